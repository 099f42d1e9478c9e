// Package facts holds what the agent knows about its node, as plain data:
// Talos's platform metadata and system information, the kubelet's node name
// and IPs, and the cloud public IPs. The edges that fetch them (pkg/talos,
// coordinator/explain) convert from Talos's resource types; the pure core
// (pkg/rules, pkg/desired) uses only these, so it links no gRPC, COSI or
// netlink.
package facts

import (
	"maps"
	"net/netip"
	"reflect"
	"slices"
)

// Platform mirrors Talos's PlatformMetadataSpec (resources/runtime), field
// for field and in the same order, so the edges convert with
// facts.Platform(spec) and a field Talos adds breaks that build.
type Platform struct {
	Platform     string
	Hostname     string
	Region       string
	Zone         string
	InstanceType string
	InstanceID   string
	ProviderID   string
	Spot         bool
	InternalDNS  string
	ExternalDNS  string
	Tags         map[string]string
}

// System mirrors Talos's SystemInformationSpec (resources/hardware), as
// Platform does PlatformMetadataSpec: the same fields in the same order
// (machinery v1.14.1 added BIOSVersion), so that one converts to the other.
type System struct {
	Manufacturer string
	ProductName  string
	Version      string
	BIOSVersion  string
	SerialNumber string
	UUID         string
	WakeUpType   string
	SKUNumber    string
}

// Talos is one snapshot of what Talos knows about the node.
type Talos struct {
	// Metadata is nil until machined has published PlatformMetadata.
	Metadata *Platform
	// System is nil until machined has published SystemInformation.
	System *System
	// Nodename is the kubelet's node name ("" until known).
	Nodename string
	// NodeIPs are the kubelet's node IPs.
	NodeIPs []netip.Addr
	// ExternalIPs are the addresses on the "external" pseudo-link: cloud
	// public IPs that are on no interface. Sorted.
	ExternalIPs []netip.Addr
	// VIPs are the shared VIPs Talos configures: the bare addresses among
	// the kubelet's NodeIPConfig ExcludeSubnets (its CIDRs are the pod and
	// service CIDRs, which may hold the node's own IPv6 address). A VIP is
	// on the interface of whichever node holds it, and no node's own.
	VIPs []netip.Addr
	// Degraded is empty when the facts come from machined; otherwise it says
	// why they do not, and which facts are missing.
	Degraded string
}

// Equal compares two snapshots.
func (f Talos) Equal(o Talos) bool {
	return metadataEqual(f.Metadata, o.Metadata) &&
		ptrEqual(f.System, o.System) && f.Nodename == o.Nodename &&
		slices.Equal(f.NodeIPs, o.NodeIPs) && slices.Equal(f.ExternalIPs, o.ExternalIPs) &&
		slices.Equal(f.VIPs, o.VIPs) &&
		f.Degraded == o.Degraded
}

func metadataEqual(a, b *Platform) bool {
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
