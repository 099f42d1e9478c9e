// Module containerd builds containerd 2.x and its runc shim from containerd's
// own module, at the version Talos v1.14.1 ships (its go.mod): Debian's
// containerd 1.6 cannot read Talos's `version = 3` configuration; and runc
// from its module (Debian's 1.1.5 cannot start Talos's extension containers
// under containerd 2.x). Separate from the project's go.mod on purpose.
module github.com/talos-nodeinit/talos-nodeinit/hack/containerd

go 1.26.5

require (
	github.com/containerd/containerd/v2 v2.3.5
	github.com/opencontainers/runc v1.4.0
)
