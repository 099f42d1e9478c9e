// Package ipam allocates pod CIDRs: IPv4 from a cluster pool, IPv6 from
// each node's own global prefix (falling back to a cluster IPv6 pool). It
// imports nothing from Kubernetes; the coordinator feeds it Nodes' facts and
// writes its answers to spec.podCIDRs, which is the only place state lives.
package ipam

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
)

// ErrExhausted is returned when a pool has no free segment left.
var ErrExhausted = errors.New("pool exhausted")

// maxSegmentBits bounds a pool's bitmap to 2^20 segments (128 KiB).
const maxSegmentBits = 20

// pool hands out fixed-size segments of one prefix. Free segments are found
// with a bitmap and a rotating cursor, so allocation is amortized O(1). The
// bitmap is sparse (words that are all zero are not stored): a node's own /64
// has 65,536 segments but usually holds a handful.
type pool struct {
	prefix  netip.Prefix
	segBits int // segment prefix length
	n       int // number of segments
	used    map[int]uint64
	free    int
	cursor  int
}

func newPool(prefix netip.Prefix, segBits int) (*pool, error) {
	prefix = prefix.Masked()
	if segBits < prefix.Bits() || segBits > prefix.Addr().BitLen() {
		return nil, fmt.Errorf("segment size /%d does not fit in %s", segBits, prefix)
	}
	if segBits-prefix.Bits() > maxSegmentBits {
		return nil, fmt.Errorf("%s split into /%d gives more than 2^%d segments", prefix, segBits, maxSegmentBits)
	}
	n := 1 << (segBits - prefix.Bits())
	return &pool{prefix: prefix, segBits: segBits, n: n, used: map[int]uint64{}, free: n}, nil
}

func (p *pool) isUsed(i int) bool { return p.used[i/64]&(1<<(i%64)) != 0 }

func (p *pool) mark(i int) bool {
	if p.isUsed(i) {
		return false
	}
	p.used[i/64] |= 1 << (i % 64)
	p.free--
	return true
}

func (p *pool) unmark(i int) {
	if p.isUsed(i) {
		w := i / 64
		if p.used[w] &^= 1 << (i % 64); p.used[w] == 0 {
			delete(p.used, w)
		}
		p.free++
	}
}

// segment returns the i-th segment.
func (p *pool) segment(i int) netip.Prefix {
	base := new(big.Int).SetBytes(p.prefix.Addr().AsSlice())
	off := new(big.Int).Lsh(big.NewInt(int64(i)), uint(p.prefix.Addr().BitLen()-p.segBits))
	b := base.Add(base, off).FillBytes(make([]byte, p.prefix.Addr().BitLen()/8))
	addr, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(addr, p.segBits)
}

// index returns the segment holding addr, or -1.
func (p *pool) index(addr netip.Addr) int {
	if !p.prefix.Contains(addr) {
		return -1
	}
	a := new(big.Int).SetBytes(addr.AsSlice())
	base := new(big.Int).SetBytes(p.prefix.Addr().AsSlice())
	off := a.Sub(a, base).Rsh(a, uint(addr.BitLen()-p.segBits))
	return int(off.Int64())
}

// indexOf returns the segment equal to s, or -1.
func (p *pool) indexOf(s netip.Prefix) int {
	if s.Bits() != p.segBits {
		return -1
	}
	i := p.index(s.Addr())
	if i < 0 || p.segment(i) != s.Masked() {
		return -1
	}
	return i
}

// allocate takes the next free segment after the cursor.
func (p *pool) allocate() (netip.Prefix, error) {
	if p.free == 0 {
		return netip.Prefix{}, fmt.Errorf("%w: %s has no free /%d", ErrExhausted, p.prefix, p.segBits)
	}
	for {
		w := p.cursor / 64
		if p.used[w] == ^uint64(0) {
			p.cursor = ((w + 1) * 64) % p.n
			continue
		}
		i := p.cursor
		p.cursor = (p.cursor + 1) % p.n
		if i < p.n && p.mark(i) {
			return p.segment(i), nil
		}
	}
}

// reserveOverlap marks every segment overlapping r.
func (p *pool) reserveOverlap(r netip.Prefix) {
	if !p.prefix.Overlaps(r) || r.Addr().BitLen() != p.prefix.Addr().BitLen() {
		return
	}
	if r.Bits() <= p.prefix.Bits() { // r covers the whole pool
		for i := 0; i < p.n; i++ {
			p.mark(i)
		}
		return
	}
	first := p.index(r.Masked().Addr())
	if r.Bits() >= p.segBits {
		p.mark(first)
		return
	}
	for i := 0; i < 1<<(p.segBits-r.Bits()); i++ {
		p.mark(first + i)
	}
}
