package csrcheck

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

func TestAttest(t *testing.T) {
	local := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("2001:db8::a")}
	names := []string{"node-a.example.com"}
	var many, manySANs []string
	for i := range MaxSANs + 1 {
		many = append(many, fmt.Sprintf("192.0.2.%d", i))
		if i < MaxSANs-1 {
			manySANs = append(manySANs, "ip:"+many[i])
		}
	}
	slices.Sort(manySANs) // RequestSANs sorts as strings
	cases := []struct {
		name    string
		req     func() Request
		self    string
		want    contract.Verdict
		reasons string
		sans    []string
	}{
		{"all SANs local", func() Request {
			return goodRequest(t, tmpl{dns: []string{"node-a.example.com", "node-a"}, ips: []string{"2001:db8::a", "10.0.0.1"}})
		}, "node-a", contract.VerdictApprove, "", []string{"dns:node-a", "dns:node-a.example.com", "ip:10.0.0.1", "ip:2001:db8::a"}},
		{"an IP not on the node", func() Request {
			return goodRequest(t, tmpl{dns: []string{"node-a"}, ips: []string{"10.0.0.1", "192.0.2.99"}})
		}, "node-a", contract.VerdictReject, "192.0.2.99", []string{"dns:node-a", "ip:10.0.0.1", "ip:192.0.2.99"}},
		{"another node's name", func() Request { return goodRequest(t, tmpl{dns: []string{"node-b"}}) }, "node-a", contract.VerdictReject, `"node-b"`, []string{"dns:node-b"}},
		{"another node's CSR", func() Request { return goodRequest(t, tmpl{dns: []string{"node-a"}}) }, "node-b", contract.VerdictReject, "not by this node", []string{"dns:node-a"}},
		{"garbage request", func() Request { r := goodRequest(t, tmpl{dns: []string{"node-a"}}); r.PEM = []byte("x"); return r }, "node-a", contract.VerdictReject, "not PEM", nil},
		{"wildcard", func() Request { return goodRequest(t, tmpl{dns: []string{"*.example.com"}}) }, "node-a", contract.VerdictReject, "wildcard", []string{"dns:*.example.com"}},
		{"too many SANs", func() Request { return goodRequest(t, tmpl{dns: []string{"node-a"}, ips: many}) }, "node-a", contract.VerdictReject, "limit", nil},
		{"many foreign IPs", func() Request { return goodRequest(t, tmpl{dns: []string{"node-a"}, ips: many[:MaxSANs-1]}) }, "node-a", contract.VerdictReject, "more", append([]string{"dns:node-a"}, manySANs...)},
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
		if !slices.Equal(a.SANs, c.sans) {
			t.Errorf("%s: SANs %q, want %q", c.name, a.SANs, c.sans)
		}
		if csr, err := Parse(req.PEM); err == nil && a.SANs != nil && !slices.Equal(a.SANs, contract.RequestSANs(csr)) {
			t.Errorf("%s: SANs %q are not the request's %q", c.name, a.SANs, contract.RequestSANs(csr))
		}
		if _, err := contract.EncodeAttestation(a); err != nil {
			t.Errorf("%s: attestation does not encode: %v", c.name, err)
		}
	}
}

func TestSummarize(t *testing.T) {
	long := strings.Repeat("x", 2*maxReasonBytes)
	var many []string
	for i := range 100 {
		many = append(many, fmt.Sprintf("IP SAN 192.0.2.%d is not an address this node publishes", i))
	}
	cases := []struct {
		name     string
		problems []string
		prefix   string
		suffix   string
	}{
		{"few", []string{"a", "b"}, "a, b", "a, b"},
		{"many", many, many[0] + ", " + many[1], " more"},
		{"one too long", []string{long}, "xxx", "…"},
		{"too long, then more", []string{long, "b", "c"}, "xxx", "… and 2 more"},
	}
	for _, c := range cases {
		got := summarize(c.problems)
		if len(got) > maxReasonBytes || !strings.HasPrefix(got, c.prefix) || !strings.HasSuffix(got, c.suffix) {
			t.Errorf("%s: %d bytes %q, want at most %d, starting %q and ending %q", c.name, len(got), got, maxReasonBytes, c.prefix, c.suffix)
		}
	}
}
