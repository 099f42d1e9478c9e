package csrcheck

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"slices"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// rotationStart is where client-go's certificate manager, which the kubelet
// runs for its serving certificate, may begin to renew it: at a random
// point between 70 % and 90 % of its lifetime (nextRotationDeadline).
const rotationStart = 0.7

// RenewalDue says whether the node's own kubelet would be asking now for a
// serving certificate naming sans (contract.RequestSANs), given the one it
// serves with (current; nil when it has none, or it cannot be read) and
// the request's subject: it has none, or that one is past the start of its
// rotation window, expired or not valid yet, names other SANs (the node's
// addresses changed, and the kubelet asks again), or lacks the request's
// common name or organizations (client-go asks again then too). Otherwise the request is not its kubelet's:
// anyone holding the bootstrap token can mint this node's kubelet identity
// and ask for the node's own names with a key of its own, and the agent is
// what tells the two apart. why says it, for the attestation's reason.
func RenewalDue(current *x509.Certificate, sans []string, subject pkix.Name, now time.Time) (due bool, why string) {
	if current == nil || now.Before(current.NotBefore) || !now.Before(current.NotAfter) {
		return true, ""
	}
	if current.Subject.CommonName != subject.CommonName || slices.ContainsFunc(subject.Organization, func(o string) bool { return !slices.Contains(current.Subject.Organization, o) }) {
		return true, "" // the kubelet asks again for a subject its certificate lacks
	}
	held := contract.RequestSANs(&x509.CertificateRequest{DNSNames: current.DNSNames, IPAddresses: current.IPAddresses})
	if !slices.Equal(held, sans) {
		return true, ""
	}
	life := current.NotAfter.Sub(current.NotBefore)
	from := current.NotBefore.Add(time.Duration(float64(life) * rotationStart))
	if !now.Before(from) {
		return true, ""
	}
	return false, fmt.Sprintf("this node's kubelet serves with a certificate for these names, valid until %s, and renews it from %s at the earliest: this request is not its kubelet's",
		current.NotAfter.UTC().Format(time.RFC3339), from.UTC().Format(time.RFC3339))
}
