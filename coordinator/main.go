// Command nodeinit-coordinator is the cluster-side half of talos-nodeinit: a
// leader-elected Deployment that allocates pod CIDRs, grants restricted
// labels and taints, removes the uninitialized taint and approves serving CSRs.
//
// This is the skeleton from the Foundation issue: only `version` works; the
// controllers arrive with the coordinator issue.
package main

import (
	"fmt"
	"os"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/version"
)

const usage = `nodeinit-coordinator finalizes Nodes and approves kubelet serving CSRs.

Usage:
  nodeinit-coordinator version    print the version and exit

The controllers are not implemented yet.
`

func main() {
	if len(os.Args) > 1 && os.Args[1] == "version" {
		fmt.Println(version.String("nodeinit-coordinator"))
		return
	}
	fmt.Fprint(os.Stderr, usage)
	if len(os.Args) > 1 && (os.Args[1] == "--help" || os.Args[1] == "-h" || os.Args[1] == "help") {
		return
	}
	os.Exit(2)
}
