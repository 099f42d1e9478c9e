// Package config is the coordinator's configuration file, mounted from a ConfigMap. Its grant
// policy (which requested labels and taints the coordinator sets) is pkg/grants.
package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/grants"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/ipam"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/yamlstrict"
)

// Config is the whole file. Every field has a default; an empty file is valid. Parse (or Load)
// makes one, defaulted and validated: what reads it need not check it again.
type Config struct {
	// ClusterName fills node.cloudprovider.kubernetes.io/clustername (Talos CCM compatibility); empty: not set.
	ClusterName string `yaml:"clusterName,omitempty"`
	// RequireProviderID holds initialization while the Node has no
	// spec.providerID and its agent's report asks for none.
	RequireProviderID bool `yaml:"requireProviderID,omitempty"`
	// NodeNetworks are the networks node addresses come from. Only
	// addresses inside them are recorded as a Node's, reserved, certified in
	// serving certificates, or carved for IPv6 pod segments. Default: the
	// private ranges (RFC 1918, RFC 6598, fc00::/7).
	NodeNetworks []string `yaml:"nodeNetworks,omitempty"`
	// MaxNodeAddresses caps the addresses recorded per Node (default 16).
	MaxNodeAddresses int `yaml:"maxNodeAddresses,omitempty"`
	// AdoptExisting lets the coordinator take over Nodes that were
	// initialized before it kept a record of them (a migration from Talos
	// CCM or an earlier version): it records their addresses and enrols
	// their agent key then (trust on first use), and never removes what it
	// did not set itself. Off by default: adoption is the admin's decision.
	AdoptExisting bool `yaml:"adoptExisting,omitempty"`
	// ClusterDomain is the cluster's DNS domain (default cluster.local):
	// no serving certificate names anything under it.
	ClusterDomain string `yaml:"clusterDomain,omitempty"`
	// Inventory binds node names to the networks their addresses come
	// from, for clusters that want more than first claim: an address inside
	// a bound network is recorded (certified, used for pod prefixes) only
	// for a Node whose name the binding lists, whoever listed it first.
	// Addresses outside every binding go to their first claimant.
	Inventory []Binding `yaml:"inventory,omitempty"`
	IPAM      IPAM      `yaml:"ipam"`
	Grants    Grants    `yaml:"grants"`
	CSR       CSR       `yaml:"csr"`
}

// Binding is one inventory entry: Nodes named like one of Nodes (shell
// patterns: "web-*", "cp-[0-9]") own the addresses of Networks.
type Binding struct {
	Nodes    []string `yaml:"nodes"`
	Networks []string `yaml:"networks"`
}

// IPAM configures pod-CIDR allocation.
type IPAM struct {
	// Enabled turns allocation on (default true). Turn kube-controller-manager's
	// node IPAM off (--allocate-node-cidrs=false) when it is on.
	Enabled *bool `yaml:"enabled,omitempty"`
	// Families are the families pod CIDRs are given in: ipv4, ipv6 or both.
	// Default: those whose pool is set (IPv4 when neither is). Pod CIDRs never
	// change, so a family turned on later reaches only Nodes that join then.
	Families []string `yaml:"families,omitempty"`
	// IPv4Pool is the IPv4 pool (when IPv4 is a family: default Talos's pod subnet, 10.244.0.0/16).
	IPv4Pool string `yaml:"ipv4Pool,omitempty"`
	// IPv4MaskSize is each Node's IPv4 segment of the pool (0: a /24).
	IPv4MaskSize int `yaml:"ipv4MaskSize,omitempty"`
	// IPv6Pool is the fallback for nodes without a global IPv6 prefix of
	// their own; without it, IPv6 comes only from nodes' own prefixes.
	IPv6Pool string `yaml:"ipv6Pool,omitempty"`
	// IPv6MaskSize is each Node's IPv6 segment, of the pool or of its own prefix (0: a /80).
	IPv6MaskSize int `yaml:"ipv6MaskSize,omitempty"`
	// ServiceCIDRs are never handed out. A family that is on and has no
	// range listed gets Talos's default service subnet for it.
	ServiceCIDRs []string `yaml:"serviceCIDRs,omitempty"`
	// SharedPrefixes are IPv6 networks in which several Nodes may each carve
	// a pod segment from the same node prefix (a /64 shared on one link).
	// Elsewhere a node prefix is carved for one Node only: one the
	// inventory binds it to.
	SharedPrefixes []string `yaml:"sharedPrefixes,omitempty"`
	// FirstClaimPrefixes are IPv6 networks whose node prefixes no binding
	// holds go to the first Node to list an address in them (trust on
	// first use: SECURITY.md says what it risks). Elsewhere a node prefix
	// is carved only for a Node the inventory binds it to.
	FirstClaimPrefixes []string `yaml:"firstClaimPrefixes,omitempty"`
	// defaultedServices are the ServiceCIDRs defaults() added, for errors.
	defaultedServices []string
}

// Talos's defaults (pkg/machinery/constants, v1.13): the IPv4 pod subnet
// and the service subnets.
const (
	DefaultIPv4Pool        = "10.244.0.0/16"
	DefaultIPv4ServiceCIDR = "10.96.0.0/12"
	DefaultIPv6ServiceCIDR = "fc00:db8:20::/112"
)

// Grants says which requested labels and taints are set (grants.Policy:
// the policy is shared with `nodeinit-agent migrate`, which writes one).
type Grants = grants.Policy

// Patterns is an allow list with exceptions.
type Patterns = grants.Patterns

// TimeoutAction is what happens to a CSR whose node never attests it.
type TimeoutAction string

const (
	// StayPending leaves the CSR pending with an Event (the default).
	StayPending TimeoutAction = "pending"
	// ApproveOnChecks approves on the coordinator's static checks alone.
	ApproveOnChecks TimeoutAction = "approve"
)

// CSR is the serving-CSR policy.
type CSR struct {
	// AttestationRequired approves only with the node agent's attestation (default true).
	AttestationRequired *bool `yaml:"attestationRequired,omitempty"`
	// AttestationTimeout is how long a CSR waits for its agent's attestation.
	AttestationTimeout Duration `yaml:"attestationTimeout,omitempty"`
	// OnTimeout is what happens then: pending (an Event, the kubelet asks again) or approve (on the static checks alone).
	OnTimeout TimeoutAction `yaml:"onTimeout,omitempty"`
	// MaxDuration caps a request's spec.expirationSeconds.
	MaxDuration Duration `yaml:"maxDuration,omitempty"`
	// SignerDuration is how long kube-controller-manager's signer makes a
	// certificate whose request asks for no duration, as the kubelet's
	// (its --cluster-signing-duration; default a year): the record counts
	// such a certificate valid that long, and none longer. Set it no lower
	// than the signer's: the renewal rule would end before the certificate.
	SignerDuration Duration `yaml:"signerDuration,omitempty"`
	// AllowedDNSNames are DNS SANs allowed besides the node name: "{node}"
	// is the node name, a "*" label one label ("{node}.nodes.example.com",
	// "*.eu-west-1.compute.internal").
	AllowedDNSNames []string `yaml:"allowedDNSNames,omitempty"`
	// MinAddressAge is how long an address must have been on its Node,
	// observed continuously by the coordinator, before it is certified (default 3s).
	MinAddressAge Duration `yaml:"minAddressAge,omitempty"`
	// InitWait is how long after its registration a Node's initialization
	// may wait for its kubelet's serving CSR, in a cluster whose kubelets
	// are seen asking for serving certificates: the initializing patch then
	// asks for the CSR's review, two writes fewer than asking after it and
	// an earlier certificate. 0 never waits (default 3s).
	InitWait *Duration `yaml:"initWait,omitempty"`
	// Renewals: sameNames (default) approves a CSR from a Node whose last
	// approved certificate is still valid only with the same SANs; checks
	// applies the checks alone.
	Renewals RenewalPolicy `yaml:"renewals,omitempty"`
	// MaxPending stops automatic approval while more serving CSRs are
	// pending (each Node counted at most twice); 0: no limit
	// (approval.FloodLimit says why there is no default).
	MaxPending int `yaml:"maxPending,omitempty"`
	// ReservedAddresses are never certified for a node
	// nor recorded as its address (and no pod CIDR holds a reserved address): a Talos shared VIP, a load balancer in
	// front of the API server, its external name. (The API server's own
	// certificate SANs are reserved automatically.)
	ReservedAddresses []string `yaml:"reservedAddresses,omitempty"`
	// ReservedNames are DNS names reserved as ReservedAddresses are.
	ReservedNames []string `yaml:"reservedNames,omitempty"`
	// AllowedIPRanges was replaced by the top-level nodeNetworks.
	AllowedIPRanges []string `yaml:"allowedIPRanges,omitempty"`
	// Enrolment is how a node agent's key is first trusted: firstUse
	// (default) enrols the key the first Node object of a name publishes
	// at its join; approve holds every new key in its NodeRecord until an
	// admin enrols it with one command.
	Enrolment EnrolmentPolicy `yaml:"enrolment,omitempty"`
}

// EnrolmentPolicy says how agent keys are first trusted.
type EnrolmentPolicy string

const (
	EnrolFirstUse EnrolmentPolicy = "firstUse"
	EnrolApprove  EnrolmentPolicy = "approve"
)

// RenewalPolicy says how a Node with a valid serving certificate renews.
type RenewalPolicy string

const (
	RenewSameNames RenewalPolicy = "sameNames"
	RenewOnChecks  RenewalPolicy = "checks"
)

// DefaultNodeNetworks are the private ranges: bare-metal and NAT'd nodes.
// Nodes with public addresses (Hetzner, AWS public IPs, global IPv6)
// add their ranges.
var DefaultNodeNetworks = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"}

// Duration reads "90s", "2m".
type Duration struct{ time.Duration }

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		// Placed at n by the decoder, which goes on: every bad value is reported.
		return fmt.Errorf("%q is not a duration: want a number and a unit, e.g. 90s, 2m, 720h", n.Value)
	}
	d.Duration = v
	return nil
}

// MarshalYAML prints the duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// Load reads and validates file: the configuration, the coordinator's ConfigMap (or `helm
// template` output holding it) or the Helm chart's values file. An empty path gives the defaults.
func Load(file string) (*Config, error) {
	var data []byte
	if file != "" {
		var err error
		if data, err = os.ReadFile(file); err != nil {
			return nil, err
		}
	}
	c, err := Parse(data)
	if err != nil && file != "" {
		return nil, setFile(err, file)
	}
	return c, err
}

// Parse validates a configuration, refusing unknown keys. Its errors are
// Errors: each with the line and column of the value at fault and a fix.
func Parse(data []byte) (*Config, error) {
	doc, err := readDocument(data)
	if err != nil {
		return nil, err
	}
	c := &Config{}
	var errs Errors
	if doc.root != nil {
		var bad yamlstrict.Errors
		if err := yamlstrict.Decode(doc.root, c); errors.As(err, &bad) {
			for _, e := range bad {
				errs = append(errs, doc.typeError(e))
			}
		} else if err != nil {
			errs = append(errs, syntaxError(err, doc.line, doc.column))
		}
	}
	if len(errs) > 0 {
		// Values that did not decode are zero: checking them would only repeat these errors.
		return nil, sorted(append(errs, doc.unknownKeys()...))
	}
	raw := *c // as written, before defaults replace zeros
	c.defaults()
	if errs := sorted(append(doc.unknownKeys(), c.validate(doc, &raw)...)); len(errs) > 0 {
		return nil, errs // only a valid Config is ever returned: its readers need not check it again
	}
	return c, nil
}

// sorted orders errors as they appear in the file.
func sorted(errs Errors) Errors {
	slices.SortStableFunc(errs, func(a, b *Error) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
	return errs
}

// typeError places an undecodable value on the key whose value is where the decoder stopped,
// else on the key there (one given twice).
func (d *document) typeError(bad *yamlstrict.Error) *Error {
	e := syntaxError(bad, d.line, d.column)
	for _, nodes := range []map[string]*yaml.Node{d.positions, d.keys} {
		for path, n := range nodes {
			if n.Line+d.line == e.Line && n.Column+d.column == e.Column && (e.Path == "" || path < e.Path) {
				e.Path = path
			}
		}
		if e.Path != "" {
			break
		}
	}
	return e
}

func (c *Config) defaults() {
	t := true
	if c.IPAM.Enabled == nil {
		c.IPAM.Enabled = &t
	}
	if c.IPAM.Families == nil {
		if c.IPAM.IPv4Pool != "" || c.IPAM.IPv6Pool == "" {
			c.IPAM.Families = append(c.IPAM.Families, string(ipam.IPv4))
		}
		if c.IPAM.IPv6Pool != "" {
			c.IPAM.Families = append(c.IPAM.Families, string(ipam.IPv6))
		}
	}
	v4, v6 := c.Families()
	if v4 && c.IPAM.IPv4Pool == "" {
		c.IPAM.IPv4Pool = DefaultIPv4Pool
	}
	// Over-reserving costs nothing; a Service range handed out as pod CIDRs breaks the cluster.
	has := func(is4 bool) bool {
		return slices.ContainsFunc(c.IPAM.ServiceCIDRs, func(s string) bool {
			p, err := netip.ParsePrefix(s)
			return err == nil && p.Addr().Is4() == is4
		})
	}
	for _, d := range []struct {
		on, is4 bool
		cidr    string
	}{{v4, true, DefaultIPv4ServiceCIDR}, {v6, false, DefaultIPv6ServiceCIDR}} {
		if d.on && !has(d.is4) {
			c.IPAM.ServiceCIDRs = append(c.IPAM.ServiceCIDRs, d.cidr)
			c.IPAM.defaultedServices = append(c.IPAM.defaultedServices, d.cidr)
		}
	}
	if c.Grants.Labels.Allow == nil && c.Grants.Labels.Deny == nil {
		c.Grants.Labels = Patterns{Allow: grants.DefaultLabelAllow, Deny: grants.DefaultLabelDeny}
	}
	if c.Grants.Taints.Allow == nil && c.Grants.Taints.Deny == nil {
		c.Grants.Taints = Patterns{Allow: grants.DefaultTaintAllow, Deny: grants.DefaultTaintDeny}
	}
	if c.CSR.AttestationRequired == nil {
		c.CSR.AttestationRequired = &t
	}
	if c.CSR.AttestationTimeout.Duration == 0 {
		c.CSR.AttestationTimeout.Duration = 2 * time.Minute
	}
	if c.CSR.MaxDuration.Duration == 0 {
		// kube-controller-manager's signing default: a kubelet never asks for more.
		c.CSR.MaxDuration.Duration = 365 * 24 * time.Hour
	}
	if c.CSR.SignerDuration.Duration == 0 {
		c.CSR.SignerDuration.Duration = 365 * 24 * time.Hour // --cluster-signing-duration's default
	}
	if c.CSR.OnTimeout == "" {
		c.CSR.OnTimeout = StayPending
	}
	if c.NodeNetworks == nil {
		c.NodeNetworks = DefaultNodeNetworks
	}
	if c.MaxNodeAddresses == 0 {
		c.MaxNodeAddresses = 16
	}
	if c.ClusterDomain == "" {
		c.ClusterDomain = "cluster.local"
	}
	if c.CSR.MinAddressAge.Duration == 0 {
		c.CSR.MinAddressAge.Duration = 3 * time.Second
	}
	if c.CSR.InitWait == nil {
		c.CSR.InitWait = &Duration{DefaultCSRInitWait}
	}
	if c.CSR.Renewals == "" {
		c.CSR.Renewals = RenewSameNames
	}
	if c.CSR.Enrolment == "" {
		c.CSR.Enrolment = EnrolFirstUse
	}
}

// validate checks the defaulted configuration (raw: as written, before defaults) and places
// each finding in the file.
func (c *Config) validate(doc *document, raw *Config) Errors {
	set := doc.present
	var ps []problem
	ps = append(ps, checkClusterName(c.ClusterName)...)
	ps = append(ps, checkPrefixes("nodeNetworks", c.NodeNetworks)...)
	ps = append(ps, checkInt("maxNodeAddresses", raw.MaxNodeAddresses, set("maxNodeAddresses"), 1, 64)...)
	if errs := validation.IsDNS1123Subdomain(strings.ToLower(c.ClusterDomain)); errs != nil {
		ps = append(ps, problem{"clusterDomain", fmt.Sprintf("%q is not a DNS name: %s", c.ClusterDomain, strings.Join(errs, "; ")), "the cluster's DNS domain, e.g. cluster.local"})
	}

	ipamOK := len(ps)
	ps = append(ps, checkPool("ipam.ipv4Pool", c.IPAM.IPv4Pool, true)...)
	ps = append(ps, checkPool("ipam.ipv6Pool", c.IPAM.IPv6Pool, false)...)
	ps = append(ps, checkMaskSize("ipam.ipv4MaskSize", c.IPAM.IPv4MaskSize, set("ipam.ipv4MaskSize") || c.IPAM.IPv4MaskSize != 0, c.IPAM.IPv4Pool, 32)...)
	ps = append(ps, checkMaskSize("ipam.ipv6MaskSize", c.IPAM.IPv6MaskSize, set("ipam.ipv6MaskSize") || c.IPAM.IPv6MaskSize != 0, c.IPAM.IPv6Pool, 128)...)
	ps = append(ps, checkPrefixes("ipam.serviceCIDRs", c.IPAM.ServiceCIDRs)...)
	for _, l := range []struct {
		key  string
		list []string
	}{{"ipam.sharedPrefixes", c.IPAM.SharedPrefixes}, {"ipam.firstClaimPrefixes", c.IPAM.FirstClaimPrefixes}} {
		key, list := l.key, l.list
		ps = append(ps, checkPrefixes(key, list)...)
		for i, p := range list {
			if pp, err := netip.ParsePrefix(p); err == nil && !pp.Addr().Is6() {
				ps = append(ps, problem{fmt.Sprintf("%s[%d]", key, i), p + " is not IPv6", "pod segments are carved from IPv6 node prefixes only"})
			}
		}
	}
	var out Errors
	if len(ps) == ipamOK {
		// Families, overlaps and what ipam itself refuses.
		if _, err := c.Allocator(); err != nil {
			for _, e := range splitJoined(err) {
				out = append(out, doc.atPath(problem{"ipam", e.Error(), ""}, ipamPath(e.Error())))
			}
		}
	}

	ps = append(ps, checkPatterns("grants.labels", c.Grants.Labels, false)...)
	ps = append(ps, checkPatterns("grants.taints", c.Grants.Taints, true)...)

	ps = append(ps, checkDuration("csr.attestationTimeout", raw.CSR.AttestationTimeout.Duration, set("csr.attestationTimeout"), 0)...)
	ps = append(ps, checkDuration("csr.maxDuration", raw.CSR.MaxDuration.Duration, set("csr.maxDuration"), minCertificateDuration)...)
	ps = append(ps, checkDuration("csr.signerDuration", raw.CSR.SignerDuration.Duration, set("csr.signerDuration"), minCertificateDuration)...)
	ps = append(ps, checkDuration("csr.minAddressAge", raw.CSR.MinAddressAge.Duration, set("csr.minAddressAge"), 0)...)
	if w := raw.CSR.InitWait; w != nil {
		ps = append(ps, checkWait("csr.initWait", w.Duration, maxCSRInitWait)...)
	}
	ps = append(ps, checkEnum("csr.onTimeout", c.CSR.OnTimeout, StayPending, ApproveOnChecks)...)
	ps = append(ps, checkEnum("csr.renewals", c.CSR.Renewals, RenewSameNames, RenewOnChecks)...)
	ps = append(ps, checkEnum("csr.enrolment", c.CSR.Enrolment, EnrolFirstUse, EnrolApprove)...)
	for i, b := range c.Inventory {
		at := fmt.Sprintf("inventory[%d]", i)
		if len(b.Nodes) == 0 || len(b.Networks) == 0 {
			ps = append(ps, problem{at, "lists no nodes or no networks", "each binding names node patterns and the networks they own"})
		}
		for j, pat := range b.Nodes {
			if _, err := path.Match(pat, ""); err != nil || pat == "" {
				ps = append(ps, problem{fmt.Sprintf("%s.nodes[%d]", at, j), fmt.Sprintf("%q is not a name pattern", pat), `a node name or a shell pattern, e.g. "web-*"`})
			}
		}
		ps = append(ps, checkPrefixes(at+".networks", b.Networks)...)
	}
	if c.CSR.MaxPending < 0 {
		ps = append(ps, problem{"csr.maxPending", fmt.Sprintf("%d is negative", c.CSR.MaxPending), "want 0 (no limit) or more"})
	}
	if len(c.CSR.AllowedIPRanges) > 0 {
		ps = append(ps, problem{"csr.allowedIPRanges", "was replaced by the top-level nodeNetworks (the networks node addresses come from)", "move the ranges there"})
	}
	ps = append(ps, checkAddresses("csr.reservedAddresses", c.CSR.ReservedAddresses)...)
	for i, a := range c.CSR.ReservedAddresses {
		r, err := parsePrefixOrAddr(a)
		if err != nil || !c.IPAMEnabled() {
			continue // without allocation, the pools hand out nothing
		}
		for _, pool := range []struct{ key, value string }{{"ipam.ipv4Pool", c.IPAM.IPv4Pool}, {"ipam.ipv6Pool", c.IPAM.IPv6Pool}} {
			if p, err := netip.ParsePrefix(pool.value); err == nil && p.Overlaps(r) {
				ps = append(ps, problem{fmt.Sprintf("csr.reservedAddresses[%d]", i), fmt.Sprintf("%s overlaps %s %s", a, pool.key, pool.value),
					"pod CIDRs never hold a reserved address, so that part of the pool would never be handed out: reserve addresses outside it"})
			}
		}
	}
	ps = append(ps, checkDNSNames("csr.reservedNames", c.CSR.ReservedNames)...)
	for i, pat := range c.CSR.AllowedDNSNames {
		if err := csrcheck.CheckPattern(pat, strings.ToLower(c.ClusterDomain)); err != nil {
			ps = append(ps, problem{fmt.Sprintf("csr.allowedDNSNames[%d]", i), err.Error(), ""})
		}
	}
	ps = append(ps, checkNodePatterns("csr.allowedDNSNames", c.CSR.AllowedDNSNames)...)

	for _, p := range ps {
		out = append(out, doc.at(p))
	}
	return out
}

func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// ipamPath is the ipam key an Allocator error starts with ("ipv4Pool …").
func ipamPath(msg string) string {
	first, _, _ := strings.Cut(msg, " ")
	first = strings.TrimSuffix(first, ":")
	for _, k := range []string{"families", "ipv4Pool", "ipv6Pool", "ipv4MaskSize", "ipv6MaskSize", "serviceCIDRs"} {
		if first == k {
			return "ipam." + k
		}
	}
	return "ipam"
}

// IPAMEnabled reports whether the coordinator allocates pod CIDRs.
func (c *Config) IPAMEnabled() bool { return *c.IPAM.Enabled }

// Families reports the families pod CIDRs are given in; none in another, whatever a Node reports.
func (c *Config) Families() (ipv4, ipv6 bool) {
	return slices.Contains(c.IPAM.Families, string(ipam.IPv4)), slices.Contains(c.IPAM.Families, string(ipam.IPv6))
}

// Allocator builds the pod-CIDR allocator from the ipam section.
func (c *Config) Allocator() (*ipam.Allocator, error) {
	var cfg ipam.Config
	if err := c.checkFamilies(); err != nil {
		return nil, err
	}
	if v4, _ := c.Families(); v4 {
		cfg.Families = append(cfg.Families, ipam.IPv4)
	}
	if _, v6 := c.Families(); v6 {
		cfg.Families = append(cfg.Families, ipam.IPv6)
	}
	// validate checked the pools and ranges before it asked for the allocator.
	cfg.IPv4Pool, _ = netip.ParsePrefix(c.IPAM.IPv4Pool)
	cfg.IPv6Pool, _ = netip.ParsePrefix(c.IPAM.IPv6Pool)
	cfg.IPv4MaskSize, cfg.IPv6MaskSize = c.IPAM.IPv4MaskSize, c.IPAM.IPv6MaskSize
	cfg.ServiceCIDRs = parsedPrefixes(c.IPAM.ServiceCIDRs)
	if err := c.checkOverlaps(cfg); err != nil {
		return nil, err
	}
	return ipam.New(cfg)
}

// checkFamilies refuses unknown or repeated families, and a pool for a family that is off.
func (c *Config) checkFamilies() error {
	if c.IPAM.Families != nil && len(c.IPAM.Families) == 0 {
		return errors.New("families is empty: want ipv4, ipv6 or both (or enabled: false)")
	}
	for i, f := range c.IPAM.Families {
		if f != string(ipam.IPv4) && f != string(ipam.IPv6) {
			return fmt.Errorf("families: %q: want ipv4, ipv6 or both", f)
		}
		if slices.Contains(c.IPAM.Families[:i], f) {
			return fmt.Errorf("families lists %s twice", f)
		}
	}
	v4, v6 := c.Families()
	if !v4 && c.IPAM.IPv4Pool != "" {
		return errors.New("ipv4Pool is set but ipv4 is not in families: add ipv4 to families or remove the pool")
	}
	if !v6 && c.IPAM.IPv6Pool != "" {
		return errors.New("ipv6Pool is set but ipv6 is not in families: add ipv6 to families or remove the pool")
	}
	return nil
}

// checkOverlaps refuses pools that overlap each other or a service CIDR:
// a pod CIDR carved there would collide with another node's or a Service's.
func (c *Config) checkOverlaps(cfg ipam.Config) error {
	type rng struct {
		name string
		p    netip.Prefix
	}
	var pools []rng
	for _, p := range []rng{{"ipv4Pool", cfg.IPv4Pool}, {"ipv6Pool", cfg.IPv6Pool}} {
		if p.p.IsValid() {
			pools = append(pools, rng{p.name, p.p.Masked()})
		}
	}
	var errs []error
	for i, p := range pools {
		for _, q := range pools[i+1:] {
			if p.p.Overlaps(q.p) {
				errs = append(errs, fmt.Errorf("%s %s overlaps %s %s: choose pools that do not overlap", p.name, p.p, q.name, q.p))
			}
		}
		for _, s := range cfg.ServiceCIDRs {
			if !p.p.Overlaps(s) {
				continue
			}
			why := ""
			if slices.Contains(c.IPAM.defaultedServices, s.String()) {
				why = fmt.Sprintf(" (Talos's default, added because serviceCIDRs lists no IPv%d range: list the cluster's own)", map[bool]int{true: 4, false: 6}[s.Addr().Is4()])
			}
			errs = append(errs, fmt.Errorf("%s %s overlaps serviceCIDRs %s%s: pod CIDRs from it would collide with Service IPs; choose a pool outside the service ranges", p.name, p.p, s.Masked(), why))
		}
	}
	return errors.Join(errs...)
}

// CSRPolicy is the static-check policy.
func (c *Config) CSRPolicy() csrcheck.Policy {
	p := csrcheck.Policy{MaxDuration: c.CSR.MaxDuration.Duration, ClusterDomain: strings.ToLower(c.ClusterDomain), MinStable: c.CSR.MinAddressAge.Duration,
		NodeNetworks: c.Networks()}
	for _, pat := range c.CSR.AllowedDNSNames {
		p.DNSPatterns = append(p.DNSPatterns, strings.ToLower(pat))
	}
	return p
}

// SharedPrefixesParsed parses ipam.sharedPrefixes (validated at load).
func (c *Config) SharedPrefixesParsed() []netip.Prefix { return parsedPrefixes(c.IPAM.SharedPrefixes) }

// FirstClaimPrefixesParsed parses ipam.firstClaimPrefixes (validated at load).
func (c *Config) FirstClaimPrefixesParsed() []netip.Prefix {
	return parsedPrefixes(c.IPAM.FirstClaimPrefixes)
}

// InventoryNetworks parses one binding's networks (validated at load).
func (b Binding) InventoryNetworks() []netip.Prefix { return parsedPrefixes(b.Networks) }

func parsedPrefixes(list []string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// Pools are the pod pools that are set (validated at load).
func (c *Config) Pools() []netip.Prefix {
	return parsedPrefixes([]string{c.IPAM.IPv4Pool, c.IPAM.IPv6Pool})
}

// Networks parses nodeNetworks (validated at load).
func (c *Config) Networks() []netip.Prefix { return parsedPrefixes(c.NodeNetworks) }

// Reserved are the configured ranges no Node address may be recorded in or certified for; the
// coordinator adds what it learns (ServiceCIDRs, the API server's endpoints, pod CIDRs).
func (c *Config) Reserved() []csrcheck.Reserved {
	var out []csrcheck.Reserved
	for _, p := range parsedPrefixes(c.IPAM.ServiceCIDRs) {
		out = append(out, csrcheck.Reserved{Prefix: p, Why: "a service CIDR"})
	}
	for _, p := range c.Pools() {
		out = append(out, csrcheck.Reserved{Prefix: p, Why: "a pod pool"})
	}
	for _, p := range c.ReservedAddresses() {
		out = append(out, csrcheck.Reserved{Prefix: p, Why: "reserved by csr.reservedAddresses"})
	}
	return out
}

// ReservedAddresses are csr.reservedAddresses' ranges, an address as its host prefix.
func (c *Config) ReservedAddresses() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range c.CSR.ReservedAddresses {
		if p, err := parsePrefixOrAddr(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// parsePrefixOrAddr reads "10.0.0.5" or "10.0.0.0/24".
func parsePrefixOrAddr(s string) (netip.Prefix, error) {
	if ip, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	return p.Masked(), err
}

// DefaultCSRInitWait is csr.initWait's default: a kubelet asks for its
// serving certificate within about a second of registering (its
// certificate manager looks every second once its Node watch has the Node).
const DefaultCSRInitWait = 3 * time.Second

// maxCSRInitWait bounds csr.initWait: a longer wait only delays Nodes
// whose kubelets ask for no serving certificate.
const maxCSRInitWait = 30 * time.Second

// CertificateDuration is how long an approved certificate may be valid: what the request asked
// for, within csr.maxDuration and csr.signerDuration; with expirationSeconds nil, as the kubelet
// sends, the signer's duration, which csr.maxDuration cannot shorten.
func (c *Config) CertificateDuration(expirationSeconds *int32) time.Duration {
	if e := expirationSeconds; e != nil {
		return min(time.Duration(*e)*time.Second, c.CSR.MaxDuration.Duration, c.CSR.SignerDuration.Duration)
	}
	return c.CSR.SignerDuration.Duration
}

// CSRInitWait is how long a Node's initialization may wait for its serving CSR; 0 never.
func (c *Config) CSRInitWait() time.Duration { return c.CSR.InitWait.Duration }

// AttestationRequired reports the CSR policy's main switch.
func (c *Config) AttestationRequired() bool { return *c.CSR.AttestationRequired }
