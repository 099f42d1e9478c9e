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
// its own names or an address on its kernel interfaces (or Talos's external
// addresses) right now. The verdict is bound to the CSR's name and request.
func Attest(req Request, self string, names []string, localIPs []netip.Addr) contract.Attestation {
	a := contract.Attestation{CSR: req.Name, RequestSHA256: contract.RequestDigest(req.PEM), Verdict: contract.VerdictReject}
	if NodeName(req.Username) != self {
		a.Reason = fmt.Sprintf("the CSR was requested by %q, not by this node (%s)", req.Username, self)
		return a
	}
	csr, err := Parse(req.PEM)
	if err != nil {
		a.Reason = err.Error()
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
		if !ok || !slices.Contains(localIPs, ip.Unmap()) {
			problems = append(problems, fmt.Sprintf("IP SAN %s is not on this node's interfaces", raw))
		}
	}
	if len(csr.DNSNames)+len(csr.IPAddresses) == 0 {
		problems = append(problems, "the request has no DNS or IP SANs")
	}
	if len(problems) > 0 {
		a.Reason = strings.Join(problems, ", ")
		return a
	}
	a.Verdict, a.Reason = contract.VerdictApprove, "every SAN is this node's"
	return a
}
