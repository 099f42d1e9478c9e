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
	// parsed is PEM parsed once by FromCSR; nil: Parse parses it.
	parsed *parsedRequest
}

type parsedRequest struct {
	csr *x509.CertificateRequest
	err error
}

// Parse is Parse(r.PEM), parsed once for a Request made by FromCSR.
func (r Request) Parse() (*x509.CertificateRequest, error) {
	if r.parsed != nil {
		return r.parsed.csr, r.parsed.err
	}
	return Parse(r.PEM)
}

// FromCSR extracts a Request from the API object, its request parsed once
// for every check and caller that reads it (Request.Parse).
func FromCSR(csr *certificatesv1.CertificateSigningRequest) Request {
	r := Request{
		Name: csr.Name, Username: csr.Spec.Username, Groups: csr.Spec.Groups,
		SignerName: csr.Spec.SignerName, Usages: csr.Spec.Usages,
		ExpirationSeconds: csr.Spec.ExpirationSeconds, PEM: csr.Spec.Request,
	}
	parsed, err := Parse(r.PEM)
	r.parsed = &parsedRequest{csr: parsed, err: err}
	return r
}

// Node is what the checks know about the requesting Node: its name (from the
// authenticated identity) and its status.addresses, which the node writes
// itself and which therefore only ever narrow what may be certified.
type Node struct {
	Name      string
	Addresses []corev1.NodeAddress
}

// Reserved is a range no serving certificate may name, and why.
type Reserved struct {
	Prefix netip.Prefix
	Why    string
}

// Facts are what the coordinator knows from sources nodes cannot write: its
// configuration, its own records, and cluster objects (Services,
// ServiceCIDRs, the API server's endpoints, Node names).
type Facts struct {
	// Reserved ranges: service CIDRs, pod pools, allocated pod CIDRs, the
	// API server's endpoints.
	Reserved []Reserved
	// Claims maps an address to the Node that holds it: the one the
	// coordinator recorded it for first (its NodeRecord), or the Node
	// carving from a node prefix that holds it, or else another Node that
	// has listed it since before the requester did.
	Claims map[netip.Addr]string
	// Seen is how long the coordinator has observed each of the requesting
	// Node's addresses continuously.
	Seen map[netip.Addr]time.Duration
	// Names maps Node names (lower-case) to that Node: another Node's name
	// is never certified. Hostnames maps another Node's Hostname to it: a
	// name another Node lists is held pending, never decided on, unless
	// the requester's identity gives it the name (FromIdentity).
	Names, Hostnames map[string]string
	// SharedNames maps a name that the requester's identity gives it and
	// another existing Node's identity gives that Node too (one's Node
	// name, the other's through a "{node}" pattern) to that other Node:
	// certified to neither while both exist, held, never denied.
	SharedNames map[string]string
	// ReservedNames are names no certificate ever carries, whoever asks,
	// even as a node's own name: the admin's csr.reservedNames.
	ReservedNames []string
	// APIServerNames are the DNS names in the API server's serving
	// certificate (the cluster endpoint, a load balancer's name, and the
	// control-plane hostnames Talos adds). Only a control-plane Node may
	// carry one, and only its own name.
	APIServerNames []string
	// PodCIDROf maps an address inside an allocated pod CIDR to the Node
	// holding that CIDR: never certified for anyone while it does; denied
	// to every requester (the holder's is a pod's address), never left
	// waiting for a pod CIDR that does not change.
	PodCIDROf map[netip.Addr]string
	// Bound maps an address the admin's inventory binds to other Nodes
	// than the requester to why: never certified for it (denied).
	Bound map[netip.Addr]string
	// ControlPlane says the requesting Node carries the control-plane role
	// label, which no node can set on itself and the coordinator never grants.
	ControlPlane bool
}

// Policy holds the operator's limits.
type Policy struct {
	// MaxDuration caps spec.expirationSeconds; 0 means no cap.
	MaxDuration time.Duration
	// NodeNetworks must contain every IP SAN.
	NodeNetworks []netip.Prefix
	// DNSPatterns are the DNS SANs allowed besides the node's name: "{node}"
	// stands for the node name, and a "*" label for exactly one label.
	DNSPatterns []string
	// ClusterDomain is the cluster's DNS domain ("cluster.local"); no name
	// under it, under .svc, or "kubernetes*" is ever certified.
	ClusterDomain string
	// MinStable is how long an address must have been observed
	// continuously on the Node before it is certified.
	MinStable time.Duration
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

// Failure is one failed check. A Retry failure is a fact that may still
// come true (an address not yet recorded or not yet stable), not a reason
// to deny.
type Failure struct {
	Check  string
	Reason string
	Retry  bool
}

// Verdict is the result of Check.
type Verdict struct {
	Decision Decision
	Failures []Failure
	// Parsed is the parsed request when it could be parsed.
	Parsed *x509.CertificateRequest
	// After is when a Retry verdict may turn (0: unknown, use backoff).
	After time.Duration
	// Conflict says an address is recorded as another Node's; NameConflict
	// that a DNS name is another Node's too.
	Conflict     bool
	NameConflict bool
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
	facts  Facts
	policy Policy
}

type check struct {
	name string
	fn   func(input) error
}

// retryError marks a failure that may resolve by itself; conflict says
// another Node holds an address, name that it holds a DNS name (worth
// telling someone about).
type retryError struct {
	msg      string
	after    time.Duration
	conflict bool
	name     bool
}

func (e retryError) Error() string { return e.msg }

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
func Check(req Request, node *Node, facts Facts, policy Policy) Verdict {
	in := input{req: req, facts: facts, policy: policy}
	var v Verdict
	for _, c := range identityChecks {
		if err := c.fn(in); err != nil {
			v.Failures = append(v.Failures, Failure{Check: c.name, Reason: err.Error()})
		}
	}
	csr, err := req.Parse()
	if err != nil {
		v.Failures = append(v.Failures, Failure{Check: "parse", Reason: err.Error()})
	}
	v.Parsed, in.csr = csr, csr
	switch {
	case len(v.Failures) > 0:
		v.Decision = Deny
		return v
	case node == nil:
		v.Decision = Retry
		v.Failures = []Failure{{Check: "node", Reason: fmt.Sprintf("Node %q is not known yet", strings.TrimPrefix(req.Username, NodeUserPrefix)), Retry: true}}
		return v
	}
	in.node = *node
	for _, c := range requestChecks {
		err := c.fn(in)
		if err == nil {
			continue
		}
		var retry retryError
		if errors.As(err, &retry) {
			v.After = max(v.After, retry.after)
			v.Conflict = v.Conflict || retry.conflict
			v.NameConflict = v.NameConflict || retry.name
		}
		v.Failures = append(v.Failures, Failure{Check: c.name, Reason: err.Error(), Retry: errors.As(err, &retry)})
	}
	v.Decision = Approve
	for _, f := range v.Failures {
		if !f.Retry {
			v.Decision = Deny
			return v
		}
		v.Decision = Retry
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

// CheckDNSName says whether one DNS SAN is a plain name in allowed. Names
// must be plain ASCII DNS names: no wildcard, no trailing dot, no IDNA or
// Unicode (which could fold to ASCII, like the Kelvin sign). The comparison
// is ASCII case-insensitive.
func CheckDNSName(name string, allowed []string) error {
	if err := checkDNSSyntax(name); err != nil {
		return err
	}
	if !slices.Contains(allowed, strings.ToLower(name)) {
		return fmt.Errorf("DNS SAN %q is not a name of this node", name)
	}
	return nil
}

func checkDNSSyntax(name string) error {
	for _, r := range name {
		if r > 0x7f {
			return fmt.Errorf("DNS SAN %q is not ASCII", name)
		}
	}
	lower := strings.ToLower(name)
	switch {
	case strings.Contains(name, "*"):
		return fmt.Errorf("DNS SAN %q is a wildcard", name)
	case strings.HasSuffix(name, "."):
		return fmt.Errorf("DNS SAN %q has a trailing dot", name)
	case strings.HasPrefix(lower, "xn--") || strings.Contains(lower, ".xn--"):
		return fmt.Errorf("DNS SAN %q is an IDNA name", name)
	}
	if errs := validation.IsDNS1123Subdomain(lower); len(errs) > 0 {
		return fmt.Errorf("DNS SAN %q is not a valid DNS name", name)
	}
	if numericLabel(lower[strings.LastIndex(lower, ".")+1:]) {
		return fmt.Errorf("DNS SAN %q has a number as its last label, which resolvers read as an IP address: addresses are certified as IP SANs only (rename a Node named so)", name)
	}
	return nil
}

// numericLabel: a name whose last label is a number (decimal, or hex with
// 0x) is one a C resolver may read as an IPv4 address (inet_aton takes
// "10.96.0.1", "0xa600001", "167772161", "10.96.1"), and no host name's
// last label is one (RFC 1123 2.1). The kubelet asks for an IP-shaped
// Hostname as an IP SAN, so an honest request never carries such a name.
func numericLabel(label string) bool {
	digits, set := label, "0123456789"
	if rest, ok := strings.CutPrefix(label, "0x"); ok {
		digits, set = rest, "0123456789abcdef"
	}
	return label != "" && strings.Trim(digits, set) == ""
}

// ClusterInternal reports why a DNS name belongs to the cluster itself (the
// API server's Service names, anything under .svc or the cluster domain,
// localhost), or "" when it does not. Such names are never certified for a
// node: the CA that signs kubelet serving certificates is the one pods
// trust for the API server.
func ClusterInternal(name, clusterDomain string) string {
	n := strings.ToLower(name)
	switch {
	case n == "kubernetes" || strings.HasPrefix(n, "kubernetes."):
		return "names the API server's Service"
	case n == "svc" || strings.HasSuffix(n, ".svc") || strings.Contains(n, ".svc."):
		return "is a Service name (.svc)"
	case clusterDomain != "" && (n == clusterDomain || strings.HasSuffix(n, "."+clusterDomain)):
		return "is under the cluster domain " + clusterDomain
	case strings.HasSuffix(n, ".localhost") || slices.Contains(loopbackLabels, strings.SplitN(n, ".", 2)[0]):
		return "is localhost"
	}
	return ""
}

// loopbackLabels begin the loopback host's names in common /etc/hosts
// files (localhost.localdomain, ip6-localhost…): a client resolving one
// connects to itself.
var loopbackLabels = []string{"localhost", "localhost4", "localhost6", "ip6-localhost", "ip6-loopback"}

// namedIn reports whether lower (a lower-case DNS name) is one of list, in
// whatever case, or one label under a wildcard entry of it ("*.k8s.example.com"
// covers "api.k8s.example.com", as a TLS client matches it).
func namedIn(list []string, lower string) bool {
	if containsFold(list, lower) {
		return true
	}
	label, parent, ok := strings.Cut(lower, ".")
	return ok && label != "" && containsFold(list, "*."+parent)
}

// MatchDNSPattern reports whether name matches pattern for node: "{node}"
// in the pattern stands for the node name, and a label "*" for exactly one
// label. Both are compared lower-case.
func MatchDNSPattern(pattern, node, name string) bool {
	p := strings.Split(strings.ToLower(strings.ReplaceAll(pattern, "{node}", node)), ".")
	n := strings.Split(strings.ToLower(name), ".")
	if len(p) != len(n) {
		return false
	}
	for i := range p {
		if p[i] != n[i] && (p[i] != "*" || n[i] == "") {
			return false
		}
	}
	return true
}

// CheckPattern validates an allowed-DNS-name pattern: a DNS name once
// "{node}" is substituted, "*" only as a whole label and never in the last
// two labels (no "*.com") nor beside "{node}", not cluster-internal, and
// not ending in a number.
func CheckPattern(pattern, clusterDomain string) error {
	if strings.Count(pattern, "{node}") > 1 {
		// A name would be given by two node names' identities at once, and
		// IdentityOwners, which inverts a pattern, could not say whose.
		return fmt.Errorf("pattern %q: \"{node}\" may appear once", pattern)
	}
	if strings.Contains(pattern, "{node}") && strings.Contains(pattern, "*") {
		// Its names would be nobody's ("*": several Nodes may carry one)
		// and one Node's (its identity gives them) at once: a Node named
		// like one would be certified for it and the other denied it.
		return fmt.Errorf("pattern %q: \"{node}\" and \"*\" may not be in one pattern: \"{node}\" gives a name to one Node, \"*\" to any", pattern)
	}
	sample := strings.ReplaceAll(pattern, "{node}", "node")
	labels := strings.Split(sample, ".")
	for i, l := range labels {
		if strings.Contains(l, "*") && (l != "*" || i >= len(labels)-2) {
			return fmt.Errorf("pattern %q: \"*\" must be a whole label and not one of the last two", pattern)
		}
	}
	if errs := validation.IsDNS1123Subdomain(strings.ReplaceAll(strings.ToLower(sample), "*", "x")); len(errs) > 0 {
		return fmt.Errorf("pattern %q is not a DNS name: %s", pattern, strings.Join(errs, "; "))
	}
	if why := ClusterInternal(strings.ReplaceAll(sample, "*", "x"), clusterDomain); why != "" {
		return fmt.Errorf("pattern %q %s", pattern, why)
	}
	if numericLabel(strings.ToLower(labels[len(labels)-1])) {
		return fmt.Errorf("pattern %q ends in a number: its names would read as IP addresses", pattern)
	}
	return nil
}

// CheckDNSSAN says whether one DNS SAN may be certified for node. It decides
// from the policy, the API server's certificate and Node names only, never
// from the node's own status.
//
// Invariant: no certificate ever carries a reserved name, whoever asks. The
// reserved-name checks (ReservedName) run before anything can accept a
// name, the node's own name included: a Node *named* like the API server's
// endpoint gets no certificate for it.
func CheckDNSSAN(name, node string, facts Facts, policy Policy) error {
	if err := checkDNSSyntax(name); err != nil {
		return err
	}
	lower := strings.ToLower(name)
	if err := ReservedName(name, node, facts, policy); err != nil {
		return err
	}
	if owner := facts.Names[lower]; owner != "" && owner != node {
		return fmt.Errorf("DNS SAN %q is Node %s's name", name, owner)
	}
	if other := facts.SharedNames[lower]; other != "" && other != node {
		return retryError{msg: fmt.Sprintf("DNS SAN %q is also Node %s's (its Node name or a \"{node}\" pattern's name, or its valid certificate carries it): "+
			"certified to neither while both have it; it stays pending. Delete the Node that should not have it and its NodeRecord (kubectl delete noderecord <node>); "+
			"if both should, no Node can hold it: change csr.allowedDNSNames or a Node's name", name, other), name: true}
	}
	if FromIdentity(lower, node, policy) {
		return nil
	}
	if owner, _ := PatternOwner(lower, policy); owner != "" && owner != strings.ToLower(node) {
		if lower == strings.ToLower(node) {
			return fmt.Errorf("DNS SAN %q is the name csr.allowedDNSNames gives Node %s, and a pattern's name is never a Node's own: rename this Node, or change the pattern", name, owner)
		}
		return fmt.Errorf("DNS SAN %q is the name csr.allowedDNSNames gives Node %s", name, owner)
	}
	if owner := facts.Hostnames[lower]; owner != "" && owner != node {
		return retryError{msg: fmt.Sprintf("DNS SAN %q is also Node %s's Hostname; it stays pending", name, owner), name: true}
	}
	for _, p := range policy.DNSPatterns {
		if MatchDNSPattern(p, node, lower) {
			return nil
		}
	}
	return fmt.Errorf("DNS SAN %q is not the node's name and matches no allowed pattern (csr.allowedDNSNames)", name)
}

// FromIdentity reports whether a DNS name is given to node by its
// authenticated identity (system:node:<node>): the node's own name, unless
// a pattern gives that name out (PatternOwner), or a name an admin pattern
// derives from it ("{node}" substituted, no "*"). Another Node listing such
// a name as its Hostname holds nothing: names come from the requester's
// identity, so the squatter's listing loses, not the requester's CSR.
// Reserved names and other Nodes' names are refused before this is asked.
func FromIdentity(name, node string, policy Policy) bool {
	lower := strings.ToLower(name)
	if owner, _ := PatternOwner(lower, policy); lower == strings.ToLower(node) && owner == "" {
		return true
	}
	for _, p := range policy.DNSPatterns {
		if strings.Contains(p, "{node}") && !strings.Contains(p, "*") && MatchDNSPattern(p, node, lower) {
			return true
		}
	}
	return false
}

// PatternOwner says whether a csr.allowedDNSNames pattern gives name out
// (ok), and to which Node: the one a "{node}" pattern derives it from, ""
// for a "*" pattern only (any Node may carry it, unless it is a Node's own
// name). A "{node}" pattern's name is never a Node's own name: no Node
// named after another's "{node}" name is ever certified for it, so no
// order of registration makes the derived Node wait for it.
func PatternOwner(name string, policy Policy) (owner string, ok bool) {
	lower := strings.ToLower(name)
	for _, p := range policy.DNSPatterns {
		if strings.Contains(p, "*") {
			ok = ok || MatchDNSPattern(p, "", lower)
			continue
		}
		before, after, found := strings.Cut(strings.ToLower(p), "{node}")
		if !found || before == "" && after == "" {
			continue // "{node}" alone is the own-name rule itself
		}
		node, hasPrefix := strings.CutPrefix(lower, before)
		node, hasSuffix := strings.CutSuffix(node, after)
		if hasPrefix && hasSuffix && node != "" && len(validation.IsDNS1123Subdomain(node)) == 0 {
			return node, true
		}
	}
	return "", ok
}

// IdentityOwners are the node names whose identity gives them name
// (FromIdentity, the inverse): the name itself, and the name each "{node}"
// pattern without "*" derives it from. Such a name is refused to every
// requester but these, when one of them is a Node: a squatter cannot take
// another Node's name through a "*" pattern either.
func IdentityOwners(name string, policy Policy) []string {
	lower := strings.ToLower(name)
	var out []string
	if owner, _ := PatternOwner(lower, policy); owner == "" {
		out = append(out, lower)
	}
	for _, p := range policy.DNSPatterns {
		before, after, ok := strings.Cut(strings.ToLower(p), "{node}")
		if !ok || strings.Contains(p, "*") || strings.Contains(after, "{node}") || before == "" && after == "" {
			continue
		}
		node, hasPrefix := strings.CutPrefix(lower, before)
		node, hasSuffix := strings.CutSuffix(node, after)
		if hasPrefix && hasSuffix && node != "" && len(validation.IsDNS1123Subdomain(node)) == 0 && !slices.Contains(out, node) {
			out = append(out, node)
		}
	}
	return out
}

// ReservedName refuses a DNS name no certificate for node may
// carry, whoever asks and whatever the node is named: cluster-internal
// names, the admin's reserved names, and the API server's certificate
// names, of which a control-plane Node may carry only its own name (Talos
// puts each control-plane hostname in the API server's certificate).
func ReservedName(name, node string, facts Facts, policy Policy) error {
	lower := strings.ToLower(name)
	if why := ClusterInternal(lower, policy.ClusterDomain); why != "" {
		return fmt.Errorf("DNS SAN %q %s", name, why)
	}
	if containsFold(facts.ReservedNames, lower) {
		return fmt.Errorf("DNS SAN %q is reserved by csr.reservedNames: no certificate carries it", name)
	}
	if namedIn(facts.APIServerNames, lower) && !(facts.ControlPlane && lower == strings.ToLower(node)) {
		return fmt.Errorf("DNS SAN %q is a name of the API server: only a control-plane Node of that name may carry it", name)
	}
	return nil
}

// containsFold: is name in list, whatever the case of either (DNS names
// compare without case, and the lists are written by admins and read from
// the API server's certificate as they come).
func containsFold(list []string, name string) bool {
	return slices.ContainsFunc(list, func(n string) bool { return strings.EqualFold(n, name) })
}

func checkDNSNames(in input) error {
	var v sanVerdicts
	for _, name := range in.csr.DNSNames {
		v.add(CheckDNSSAN(name, in.node.Name, in.facts, in.policy))
	}
	return v.err()
}

// sanVerdicts collects one check's verdicts on each SAN: any refusal makes
// the check a refusal (every reason joined); otherwise the retries, merged,
// make it a retry.
type sanVerdicts struct {
	refused []error
	retry   retryError
}

func (v *sanVerdicts) add(err error) {
	var r retryError
	switch {
	case errors.As(err, &r):
		v.retry.msg = strings.TrimPrefix(v.retry.msg+", "+r.msg, ", ")
		v.retry.after = max(v.retry.after, r.after)
		v.retry.conflict = v.retry.conflict || r.conflict
		v.retry.name = v.retry.name || r.name
	case err != nil:
		v.refused = append(v.refused, err)
	}
}

func (v *sanVerdicts) err() error {
	switch {
	case len(v.refused) > 0:
		return joinErrs(v.refused)
	case v.retry.msg != "":
		return v.retry
	}
	return nil
}

// checkHasDNSName refuses IP-only requests: a kubelet always asks for its
// hostname, and a request without one is not a kubelet's.
func checkHasDNSName(in input) error {
	if len(in.csr.DNSNames) == 0 {
		return errors.New("the request names no DNS name; a kubelet always includes its hostname")
	}
	return nil
}

// NodeIPs are the Node's InternalIP and ExternalIP addresses, as it reports them.
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

// Certifiable says whether an address may ever be named in a node's serving
// certificate, whoever asks: a routable unicast address inside the node
// networks and outside every reserved range.
func Certifiable(ip netip.Addr, networks []netip.Prefix, reserved []Reserved) error {
	ip = ip.Unmap()
	switch {
	case !ip.IsValid(), ip.IsUnspecified(), ip.IsLoopback(), ip.IsMulticast(), ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return fmt.Errorf("IP SAN %s is not a routable unicast address", ip)
	case !slices.ContainsFunc(networks, func(p netip.Prefix) bool { return p.Contains(ip) }):
		return fmt.Errorf("IP SAN %s is outside the node networks (nodeNetworks)", ip)
	}
	for _, r := range reserved {
		if r.Prefix.Contains(ip) {
			return fmt.Errorf("IP SAN %s is in %s (%s)", ip, r.Prefix, r.Why)
		}
	}
	return nil
}

// APIServerAddresses are the API server's addresses as reserved ranges for
// one requester. Invariant: no certificate ever carries a shared API-server
// address, whoever asks: an address in the API server's certificate that
// is not one API server's own endpoint (a Talos shared VIP, a load
// balancer) is reserved for everyone, control-plane Nodes included. The
// endpoints of the kubernetes Service (each API server's advertised
// address, written by the API server itself) are reserved for every Node
// but a control-plane one, whose own addresses they are.
func APIServerAddresses(endpoints, certIPs []netip.Addr, controlPlane bool) []Reserved {
	var out []Reserved
	one := func(ip netip.Addr, why string) {
		ip = ip.Unmap()
		p := netip.PrefixFrom(ip, ip.BitLen())
		if !slices.ContainsFunc(out, func(r Reserved) bool { return r.Prefix == p }) {
			out = append(out, Reserved{Prefix: p, Why: why})
		}
	}
	eps := make([]netip.Addr, 0, len(endpoints))
	for _, ip := range endpoints {
		eps = append(eps, ip.Unmap())
	}
	for _, ip := range certIPs {
		if !slices.Contains(eps, ip.Unmap()) {
			one(ip, "a shared address of the API server (in its certificate, not one API server's endpoint): never certified for any node")
		}
	}
	if !controlPlane {
		for _, ip := range eps {
			one(ip, "an address of the API server; only control-plane Nodes may name it")
		}
	}
	return out
}

// CheckIP says whether one IP SAN may be certified for node: certifiable,
// one of the node's addresses, recorded by the coordinator as this node's
// (an address another Node claimed first stays that Node's), and observed
// continuously for the policy's minimum time.
func CheckIP(ip netip.Addr, node string, nodeIPs []netip.Addr, facts Facts, policy Policy) error {
	ip = ip.Unmap()
	if err := Certifiable(ip, policy.NodeNetworks, facts.Reserved); err != nil {
		return err
	}
	if !slices.Contains(nodeIPs, ip) {
		return fmt.Errorf("IP SAN %s is not an address of Node %s", ip, node)
	}
	if why := facts.Bound[ip]; why != "" {
		return fmt.Errorf("IP SAN %s: %s", ip, why)
	}
	switch holder := facts.PodCIDROf[ip]; {
	case holder == node:
		return fmt.Errorf("IP SAN %s is inside this Node's own pod CIDR (a pod's address)", ip)
	case holder != "":
		// Denied, not left waiting: a pod CIDR never changes while its
		// Node exists (a later address in a shared prefix, a binding
		// added after the carve). The kubelet asks again, and once the
		// holder is gone its next request is certified.
		return fmt.Errorf("IP SAN %s is inside Node %s's pod CIDR, which never changes while that Node exists. "+
			"If the address is this Node's, delete Node %s (kubectl delete node %s) and restart its kubelet: it registers again with another segment", ip, holder, holder, holder)
	}
	switch owner := facts.Claims[ip]; {
	case owner == "":
		return retryError{msg: fmt.Sprintf("IP SAN %s is not yet recorded as Node %s's address", ip, node)}
	case owner != node:
		return retryError{msg: fmt.Sprintf("IP SAN %s is held by Node %s (recorded as its address, or listed by it first); it stays pending while %s holds it", ip, owner, owner), conflict: true}
	}
	if seen := facts.Seen[ip]; seen < policy.MinStable {
		return retryError{msg: fmt.Sprintf("IP SAN %s has been on Node %s for %v, less than %v", ip, node, seen.Round(time.Millisecond), policy.MinStable),
			after: policy.MinStable - seen}
	}
	return nil
}

func checkIPAddresses(in input) error {
	nodeIPs := NodeIPs(in.node)
	var v sanVerdicts
	for _, raw := range in.csr.IPAddresses {
		ip, ok := netip.AddrFromSlice(raw)
		if !ok {
			v.add(fmt.Errorf("IP SAN %v is malformed", raw))
			continue
		}
		v.add(CheckIP(ip, in.node.Name, nodeIPs, in.facts, in.policy))
	}
	return v.err()
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
