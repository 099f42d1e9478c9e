// Command nodeinit-agent runs on every Talos node as a system extension
// service and initializes its own Node with the node's kubelet credentials.
//
// This is the skeleton from the Foundation issue: only `version` works; the
// run loop, `validate` and `explain` arrive with the agent issue.
package main

import (
	"fmt"
	"os"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/version"
)

const usage = `nodeinit-agent initializes this node's Kubernetes Node object on Talos Linux.

Usage:
  nodeinit-agent version    print the version and exit

The run loop, validate and explain commands are not implemented yet.
`

func main() {
	if len(os.Args) > 1 && os.Args[1] == "version" {
		fmt.Println(version.String("nodeinit-agent"))
		return
	}
	fmt.Fprint(os.Stderr, usage)
	if len(os.Args) > 1 && (os.Args[1] == "--help" || os.Args[1] == "-h" || os.Args[1] == "help") {
		return
	}
	os.Exit(2)
}
