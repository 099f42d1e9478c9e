package csrcheck

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"testing"
	"time"
)

// TestRenewalDue: the agent vouches for a serving request only when its own
// kubelet would be asking: it has no certificate, or the one it serves with
// is in its rotation window (client-go's certificate manager renews at a
// random point between 70 % and 90 % of the lifetime) or expired, or names
// other SANs than the request (its addresses changed). Anyone with the
// bootstrap token can mint this node's kubelet identity and file a request
// with the node's own names; outside those cases it is not the kubelet's.
func TestRenewalDue(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	year := 365 * 24 * time.Hour
	subject := pkix.Name{CommonName: "system:node:w1", Organization: []string{"system:nodes"}}
	cert := func(issued time.Time, life time.Duration, dns []string, ips ...string) *x509.Certificate {
		c := &x509.Certificate{NotBefore: issued, NotAfter: issued.Add(life), DNSNames: dns, Subject: subject}
		for _, ip := range ips {
			c.IPAddresses = append(c.IPAddresses, net.ParseIP(ip))
		}
		return c
	}
	sans := []string{"dns:w1", "ip:10.0.0.1"}
	for _, tc := range []struct {
		name    string
		current *x509.Certificate
		sans    []string
		due     bool
	}{
		{"no certificate yet", nil, sans, true},
		{"a fresh certificate for the same names", cert(now.Add(-24*time.Hour), year, []string{"w1"}, "10.0.0.1"), sans, false},
		{"half its life, the same names", cert(now.Add(-year/2), year, []string{"w1"}, "10.0.0.1"), sans, false},
		{"in its rotation window", cert(now.Add(-year*71/100), year, []string{"w1"}, "10.0.0.1"), sans, true},
		{"expired", cert(now.Add(-2*year), year, []string{"w1"}, "10.0.0.1"), sans, true},
		{"a fresh certificate, the node's addresses changed", cert(now.Add(-time.Hour), year, []string{"w1"}, "10.0.0.2"), sans, true},
		{"a fresh certificate, a name more", cert(now.Add(-time.Hour), year, []string{"w1", "w1.example.com"}, "10.0.0.1"), sans, true},
		{"not valid yet (the clock moved back)", cert(now.Add(time.Hour), year, []string{"w1"}, "10.0.0.1"), sans, true},
		{"a short certificate past 70 %", cert(now.Add(-8*time.Hour), 10*time.Hour, []string{"w1"}, "10.0.0.1"), sans, true},
		// The kubelet also asks again when its certificate's subject is
		// not its template's (client-go's certSatisfiesTemplate).
		{"a fresh certificate of another common name", func() *x509.Certificate {
			c := cert(now.Add(-time.Hour), year, []string{"w1"}, "10.0.0.1")
			c.Subject.CommonName = "system:node:old-name"
			return c
		}(), sans, true},
		{"a fresh certificate without the nodes' organization", func() *x509.Certificate {
			c := cert(now.Add(-time.Hour), year, []string{"w1"}, "10.0.0.1")
			c.Subject.Organization = nil
			return c
		}(), sans, true},
	} {
		due, why := RenewalDue(tc.current, tc.sans, subject, now)
		if due != tc.due || (!due && why == "") {
			t.Errorf("%s: due %v (%q), want %v", tc.name, due, why, tc.due)
		}
	}
}
