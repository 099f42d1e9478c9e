package csrcheck

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

func TestAttest(t *testing.T) {
	local := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("2001:db8::a")}
	names := []string{"node-a.example.com"}
	cases := []struct {
		name    string
		req     func() Request
		self    string
		want    contract.Verdict
		reasons string
	}{
		{"all SANs local", func() Request {
			return goodRequest(t, tmpl{dns: []string{"node-a", "node-a.example.com"}, ips: []string{"10.0.0.1", "2001:db8::a"}})
		}, "node-a", contract.VerdictApprove, ""},
		{"an IP not on the node", func() Request {
			return goodRequest(t, tmpl{dns: []string{"node-a"}, ips: []string{"10.0.0.1", "192.0.2.99"}})
		}, "node-a", contract.VerdictReject, "192.0.2.99"},
		{"another node's name", func() Request { return goodRequest(t, tmpl{dns: []string{"node-b"}}) }, "node-a", contract.VerdictReject, `"node-b"`},
		{"another node's CSR", func() Request { return goodRequest(t, tmpl{dns: []string{"node-a"}}) }, "node-b", contract.VerdictReject, "not by this node"},
		{"garbage request", func() Request { r := goodRequest(t, tmpl{dns: []string{"node-a"}}); r.PEM = []byte("x"); return r }, "node-a", contract.VerdictReject, "not PEM"},
		{"wildcard", func() Request { return goodRequest(t, tmpl{dns: []string{"*.example.com"}}) }, "node-a", contract.VerdictReject, "wildcard"},
	}
	for _, c := range cases {
		req := c.req()
		a := Attest(req, c.self, names, local)
		if a.Verdict != c.want || !strings.Contains(a.Reason, c.reasons) {
			t.Errorf("%s: %s (%s)", c.name, a.Verdict, a.Reason)
		}
		if a.CSR != req.Name || !a.About(req.Name, req.PEM) {
			t.Errorf("%s: attestation not bound to the CSR", c.name)
		}
		if _, err := contract.EncodeAttestation(a); err != nil {
			t.Errorf("%s: attestation does not encode: %v", c.name, err)
		}
	}
}
