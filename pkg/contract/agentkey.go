package contract

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
)

// The agent's own key makes an attestation a second, independent yes: the
// kubelet credential can write the attestation annotation, but only the
// agent holds the private key whose public half the coordinator enrolled on
// the node's first join (trust on first use). The agent publishes the public
// half in Metadata.AgentKey; the coordinator reads it only to enrol.

// EncodeAgentKey renders an ed25519 public key for Metadata.AgentKey.
func EncodeAgentKey(pub ed25519.PublicKey) string {
	return "ed25519:" + base64.StdEncoding.EncodeToString(pub)
}

// DecodeAgentKey parses Metadata.AgentKey (or a NodeRecord's enrolled key).
func DecodeAgentKey(s string) (ed25519.PublicKey, error) {
	raw, ok := strings.CutPrefix(s, "ed25519:")
	if !ok {
		return nil, errors.New(`agent key: want "ed25519:<base64>"`)
	}
	b, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, fmt.Errorf("agent key: %w", err)
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("agent key: %d bytes, want %d", len(b), ed25519.PublicKeySize)
	}
	if base64.StdEncoding.EncodeToString(b) != raw {
		// One key, one spelling (EncodeAgentKey's): keys compare as strings.
		return nil, errors.New("agent key: not in canonical base64 (line breaks, or unused bits set)")
	}
	return ed25519.PublicKey(b), nil
}

// RequestSANs lists a certificate request's SANs in a canonical order:
// "dns:<name>" then "ip:<address>", each group sorted. An attestation
// signs them so a reader sees what was attested without parsing the request.
func RequestSANs(csr *x509.CertificateRequest) []string {
	var dns, ips []string
	for _, n := range csr.DNSNames {
		dns = append(dns, "dns:"+n)
	}
	for _, ip := range csr.IPAddresses {
		ips = append(ips, "ip:"+canonicalIP(ip))
	}
	slices.Sort(dns)
	slices.Sort(ips)
	return append(dns, ips...)
}

func canonicalIP(ip net.IP) string {
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.String()
}

// attestationMessage is what the agent's key signs: the node, the CSR's
// name, the digest of its exact request, the verdict and the SANs. A
// signature can therefore not be replayed onto another node, request or
// verdict.
func attestationMessage(node string, a Attestation) []byte {
	parts := append([]string{"nodeinit.io/csr-attestation/v1", node, a.CSR, a.RequestSHA256, string(a.Verdict)}, a.SANs...)
	return []byte(strings.Join(parts, "\x00"))
}

// Sign fills a.Signature with the agent key's signature for node.
func (a Attestation) Sign(node string, key ed25519.PrivateKey) Attestation {
	a.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(key, attestationMessage(node, a)))
	return a
}

// ErrUnsigned is returned by Verify for an attestation without a signature.
var ErrUnsigned = errors.New("the attestation is not signed")

// Verify checks that the enrolled key signed this attestation for node and
// that it names exactly sans (the request's, from RequestSANs).
func (a Attestation) Verify(node string, enrolled ed25519.PublicKey, sans []string) error {
	if a.Signature == "" {
		return ErrUnsigned
	}
	// One encoding per signature (Sign's): a re-encoded copy of a genuine
	// signature (line breaks, other trailing bits) is malformed, so copies
	// of one attestation are equal as text.
	sig, err := base64.StdEncoding.DecodeString(a.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize || base64.StdEncoding.EncodeToString(sig) != a.Signature {
		return errors.New("the attestation's signature is malformed")
	}
	if !slices.Equal(a.SANs, sans) {
		// The attestation's SANs are node text, the request's were checked.
		return fmt.Errorf("the attestation names SANs %s, the request has %v", NodeText(strings.Join(a.SANs, " ")), sans)
	}
	if !ed25519.Verify(enrolled, attestationMessage(node, a), sig) {
		return errors.New("the attestation is not signed by the node's enrolled agent key")
	}
	return nil
}
