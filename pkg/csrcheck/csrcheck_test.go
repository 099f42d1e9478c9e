package csrcheck

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
)

// Keys are slow to generate (RSA especially); make each kind once.
var keys = sync.OnceValue(func() map[string]crypto.Signer {
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p521, _ := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	rsa1024, _ := rsa.GenerateKey(rand.Reader, 1024)
	rsa2048, _ := rsa.GenerateKey(rand.Reader, 2048)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	return map[string]crypto.Signer{"p256": p256, "p521": p521, "rsa1024": rsa1024, "rsa2048": rsa2048, "ed25519": ed}
})

type tmpl struct {
	key    string
	cn     string
	org    []string
	dns    []string
	ips    []string
	emails []string
	uris   []string
	// rawDNS are DNS SANs written as raw bytes, bypassing Go's IA5 check,
	// the way a hostile client would.
	rawDNS []string
}

func makePEM(t testing.TB, c tmpl) []byte {
	t.Helper()
	if c.key == "" {
		c.key = "p256"
	}
	req := &x509.CertificateRequest{
		Subject:        pkix.Name{CommonName: c.cn, Organization: c.org},
		DNSNames:       c.dns,
		EmailAddresses: c.emails,
	}
	for _, ip := range c.ips {
		req.IPAddresses = append(req.IPAddresses, net.ParseIP(ip))
	}
	for _, u := range c.uris {
		parsed, _ := url.Parse(u)
		req.URIs = append(req.URIs, parsed)
	}
	if c.rawDNS != nil {
		var names []asn1.RawValue
		for _, n := range c.rawDNS {
			names = append(names, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 2, Bytes: []byte(n)})
		}
		val, err := asn1.Marshal(names)
		if err != nil {
			t.Fatal(err)
		}
		req.ExtraExtensions = append(req.ExtraExtensions, pkix.Extension{Id: asn1.ObjectIdentifier{2, 5, 29, 17}, Value: val})
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, req, keys()[c.key])
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

var (
	nodeA = Node{Name: "node-a", Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.0.1"},
		{Type: corev1.NodeExternalIP, Address: "2001:db8::a"},
		{Type: corev1.NodeHostName, Address: "node-a"},
		{Type: corev1.NodeExternalDNS, Address: "node-a.example.com"},
		{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, // a hostile node may claim anything
	}}
	// What the coordinator knows about node-a from sources nodes cannot
	// write: its records claim its two addresses, observed for a minute.
	factsA = Facts{
		Claims: map[netip.Addr]string{netip.MustParseAddr("10.0.0.1"): "node-a", netip.MustParseAddr("2001:db8::a"): "node-a", netip.MustParseAddr("10.0.0.2"): "node-b"},
		Seen:   map[netip.Addr]time.Duration{netip.MustParseAddr("10.0.0.1"): time.Minute, netip.MustParseAddr("2001:db8::a"): time.Minute},
		Names:  map[string]string{"node-a": "node-a", "node-b": "node-b", "b.example.com": "node-b"},
		Reserved: []Reserved{
			{netip.MustParsePrefix("10.96.0.0/12"), "service CIDR"},
			{netip.MustParsePrefix("10.244.0.0/16"), "pod pool"},
		},
	}
	policyA = Policy{
		MaxDuration: 365 * 24 * time.Hour, ClusterDomain: "cluster.local", MinStable: 10 * time.Second,
		NodeNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")},
		DNSPatterns:  []string{"{node}.example.com"},
	}
)

func goodRequest(t testing.TB, c tmpl) Request {
	if c.cn == "" {
		c.cn = "system:node:node-a"
	}
	if c.org == nil {
		c.org = []string{"system:nodes"}
	}
	return Request{
		Name: "csr-1", Username: "system:node:node-a", Groups: []string{"system:nodes", "system:authenticated"},
		SignerName: certificatesv1.KubeletServingSignerName,
		Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		PEM:        makePEM(t, c),
	}
}

func TestCheck(t *testing.T) {
	good := tmpl{dns: []string{"node-a"}, ips: []string{"10.0.0.1", "2001:db8::a"}}
	many := make([]string, 10000)
	for i := range many {
		many[i] = fmt.Sprintf("n%d.example.com", i)
	}

	cases := []struct {
		name     string
		req      func() Request
		node     *Node
		facts    *Facts
		policy   *Policy
		want     Decision
		check    string // the check that must fail
		inReason string
	}{
		{name: "good ECDSA request", req: func() Request { return goodRequest(t, good) }, want: Approve},
		{name: "good RSA-2048 request", req: func() Request {
			r := goodRequest(t, tmpl{key: "rsa2048", dns: []string{"node-a"}, ips: []string{"10.0.0.1"}})
			r.Usages = append(r.Usages, certificatesv1.UsageKeyEncipherment)
			return r
		}, want: Approve},
		{name: "upper-case own name is the same name", req: func() Request { return goodRequest(t, tmpl{dns: []string{"NODE-A", "Node-A.Example.com"}}) }, want: Approve},
		{name: "IP not observed long enough waits", req: func() Request { return goodRequest(t, good) },
			facts: &Facts{Claims: factsA.Claims, Seen: map[netip.Addr]time.Duration{netip.MustParseAddr("10.0.0.1"): time.Second, netip.MustParseAddr("2001:db8::a"): time.Minute}}, want: Retry, check: "ip-addresses", inReason: "less than 10s"},
		{name: "IP not yet recorded waits", req: func() Request { return goodRequest(t, good) },
			facts: &Facts{Seen: factsA.Seen}, want: Retry, check: "ip-addresses", inReason: "not yet recorded"},

		{name: "IP-only CSR", req: func() Request { return goodRequest(t, tmpl{ips: []string{"10.0.0.1"}}) }, want: Deny, check: "needs-dns-name", inReason: "no DNS name"},
		{name: "IP-only CSR with a foreign IP", req: func() Request { return goodRequest(t, tmpl{ips: []string{"10.0.0.2"}}) }, want: Deny, check: "ip-addresses", inReason: "10.0.0.2 is not an address of Node node-a"},
		{name: "DNS SAN naming another node", req: func() Request { return goodRequest(t, tmpl{dns: []string{"node-a", "node-b"}}) }, want: Deny, check: "dns-names", inReason: `"node-b" is Node node-b's name`},
		{name: "KUBERNETES.default.svc", req: func() Request { return goodRequest(t, tmpl{dns: []string{"node-a", "KUBERNETES.default.svc"}}) }, want: Deny, check: "dns-names", inReason: "KUBERNETES.default.svc"},
		{name: "kubernetes.default.svc.cluster.local", req: func() Request {
			return goodRequest(t, tmpl{dns: []string{"kubernetes.default.svc.cluster.local"}})
		}, want: Deny, check: "dns-names", inReason: "names the API server's Service"},
		{name: "Kelvin sign folding to k", req: func() Request { return goodRequest(t, tmpl{rawDNS: []string{"node-a", "\u212a8s"}}) }, want: Deny, check: "parse", inReason: "malformed"},
		{name: "unicode look-alike of own name", req: func() Request { return goodRequest(t, tmpl{rawDNS: []string{"nоde-a"}}) }, want: Deny, check: "parse", inReason: "malformed"},
		{name: "IDNA name", req: func() Request { return goodRequest(t, tmpl{dns: []string{"node-a", "xn--nde-a-9ve"}}) }, want: Deny, check: "dns-names", inReason: "IDNA"},
		{name: "trailing dot", req: func() Request { return goodRequest(t, tmpl{dns: []string{"node-a."}}) }, want: Deny, check: "dns-names", inReason: "trailing dot"},
		{name: "wildcard", req: func() Request { return goodRequest(t, tmpl{dns: []string{"*.example.com"}}) }, want: Deny, check: "dns-names", inReason: "wildcard"},
		{name: "wildcard of own domain", req: func() Request { return goodRequest(t, tmpl{dns: []string{"*.node-a.example.com"}}) }, want: Deny, check: "dns-names", inReason: "wildcard"},
		{name: "CN is not the username", req: func() Request { return goodRequest(t, tmpl{cn: "system:node:node-b", dns: []string{"node-a"}}) }, want: Deny, check: "common-name", inReason: `CN "system:node:node-b"`},
		{name: "O is system:masters", req: func() Request { return goodRequest(t, tmpl{org: []string{"system:masters"}, dns: []string{"node-a"}}) }, want: Deny, check: "organization", inReason: "system:masters"},
		{name: "O has an extra group", req: func() Request {
			return goodRequest(t, tmpl{org: []string{"system:nodes", "system:masters"}, dns: []string{"node-a"}})
		}, want: Deny, check: "organization"},
		{name: "e-mail SAN", req: func() Request {
			return goodRequest(t, tmpl{dns: []string{"node-a"}, emails: []string{"a@example.com"}})
		}, want: Deny, check: "no-email-or-uri"},
		{name: "URI SAN", req: func() Request { return goodRequest(t, tmpl{dns: []string{"node-a"}, uris: []string{"spiffe://x/y"}}) }, want: Deny, check: "no-email-or-uri"},
		{name: "RSA-1024", req: func() Request { return goodRequest(t, tmpl{key: "rsa1024", dns: []string{"node-a"}}) }, want: Deny, check: "key", inReason: "1024 bits"},
		{name: "Ed25519 key", req: func() Request { return goodRequest(t, tmpl{key: "ed25519", dns: []string{"node-a"}}) }, want: Deny, check: "key", inReason: "not ECDSA or RSA"},
		{name: "P-521 key", req: func() Request { return goodRequest(t, tmpl{key: "p521", dns: []string{"node-a"}}) }, want: Deny, check: "key", inReason: "P-521"},
		{name: "client-auth usage", req: func() Request {
			r := goodRequest(t, good)
			r.Usages = append(r.Usages, certificatesv1.UsageClientAuth)
			return r
		}, want: Deny, check: "usages", inReason: "client auth"},
		{name: "server-auth usage missing", req: func() Request {
			r := goodRequest(t, good)
			r.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature}
			return r
		}, want: Deny, check: "usages", inReason: "server auth"},
		{name: "IP recorded for another node stays pending", req: func() Request { return goodRequest(t, tmpl{dns: []string{"node-a"}, ips: []string{"2001:db8::a"}}) },
			facts: &Facts{Claims: map[netip.Addr]string{netip.MustParseAddr("2001:db8::a"): "node-b"}}, want: Retry, check: "ip-addresses", inReason: "held by Node node-b"},
		// Class 9: an honest node whose address falls inside another
		// node's carved pod segment is denied for it, with the fix, never
		// left waiting for a pod CIDR that does not change.
		{name: "IP inside another node's pod CIDR is denied", req: func() Request { return goodRequest(t, tmpl{dns: []string{"node-a"}, ips: []string{"2001:db8::a"}}) },
			facts: &Facts{Claims: factsA.Claims, Seen: factsA.Seen, PodCIDROf: map[netip.Addr]string{netip.MustParseAddr("2001:db8::a"): "node-b"}}, want: Deny, check: "ip-addresses", inReason: "kubectl delete node node-b"},
		{name: "IP inside its own pod CIDR", req: func() Request { return goodRequest(t, tmpl{dns: []string{"node-a"}, ips: []string{"2001:db8::a"}}) },
			facts: &Facts{Claims: factsA.Claims, Seen: factsA.Seen, PodCIDROf: map[netip.Addr]string{netip.MustParseAddr("2001:db8::a"): "node-a"}}, want: Deny, check: "ip-addresses", inReason: "own pod CIDR"},
		// Class 8: an address the inventory binds to other Nodes is never
		// this one's, recorded or not: denied, not left waiting.
		{name: "IP the inventory binds to another node", req: func() Request { return goodRequest(t, tmpl{dns: []string{"node-a"}, ips: []string{"2001:db8::a"}}) },
			facts: &Facts{Claims: factsA.Claims, Seen: factsA.Seen, Bound: map[netip.Addr]string{netip.MustParseAddr("2001:db8::a"): "in the inventory for Nodes [node-b]"}}, want: Deny, check: "ip-addresses", inReason: "inventory for Nodes [node-b]"},
		{name: "IP not on the node", req: func() Request { return goodRequest(t, tmpl{dns: []string{"node-a"}, ips: []string{"192.0.2.99"}}) }, want: Deny, check: "ip-addresses", inReason: "192.0.2.99"},
		{name: "loopback the node claims", req: func() Request { return goodRequest(t, tmpl{dns: []string{"node-a"}, ips: []string{"127.0.0.1"}}) }, want: Deny, check: "ip-addresses", inReason: "not a routable"},
		{name: "IP outside the node networks", req: func() Request { return goodRequest(t, good) },
			policy: &Policy{NodeNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, want: Deny, check: "ip-addresses", inReason: "outside the node networks"},
		{name: "duration over the policy", req: func() Request {
			r := goodRequest(t, good)
			huge := int32(1 << 30)
			r.ExpirationSeconds = &huge
			return r
		}, want: Deny, check: "duration", inReason: "exceeds the policy maximum"},
		{name: "garbage PEM", req: func() Request { r := goodRequest(t, good); r.PEM = []byte("not a csr"); return r }, want: Deny, check: "parse", inReason: "not PEM"},
		{name: "wrong PEM block type", req: func() Request {
			r := goodRequest(t, good)
			r.PEM = []byte(strings.Replace(string(r.PEM), "CERTIFICATE REQUEST", "CERTIFICATE", 2))
			return r
		}, want: Deny, check: "parse", inReason: `"CERTIFICATE"`},
		{name: "trailing data after the block", req: func() Request { r := goodRequest(t, good); r.PEM = append(r.PEM, "junk"...); return r }, want: Deny, check: "parse", inReason: "data after"},
		{name: "corrupt DER", req: func() Request {
			r := goodRequest(t, good)
			r.PEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{0x30, 0x03, 0x02, 0x01}})
			return r
		}, want: Deny, check: "parse"},
		{name: "10,000 SANs", req: func() Request { return goodRequest(t, tmpl{dns: many}) }, want: Deny, check: "parse", inReason: "limit 65536"},
		{name: "100 SANs", req: func() Request { return goodRequest(t, tmpl{dns: many[:100]}) }, want: Deny, check: "san-count", inReason: "100 subject alternative names"},
		{name: "wrong signer", req: func() Request {
			r := goodRequest(t, good)
			r.SignerName = certificatesv1.KubeAPIServerClientSignerName
			return r
		}, want: Deny, check: "signer"},
		{name: "not a node identity", req: func() Request { r := goodRequest(t, good); r.Username = "alice"; return r }, want: Deny, check: "username"},
		{name: "not in system:nodes", req: func() Request { r := goodRequest(t, good); r.Groups = []string{"system:authenticated"}; return r }, want: Deny, check: "groups"},
		{name: "node not known yet", req: func() Request { return goodRequest(t, good) }, node: &Node{}, want: Retry, check: "node"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			node := &nodeA
			if c.node != nil {
				if c.node.Name == "" {
					node = nil
				} else {
					node = c.node
				}
			}
			f, p := factsA, policyA
			if c.facts != nil {
				f = *c.facts
			}
			if c.policy != nil {
				p = *c.policy
			}
			v := Check(c.req(), node, f, p)
			if v.Decision != c.want {
				t.Fatalf("decision %s, want %s (%s)", v.Decision, c.want, v.Reason())
			}
			if c.check == "" {
				return
			}
			for _, f := range v.Failures {
				if f.Check == c.check {
					if !strings.Contains(f.Reason, c.inReason) {
						t.Fatalf("check %s failed with %q, want it to mention %q", f.Check, f.Reason, c.inReason)
					}
					return
				}
			}
			t.Fatalf("check %s did not fail; failures: %s", c.check, v.Reason())
		})
	}
}

func FuzzCheck(f *testing.F) {
	good := goodRequest(f, tmpl{dns: []string{"node-a"}, ips: []string{"10.0.0.1"}})
	f.Add(good.PEM, "system:node:node-a", []byte("server auth"))
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"), "system:node:x", []byte{})
	f.Add([]byte{}, "", []byte("client auth"))
	f.Fuzz(func(t *testing.T, data []byte, user string, usage []byte) {
		req := Request{
			Username: user, Groups: []string{NodesGroup}, SignerName: certificatesv1.KubeletServingSignerName,
			Usages: []certificatesv1.KeyUsage{certificatesv1.KeyUsage(usage), certificatesv1.UsageServerAuth, certificatesv1.UsageDigitalSignature},
			PEM:    data,
		}
		v := Check(req, &nodeA, factsA, policyA)
		if v.Decision == Approve && (NodeName(user) != "node-a" || v.Parsed == nil) {
			t.Fatalf("approved a request from %q", user)
		}
		if v.Decision == Approve {
			for _, n := range v.Parsed.DNSNames {
				if ClusterInternal(n, "cluster.local") != "" {
					t.Fatalf("approved cluster-internal name %q", n)
				}
			}
		}
		_ = Check(req, nil, factsA, policyA)
	})
}

// TestForgedNodeRefusals: everything on the Node object is forged. Each row
// is a SAN an attacker holding node-a's kubelet credential put both in its
// own status.addresses and in its CSR; every one must be refused whatever
// the status says.
func TestForgedNodeRefusals(t *testing.T) {
	forged := func(addrs ...corev1.NodeAddress) *Node {
		return &Node{Name: "node-a", Addresses: append([]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}, addrs...)}
	}
	ip := func(a string) corev1.NodeAddress { return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a} }
	dns := func(a string) corev1.NodeAddress { return corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: a} }
	claimed := func(ips ...string) Facts {
		f := factsA
		f.Claims, f.Seen = map[netip.Addr]string{}, map[netip.Addr]time.Duration{}
		for _, s := range ips {
			f.Claims[netip.MustParseAddr(s)], f.Seen[netip.MustParseAddr(s)] = "node-a", time.Hour
		}
		f.Reserved = append(f.Reserved, Reserved{netip.MustParsePrefix("10.0.0.100/32"), "API server endpoint"})
		return f
	}
	for _, c := range []struct {
		name  string
		dns   []string
		ip    string
		node  *Node
		facts Facts
		want  string
	}{
		{"kubernetes", []string{"node-a", "kubernetes"}, "", forged(dns("kubernetes")), claimed(), "API server's Service"},
		{"kubernetes.default", []string{"node-a", "kubernetes.default"}, "", forged(dns("kubernetes.default")), claimed(), "API server's Service"},
		{"kubernetes.default.svc", []string{"node-a", "kubernetes.default.svc"}, "", forged(dns("kubernetes.default.svc")), claimed(), "API server's Service"},
		{"kubernetes.default.svc.cluster.local", []string{"node-a", "kubernetes.default.svc.cluster.local"}, "", forged(dns("kubernetes.default.svc.cluster.local")), claimed(), "API server's Service"},
		{"other service", []string{"node-a", "vault.secrets.svc"}, "", forged(dns("vault.secrets.svc")), claimed(), ".svc"},
		{"under the cluster domain", []string{"node-a", "x.cluster.local"}, "", forged(dns("x.cluster.local")), claimed(), "cluster domain"},
		{"localhost", []string{"node-a", "localhost"}, "", forged(dns("localhost")), claimed(), "localhost"},
		{"another node's name", []string{"node-a", "node-b"}, "", forged(corev1.NodeAddress{Type: corev1.NodeHostName, Address: "node-b"}), claimed(), "Node node-b's name"},
		{"another node's hostname", []string{"node-a", "b.example.com"}, "", forged(dns("b.example.com")), claimed(), "Node node-b's name"},
		{"a name only in its own status", []string{"node-a", "mail.example.org"}, "", forged(dns("mail.example.org")), claimed(), "matches no allowed pattern"},
		{"pattern for another node", []string{"node-a", "node-c.example.com"}, "", forged(dns("node-c.example.com")), claimed(), "gives Node node-c"},
		{"the kubernetes Service IP", []string{"node-a"}, "10.96.0.1", forged(ip("10.96.0.1")), claimed("10.96.0.1"), "service CIDR"},
		{"the DNS Service IP", []string{"node-a"}, "10.96.0.10", forged(ip("10.96.0.10")), claimed("10.96.0.10"), "service CIDR"},
		{"an IP in the pod pool", []string{"node-a"}, "10.244.3.7", forged(ip("10.244.3.7")), claimed("10.244.3.7"), "pod pool"},
		{"the API server's endpoint", []string{"node-a"}, "10.0.0.100", forged(ip("10.0.0.100")), claimed("10.0.0.100"), "API server endpoint"},
		{"outside the node networks", []string{"node-a"}, "8.8.8.8", forged(ip("8.8.8.8")), claimed("8.8.8.8"), "outside the node networks"},
		{"loopback", []string{"node-a"}, "127.0.0.1", forged(ip("127.0.0.1")), claimed("127.0.0.1"), "not a routable"},
		{"link-local", []string{"node-a"}, "169.254.169.254", forged(ip("169.254.169.254")), claimed(), "not a routable"},
		{"IPv6 link-local", []string{"node-a"}, "fe80::1", forged(ip("fe80::1")), claimed(), "not a routable"},
		{"multicast", []string{"node-a"}, "ff02::1", forged(ip("ff02::1")), claimed(), "not a routable"},
		{"unspecified", []string{"node-a"}, "0.0.0.0", forged(ip("0.0.0.0")), claimed(), "not a routable"},
		{"mapped service IP", []string{"node-a"}, "::ffff:10.96.0.1", forged(ip("::ffff:10.96.0.1")), claimed("10.96.0.1"), "service CIDR"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ips := []string{}
			if c.ip != "" {
				ips = append(ips, c.ip)
			}
			v := Check(goodRequest(t, tmpl{dns: c.dns, ips: ips}), c.node, c.facts, policyA)
			if v.Decision != Deny {
				t.Fatalf("decision %s, want Deny (%s)", v.Decision, v.Reason())
			}
			if !strings.Contains(v.Reason(), c.want) {
				t.Fatalf("reason %q lacks %q", v.Reason(), c.want)
			}
		})
	}
}

func TestDNSPatterns(t *testing.T) {
	for _, c := range []struct {
		pattern, node, name string
		want                bool
	}{
		{"{node}.nodes.example.com", "n1", "n1.nodes.example.com", true},
		{"{node}.nodes.example.com", "n1", "n2.nodes.example.com", false},
		{"{node}.nodes.example.com", "n1", "x.n1.nodes.example.com", false},
		{"*.eu-west-1.compute.internal", "n1", "ip-10-0-0-1.eu-west-1.compute.internal", true},
		{"*.eu-west-1.compute.internal", "n1", "a.b.eu-west-1.compute.internal", false},
		{"{node}.EXAMPLE.com", "n1", "N1.example.COM", true},
	} {
		if got := MatchDNSPattern(c.pattern, c.node, c.name); got != c.want {
			t.Errorf("MatchDNSPattern(%q, %q, %q) = %v, want %v", c.pattern, c.node, c.name, got, c.want)
		}
	}
	for _, bad := range []string{"*", "*.com", "x.*", "a*.example.com", "{node}.svc", "*.default.svc.cluster.local", "kubernetes.{node}.example.com", "{node}.cluster.local", "bad_name.example.com",
		"{node}.{node}.example.com", "{node}-{node}.example.com", // IdentityOwners inverts a pattern with one {node}
		"{node}.10", "*.0x1f", "10.96.{node}.1", // names a resolver reads as an address
		"*.{node}.example.com", "{node}.*.nodes.example.com"} { // a name both nobody's ("*") and an identity's ("{node}")
		if err := CheckPattern(bad, "cluster.local"); err == nil {
			t.Errorf("pattern %q accepted", bad)
		}
	}
	for _, good := range []string{"{node}.nodes.example.com", "*.eu-west-1.compute.internal", "{node}"} {
		if err := CheckPattern(good, "cluster.local"); err != nil {
			t.Errorf("pattern %q refused: %v", good, err)
		}
	}
}
