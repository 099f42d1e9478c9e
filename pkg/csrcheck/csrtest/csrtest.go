// Package csrtest makes kubelet serving-CSR requests for tests, including
// hostile ones Go's x509 package would refuse to encode (non-ASCII DNS names).
package csrtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"net"
	"strings"
	"testing"
)

// PEM returns a CERTIFICATE REQUEST for node (CN system:node:<node>,
// O system:nodes) with the given SANs, signed by key (a fresh P-256 key when nil).
func PEM(t testing.TB, key crypto.Signer, node string, dns []string, ips ...string) []byte {
	t.Helper()
	if key == nil {
		var err error
		if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			t.Fatal(err)
		}
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}, DNSNames: dns}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	if strings.ContainsFunc(strings.Join(dns, ""), func(r rune) bool { return r > 127 }) {
		// Go refuses to encode non-ASCII DNS names; a hostile client would not.
		var names []asn1.RawValue
		for _, d := range dns {
			names = append(names, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 2, Bytes: []byte(d)})
		}
		san, err := asn1.Marshal(names)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.DNSNames = nil
		tmpl.ExtraExtensions = []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 17}, Value: san}}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}
