// Package csrcheck decides whether a kubelet serving CSR may be approved on
// static grounds: who asked, what the request says, and what the requesting
// Node's object says about its names and addresses. Every check is a small
// named pure function; Check runs them all and reports every failure.
//
// It is shared by the coordinator (final decision) and the agent (which adds
// the kernel's ground truth before attesting).
package csrcheck

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// NodeUserPrefix is the username prefix of node identities.
const NodeUserPrefix = "system:node:"

// NodesGroup is the group every node identity belongs to.
const NodesGroup = "system:nodes"

// Limits that keep a hostile CSR from costing much to check.
const (
	MaxRequestBytes = 64 << 10
	MaxSANs         = 64
	MinRSABits      = 2048
	MaxRSABits      = 8192
)

// Request is what the checks need from a CertificateSigningRequest object.
type Request struct {
	Name              string
	Username          string
	Groups            []string
	SignerName        string
	Usages            []certificatesv1.KeyUsage
	ExpirationSeconds *int32
	// PEM is spec.request.
	PEM []byte
}

// FromCSR extracts a Request from the API object.
func FromCSR(csr *certificatesv1.CertificateSigningRequest) Request {
	return Request{
		Name: csr.Name, Username: csr.Spec.Username, Groups: csr.Spec.Groups,
		SignerName: csr.Spec.SignerName, Usages: csr.Spec.Usages,
		ExpirationSeconds: csr.Spec.ExpirationSeconds, PEM: csr.Spec.Request,
	}
}

// Node is what the checks know about the requesting Node.
type Node struct {
	Name      string
	Addresses []corev1.NodeAddress
}

// AddressOwners maps each address claimed by a Node to the Node's name, over
// all Nodes. An IP claimed by another Node may not be certified.
type AddressOwners map[netip.Addr][]string

// Policy holds the operator's limits.
type Policy struct {
	// MaxDuration caps spec.expirationSeconds; 0 means no cap.
	MaxDuration time.Duration
	// AllowedIPRanges, when set, must contain every IP SAN.
	AllowedIPRanges []netip.Prefix
}

// Decision is the outcome of Check.
type Decision string

const (
	Approve Decision = "Approve"
	Deny    Decision = "Deny"
	// Retry means the facts needed are not there yet (the Node is not in the
	// cache); the caller requeues with backoff and never drops the CSR.
	Retry Decision = "Retry"
)

// Failure is one failed check.
type Failure struct {
	Check  string
	Reason string
}

// Verdict is the result of Check.
type Verdict struct {
	Decision Decision
	Failures []Failure
	// Parsed is the parsed request when it could be parsed.
	Parsed *x509.CertificateRequest
}

// Reason joins the failures into one line for a condition or an Event.
func (v Verdict) Reason() string {
	parts := make([]string, 0, len(v.Failures))
	for _, f := range v.Failures {
		parts = append(parts, f.Check+": "+f.Reason)
	}
	return strings.Join(parts, "; ")
}

// input is what every check sees.
type input struct {
	req    Request
	csr    *x509.CertificateRequest
	node   Node
	owners AddressOwners
	policy Policy
}

type check struct {
	name string
	fn   func(input) error
}

// identityChecks need only the CSR object; requestChecks need the parsed
// request and the Node.
var identityChecks = []check{
	{"signer", checkSigner},
	{"username", checkUsername},
	{"groups", checkGroups},
	{"usages", checkUsages},
	{"duration", checkDuration},
}

var requestChecks = []check{
	{"common-name", checkCommonName},
	{"organization", checkOrganization},
	{"key", checkKey},
	{"san-count", checkSANCount},
	{"no-email-or-uri", checkNoEmailOrURI},
	{"dns-names", checkDNSNames},
	{"needs-dns-name", checkHasDNSName},
	{"ip-addresses", checkIPAddresses},
}

// Check runs every static check. node is nil when the requesting Node is not
// known (yet): the verdict is then Retry, unless the CSR is already invalid on
// its own, which is a Deny.
func Check(req Request, node *Node, owners AddressOwners, policy Policy) Verdict {
	in := input{req: req, owners: owners, policy: policy}
	var v Verdict
	for _, c := range identityChecks {
		if err := c.fn(in); err != nil {
			v.Failures = append(v.Failures, Failure{c.name, err.Error()})
		}
	}
	csr, err := Parse(req.PEM)
	if err != nil {
		v.Failures = append(v.Failures, Failure{"parse", err.Error()})
	}
	v.Parsed, in.csr = csr, csr
	switch {
	case len(v.Failures) > 0:
		v.Decision = Deny
		return v
	case node == nil:
		v.Decision = Retry
		v.Failures = []Failure{{"node", fmt.Sprintf("Node %q is not known yet", strings.TrimPrefix(req.Username, NodeUserPrefix))}}
		return v
	}
	in.node = *node
	for _, c := range requestChecks {
		if err := c.fn(in); err != nil {
			v.Failures = append(v.Failures, Failure{c.name, err.Error()})
		}
	}
	v.Decision = Approve
	if len(v.Failures) > 0 {
		v.Decision = Deny
	}
	return v
}

// Parse decodes spec.request: exactly one PEM block of type CERTIFICATE
// REQUEST, nothing after it, a valid self-signature.
func Parse(data []byte) (*x509.CertificateRequest, error) {
	if len(data) > MaxRequestBytes {
		return nil, fmt.Errorf("request is %d bytes, limit %d", len(data), MaxRequestBytes)
	}
	block, rest := pem.Decode(data)
	if block == nil {
		return nil, errors.New("request is not PEM")
	}
	if block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("PEM block is %q, want \"CERTIFICATE REQUEST\"", block.Type)
	}
	if len(strings.TrimSpace(string(rest))) > 0 {
		return nil, errors.New("data after the CERTIFICATE REQUEST block")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing the request: %v", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("request signature: %v", err)
	}
	return csr, nil
}

func checkSigner(in input) error {
	if in.req.SignerName != certificatesv1.KubeletServingSignerName {
		return fmt.Errorf("signer %q is not %s", in.req.SignerName, certificatesv1.KubeletServingSignerName)
	}
	return nil
}

// NodeName returns the node a username belongs to, or "" if it is not a node identity.
func NodeName(username string) string {
	name, ok := strings.CutPrefix(username, NodeUserPrefix)
	if !ok || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return ""
	}
	return name
}

func checkUsername(in input) error {
	if NodeName(in.req.Username) == "" {
		return fmt.Errorf("requestor %q is not a node identity (system:node:<name>)", in.req.Username)
	}
	return nil
}

func checkGroups(in input) error {
	if !slices.Contains(in.req.Groups, NodesGroup) {
		return fmt.Errorf("requestor is not in group %s", NodesGroup)
	}
	return nil
}

var allowedUsages = []certificatesv1.KeyUsage{
	certificatesv1.UsageServerAuth, certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment,
}

func checkUsages(in input) error {
	for _, u := range in.req.Usages {
		if !slices.Contains(allowedUsages, u) {
			return fmt.Errorf("usage %q is not allowed for a serving certificate", u)
		}
	}
	for _, want := range []certificatesv1.KeyUsage{certificatesv1.UsageServerAuth, certificatesv1.UsageDigitalSignature} {
		if !slices.Contains(in.req.Usages, want) {
			return fmt.Errorf("usage %q is missing", want)
		}
	}
	return nil
}

func checkDuration(in input) error {
	if in.req.ExpirationSeconds == nil || in.policy.MaxDuration == 0 {
		return nil
	}
	asked := time.Duration(*in.req.ExpirationSeconds) * time.Second
	if asked > in.policy.MaxDuration {
		return fmt.Errorf("requested duration %s exceeds the policy maximum %s", asked, in.policy.MaxDuration)
	}
	return nil
}

func checkCommonName(in input) error {
	if in.csr.Subject.CommonName != in.req.Username {
		return fmt.Errorf("CN %q does not equal the requestor %q", in.csr.Subject.CommonName, in.req.Username)
	}
	return nil
}

func checkOrganization(in input) error {
	if !slices.Equal(in.csr.Subject.Organization, []string{NodesGroup}) {
		return fmt.Errorf("O is %q, want exactly [%s]", in.csr.Subject.Organization, NodesGroup)
	}
	return nil
}

func checkKey(in input) error {
	switch k := in.csr.PublicKey.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return fmt.Errorf("ECDSA curve %s is not P-256 or P-384", k.Curve.Params().Name)
		}
	case *rsa.PublicKey:
		if bits := k.N.BitLen(); bits < MinRSABits || bits > MaxRSABits {
			return fmt.Errorf("RSA key of %d bits, want %d to %d", bits, MinRSABits, MaxRSABits)
		}
	default:
		return fmt.Errorf("key type %T is not ECDSA or RSA", in.csr.PublicKey)
	}
	return nil
}

func checkSANCount(in input) error {
	n := len(in.csr.DNSNames) + len(in.csr.IPAddresses) + len(in.csr.EmailAddresses) + len(in.csr.URIs)
	switch {
	case n == 0:
		return errors.New("the request has no subject alternative names")
	case n > MaxSANs:
		return fmt.Errorf("%d subject alternative names, limit %d", n, MaxSANs)
	}
	return nil
}

func checkNoEmailOrURI(in input) error {
	if len(in.csr.EmailAddresses) > 0 || len(in.csr.URIs) > 0 {
		return fmt.Errorf("e-mail (%d) and URI (%d) SANs are not allowed", len(in.csr.EmailAddresses), len(in.csr.URIs))
	}
	return nil
}

// NodeNames are the DNS names a Node may certify: its name and its
// Hostname, InternalDNS and ExternalDNS addresses, lower-cased.
func NodeNames(node Node) []string {
	names := []string{strings.ToLower(node.Name)}
	for _, a := range node.Addresses {
		switch a.Type {
		case corev1.NodeHostName, corev1.NodeInternalDNS, corev1.NodeExternalDNS:
			names = append(names, strings.ToLower(a.Address))
		}
	}
	return names
}

// CheckDNSName says whether one DNS SAN may be certified for a node with
// these names. Names must be plain ASCII DNS names: no wildcard, no trailing
// dot, no IDNA or Unicode (which could fold to ASCII, like the Kelvin sign).
// The comparison is ASCII case-insensitive.
func CheckDNSName(name string, allowed []string) error {
	for _, r := range name {
		if r > 0x7f {
			return fmt.Errorf("DNS SAN %q is not ASCII", name)
		}
	}
	switch {
	case strings.Contains(name, "*"):
		return fmt.Errorf("DNS SAN %q is a wildcard", name)
	case strings.HasSuffix(name, "."):
		return fmt.Errorf("DNS SAN %q has a trailing dot", name)
	case strings.HasPrefix(strings.ToLower(name), "xn--") || strings.Contains(strings.ToLower(name), ".xn--"):
		return fmt.Errorf("DNS SAN %q is an IDNA name", name)
	}
	lower := strings.ToLower(name)
	if errs := validation.IsDNS1123Subdomain(lower); len(errs) > 0 {
		return fmt.Errorf("DNS SAN %q is not a valid DNS name", name)
	}
	if !slices.Contains(allowed, lower) {
		return fmt.Errorf("DNS SAN %q is not a name of this node", name)
	}
	return nil
}

func checkDNSNames(in input) error {
	allowed := NodeNames(in.node)
	var errs []error
	for _, name := range in.csr.DNSNames {
		if err := CheckDNSName(name, allowed); err != nil {
			errs = append(errs, err)
		}
	}
	return joinErrs(errs)
}

// checkHasDNSName refuses IP-only requests: a kubelet always asks for its
// hostname, and a request without one is not a kubelet's.
func checkHasDNSName(in input) error {
	if len(in.csr.DNSNames) == 0 {
		return errors.New("the request names no DNS name; a kubelet always includes its hostname")
	}
	return nil
}

// NodeIPs are the addresses a Node may certify: its InternalIP and ExternalIP addresses.
func NodeIPs(node Node) []netip.Addr {
	var ips []netip.Addr
	for _, a := range node.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			ips = append(ips, ip.Unmap())
		}
	}
	return ips
}

// CheckIP says whether one IP SAN may be certified for node: it is one of the
// node's addresses, is claimed by no other Node, is a unicast address, and
// is inside the allowed ranges when the policy sets them.
func CheckIP(ip netip.Addr, node string, nodeIPs []netip.Addr, owners AddressOwners, allowed []netip.Prefix) error {
	ip = ip.Unmap()
	switch {
	case ip.IsUnspecified(), ip.IsLoopback(), ip.IsMulticast(), ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return fmt.Errorf("IP SAN %s is not a routable unicast address", ip)
	case !slices.Contains(nodeIPs, ip):
		return fmt.Errorf("IP SAN %s is not an address of Node %s", ip, node)
	}
	for _, owner := range owners[ip] {
		if owner != node {
			return fmt.Errorf("IP SAN %s is also claimed by Node %s", ip, owner)
		}
	}
	if len(allowed) > 0 && !slices.ContainsFunc(allowed, func(p netip.Prefix) bool { return p.Contains(ip) }) {
		return fmt.Errorf("IP SAN %s is outside the allowed ranges", ip)
	}
	return nil
}

func checkIPAddresses(in input) error {
	nodeIPs := NodeIPs(in.node)
	var errs []error
	for _, raw := range in.csr.IPAddresses {
		ip, ok := netip.AddrFromSlice(raw)
		if !ok {
			errs = append(errs, fmt.Errorf("IP SAN %v is malformed", raw))
			continue
		}
		if err := CheckIP(ip, in.node.Name, nodeIPs, in.owners, in.policy.AllowedIPRanges); err != nil {
			errs = append(errs, err)
		}
	}
	return joinErrs(errs)
}

// joinErrs joins errors into one line (errors.Join uses newlines, which do
// not belong in a condition message).
func joinErrs(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, ", "))
}

// Owners builds the address index from every Node's addresses.
func Owners(nodes []Node) AddressOwners {
	owners := AddressOwners{}
	for _, n := range nodes {
		for _, ip := range NodeIPs(n) {
			if !slices.Contains(owners[ip], n.Name) {
				owners[ip] = append(owners[ip], n.Name)
			}
		}
	}
	return owners
}
