package talos

import (
	"net/netip"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
)

// The agent decodes AddressStatus from its wire form; these must stay
// machinery's own names and encoding.
func TestAddressStatusWireForm(t *testing.T) {
	if addressStatusType != network.AddressStatusType || networkNamespace != network.NamespaceName {
		t.Fatalf("AddressStatus is %s/%s in machinery, %s/%s here", network.NamespaceName, network.AddressStatusType, networkNamespace, addressStatusType)
	}
	for _, tc := range []struct {
		link, cidr string
		want       bool
	}{{ExternalLink, "203.0.113.5/32", true}, {ExternalLink, "2001:db8::5/128", true}, {"eth0", "10.0.0.1/24", false}} {
		r := network.NewAddressStatus(network.NamespaceName, tc.link+"/"+tc.cidr)
		r.TypedSpec().LinkName = tc.link
		r.TypedSpec().Address = netip.MustParsePrefix(tc.cidr)
		// Typed (as registered in this test binary) and generic (as the agent sees it).
		generic, err := protobuf.FromResource(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, res := range []any{r, generic} {
			var ip netip.Addr
			var ok bool
			switch v := res.(type) {
			case *network.AddressStatus:
				ip, ok, err = externalAddress(v)
			case *protobuf.Resource:
				ip, ok, err = externalAddress(v)
			}
			if err != nil || ok != tc.want || (ok && ip != netip.MustParsePrefix(tc.cidr).Addr()) {
				t.Errorf("%T %s %s: %v %v %v", res, tc.link, tc.cidr, ip, ok, err)
			}
		}
	}
}
