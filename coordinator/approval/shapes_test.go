package approval

import (
	"crypto/ed25519"
	"crypto/rand"
	"net/netip"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck/csrtest"
)

// The node shapes the README's "Serving certificates on your platform"
// section describes, each with the settings it gives: the kubelet's CSR (its
// Node's Hostname, DNS names and IPs) is approved with them, and refused
// without them. The settings here are the README's, verbatim.
func TestPlatformShapes(t *testing.T) {
	for _, shape := range []struct {
		name, settings, node string
		addrs                []corev1.NodeAddress
		refusedWithout       string // what the defaults refuse ("" if the defaults suffice)
	}{
		{
			name: "bare metal, private addresses", settings: "", node: "metal-1",
			addrs: []corev1.NodeAddress{ip(corev1.NodeInternalIP, "192.168.10.21"), ip(corev1.NodeInternalIP, "fd00:10::21"), ip(corev1.NodeHostName, "metal-1")},
		},
		{
			name: "AWS: VPC address, public IP, EC2 DNS names",
			settings: `
nodeNetworks: [10.0.0.0/16, 0.0.0.0/0]
csr:
  allowedDNSNames: ["{node}.eu-west-1.compute.internal", "*.eu-west-1.compute.amazonaws.com"]
`,
			node: "ip-10-0-1-23",
			addrs: []corev1.NodeAddress{ip(corev1.NodeInternalIP, "10.0.1.23"), ip(corev1.NodeExternalIP, "203.0.113.40"), ip(corev1.NodeHostName, "ip-10-0-1-23"),
				ip(corev1.NodeInternalDNS, "ip-10-0-1-23.eu-west-1.compute.internal"), ip(corev1.NodeExternalDNS, "ec2-203-0-113-40.eu-west-1.compute.amazonaws.com")},
			refusedWithout: "compute.internal",
		},
		{
			name: "Hetzner: public IPv4 and the server's own IPv6 /64",
			settings: `
nodeNetworks: [10.0.0.0/8, 198.51.100.0/24, "2001:db8:4f9::/48"]
`,
			node:           "hz-fsn1-1",
			addrs:          []corev1.NodeAddress{ip(corev1.NodeExternalIP, "198.51.100.7"), ip(corev1.NodeExternalIP, "2001:db8:4f9:1::1"), ip(corev1.NodeHostName, "hz-fsn1-1")},
			refusedWithout: "outside the node networks",
		},
		{
			name: "NAT'd hybrid node: a home LAN address and a KubeSpan address",
			settings: `
nodeNetworks: ["fd00::/8"]
`,
			node:  "home-1",
			addrs: []corev1.NodeAddress{ip(corev1.NodeInternalIP, "fd7a:115c:a1e0::21"), ip(corev1.NodeHostName, "home-1")},
		},
	} {
		t.Run(shape.name, func(t *testing.T) {
			decide := func(settings string) Decision {
				c, err := config.Parse([]byte(settings))
				if err != nil {
					t.Fatal(err)
				}
				policy := c.CSRPolicy()
				var dns, ips []string
				facts := csrcheck.Facts{Claims: map[netip.Addr]string{}, Seen: map[netip.Addr]time.Duration{}, Names: map[string]string{shape.node: shape.node}}
				for _, a := range shape.addrs {
					switch a.Type {
					case corev1.NodeHostName, corev1.NodeInternalDNS, corev1.NodeExternalDNS:
						dns = append(dns, a.Address)
					default:
						ips = append(ips, a.Address)
						facts.Claims[netip.MustParseAddr(a.Address)] = shape.node
						facts.Seen[netip.MustParseAddr(a.Address)] = time.Minute
					}
				}
				req := csrcheck.Request{Name: "csr-1", Username: "system:node:" + shape.node, Groups: []string{"system:nodes"},
					SignerName: certificatesv1.KubeletServingSignerName,
					Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
					PEM:        csrtest.PEM(t, nil, shape.node, dns, ips...)}
				pub, key, _ := ed25519.GenerateKey(rand.Reader)
				parsed, _ := csrcheck.Parse(req.PEM)
				att := contract.Attestation{CSR: req.Name, RequestSHA256: contract.RequestDigest(req.PEM), Verdict: contract.VerdictApprove, SANs: contract.RequestSANs(parsed)}.Sign(shape.node, key)
				return Decide(Input{CSR: req, Created: time.Now(), Node: &csrcheck.Node{Name: shape.node, Addresses: shape.addrs},
					Facts: facts, Policy: policy, AttestationRequired: true, Timeout: time.Minute, Renewals: config.RenewSameNames,
					EnrolledKey: pub, Attestation: &att, Now: time.Now()})
			}
			if d := decide(shape.settings); d.Action != Approve {
				t.Fatalf("with the README's settings: %s (%s)", d.Action, d.Reason)
			}
			if shape.refusedWithout != "" {
				if d := decide(""); d.Action != Deny || !strings.Contains(d.Reason, shape.refusedWithout) {
					t.Errorf("with the defaults: %s (%s), want a denial naming %q", d.Action, d.Reason, shape.refusedWithout)
				}
			}
		})
	}
}

func ip(typ corev1.NodeAddressType, a string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: typ, Address: a}
}
