package csrcheck

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// Attest is the agent's decision on a serving CSR the coordinator asked it to
// review: the request must come from this node, and every SAN must be one of
// its own names or one of the addresses it publishes. The verdict is bound to
// the CSR's name and request, and carries the request's SANs
// (contract.RequestSANs) for the agent to sign; a request that does not
// parse is rejected with none.
//
// published are the IP addresses the agent writes to the Node's
// status.addresses, the only ones its kubelet asks for (client-go's
// certificate manager takes them from there). An address the node holds but
// does not publish (on lo, on an excluded link such as kube-proxy's
// kube-ipvs0, on a link that is down, a deprecated one) is in no honest
// request.
func Attest(req Request, self string, names []string, published []netip.Addr) contract.Attestation {
	a := contract.Attestation{CSR: req.Name, RequestSHA256: contract.RequestDigest(req.PEM), Verdict: contract.VerdictReject}
	csr, err := Parse(req.PEM)
	if err != nil {
		a.Reason = err.Error()
		return a
	}
	if n := len(csr.DNSNames) + len(csr.IPAddresses); n > MaxSANs {
		a.Reason = fmt.Sprintf("%d SANs, limit %d", n, MaxSANs)
		return a
	}
	a.SANs = contract.RequestSANs(csr)
	if NodeName(req.Username) != self {
		a.Reason = fmt.Sprintf("the CSR was requested by %q, not by this node (%s)", req.Username, self)
		return a
	}
	allowed := []string{strings.ToLower(self)}
	for _, n := range names {
		if n != "" {
			allowed = append(allowed, strings.ToLower(n))
		}
	}
	var problems []string
	for _, n := range csr.DNSNames {
		if err := CheckDNSName(n, allowed); err != nil {
			problems = append(problems, err.Error())
		}
	}
	for _, raw := range csr.IPAddresses {
		ip, ok := netip.AddrFromSlice(raw)
		if !ok || !slices.Contains(published, ip.Unmap()) {
			problems = append(problems, fmt.Sprintf("IP SAN %s is not an address this node publishes", raw))
		}
	}
	if len(csr.DNSNames)+len(csr.IPAddresses) == 0 {
		problems = append(problems, "the request has no DNS or IP SANs")
	}
	if len(problems) > 0 {
		a.Reason = summarize(problems)
		return a
	}
	a.Verdict, a.Reason = contract.VerdictApprove, "every SAN is this node's"
	return a
}

// maxReasonBytes keeps a reason within the contract's limit for a field, so
// a request with many bad SANs still gets an attestation the agent can write.
const maxReasonBytes = 1000

// summarize joins problems, then counts those that do not fit.
func summarize(problems []string) string {
	var b strings.Builder
	for i, p := range problems {
		sep := ""
		if i > 0 {
			sep = ", "
		}
		if b.Len()+len(sep)+len(p) <= maxReasonBytes-32 {
			b.WriteString(sep + p)
			continue
		}
		if i == 0 { // the first problem alone is too long: cut it
			b.WriteString(strings.ToValidUTF8(p[:maxReasonBytes-64], "") + "…")
			i++
		}
		if rest := len(problems) - i; rest > 0 {
			fmt.Fprintf(&b, " and %d more", rest)
		}
		break
	}
	return b.String()
}
