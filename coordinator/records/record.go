// Package records holds the coordinator's bookkeeping about each Node in a NodeRecord, a
// cluster-scoped resource only the coordinator's ServiceAccount may write: Nodes write their own
// Node object freely, so nothing the coordinator decides from lives there.
//
// record.go is the data and its wire form, claims.go the pure decisions, store.go the I/O edge.
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
	// UID, as read (empty if never written), tells a deleted record from one created since.
	UID  types.UID `json:"-"`
	Spec Spec      `json:"spec"`
}

// Spec is what the coordinator remembers.
type Spec struct {
	// NodeUID is the Node object described; a Node re-created under the name starts with no
	// claims and no grants, but keeps the enrolled agent key.
	NodeUID string `json:"nodeUID,omitempty"`
	// Adopted: the Node was initialized when first seen, so the coordinator granted nothing
	// before and removes nothing it did not set since.
	Adopted bool `json:"adopted,omitempty"`
	// NotAdopted marks a record that only remembers the name: the Node predates the coordinator's
	// records and adoptExisting is off.
	NotAdopted bool `json:"notAdopted,omitempty"`
	// EnrolUID is the one Node object that may enrol an agent key on first
	// use: the first object seen under this name, seen at its join.
	EnrolUID string `json:"enrolUID,omitempty"`
	// PendingAgentKey is a key the agent publishes that was not enrolled
	// (no first use left): an admin copies it to AgentKey to enrol it.
	PendingAgentKey string `json:"pendingAgentKey,omitempty"`
	// AgentKey is the agent's public key enrolled on first use, and AgentKeyEnrolled when.
	AgentKey         string     `json:"agentKey,omitempty"`
	AgentKeyEnrolled *time.Time `json:"agentKeyEnrolled,omitempty"`
	// GrantedLabels ("key=value") and GrantedTaints ("key=value:effect") are what the coordinator
	// wrote on the Node, by value; finalize.Owned decides what of it may be removed.
	GrantedLabels []string `json:"grantedLabels,omitempty"`
	GrantedTaints []string `json:"grantedTaints,omitempty"`
	// Addresses are recorded as this Node's, first claim first; none is held by another record.
	Addresses []Claim `json:"addresses,omitempty"`
	// Prefix is the IPv6 node prefix this Node's pod segment was carved from: while the Node
	// lives, no other Node carves from it or records an address in it (PrefixHolder). Empty for
	// pool segments and shared prefixes.
	Prefix string `json:"prefix,omitempty"`
	// Serving is the serving certificate last approved (or under review at initialization).
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
	// UID is the CSR object's: a name is the requester's choice and free again once the CSR is
	// deleted (an issued one after an hour), so only name and UID identify its own request (Is).
	// Empty in records written before it was kept.
	UID        string    `json:"uid,omitempty"`
	SANs       []string  `json:"sans"`
	ValidUntil time.Time `json:"validUntil"`
	// CertifiedUntil is the end of the same-SANs certificate this request renews (Renewing): the
	// SANs stay certified that long whatever becomes of the request.
	CertifiedUntil *time.Time `json:"certifiedUntil,omitempty"`
}

// NamesDNS reports whether the certificate names dns, whatever the case of either or of the
// SAN's "dns:" prefix; a nil certificate names nothing.
func (s *Serving) NamesDNS(dns string) bool {
	if s == nil {
		return false
	}
	want := strings.ToLower(dns)
	return slices.ContainsFunc(s.SANs, func(san string) bool { name, ok := servingDNS(san); return ok && name == want })
}

// servingDNS is the lower-cased DNS name a serving SAN carries ("dns:" in any case): the one
// rule by which the store's index and every reader match a certificate's names.
func servingDNS(san string) (string, bool) {
	if len(san) < len("dns:") || !strings.EqualFold(san[:len("dns:")], "dns:") {
		return "", false
	}
	return strings.ToLower(san[len("dns:"):]), true
}

// Certified are the SANs a valid certificate the record names carries now, nil when none.
// namedApproved: the named request was approved, or is gone (an issued CSR is deleted after an
// hour). The record names a request before it is approved; a same-names renewal keeps the old
// certificate's end (CertifiedUntil), so the names stay certified if it is denied or deleted.
func (s *Serving) Certified(namedApproved bool, now time.Time) []string {
	switch {
	case s == nil:
		return nil
	case namedApproved && now.Before(s.ValidUntil), s.CertifiedUntil != nil && now.Before(*s.CertifiedUntil):
		return s.SANs
	}
	return nil
}

// Cleared is what the record keeps once the request it names is denied or deleted unapproved:
// the certificate it renewed, until that one's end, naming no request (treated as Is describes
// for a record without a UID); nil when it renewed none.
func (s *Serving) Cleared(now time.Time) *Serving {
	if s == nil || s.CertifiedUntil == nil || !now.Before(*s.CertifiedUntil) {
		return nil
	}
	return &Serving{SANs: slices.Clone(s.SANs), ValidUntil: *s.CertifiedUntil}
}

// Renewing is next, a request with its SANs approved now, over prev, the record's certificate
// (prevApproved: approved, or gone). When prev names the same SANs and is valid (or renews one
// that is), next keeps prev's end as CertifiedUntil and, if later, as ValidUntil: the requester
// chooses expirationSeconds, and the renewal rule holds until the earlier certificate expires.
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

// Is reports whether the serving certificate was approved for this CSR object (name and UID).
// A record without a UID is no object's: its certificate is compared with every request, only a
// new approval replaces it, and no denial clears it.
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

// Equal reports whether two specs say the same, times to the second as the API keeps them.
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

// Survives is what a record keeps when its Node object is deleted or re-created: what belongs
// to the machine and the name, not to one object. The agent key stays (a re-registration is no
// first use), and so does the last approved serving certificate (while it is valid, one with
// other names is held); claims and grants go with the object.
func Survives(s Spec) Spec {
	return Spec{AgentKey: s.AgentKey, AgentKeyEnrolled: s.AgentKeyEnrolled, Serving: s.Serving, EnrolUID: s.EnrolUID, PendingAgentKey: s.PendingAgentKey}
}

// Released is what a record keeps once its Node object is gone: what Survives, and that
// object's UID, so a later object of the name is known to be another.
func Released(s Spec) Spec {
	kept := Survives(s)
	kept.NodeUID = s.NodeUID
	return kept
}

// Orphaned returns the records to reduce to Released: no Node of the name exists (nodes maps
// name to UID), or it is another object than recorded (a record without NodeUID matches any).
// Records already Released are left out. It catches a leader up with deletions nobody saw.
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

// MayEnrolOnFirstUse is the enrolment invariant: only the first Node object ever seen under a
// name enrols an agent key without an admin, and only if seen joining (uninitialized) or adopted
// now (adoptExisting). rec is the name's record before this sync, nil if never seen. Records
// outlive Nodes, so a re-registration, by the machine or a stolen credential, is no first use.
func MayEnrolOnFirstUse(rec *Record, nodeUID string, uninitialized, adopting bool) bool {
	switch {
	case rec == nil:
		return uninitialized || adopting
	case rec.Spec.EnrolUID != "":
		return rec.Spec.EnrolUID == nodeUID
	case rec.Spec.NotAdopted:
		return adopting && rec.Spec.NodeUID == nodeUID
	}
	// Without EnrolUID (an older record, or the first use spent), only an admin enrols a key.
	return false
}
