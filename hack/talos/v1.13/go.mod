// Module v1.13 builds Talos 1.13's machined (v1.13.9, the newest 1.13
// release the module proxy serves) as ../build.sh v1.13 does, for the 1.13
// walk-through of docs/install.md (make e2e-talos). Separate from the
// project's go.mod on purpose, as ../go.mod is.
module github.com/talos-nodeinit/talos-nodeinit/hack/talos/v1.13

go 1.26.6

require github.com/siderolabs/talos v1.13.9

replace (
	// The nested module, absent from Talos's module zip: the same release from the proxy.
	github.com/siderolabs/talos/pkg/machinery => github.com/siderolabs/talos/pkg/machinery v1.13.9

	// Refused by the module proxy at Talos 1.13.9's versions: the nearest served.
	// go-kubernetes v0.2.38 -> v0.2.41 (Talos 1.14.1's).
	github.com/siderolabs/go-kubernetes => github.com/siderolabs/go-kubernetes v0.2.41
	// etcdutl v3.6.12 -> v3.6.14 (the same minor; only machined's etcd service uses it).
	go.etcd.io/etcd/etcdutl/v3 => go.etcd.io/etcd/etcdutl/v3 v3.6.14
	// Talos's containerd fork (smira/containerd v2.2.3-0.20260521103442) is refused:
	// upstream containerd v2.2.4, the version it forks, as Talos's go.mod requires it.

	// Talos's own replaces (they apply only in Talos's main module), as Talos has them;
	// GONOSUMDB for exactly these three, hashes in go.sum (../build.sh).
	github.com/coredns/coredns => github.com/siderolabs/coredns v1.14.53
	github.com/mdlayher/ethtool => github.com/siderolabs/ethtool v0.4.0-sidero
	github.com/mdlayher/kobject => github.com/smira/kobject v0.0.0-20240304111826-49c8d4613389
	golang.zx2c4.com/wireguard/wgctrl => github.com/siderolabs/wgctrl-go v0.0.0-20251029173431-c4fd5f6a4e72
)
