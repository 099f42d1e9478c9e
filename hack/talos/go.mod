// Module talos builds Talos's own machined, at the release users run, from
// Talos's module (github.com/siderolabs/talos), for the real-machined tests
// (make e2e-talos). It is separate from the project's go.mod on purpose: the
// Talos main module must never enter the project's graph.
//
// Talos's go.mod replaces some modules with forks and its nested
// pkg/machinery module with a directory; as a dependency its replaces do
// not apply, and the module proxy here refuses some of the forks. Every
// replacement below says why; build.sh applies the one source patch.
module github.com/talos-nodeinit/talos-nodeinit/hack/talos

go 1.26.5

require github.com/siderolabs/talos v1.14.1

replace (
	// The nested module, absent from Talos's module zip: the same release from the proxy.
	github.com/siderolabs/talos/pkg/machinery => github.com/siderolabs/talos/pkg/machinery v1.14.1

	// Refused by the module proxy at Talos's versions: the nearest served.
	// cosi runtime v1.16.3 -> v1.16.2.
	github.com/cosi-project/runtime => github.com/cosi-project/runtime v1.16.2
	// rtnetlink/v2 pseudo-version 20260802200809 -> 20260317095713 (Talos 1.13.7's, which
	// hack/machined builds with). It predates RTA_VIA: patches/route_*.go.patch.
	github.com/jsimonetti/rtnetlink/v2 => github.com/jsimonetti/rtnetlink/v2 v2.2.1-0.20260317095713-310581b9c6ac
	// Talos's fork siderolabs/ethtool v0.6.0-sidero -> v0.4.0-sidero (Talos 1.13.7's), which
	// has every API machined calls.
	github.com/mdlayher/ethtool => github.com/siderolabs/ethtool v0.4.0-sidero

	// Talos's own replaces (they apply only in Talos's main module), as Talos has them.
	// The proxy serves these forks but the checksum database does not know them:
	// build.sh sets GONOSUMDB for exactly these three, and go.sum pins their hashes.
	github.com/coredns/coredns => github.com/siderolabs/coredns v1.14.53
	github.com/mdlayher/kobject => github.com/smira/kobject v0.0.0-20240304111826-49c8d4613389
	golang.zx2c4.com/wireguard/wgctrl => github.com/siderolabs/wgctrl-go v0.0.0-20251029173431-c4fd5f6a4e72
)
