// Package records holds the coordinator's own bookkeeping about each Node,
// in a NodeRecord: a cluster-scoped custom resource only the coordinator's
// ServiceAccount may write. Nodes write their own Node object freely, so
// nothing the coordinator decides from lives there: which labels and taints
// it granted, which addresses each Node claimed first and since when, the
// agent key it enrolled, and the names of the serving certificate it last
// approved.
//
// record.go is the data and its wire form; claims.go holds the pure
// decisions; store.go is the I/O edge.
package records

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// The NodeRecord resource (coordinator/deploy/noderecords.yaml).
var (
	GVR  = schema.GroupVersionResource{Group: "nodeinit.io", Version: "v1alpha1", Resource: "noderecords"}
	Kind = "NodeRecord"
)

// Record is one Node's NodeRecord, named after the Node.
type Record struct {
	Name            string `json:"-"`
	ResourceVersion string `json:"-"`
	// UID is the record object's, as read (empty for one not written
	// yet): the store tells a deleted record from one created since.
	UID  types.UID `json:"-"`
	Spec Spec      `json:"spec"`
}

// Spec is what the coordinator remembers.
type Spec struct {
	// NodeUID is the Node object this record describes; a Node re-created
	// under the same name starts with no claims and no grants, but keeps
	// the enrolled agent key.
	NodeUID string `json:"nodeUID,omitempty"`
	// Adopted marks a record created for a Node that was already
	// initialized when the coordinator first saw it: it granted nothing
	// before, so it removes nothing it did not set since.
	Adopted bool `json:"adopted,omitempty"`
	// NotAdopted marks a record written only to remember the name: the
	// Node was initialized before the coordinator kept records, and
	// adoptExisting is off.
	NotAdopted bool `json:"notAdopted,omitempty"`
	// EnrolUID is the one Node object that may enrol an agent key on first
	// use: the first object seen under this name, seen at its join.
	EnrolUID string `json:"enrolUID,omitempty"`
	// PendingAgentKey is a key the agent publishes that was not enrolled
	// (no first use left): an admin copies it to AgentKey to enrol it.
	PendingAgentKey string `json:"pendingAgentKey,omitempty"`
	// AgentKey is the agent's public key enrolled on first join (trust on
	// first use), and AgentKeyEnrolled when.
	AgentKey         string     `json:"agentKey,omitempty"`
	AgentKeyEnrolled *time.Time `json:"agentKeyEnrolled,omitempty"`
	// GrantedLabels ("key=value") and GrantedTaints ("key=value:effect")
	// are what the coordinator wrote on the Node, by value: it removes or
	// rewrites only a grant the Node still holds with exactly that value,
	// and forgets one someone else changed (finalize.Owned). Entries
	// without "=" are from records that kept keys only.
	GrantedLabels []string `json:"grantedLabels,omitempty"`
	GrantedTaints []string `json:"grantedTaints,omitempty"`
	// Addresses are the addresses recorded as this Node's, first claim
	// first: an address another record holds is never recorded here.
	Addresses []Claim `json:"addresses,omitempty"`
	// Prefix is the IPv6 node prefix this Node's pod segment was carved
	// from: while the Node object lives, no other Node carves from it or
	// has an address inside it recorded (PrefixHolder). Empty for pool
	// segments and for prefixes the configuration declares shared.
	Prefix string `json:"prefix,omitempty"`
	// Serving names the SANs of the serving certificate last approved (or
	// under review at initialization) for the renewal rule.
	Serving *Serving `json:"serving,omitempty"`
}

// Claim is one address and when it was recorded.
type Claim struct {
	IP    string    `json:"ip"`
	Since time.Time `json:"since"`
}

// Serving is the serving certificate the coordinator approved.
type Serving struct {
	CSR string `json:"csr"`
	// UID is the CSR object's: a CSR's name is the requester's choice and
	// free again once the object is deleted (kube-controller-manager's
	// cleaner deletes an issued CSR after an hour), so only the name and
	// the UID together say "this certificate's own request" (Is). Empty
	// in records written before it was kept.
	UID        string    `json:"uid,omitempty"`
	SANs       []string  `json:"sans"`
	ValidUntil time.Time `json:"validUntil"`
	// CertifiedUntil: this request renews a certificate approved for the
	// same SANs, valid until then (Renewing); the SANs stay certified that
	// long whatever becomes of the request (Certified, Cleared).
	CertifiedUntil *time.Time `json:"certifiedUntil,omitempty"`
}

// NamesDNS reports whether the certificate names the DNS name dns,
// whatever the case of either or of the SAN's "dns:" prefix (servingDNS).
// A nil certificate names nothing.
func (s *Serving) NamesDNS(dns string) bool {
	if s == nil {
		return false
	}
	want := strings.ToLower(dns)
	return slices.ContainsFunc(s.SANs, func(san string) bool { name, ok := servingDNS(san); return ok && name == want })
}

// servingDNS is the DNS name a serving SAN carries, lower-cased, when it
// carries one: "dns:" in any case. The one rule by which the store's index
// and every reader match a certificate's names.
func servingDNS(san string) (string, bool) {
	if len(san) < len("dns:") || !strings.EqualFold(san[:len("dns:")], "dns:") {
		return "", false
	}
	return strings.ToLower(san[len("dns:"):]), true
}

// Certified are the SANs a valid certificate the record names carries
// now, nil when none: namedApproved says whether the request the record
// names was approved (or is gone: an issued CSR is deleted an hour after
// its certificate). The record names a request before its approval is
// written; one that renews a certificate with the same names keeps that
// certificate's end (CertifiedUntil), so the names stay certified whatever
// becomes of it: pending, denied or deleted.
func (s *Serving) Certified(namedApproved bool, now time.Time) []string {
	switch {
	case s == nil:
		return nil
	case namedApproved && now.Before(s.ValidUntil), s.CertifiedUntil != nil && now.Before(*s.CertifiedUntil):
		return s.SANs
	}
	return nil
}

// Cleared is what the record keeps once the request it names is denied,
// or deleted unapproved: the certificate it renewed, until that one's end,
// naming no request (as a record from before UIDs were kept: compared with
// every request, replaced only by an approval, cleared by no denial); nil
// when it renewed none.
func (s *Serving) Cleared(now time.Time) *Serving {
	if s == nil || s.CertifiedUntil == nil || !now.Before(*s.CertifiedUntil) {
		return nil
	}
	return &Serving{SANs: slices.Clone(s.SANs), ValidUntil: *s.CertifiedUntil}
}

// Renewing is next, the record of a request with its SANs approved now,
// over prev, the record's serving certificate (prevApproved: its request
// was approved, or is gone). When prev carries the same names, approved
// and valid (or itself renewing one that is), next keeps that end as
// CertifiedUntil, and the later of the two end dates: the requester sets
// expirationSeconds, and the renewal rule holds until the earlier
// certificate expires.
func Renewing(prev *Serving, prevApproved bool, next Serving, now time.Time) Serving {
	if prev == nil || !slices.Equal(prev.SANs, next.SANs) {
		return next
	}
	var until time.Time
	if prevApproved && now.Before(prev.ValidUntil) {
		until = prev.ValidUntil
	}
	if c := prev.CertifiedUntil; c != nil && now.Before(*c) && c.After(until) {
		until = *c
	}
	if until.IsZero() {
		return next
	}
	next.CertifiedUntil = &until
	if until.After(next.ValidUntil) {
		next.ValidUntil = until
	}
	return next
}

// Is reports whether the serving certificate was approved for this CSR
// object: the name and the UID. A record from before UIDs were kept is
// no object's: its certificate is compared with every request (its own
// request names the same SANs), only a new approval replaces it (and
// records the UID), and no denial clears it.
func (s *Serving) Is(csr string, uid string) bool {
	return s != nil && s.UID != "" && s.CSR == csr && s.UID == uid
}

// holdings lists the record's IPv6 claims and carved prefix, as node's.
func (s *Spec) holdings(node string) []Holding {
	var out []Holding
	if p, err := netip.ParsePrefix(s.Prefix); err == nil {
		out = append(out, Holding{Node: node, Prefix: p})
	}
	for _, c := range s.Addresses {
		if ip, err := netip.ParseAddr(c.IP); err == nil && ip.Is6() {
			out = append(out, Holding{Node: node, Addr: ip, Since: c.Since})
		}
	}
	return out
}

// Equal reports whether two specs say the same (times to the second, as
// they round-trip through the API).
func (s Spec) Equal(o Spec) bool {
	a, _ := json.Marshal(s.normal())
	b, _ := json.Marshal(o.normal())
	return string(a) == string(b)
}

func (s Spec) normal() Spec {
	n := s
	n.Addresses = slices.Clone(s.Addresses)
	for i := range n.Addresses {
		n.Addresses[i].Since = n.Addresses[i].Since.UTC().Truncate(time.Second)
	}
	if s.AgentKeyEnrolled != nil {
		t := s.AgentKeyEnrolled.UTC().Truncate(time.Second)
		n.AgentKeyEnrolled = &t
	}
	if s.Serving != nil {
		sv := *s.Serving
		sv.ValidUntil = sv.ValidUntil.UTC().Truncate(time.Second)
		if sv.CertifiedUntil != nil {
			c := sv.CertifiedUntil.UTC().Truncate(time.Second)
			sv.CertifiedUntil = &c
		}
		n.Serving = &sv
	}
	if len(n.GrantedLabels) == 0 {
		n.GrantedLabels = nil
	}
	if len(n.GrantedTaints) == 0 {
		n.GrantedTaints = nil
	}
	if len(n.Addresses) == 0 {
		n.Addresses = nil
	}
	return n
}

// ToUnstructured renders the API object.
func (r *Record) ToUnstructured() (*unstructured.Unstructured, error) {
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&r.Spec)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": GVR.GroupVersion().String(), "kind": Kind,
		"metadata": map[string]any{"name": r.Name},
		"spec":     spec,
	}}
	if r.ResourceVersion != "" {
		u.SetResourceVersion(r.ResourceVersion)
	}
	return u, nil
}

// FromUnstructured reads the API object.
func FromUnstructured(u *unstructured.Unstructured) (*Record, error) {
	r := &Record{Name: u.GetName(), ResourceVersion: u.GetResourceVersion(), UID: u.GetUID()}
	raw, err := json.Marshal(u.Object["spec"])
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &r.Spec); err != nil {
		return nil, fmt.Errorf("NodeRecord %s: %w", u.GetName(), err)
	}
	return r, nil
}

// Survives is what a record keeps when its Node object is deleted or
// re-created under the same name: what belongs to the machine and the
// name, not to one object. The enrolled agent key (a re-registration is
// no first use), and the serving certificate last approved (invariant:
// while a certificate the coordinator approved for a name is valid, one
// with other names is held, whatever happened to the Node object). Claims
// and grants belong to the object and go with it.
func Survives(s Spec) Spec {
	return Spec{AgentKey: s.AgentKey, AgentKeyEnrolled: s.AgentKeyEnrolled, Serving: s.Serving, EnrolUID: s.EnrolUID, PendingAgentKey: s.PendingAgentKey}
}

// Released is what a record keeps once the Node object it describes is
// gone: what Survives, and the UID of that object (so a later object of the
// name is known to be another one).
func Released(s Spec) Spec {
	kept := Survives(s)
	kept.NodeUID = s.NodeUID
	return kept
}

// Orphaned returns the records whose Node object is gone, which must be
// reduced to Released: no Node of the name exists (nodes maps each Node's
// name to its UID), or the Node that exists is another object than the one
// recorded. A record without a NodeUID describes whichever Node has the
// name. Records that already hold nothing more than Released are left out:
// no write without a diff. It is how a leader catches up with deletions no
// coordinator saw.
func Orphaned(recs []*Record, nodes map[string]string) []*Record {
	var out []*Record
	for _, r := range recs {
		uid, exists := nodes[r.Name]
		if exists && (r.Spec.NodeUID == "" || r.Spec.NodeUID == uid) {
			continue
		}
		if !Released(r.Spec).Equal(r.Spec) {
			out = append(out, r)
		}
	}
	return out
}

// MayEnrolOnFirstUse is the enrolment invariant: only the first Node object
// ever seen under a name enrols an agent key without an admin, and only if
// the coordinator saw it join (uninitialized) or adopts it now on the
// admin's adoptExisting. rec is the name's record before this sync (nil:
// the name was never seen). A record outlives its Node (records.Survives),
// so a Node deleted and registered again under the name, by its machine or
// by a stolen credential, never counts as a first use; nor does one the
// coordinator saw and left alone (NotAdopted).
func MayEnrolOnFirstUse(rec *Record, nodeUID string, uninitialized, adopting bool) bool {
	switch {
	case rec == nil:
		return uninitialized || adopting
	case rec.Spec.EnrolUID != "":
		return rec.Spec.EnrolUID == nodeUID
	case rec.Spec.NotAdopted:
		return adopting && rec.Spec.NodeUID == nodeUID
	}
	// A record without EnrolUID (written before it existed, or after the
	// first use was spent) enrols nothing more without an admin.
	return false
}
