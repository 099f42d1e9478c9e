// Package talos reads the node's facts from Talos's machined over its local
// socket, and watches them: platform metadata, system information, the
// kubelet's node name and node IPs, and the cloud public IPs Talos puts on
// the pseudo-link "external". When the socket is not usable (a static pod
// since Talos 1.13), the kernel command line gives a degraded subset.
package talos

import (
	"maps"
	"net/netip"
	"reflect"
	"slices"

	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// Facts is one snapshot of what Talos knows about the node.
type Facts struct {
	// Metadata is nil until machined has published PlatformMetadata.
	Metadata *runtime.PlatformMetadataSpec
	// System is nil until machined has published SystemInformation.
	System *hardware.SystemInformationSpec
	// Nodename is the kubelet's node name ("" until known).
	Nodename string
	// NodeIPs are the kubelet's node IPs.
	NodeIPs []netip.Addr
	// ExternalIPs are the addresses on the "external" pseudo-link: cloud
	// public IPs that are on no interface. Sorted.
	ExternalIPs []netip.Addr
	// Degraded is empty when the facts come from machined; otherwise it says
	// why they do not, and which facts are missing.
	Degraded string
}

// Equal compares two snapshots.
func (f Facts) Equal(o Facts) bool {
	return metadataEqual(f.Metadata, o.Metadata) &&
		ptrEqual(f.System, o.System) && f.Nodename == o.Nodename &&
		slices.Equal(f.NodeIPs, o.NodeIPs) && slices.Equal(f.ExternalIPs, o.ExternalIPs) &&
		f.Degraded == o.Degraded
}

func metadataEqual(a, b *runtime.PlatformMetadataSpec) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	if maps.Equal(x.Tags, y.Tags) { // nil and empty tags are the same
		x.Tags, y.Tags = nil, nil
	}
	return reflect.DeepEqual(x, y)
}

func ptrEqual[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
