// Command etcd is etcd's own server entry point, built at the version pinned
// in this module's go.mod so the tests need no etcd download.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
