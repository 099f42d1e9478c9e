package ipam

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
)

// Family is an address family pod CIDRs are given in.
type Family string

// The families, spelled as ipam.families spells them.
const (
	IPv4 Family = "ipv4"
	IPv6 Family = "ipv6"
)

// Config describes the pools.
type Config struct {
	// Families are the families pod CIDRs are given in (nil: IPv4 when
	// IPv4Pool is set, IPv6 when IPv6Pool is set). A request for any other
	// family is ignored: pod CIDRs never change once set, so an IPv4-only
	// cluster must not give a node an IPv6 CIDR because it has a prefix.
	// IPv6 without IPv6Pool gives IPv6 only from nodes' own prefixes.
	Families []Family
	// IPv4Pool is the cluster IPv4 pool (zero: no IPv4 allocation).
	IPv4Pool netip.Prefix
	// IPv4MaskSize is the per-node IPv4 segment (default 24).
	IPv4MaskSize int
	// IPv6Pool is the cluster IPv6 pool for nodes without a global prefix
	// (zero: such nodes get no IPv6 CIDR).
	IPv6Pool netip.Prefix
	// IPv6MaskSize is the per-node segment of IPv6Pool (default 80).
	IPv6MaskSize int
	// ServiceCIDRs are never overlapped.
	ServiceCIDRs []netip.Prefix
}

// Request is what a node needs.
type Request struct {
	// IPv4 asks for a segment of the IPv4 pool.
	IPv4 bool
	// IPv6Prefix is the node's preferred global IPv6 prefix, and IPv6Addr an
	// address of the node inside it; zero means use the IPv6 pool.
	IPv6Prefix netip.Prefix
	IPv6Addr   netip.Addr
	// IPv6 asks for an IPv6 segment at all.
	IPv6 bool
	// Avoid are addresses no segment handed out for this request may hold
	// (IPv6Addr is one), reserved or not: the requesting Node's own, and
	// those other Nodes list near its prefix, as the caller read them (a
	// caller's reservations may lag the Nodes it read).
	Avoid []netip.Addr
	// AvoidRanges are ranges no segment handed out for this request may
	// overlap: the admin's inventory binds them to other Nodes.
	AvoidRanges []netip.Prefix
}

// Allocator holds every pool and who has what. It is not safe for
// concurrent use; the coordinator serializes calls.
//
// The pools overlap: the fallback pool, node prefixes inside it, nested
// node prefixes. Every held CIDR, reserved address and service CIDR blocks
// the segments it overlaps in every pool (pool.block), and releasing it
// lifts exactly those blocks, so a segment one pool hands out is taken in
// all of them.
type Allocator struct {
	cfg        Config
	ipv4, ipv6 bool // the families handed out
	v4, v6     *pool
	services   []netip.Prefix         // the configured ServiceCIDRs, then those added since
	sets       map[netip.Prefix]*pool // per-node-prefix IPv6 sets, keyed by set prefix
	reserved   map[netip.Addr]bool    // Node addresses: never inside a handed-out segment
	owners     map[string][]netip.Prefix
	occupied   map[string]bool           // owners whose CIDRs were taken from their Node (Occupy), not handed out
	byCIDR     map[netip.Prefix]string   // who holds each CIDR, for O(1) lookups
	shared     map[netip.Prefix][]string // further holders of a CIDR (only after Occupy reported a conflict)
	heldLens   [2][129]int               // held CIDRs per family (IPv4, IPv6) and prefix length: lookups instead of scans

	// Indexes by the /64 holding them, so creating a per-node set or
	// reserving an address touches only its neighbourhood (every set prefix
	// is a /64 or longer). wideHeld are held IPv6 CIDRs wider than a /64.
	setsBy64     map[netip.Prefix][]*pool
	heldBy64     map[netip.Prefix][]netip.Prefix
	reservedBy64 map[netip.Prefix][]netip.Addr
	wideHeld     []netip.Prefix
	near         []*pool // scratch for poolsNear
}

func slash64(a netip.Addr) netip.Prefix { p, _ := a.Prefix(64); return p }

func family(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}

// hold records node as a holder of c and blocks c in every pool.
func (a *Allocator) hold(c netip.Prefix, node string) {
	if _, ok := a.byCIDR[c]; ok {
		a.shared[c] = append(a.shared[c], node)
	} else {
		a.byCIDR[c] = node
	}
	a.heldLens[family(c.Addr())][c.Bits()]++
	switch {
	case !c.Addr().Is6():
	case c.Bits() >= 64:
		k := slash64(c.Addr())
		a.heldBy64[k] = append(a.heldBy64[k], c)
	default:
		a.wideHeld = append(a.wideHeld, c)
	}
	for _, p := range a.poolsNear(c) {
		p.block(c)
	}
}

// unhold undoes one hold(c, node).
func (a *Allocator) unhold(c netip.Prefix, node string) {
	others := a.shared[c]
	if a.byCIDR[c] == node {
		if len(others) == 0 {
			delete(a.byCIDR, c)
		} else {
			a.byCIDR[c], others = others[0], others[1:]
		}
	} else if i := slices.Index(others, node); i >= 0 {
		others = slices.Delete(others, i, i+1)
	}
	if len(others) == 0 {
		delete(a.shared, c)
	} else {
		a.shared[c] = others
	}
	a.heldLens[family(c.Addr())][c.Bits()]--
	removeOne := func(xs []netip.Prefix) []netip.Prefix {
		if i := slices.Index(xs, c); i >= 0 {
			return slices.Delete(xs, i, i+1)
		}
		return xs
	}
	switch {
	case !c.Addr().Is6():
	case c.Bits() >= 64:
		k := slash64(c.Addr())
		if a.heldBy64[k] = removeOne(a.heldBy64[k]); len(a.heldBy64[k]) == 0 {
			delete(a.heldBy64, k)
		}
	default:
		a.wideHeld = removeOne(a.wideHeld)
	}
	for _, p := range a.poolsNear(c) {
		p.unblock(c)
	}
}

// New validates the configuration and builds the cluster pools.
func New(cfg Config) (*Allocator, error) {
	a := &Allocator{cfg: cfg, sets: map[netip.Prefix]*pool{}, reserved: map[netip.Addr]bool{}, owners: map[string][]netip.Prefix{}, occupied: map[string]bool{},
		byCIDR: map[netip.Prefix]string{}, shared: map[netip.Prefix][]string{},
		setsBy64: map[netip.Prefix][]*pool{}, heldBy64: map[netip.Prefix][]netip.Prefix{}, reservedBy64: map[netip.Prefix][]netip.Addr{}}
	if cfg.IPv4MaskSize == 0 {
		a.cfg.IPv4MaskSize = 24
	}
	if cfg.IPv6MaskSize == 0 {
		a.cfg.IPv6MaskSize = 80
	}
	if cfg.Families == nil {
		a.ipv4, a.ipv6 = cfg.IPv4Pool.IsValid(), cfg.IPv6Pool.IsValid()
	}
	for _, f := range cfg.Families {
		switch f {
		case IPv4:
			a.ipv4 = true
		case IPv6:
			a.ipv6 = true
		default:
			return nil, fmt.Errorf("family %q: want %s or %s", f, IPv4, IPv6)
		}
	}
	switch {
	case a.ipv4 && !cfg.IPv4Pool.IsValid():
		return nil, errors.New("IPv4 is a family but no IPv4 pool is configured")
	case !a.ipv4 && cfg.IPv4Pool.IsValid():
		return nil, fmt.Errorf("IPv4 pool %s is configured but IPv4 is not a family", cfg.IPv4Pool)
	case !a.ipv6 && cfg.IPv6Pool.IsValid():
		return nil, fmt.Errorf("IPv6 pool %s is configured but IPv6 is not a family", cfg.IPv6Pool)
	}
	var err error
	if cfg.IPv4Pool.IsValid() {
		if !cfg.IPv4Pool.Addr().Is4() {
			return nil, fmt.Errorf("IPv4 pool %s is not IPv4", cfg.IPv4Pool)
		}
		if a.v4, err = newPool(cfg.IPv4Pool, a.cfg.IPv4MaskSize); err != nil {
			return nil, fmt.Errorf("IPv4 pool: %w", err)
		}
	}
	if cfg.IPv6Pool.IsValid() {
		if !cfg.IPv6Pool.Addr().Is6() {
			return nil, fmt.Errorf("IPv6 pool %s is not IPv6", cfg.IPv6Pool)
		}
		if a.v6, err = newPool(cfg.IPv6Pool, a.cfg.IPv6MaskSize); err != nil {
			return nil, fmt.Errorf("IPv6 pool: %w", err)
		}
	}
	for _, s := range cfg.ServiceCIDRs {
		a.services = append(a.services, s.Masked())
		for _, p := range a.poolsNear(s.Masked()) {
			p.block(s.Masked())
		}
	}
	return a, nil
}

// AddServiceCIDR adds a service range learned from the cluster (a
// ServiceCIDR object): nothing overlapping it is handed out from now on.
// CIDRs nodes already hold stay theirs (Holder finds them).
func (a *Allocator) AddServiceCIDR(p netip.Prefix) {
	p = p.Masked()
	a.services = append(a.services, p)
	for _, pl := range a.poolsNear(p) {
		pl.block(p)
	}
}

// RemoveServiceCIDR undoes one AddServiceCIDR (the ServiceCIDR object is
// gone); a range the configuration lists stays.
func (a *Allocator) RemoveServiceCIDR(p netip.Prefix) {
	p = p.Masked()
	i := slices.Index(a.services[len(a.cfg.ServiceCIDRs):], p)
	if i < 0 {
		return
	}
	a.services = slices.Delete(a.services, len(a.cfg.ServiceCIDRs)+i, len(a.cfg.ServiceCIDRs)+i+1)
	for _, pl := range a.poolsNear(p) {
		pl.unblock(p)
	}
}

// Families reports the families the allocator hands out.
func (a *Allocator) Families() (ipv4, ipv6 bool) { return a.ipv4, a.ipv6 }

// Pools reports the families it hands out segments of a cluster pool of
// (an IPv6 family without ipv6Pool gives only nodes' own prefixes).
func (a *Allocator) Pools() (ipv4, ipv6 bool) { return a.ipv4 && a.v4 != nil, a.ipv6 && a.v6 != nil }

// SegmentFor returns the set prefix and segment size a node's own IPv6
// prefix gives (DESIGN.md §4, compatible with Talos CCM): a /64 gives /80s;
// a shorter prefix uses the /64 holding the node's address; a longer one
// gets proportionally smaller segments (a quarter of its host bits); /124
// and longer are refused.
func SegmentFor(prefix netip.Prefix, addr netip.Addr) (netip.Prefix, int, error) {
	if !prefix.Addr().Is6() || prefix.Addr().Is4In6() {
		return netip.Prefix{}, 0, fmt.Errorf("%s is not an IPv6 prefix", prefix)
	}
	bits := prefix.Bits()
	switch {
	case bits >= 124:
		return netip.Prefix{}, 0, fmt.Errorf("prefix %s is too long to carve pod segments from (/124 or longer)", prefix)
	case bits < 64:
		if !prefix.Contains(addr) {
			return netip.Prefix{}, 0, fmt.Errorf("node address %s is not inside its prefix %s", addr, prefix)
		}
		set, _ := addr.Prefix(64)
		return set, 80, nil
	default:
		return prefix.Masked(), bits + (128-bits)/4, nil
	}
}

// MinNodePrefixSegments is how many segments a node prefix must give to be
// carved from: its lowest, where hosts have their addresses, is never
// handed out (Allocator.set), and the rest must still be most of it. A /112
// or shorter prefix gives 16 or more.
const MinNodePrefixSegments = 16

// Reserve records a Node address: no segment holding it is handed out.
// Segments already free that hold it are taken out of circulation now.
func (a *Allocator) Reserve(addr netip.Addr) {
	addr = addr.Unmap()
	if a.reserved[addr] {
		return
	}
	a.reserved[addr] = true
	if addr.Is6() {
		a.reservedBy64[slash64(addr)] = append(a.reservedBy64[slash64(addr)], addr)
	}
	r := netip.PrefixFrom(addr, addr.BitLen())
	for _, p := range a.poolsNear(r) {
		p.block(r)
	}
}

// Unreserve forgets an address Reserve recorded (the Node withdrew it). A
// segment it kept out of circulation returns to its pool unless something
// else blocks it: a node holds it, or it holds another reserved address or
// a service CIDR.
func (a *Allocator) Unreserve(addr netip.Addr) {
	addr = addr.Unmap()
	if !a.reserved[addr] {
		return
	}
	delete(a.reserved, addr)
	if addr.Is6() {
		k := slash64(addr)
		if a.reservedBy64[k] = slices.DeleteFunc(a.reservedBy64[k], func(x netip.Addr) bool { return x == addr }); len(a.reservedBy64[k]) == 0 {
			delete(a.reservedBy64, k)
		}
	}
	r := netip.PrefixFrom(addr, addr.BitLen())
	for _, p := range a.poolsNear(r) {
		p.unblock(r)
	}
}

// Holder returns the node holding a CIDR that contains addr, and the CIDR;
// "" when none does.
func (a *Allocator) Holder(addr netip.Addr) (string, netip.Prefix) {
	addr = addr.Unmap()
	for bits, n := range a.heldLens[family(addr)] {
		if n == 0 {
			continue
		}
		c, _ := addr.Prefix(bits)
		if node, ok := a.byCIDR[c]; ok {
			return node, c
		}
	}
	return "", netip.Prefix{}
}

// Reserved reports whether addr is reserved.
func (a *Allocator) Reserved(addr netip.Addr) bool { return a.reserved[addr.Unmap()] }

// set returns (creating) the IPv6 set for a node prefix. A new set starts
// with the blocks every other pool already has in its range.
func (a *Allocator) set(prefix netip.Prefix, segBits int) (*pool, error) {
	if p, ok := a.sets[prefix]; ok {
		return p, nil
	}
	p, err := newPool(prefix, segBits)
	if err != nil {
		return nil, err
	}
	// A node prefix is carved from the top down, and its lowest segment
	// never (of 16 or more): the low end holds the addresses hosts are
	// given there (::1, DHCPv6 and static ranges), and the top of a /64,
	// with a first interface-ID byte that is odd, no EUI-64 address of a
	// unicast MAC.
	p.down, p.cursor = true, p.n-1
	if p.n >= MinNodePrefixSegments {
		p.block(p.segment(0))
	}
	for _, s := range a.services {
		p.block(s)
	}
	k := slash64(prefix.Addr())
	for _, addr := range a.reservedBy64[k] {
		p.block(netip.PrefixFrom(addr, 128))
	}
	for _, c := range a.heldBy64[k] {
		p.block(c)
	}
	for _, c := range a.wideHeld {
		p.block(c)
	}
	a.sets[prefix] = p
	a.setsBy64[k] = append(a.setsBy64[k], p)
	return p, nil
}

// Allocate gives a node its CIDRs, in the families the allocator hands
// out (a request for another family is ignored). A node that already has
// CIDRs keeps them (they never change once set), unless this allocator
// handed them out and they hold an address of req.Avoid: a caller asks
// only for a Node without pod CIDRs, so those never reached it (its write
// failed), and it gets others. CIDRs taken from the Node (Occupy) did
// reach it: the caller read a version from before they were written, and
// they stay the node's. On error nothing is held for the node.
func (a *Allocator) Allocate(node string, req Request) ([]netip.Prefix, error) {
	avoid := append(slices.Clone(req.Avoid), req.IPv6Addr)
	if have, ok := a.owners[node]; ok {
		if a.occupied[node] || !slices.ContainsFunc(have, func(c netip.Prefix) bool { return slices.ContainsFunc(avoid, c.Contains) }) {
			return slices.Clone(have), nil
		}
		a.Release(node)
	}
	wantV4, wantV6 := req.IPv4 && a.ipv4, req.IPv6 && a.ipv6
	if !wantV4 && !wantV6 {
		if a.ipv6 && !a.ipv4 && a.v6 == nil {
			return nil, errors.New("IPv6 is the only family, the node has no global IPv6 prefix of its own and no IPv6 pool is configured for such nodes")
		}
		return nil, fmt.Errorf("nothing to allocate: the request (IPv4 %t, IPv6 %t) asks for no family the allocator hands out", req.IPv4, req.IPv6)
	}
	// The addresses to avoid are kept out for this allocation only: the
	// Node events reserve them for good (and release them).
	for _, addr := range avoid {
		if addr = addr.Unmap(); addr.IsValid() && !a.reserved[addr] {
			a.Reserve(addr)
			defer a.Unreserve(addr)
		}
	}
	var pools []*pool
	if wantV4 {
		pools = append(pools, a.v4)
	}
	if wantV6 {
		p := a.v6
		if req.IPv6Prefix.IsValid() {
			setPrefix, segBits, err := SegmentFor(req.IPv6Prefix, req.IPv6Addr)
			if err != nil {
				return nil, err
			}
			if p, err = a.set(setPrefix, segBits); err != nil {
				return nil, err
			}
		}
		if p == nil {
			return nil, errors.New("IPv6 requested but the node has no global prefix and no IPv6 pool is configured")
		}
		pools = append(pools, p)
	}
	for _, r := range req.AvoidRanges {
		for _, p := range pools {
			p.block(r.Masked())
			defer p.unblock(r.Masked())
		}
	}
	var got []netip.Prefix
	for _, p := range pools {
		i, err := p.firstFree()
		if err != nil {
			for _, c := range got {
				a.unhold(c, node)
			}
			if p == a.v4 {
				return nil, fmt.Errorf("IPv4: %w", err)
			}
			return nil, fmt.Errorf("IPv6: %w", err)
		}
		c := p.segment(i)
		a.hold(c, node)
		got = append(got, c)
	}
	a.owners[node] = got
	return slices.Clone(got), nil
}

// Occupy records CIDRs a node already has (rebuilding from spec.podCIDRs),
// replacing what it held. They are held even when they overlap another
// node's (they are on the Node, so nothing overlapping them may be handed
// out while it has them), and the overlap is returned as an error.
func (a *Allocator) Occupy(node string, cidrs []netip.Prefix) error {
	a.Release(node)
	var conflicts []error
	for _, c := range cidrs {
		if other, oc, ok := a.heldOverlapping(c.Masked(), node); ok {
			conflicts = append(conflicts, fmt.Errorf("%s of node %s overlaps %s, already node %s's", c, node, oc, other))
		}
	}
	a.owners[node] = slices.Clone(cidrs)
	a.occupied[node] = true
	for _, c := range cidrs {
		a.hold(c.Masked(), node)
	}
	return errors.Join(conflicts...)
}

// heldOverlapping finds a CIDR overlapping c that a node other than node
// holds. It looks up each held prefix length rather than scanning: those
// containing c by masking c, those inside it by enumerating them when
// there are few, else by scanning c's /64.
func (a *Allocator) heldOverlapping(c netip.Prefix, node string) (string, netip.Prefix, bool) {
	other := func(p netip.Prefix) (string, bool) {
		if n, ok := a.byCIDR[p]; ok && n != node {
			return n, true
		}
		for _, n := range a.shared[p] {
			if n != node {
				return n, true
			}
		}
		return "", false
	}
	scan := false
	for bits, n := range a.heldLens[family(c.Addr())] {
		switch {
		case n == 0:
		case bits <= c.Bits():
			p, _ := c.Addr().Prefix(bits)
			if o, ok := other(p); ok {
				return o, p, true
			}
		case bits-c.Bits() <= 8:
			for i := range 1 << (bits - c.Bits()) {
				if p := subprefix(c, bits, i); a.byCIDR[p] != "" {
					if o, ok := other(p); ok {
						return o, p, true
					}
				}
			}
		default:
			scan = true
		}
	}
	if !scan {
		return "", netip.Prefix{}, false
	}
	candidates := a.heldBy64[slash64(c.Addr())]
	if !c.Addr().Is6() || c.Bits() < 64 {
		candidates = slices.Collect(maps.Keys(a.byCIDR))
	}
	for _, p := range candidates {
		if p.Bits() > c.Bits()+8 && c.Overlaps(p) {
			if o, ok := other(p); ok {
				return o, p, true
			}
		}
	}
	return "", netip.Prefix{}, false
}

// Release frees a node's CIDRs (call only once the Node object is gone).
func (a *Allocator) Release(node string) {
	for _, c := range a.owners[node] {
		a.unhold(c.Masked(), node)
	}
	delete(a.owners, node)
	delete(a.occupied, node)
}

// poolsNear are the pools that can overlap c (in a scratch slice, valid
// until the next call): every set overlapping a /64 or longer is in its /64.
func (a *Allocator) poolsNear(c netip.Prefix) []*pool {
	ps := a.near[:0]
	switch {
	case c.Addr().Is4():
		if a.v4 != nil {
			ps = append(ps, a.v4)
		}
	case c.Bits() >= 64:
		if a.v6 != nil {
			ps = append(ps, a.v6)
		}
		ps = append(ps, a.setsBy64[slash64(c.Addr())]...)
	default:
		if a.v6 != nil {
			ps = append(ps, a.v6)
		}
		for _, p := range a.sets {
			ps = append(ps, p)
		}
	}
	a.near = ps
	return ps
}

// Owned returns a node's CIDRs.
func (a *Allocator) Owned(node string) []netip.Prefix { return slices.Clone(a.owners[node]) }

// Usage is how full one cluster pool is; Used counts reserved segments too.
type Usage struct {
	Pool        string // "ipv4", "ipv6" or "node-prefixes"
	Used, Total int
}

// Usage reports the cluster pools, and the per-node-prefix sets summed.
func (a *Allocator) Usage() []Usage {
	var out []Usage
	for _, p := range []struct {
		name string
		pool *pool
	}{{"ipv4", a.v4}, {"ipv6", a.v6}} {
		if p.pool != nil {
			out = append(out, Usage{Pool: p.name, Used: p.pool.blocked(), Total: p.pool.n})
		}
	}
	sets := Usage{Pool: "node-prefixes"}
	for _, s := range a.sets {
		sets.Used += s.blocked()
		sets.Total += s.n
	}
	return append(out, sets)
}

// OutsidePool lists, sorted, the Nodes (name → their pod CIDRs) holding an
// IPv4 pod CIDR outside pool, the configured ipam.ipv4Pool: on a cluster
// whose Nodes already have pod CIDRs, any such Node says the pool is
// probably not the cluster's pod subnet, and Nodes that join get segments
// the CNI may not route. IPv6 pod CIDRs are left out (they come from each
// Node's own prefix by design). An invalid pool lists nothing.
func OutsidePool(cidrs map[string][]netip.Prefix, pool netip.Prefix) []string {
	if !pool.IsValid() || !pool.Addr().Is4() {
		return nil
	}
	var out []string
	for node, cs := range cidrs {
		if slices.ContainsFunc(cs, func(c netip.Prefix) bool {
			return c.Addr().Unmap().Is4() && !(pool.Bits() <= c.Bits() && pool.Contains(c.Addr().Unmap()))
		}) {
			out = append(out, node)
		}
	}
	slices.Sort(out)
	return out
}
