// Package version holds the build's version, set with -ldflags -X.
package version

import (
	"fmt"
	"runtime"
)

// Version is the release, e.g. v0.1.0; "dev" for unreleased builds.
var Version = "dev"

// String describes the build for `version` subcommands and logs.
func String(program string) string {
	return fmt.Sprintf("%s %s (%s, %s/%s)", program, Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
