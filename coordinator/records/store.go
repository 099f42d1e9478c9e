package records

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

const (
	byClaim = "byClaim"
	// byServingName: the lower-cased DNS names of the serving certificate
	// a record names, for ServingHolders.
	byServingName = "byServingName"
	by64          = "by64" // the /64 of every IPv6 claim and carved prefix
)

func key64(a netip.Addr) string { p, _ := a.Prefix(64); return p.String() }

// Store reads NodeRecords from an informer and writes them with the
// coordinator's ServiceAccount. Its own writes are visible to the next read
// at once (write-through), before the informer delivers them.
type Store struct {
	client   dynamic.NamespaceableResourceInterface
	informer cache.SharedIndexInformer

	mu      sync.Mutex
	written map[string]*own // own writes the informer has not caught up with
	// gone is each record the informer saw deleted, until a newer object
	// of the name comes: an own write whose response returns after the
	// deletion is not kept.
	gone map[string]tombstone
}

// own is a record the store wrote, with its keys in each of the
// informer's indexes, taken once at the write: a read by index looks at
// the own writes under its key only, without decoding each of them again.
type own struct {
	*Record
	keys map[string][]string
}

// tombstone is a deleted record: its object's UID, and the version the
// deletion carried (a watch's: the deletion's own; a relist's: the
// version last seen, earlier).
type tombstone struct {
	rv  string
	uid types.UID
}

// buries says whether a version rv of object uid is the deleted one's, or
// older than its deletion.
func (g tombstone) buries(rv string, uid types.UID) bool {
	return uid != "" && uid == g.uid || !newer(rv, g.rv)
}

// Cached is a NodeRecord as the informer keeps it: decoded once, as it
// arrives (the informer's transform), instead of the generic map the
// dynamic client reads, which every lookup would decode again. A cluster
// has one record per Node, so this is most of what the store holds.
type Cached struct {
	metav1.ObjectMeta // name, resourceVersion and UID only
	Record            *Record
	Err               error // the object is not a record this version reads (Record is nil)
	// Holds, when Err, is what the object still says it holds, read
	// leniently: its claimed addresses (holds says how they are dated)
	// and its node prefix. A record the coordinator cannot read (an admin's edit the
	// API server accepted) keeps holding them until it is fixed: it
	// never frees them for another Node.
	Holds *Spec
}

// GetObjectKind: a Cached object is never encoded.
func (c *Cached) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies the record too.
func (c *Cached) DeepCopyObject() runtime.Object {
	out := &Cached{ObjectMeta: *c.ObjectMeta.DeepCopy(), Err: c.Err}
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
	return c, nil
}

// holds reads what an unreadable record holds: every string spec.addresses[].ip
// and spec.prefix. A claim keeps its date when it reads in upper case (the
// API server's date-time check lower-cases before it checks; Go's RFC 3339
// parser does not), else it dates from the zero time, earlier than any.
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

// Claimed is the addresses an informer object (or its tombstone) holds:
// its record's claims, or what an unreadable one still names (Holds).
func Claimed(obj any) []string {
	spec := held(obj)
	if spec == nil {
		return nil
	}
	out := make([]string, 0, len(spec.Addresses))
	for _, a := range spec.Addresses {
		out = append(out, claimKey(a.IP))
	}
	return out
}

// claimKey is a claim's address in the one spelling lookups use
// (netip.Addr.String): a record edited by hand may spell it otherwise
// ("2001:DB8::5"), and must hold it all the same.
func claimKey(ip string) string {
	if a, err := netip.ParseAddr(ip); err == nil {
		return a.Unmap().String()
	}
	return ip
}

// claimIndex keys a record by each address it claims (Claimed).
func claimIndex(obj any) ([]string, error) { return Claimed(obj), nil }

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

// NewStore builds the store; its informer starts with the caller's factory
// lifecycle (Informer().Run).
func NewStore(client dynamic.Interface) *Store {
	s := &Store{client: client.Resource(GVR), written: map[string]*own{}, gone: map[string]tombstone{}}
	s.informer = dynamicinformer.NewFilteredDynamicInformer(client, GVR, "", 0, s.indexers(), nil).Informer()
	_ = s.informer.SetTransform(cached)
	_, _ = s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.caughtUp,
		UpdateFunc: func(_, obj any) { s.caughtUp(obj) },
		DeleteFunc: s.deleted,
	})
	return s
}

// indexers are the record informer's indexes: claimed addresses, the
// serving certificate's DNS names (servingDNS), and the /64s held.
func (s *Store) indexers() cache.Indexers {
	return cache.Indexers{
		byClaim: claimIndex,
		byServingName: func(obj any) ([]string, error) {
			var keys []string
			if sp := held(obj); sp != nil && sp.Serving != nil {
				for _, san := range sp.Serving.SANs {
					if name, ok := servingDNS(san); ok && !slices.Contains(keys, name) {
						keys = append(keys, name)
					}
				}
			}
			return keys, nil
		},
		by64: func(obj any) ([]string, error) {
			var keys []string
			if sp := held(obj); sp != nil {
				for _, h := range sp.holdings("") {
					a := h.Addr
					if h.Prefix.IsValid() {
						a = h.Prefix.Addr()
					}
					if k := key64(a); a.Is6() && !slices.Contains(keys, k) {
						keys = append(keys, k)
					}
				}
			}
			return keys, nil
		},
	}
}

// deleted drops the store's own write of a record the informer saw
// deleted (that object's, or older than the deletion; an object created
// since is kept), and remembers the deletion for a write whose response
// is still on its way (wrote). A relist's deletion carries the version
// last seen, earlier than the deletion: the object's UID tells its writes
// from a new object's.
func (s *Store) deleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	c, ok := obj.(*Cached)
	if !ok {
		return
	}
	g := tombstone{rv: c.ResourceVersion, uid: c.UID}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.written[c.Name]; w != nil && g.buries(w.ResourceVersion, w.UID) {
		delete(s.written, c.Name)
	}
	s.gone[c.Name] = g
}

// Informer is the NodeRecord informer (start it, and wait for its sync).
func (s *Store) Informer() cache.SharedIndexInformer { return s.informer }

func (s *Store) caughtUp(obj any) {
	c, ok := obj.(*Cached)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.written[c.Name]; w != nil && !newer(w.ResourceVersion, c.ResourceVersion) {
		delete(s.written, c.Name)
	}
	if g, ok := s.gone[c.Name]; ok && !g.buries(c.ResourceVersion, c.UID) {
		delete(s.gone, c.Name)
	}
}

// newer reports whether resource version a is newer than b. Versions are
// opaque, but etcd's are integers: when either is not, a's write wins.
func newer(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil {
		return true
	}
	return x > y
}

// Get returns the Node's record, or nil when there is none (or it cannot be
// read, which a sync reports as an error).
func (s *Store) Get(name string) (*Record, error) {
	// The cache is read under the lock caughtUp takes: the informer may
	// add the written version to its cache, and its handler drop it from
	// written, between a read of one and of the other, and the reader
	// would see neither (nil, or the cache's older version).
	s.mu.Lock()
	obj, exists, err := s.informer.GetIndexer().GetByKey(name)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	w := s.written[name]
	if w != nil && exists && !newer(w.ResourceVersion, obj.(*Cached).ResourceVersion) {
		// The cache caught up (or an admin wrote since): it wins, even
		// before the informer's own handler has run.
		delete(s.written, name)
		w = nil
	}
	s.mu.Unlock()
	if w != nil {
		return clone(w.Record), nil
	}
	if !exists {
		return nil, nil
	}
	r, err := Decoded(obj)
	if err != nil {
		return nil, err
	}
	return clone(r), nil
}

// Owner returns the Node whose record holds ip, "" when none does. Should
// two records hold it (written by two leaders at once), the earliest claim
// wins, then the name: every reader agrees.
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
	s.each(byClaim, key, consider)
	return best
}

// ServingHolders returns the records (by name, sorted) whose serving
// certificate names the DNS name dns, whatever its case; valid or not,
// approved or not: the caller decides.
func (s *Store) ServingHolders(dns string) []string {
	var out []string
	s.each(byServingName, strings.ToLower(dns), func(name string, spec *Spec) {
		if spec.Serving.NamesDNS(dns) && !slices.Contains(out, name) {
			out = append(out, name)
		}
	})
	slices.Sort(out)
	return out
}

// each calls f with every record the informer's index holds under key,
// and every record of the store's own writes not yet in the cache (an own
// write newer than the cache counts, not the cache's older version).
func (s *Store) each(index, key string, f func(name string, spec *Spec)) {
	// One moment's view: the cache is read under the lock too (Get).
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, w := range s.written {
		if !slices.Contains(w.keys[index], key) {
			continue // not under key (its cache version, if under it, is passed over below)
		}
		if c := s.cachedLocked(name); c != nil && !newer(w.ResourceVersion, c.ResourceVersion) {
			delete(s.written, name) // the cache caught up, or holds a newer version
			continue
		}
		f(name, &w.Spec)
	}
	objs, _ := s.informer.GetIndexer().ByIndex(index, key)
	for _, o := range objs {
		c := o.(*Cached)
		if w := s.written[c.Name]; w != nil && newer(w.ResourceVersion, c.ResourceVersion) {
			continue // an own write is newer: it counts, under its own keys
		}
		if sp := held(c); sp != nil {
			f(c.Name, sp)
		}
	}
}

// Near returns what every record holds in the /64s around p (a node prefix
// of /64 or longer, or an address as a /128): carved prefixes and IPv6
// claims, for PrefixHolder and InPrefix.
func (s *Store) Near(p netip.Prefix) []Holding {
	key := key64(p.Addr())
	var out []Holding
	s.each(by64, key, func(name string, spec *Spec) { out = append(out, spec.holdings(name)...) })
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
			s.stale(r.Name, r.ResourceVersion)
		}
		return nil, fmt.Errorf("writing NodeRecord %s: %w", r.Name, err)
	}
	rec, err := FromUnstructured(out)
	if err != nil {
		return nil, err
	}
	s.wrote(rec)
	return clone(rec), nil
}

// wrote keeps rec, just written, for the reads before the informer has it,
// unless the store already knows a newer version: another worker's write
// of the record returned first, or the informer has it already.
func (s *Store) wrote(rec *Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.written[rec.Name]; w != nil && !newer(rec.ResourceVersion, w.ResourceVersion) {
		return
	}
	if c := s.cachedLocked(rec.Name); c != nil && !newer(rec.ResourceVersion, c.ResourceVersion) {
		return
	}
	if g, ok := s.gone[rec.Name]; ok {
		if g.buries(rec.ResourceVersion, rec.UID) {
			return // deleted since
		}
		delete(s.gone, rec.Name)
	}
	s.keep(rec)
}

// keep holds rec as the store's own write, with its index keys; the
// caller holds s.mu.
func (s *Store) keep(rec *Record) {
	keys := map[string][]string{}
	for index, f := range s.informer.GetIndexer().GetIndexers() {
		keys[index], _ = f(&Cached{ObjectMeta: metav1.ObjectMeta{Name: rec.Name}, Record: rec})
	}
	s.written[rec.Name] = &own{Record: rec, keys: keys}
}

// stale drops the store's own write that a write based on it found
// deleted (NotFound): the next read is the informer's, which the next
// write starts from. A Conflict drops nothing: the own write is still
// the newest version this replica knows (the cache's is older, or Get
// would have dropped it), and its claims hold until the informer
// delivers the newer one.
func (s *Store) stale(name, rv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.written[name]; w != nil && w.ResourceVersion == rv {
		delete(s.written, name)
	}
}

// cachedLocked is the informer's object for name, nil when it has none;
// the caller holds s.mu.
func (s *Store) cachedLocked(name string) *Cached {
	obj, ok, _ := s.informer.GetIndexer().GetByKey(name)
	if !ok {
		return nil
	}
	c, _ := obj.(*Cached)
	return c
}

// List reads every record from the API server, in pages: a fresh list, not
// this replica's cache (a new leader decides from what the previous one
// last wrote). A record it cannot read is not in it but in unreadable,
// with the reason: one bad record must not stop a leader from starting.
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
