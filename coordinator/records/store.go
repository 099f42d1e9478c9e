package records

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

const (
	byName  = "byName" // the record's own name: Get reads through it
	byClaim = "byClaim"
	// byServingName: the lower-cased DNS names of a record's serving certificate.
	byServingName = "byServingName"
	by64          = "by64" // the /64 of every IPv6 claim and carved prefix
)

func key64(a netip.Addr) string { p, _ := a.Prefix(64); return p.String() }

// Store reads NodeRecords from an informer and writes them as the coordinator's ServiceAccount;
// its writes show at once, for each record's one writer, its Node's sync, reads its last write.
type Store struct {
	client   dynamic.NamespaceableResourceInterface
	informer cache.SharedIndexInformer
	// own overlays the informer's cache with this replica's writes until the informer has them.
	own cache.MutationCache
}

// ownWritesTTL bounds an own write the informer never delivers; its handlers drop the rest.
const ownWritesTTL = 24 * time.Hour

// Cached is a NodeRecord as the informer keeps it, decoded once on arrival (the transform)
// rather than as the generic map, which every lookup would decode again.
type Cached struct {
	metav1.ObjectMeta // name, resourceVersion and UID only
	Record            *Record
	Err               error // the object is not a record this version reads (Record is nil)
	// Holds, when Err, is what the object still claims (addresses, node prefix), read leniently:
	// a record the coordinator cannot read (an admin's edit) never frees them for another Node.
	Holds *Spec
	// keys are its keys in each index, taken once (withKeys).
	keys map[string][]string
}

// GetObjectKind: a Cached object is never encoded.
func (c *Cached) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies the record too.
func (c *Cached) DeepCopyObject() runtime.Object {
	out := &Cached{ObjectMeta: *c.ObjectMeta.DeepCopy(), Err: c.Err, keys: c.keys}
	if c.Record != nil {
		out.Record = clone(c.Record)
	}
	if c.Holds != nil {
		out.Holds = &Spec{Addresses: slices.Clone(c.Holds.Addresses), Prefix: c.Holds.Prefix}
	}
	return out
}

// cached is the informer's transform: a record decoded once (Cached).
func cached(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a Cached already, or a tombstone
	}
	c := &Cached{ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), ResourceVersion: u.GetResourceVersion(), UID: u.GetUID()}}
	if c.Record, c.Err = FromUnstructured(u); c.Err != nil {
		c.Holds = holds(u)
	}
	return withKeys(c), nil
}

// withKeys takes c's index keys, once: an index read of the store's own
// writes looks at every one of them (cache.MutationCache's IncludeAdds).
func withKeys(c *Cached) *Cached {
	c.keys = map[string][]string{byName: {c.Name}}
	if sp := held(c); sp != nil {
		for name, f := range indexOf {
			c.keys[name] = f(sp)
		}
	}
	return c
}

// holds reads what an unreadable record holds: every string spec.addresses[].ip and spec.prefix.
// A date is parsed upper-cased (the API server accepts "t" and "z"; Go's parser does not); one
// that still fails dates from the zero time, earlier than any.
func holds(u *unstructured.Unstructured) *Spec {
	h := &Spec{}
	h.Prefix, _, _ = unstructured.NestedString(u.Object, "spec", "prefix")
	addrs, _, _ := unstructured.NestedSlice(u.Object, "spec", "addresses")
	for _, a := range addrs {
		if m, ok := a.(map[string]any); ok {
			if ip, ok := m["ip"].(string); ok {
				since, _ := m["since"].(string)
				t, _ := time.Parse(time.RFC3339Nano, strings.ToUpper(since))
				h.Addresses = append(h.Addresses, Claim{IP: ip, Since: t})
			}
		}
	}
	return h
}

// Claimed is the addresses an informer object or tombstone holds (see held).
func Claimed(obj any) []string {
	if spec := held(obj); spec != nil {
		return indexOf[byClaim](spec)
	}
	return nil
}

// claimKey is a claim's address in the one spelling lookups use: a record edited by hand may
// spell it otherwise ("2001:DB8::5") and must hold it all the same.
func claimKey(ip string) string {
	if a, err := netip.ParseAddr(ip); err == nil {
		return a.Unmap().String()
	}
	return ip
}

// held is what an informer object (or its tombstone) holds: its record's
// spec, or what an unreadable one still names (Holds); nil when neither.
func held(obj any) *Spec {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if c, ok := obj.(*Cached); ok && c.Record == nil {
		return c.Holds
	}
	if r, err := Decoded(obj); err == nil {
		return &r.Spec
	}
	return nil
}

// Decoded is the record an informer object (or its tombstone) holds.
func Decoded(obj any) (*Record, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	switch o := obj.(type) {
	case *Cached:
		return o.Record, o.Err
	case *unstructured.Unstructured:
		return FromUnstructured(o)
	}
	return nil, fmt.Errorf("not a NodeRecord: %T", obj)
}

// overlay is the cache of own writes over idx: it shows created records too (IncludeAdds), and a
// deletion's tombstone keeps out a late write response for the deleted object.
func overlay(idx cache.Indexer) cache.MutationCache {
	return cache.NewIntegerResourceVersionMutationCacheWithOptions(klog.Background(), idx,
		cache.MutationCacheOptions{Indexer: idx, TTL: ownWritesTTL, MaxCacheSize: 10000, IncludeAdds: true})
}

// NewStore builds the store; the caller runs its informer (Informer).
func NewStore(client dynamic.Interface) *Store {
	s := &Store{client: client.Resource(GVR)}
	s.informer = dynamicinformer.NewFilteredDynamicInformer(client, GVR, "", 0, s.indexers(), nil).Informer()
	_ = s.informer.SetTransform(cached)
	s.own = overlay(s.informer.GetIndexer())
	caughtUp := func(obj any) {
		if o, ok := obj.(runtime.Object); ok {
			s.own.OnAddOrUpdate(o)
		}
	}
	_, _ = s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    caughtUp,
		UpdateFunc: func(_, obj any) { caughtUp(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if o, ok := obj.(runtime.Object); ok {
				s.own.OnDelete(o)
			}
		},
	})
	return s
}

// indexOf computes a record's keys in each index from what it holds.
var indexOf = map[string]func(*Spec) []string{
	byClaim: func(sp *Spec) []string {
		out := make([]string, 0, len(sp.Addresses))
		for _, a := range sp.Addresses {
			out = append(out, claimKey(a.IP))
		}
		return out
	},
	byServingName: func(sp *Spec) []string {
		var keys []string
		if sp.Serving != nil {
			for _, san := range sp.Serving.SANs {
				if name, ok := servingDNS(san); ok && !slices.Contains(keys, name) {
					keys = append(keys, name)
				}
			}
		}
		return keys
	},
	by64: func(sp *Spec) []string {
		var keys []string
		for _, h := range sp.holdings("") {
			a := h.Addr
			if h.Prefix.IsValid() {
				a = h.Prefix.Addr()
			}
			if k := key64(a); a.Is6() && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		return keys
	},
}

// indexers read the keys an object took once (withKeys), computing them if it took none.
func (s *Store) indexers() cache.Indexers {
	out := cache.Indexers{}
	for _, name := range []string{byName, byClaim, byServingName, by64} {
		out[name] = func(obj any) ([]string, error) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			c, ok := obj.(*Cached)
			if !ok {
				return nil, nil
			}
			if c.keys == nil {
				c = withKeys(&Cached{ObjectMeta: c.ObjectMeta, Record: c.Record, Holds: c.Holds})
			}
			return c.keys[name], nil
		}
	}
	return out
}

// Informer is the NodeRecord informer (start it, and wait for its sync).
func (s *Store) Informer() cache.SharedIndexInformer { return s.informer }

// Get returns the Node's record: nil when there is none, an error when it cannot be read.
func (s *Store) Get(name string) (*Record, error) {
	// The name's index, not GetByKey: client-go's GetByKey drops a record created here from its
	// cache on the first read, before the informer has it.
	var obj any
	s.each(byName, name, func(c *Cached) { obj = c })
	if obj == nil {
		return nil, nil
	}
	r, err := Decoded(obj)
	if err != nil {
		return nil, err
	}
	return clone(r), nil
}

// Owner returns the Node whose record holds ip, "" when none. Should two hold it (two leaders at
// once), the earliest claim wins, then the name, so every reader agrees.
func (s *Store) Owner(ip netip.Addr) string {
	key := ip.String()
	best, bestAt := "", time.Time{}
	consider := func(name string, spec *Spec) {
		for _, c := range spec.Addresses {
			if claimKey(c.IP) == key && (best == "" || c.Since.Before(bestAt) || (c.Since.Equal(bestAt) && name < best)) {
				best, bestAt = name, c.Since
			}
		}
	}
	s.eachHeld(byClaim, key, consider)
	return best
}

// ServingHolders returns the records (names, sorted) whose serving certificate names dns in any
// case, valid or not, approved or not: the caller decides.
func (s *Store) ServingHolders(dns string) []string {
	var out []string
	s.eachHeld(byServingName, strings.ToLower(dns), func(name string, spec *Spec) {
		if spec.Serving.NamesDNS(dns) && !slices.Contains(out, name) {
			out = append(out, name)
		}
	})
	slices.Sort(out)
	return out
}

// each calls f with every record under key in index, own writes not yet delivered included.
func (s *Store) each(index, key string, f func(c *Cached)) {
	objs, _ := s.own.ByIndex(index, key)
	for _, o := range objs {
		c, ok := o.(*Cached)
		if !ok {
			continue
		}
		// An own write may be older than the informer's version (an admin's, whose handler has
		// not run yet): the newest counts, and the caller checks it.
		if cur, ok, _ := s.informer.GetIndexer().GetByKey(c.Name); ok {
			if cc, ok := cur.(*Cached); ok && cc != c && !newer(c.ResourceVersion, cc.ResourceVersion) {
				c = cc
			}
		}
		f(c)
	}
}

// newer reports whether resource version a is newer than b; a wins unless both are integers.
func newer(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA != nil || errB != nil || x > y
}

// eachHeld calls f with what every record under key holds.
func (s *Store) eachHeld(index, key string, f func(name string, spec *Spec)) {
	s.each(index, key, func(c *Cached) {
		if sp := held(c); sp != nil {
			f(c.Name, sp)
		}
	})
}

// Near returns the carved prefixes and IPv6 claims every record holds in the /64 of p (a node
// prefix of /64 or longer, or an address as a /128), for PrefixHolder and InPrefix.
func (s *Store) Near(p netip.Prefix) []Holding {
	key := key64(p.Addr())
	var out []Holding
	s.eachHeld(by64, key, func(name string, spec *Spec) { out = append(out, spec.holdings(name)...) })
	return slices.DeleteFunc(out, func(h Holding) bool {
		a := h.Addr
		if h.Prefix.IsValid() {
			a = h.Prefix.Addr()
		}
		return !a.Is6() || key64(a) != key
	})
}

// clone deep-copies a record: readers never share slices with the store.
func clone(r *Record) *Record {
	c := *r
	c.Spec.GrantedLabels = slices.Clone(r.Spec.GrantedLabels)
	c.Spec.GrantedTaints = slices.Clone(r.Spec.GrantedTaints)
	c.Spec.Addresses = slices.Clone(r.Spec.Addresses)
	if r.Spec.AgentKeyEnrolled != nil {
		t := *r.Spec.AgentKeyEnrolled
		c.Spec.AgentKeyEnrolled = &t
	}
	if r.Spec.Serving != nil {
		sv := *r.Spec.Serving
		sv.SANs = slices.Clone(sv.SANs)
		if sv.CertifiedUntil != nil {
			t := *sv.CertifiedUntil
			sv.CertifiedUntil = &t
		}
		c.Spec.Serving = &sv
	}
	return &c
}

// Put creates or updates a record (optimistically, on its resourceVersion).
func (s *Store) Put(ctx context.Context, r *Record) (*Record, error) {
	u, err := r.ToUnstructured()
	if err != nil {
		return nil, err
	}
	var out *unstructured.Unstructured
	if r.ResourceVersion == "" {
		out, err = s.client.Create(ctx, u, metav1.CreateOptions{FieldManager: "nodeinit-coordinator"})
	} else {
		out, err = s.client.Update(ctx, u, metav1.UpdateOptions{FieldManager: "nodeinit-coordinator"})
	}
	if err != nil {
		if r.ResourceVersion != "" && apierrors.IsNotFound(err) {
			// Deleted since: bury the version written from, so the next write creates it.
			s.own.OnDelete(&Cached{ObjectMeta: metav1.ObjectMeta{Name: r.Name, ResourceVersion: r.ResourceVersion, UID: r.UID}})
		}
		return nil, fmt.Errorf("writing NodeRecord %s: %w", r.Name, err)
	}
	rec, err := FromUnstructured(out)
	if err != nil {
		return nil, err
	}
	s.own.Mutation(withKeys(&Cached{ObjectMeta: metav1.ObjectMeta{Name: rec.Name, ResourceVersion: rec.ResourceVersion, UID: rec.UID}, Record: rec}))
	return clone(rec), nil
}

// List reads every record from the API server, not this replica's cache: a new leader decides
// from what the last one wrote. Unreadable records come back in unreadable, with the reason:
// one bad record must not stop a leader from starting.
func (s *Store) List(ctx context.Context) (recs []*Record, unreadable []error, err error) {
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := s.client.List(ctx, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("listing NodeRecords: %w", err)
		}
		for i := range list.Items {
			r, err := FromUnstructured(&list.Items[i])
			if err != nil {
				unreadable = append(unreadable, err)
				continue
			}
			recs = append(recs, r)
		}
		if list.GetContinue() == "" {
			return recs, unreadable, nil
		}
		opts.Continue = list.GetContinue()
	}
}

// Installed says whether the NodeRecord resource exists on the API server.
func (s *Store) Installed(ctx context.Context) error {
	_, err := s.client.List(ctx, metav1.ListOptions{Limit: 1})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("the NodeRecord resource is not installed (kubectl apply -f coordinator/deploy/noderecords.yaml): %w", err)
	}
	return err
}
