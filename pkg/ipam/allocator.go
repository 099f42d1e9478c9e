package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// Config describes the pools.
type Config struct {
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
}

// Allocator holds every pool and who has what. It is not safe for
// concurrent use; the coordinator serializes calls.
type Allocator struct {
	cfg      Config
	v4, v6   *pool
	sets     map[netip.Prefix]*pool // per-node-prefix IPv6 sets, keyed by set prefix
	reserved map[netip.Addr]bool    // Node addresses: never inside a handed-out segment
	owners   map[string][]netip.Prefix
	byCIDR   map[netip.Prefix]string // who holds each CIDR, for O(1) rebuild checks

	// Indexes by the /64 holding them, so creating a per-node set or
	// reserving an address touches only its neighbourhood (every set prefix
	// is a /64 or longer). wideHeld are held IPv6 CIDRs wider than a /64.
	setsBy64     map[netip.Prefix][]*pool
	heldBy64     map[netip.Prefix][]netip.Prefix
	reservedBy64 map[netip.Prefix][]netip.Addr
	wideHeld     []netip.Prefix
}

func slash64(a netip.Addr) netip.Prefix { p, _ := a.Prefix(64); return p }

func (a *Allocator) hold(c netip.Prefix, node string) {
	a.byCIDR[c] = node
	switch {
	case !c.Addr().Is6():
	case c.Bits() >= 64:
		k := slash64(c.Addr())
		a.heldBy64[k] = append(a.heldBy64[k], c)
	default:
		a.wideHeld = append(a.wideHeld, c)
	}
}

func (a *Allocator) unhold(c netip.Prefix) {
	delete(a.byCIDR, c)
	switch {
	case !c.Addr().Is6():
	case c.Bits() >= 64:
		k := slash64(c.Addr())
		a.heldBy64[k] = slices.DeleteFunc(a.heldBy64[k], func(x netip.Prefix) bool { return x == c })
	default:
		a.wideHeld = slices.DeleteFunc(a.wideHeld, func(x netip.Prefix) bool { return x == c })
	}
}

// New validates the configuration and builds the cluster pools.
func New(cfg Config) (*Allocator, error) {
	a := &Allocator{cfg: cfg, sets: map[netip.Prefix]*pool{}, reserved: map[netip.Addr]bool{}, owners: map[string][]netip.Prefix{}, byCIDR: map[netip.Prefix]string{},
		setsBy64: map[netip.Prefix][]*pool{}, heldBy64: map[netip.Prefix][]netip.Prefix{}, reservedBy64: map[netip.Prefix][]netip.Addr{}}
	if cfg.IPv4MaskSize == 0 {
		a.cfg.IPv4MaskSize = 24
	}
	if cfg.IPv6MaskSize == 0 {
		a.cfg.IPv6MaskSize = 80
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
	for _, p := range []*pool{a.v4, a.v6} {
		if p == nil {
			continue
		}
		for _, s := range cfg.ServiceCIDRs {
			p.reserveOverlap(s)
		}
	}
	return a, nil
}

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

// Reserve records a Node address: no segment holding it is handed out.
// Segments already free that hold it are taken out of circulation now.
func (a *Allocator) Reserve(addr netip.Addr) {
	addr = addr.Unmap()
	if a.reserved[addr] {
		return
	}
	a.reserved[addr] = true
	pools := []*pool{a.v4, a.v6}
	if addr.Is6() {
		pools = append(pools, a.setsBy64[slash64(addr)]...)
		a.reservedBy64[slash64(addr)] = append(a.reservedBy64[slash64(addr)], addr)
	}
	for _, p := range pools {
		if p == nil {
			continue
		}
		if i := p.index(addr); i >= 0 {
			p.mark(i)
		}
	}
}

// Unreserve forgets an address Reserve recorded (the Node withdrew it). A
// segment it kept out of circulation returns to its pool unless a node holds
// it or it holds another reserved address or a service CIDR.
func (a *Allocator) Unreserve(addr netip.Addr) {
	addr = addr.Unmap()
	if !a.reserved[addr] {
		return
	}
	delete(a.reserved, addr)
	pools := []*pool{a.v4, a.v6}
	if addr.Is6() {
		k := slash64(addr)
		a.reservedBy64[k] = slices.DeleteFunc(a.reservedBy64[k], func(x netip.Addr) bool { return x == addr })
		pools = append(pools, a.setsBy64[k]...)
	}
	for _, p := range pools {
		if p == nil {
			continue
		}
		if i := p.index(addr); i >= 0 && p.isUsed(i) {
			seg := p.segment(i)
			if _, held := a.byCIDR[seg]; !held && !a.holdsReserved(seg) {
				p.unmark(i)
			}
		}
	}
}

// Holder returns the node holding a CIDR that contains addr, and the CIDR;
// "" when none does.
func (a *Allocator) Holder(addr netip.Addr) (string, netip.Prefix) {
	addr = addr.Unmap()
	if addr.Is6() {
		for _, c := range append(slices.Clone(a.heldBy64[slash64(addr)]), a.wideHeld...) {
			if c.Contains(addr) {
				return a.byCIDR[c], c
			}
		}
		return "", netip.Prefix{}
	}
	if a.v4 != nil && a.v4.prefix.Contains(addr) {
		seg := a.v4.segment(a.v4.index(addr))
		if n, ok := a.byCIDR[seg]; ok {
			return n, seg
		}
	}
	for c, n := range a.byCIDR {
		if c.Addr().Is4() && c.Contains(addr) {
			return n, c
		}
	}
	return "", netip.Prefix{}
}

// Reserved reports whether addr is reserved.
func (a *Allocator) Reserved(addr netip.Addr) bool { return a.reserved[addr.Unmap()] }

func (a *Allocator) allPools() []*pool {
	ps := make([]*pool, 0, len(a.sets)+2)
	for _, p := range []*pool{a.v4, a.v6} {
		if p != nil {
			ps = append(ps, p)
		}
	}
	for _, p := range a.sets {
		ps = append(ps, p)
	}
	return ps
}

// set returns (creating) the IPv6 set for a node prefix.
func (a *Allocator) set(prefix netip.Prefix, segBits int) (*pool, error) {
	if p, ok := a.sets[prefix]; ok {
		return p, nil
	}
	p, err := newPool(prefix, segBits)
	if err != nil {
		return nil, err
	}
	for _, s := range a.cfg.ServiceCIDRs {
		p.reserveOverlap(s)
	}
	k := slash64(prefix.Addr())
	for _, addr := range a.reservedBy64[k] {
		if i := p.index(addr); i >= 0 {
			p.mark(i)
		}
	}
	// Segments already given out from an overlapping pool stay taken.
	for _, c := range slices.Concat(a.heldBy64[k], a.wideHeld) {
		p.reserveOverlap(c)
	}
	a.sets[prefix] = p
	a.setsBy64[k] = append(a.setsBy64[k], p)
	return p, nil
}

// Allocate gives a node its CIDRs. A node that already has CIDRs keeps them
// (they never change once set). On error nothing is held for the node.
func (a *Allocator) Allocate(node string, req Request) ([]netip.Prefix, error) {
	if have, ok := a.owners[node]; ok {
		return slices.Clone(have), nil
	}
	var got []netip.Prefix
	undo := func() {
		for _, c := range got {
			a.free(c)
		}
	}
	if req.IPv4 {
		if a.v4 == nil {
			return nil, errors.New("IPv4 requested but no IPv4 pool is configured")
		}
		c, err := a.v4.allocate()
		if err != nil {
			return nil, fmt.Errorf("IPv4: %w", err)
		}
		got = append(got, c)
	}
	if req.IPv6 {
		p := a.v6
		if req.IPv6Prefix.IsValid() {
			setPrefix, segBits, err := SegmentFor(req.IPv6Prefix, req.IPv6Addr)
			if err != nil {
				undo()
				return nil, err
			}
			if p, err = a.set(setPrefix, segBits); err != nil {
				undo()
				return nil, err
			}
		}
		if p == nil {
			undo()
			return nil, errors.New("IPv6 requested but the node has no global prefix and no IPv6 pool is configured")
		}
		c, err := p.allocate()
		if err != nil {
			undo()
			return nil, fmt.Errorf("IPv6: %w", err)
		}
		got = append(got, c)
	}
	a.owners[node] = got
	for _, c := range got {
		a.hold(c, node)
	}
	return slices.Clone(got), nil
}

// Occupy records CIDRs a node already has (rebuilding from spec.podCIDRs).
// It refuses a CIDR another node holds.
func (a *Allocator) Occupy(node string, cidrs []netip.Prefix) error {
	for _, c := range cidrs {
		if other, ok := a.byCIDR[c.Masked()]; ok && other != node {
			return fmt.Errorf("%s of node %s is already node %s's", c, node, other)
		}
	}
	a.owners[node] = slices.Clone(cidrs)
	for _, c := range cidrs {
		c = c.Masked()
		a.hold(c, node)
		for _, p := range a.poolsNear(c) {
			p.reserveOverlap(c)
		}
	}
	return nil
}

// Release frees a node's CIDRs (call only once the Node object is gone).
func (a *Allocator) Release(node string) {
	for _, c := range a.owners[node] {
		a.free(c)
		a.unhold(c)
	}
	delete(a.owners, node)
}

// poolsNear are the pools that can overlap c.
func (a *Allocator) poolsNear(c netip.Prefix) []*pool {
	if c.Addr().Is6() && c.Bits() >= 64 {
		return slices.DeleteFunc(append([]*pool{a.v4, a.v6}, a.setsBy64[slash64(c.Addr())]...), func(p *pool) bool { return p == nil })
	}
	return a.allPools()
}

func (a *Allocator) free(c netip.Prefix) {
	for _, p := range a.poolsNear(c) {
		if i := p.indexOf(c); i >= 0 && !a.holdsReserved(p.segment(i)) {
			p.unmark(i)
		}
	}
}

func (a *Allocator) holdsReserved(seg netip.Prefix) bool {
	candidates := a.reservedBy64[slash64(seg.Addr())]
	if seg.Addr().Is4() || seg.Bits() < 64 {
		candidates = nil
		for addr := range a.reserved {
			candidates = append(candidates, addr)
		}
	}
	for _, addr := range candidates {
		if seg.Contains(addr) {
			return true
		}
	}
	for _, s := range a.cfg.ServiceCIDRs {
		if seg.Overlaps(s) {
			return true
		}
	}
	return false
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
			out = append(out, Usage{Pool: p.name, Used: p.pool.n - p.pool.free, Total: p.pool.n})
		}
	}
	sets := Usage{Pool: "node-prefixes"}
	for _, s := range a.sets {
		sets.Used += s.n - s.free
		sets.Total += s.n
	}
	return append(out, sets)
}
