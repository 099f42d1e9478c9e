// Package ipam allocates pod CIDRs: IPv4 from a cluster pool, IPv6 from
// each node's own global prefix (falling back to a cluster IPv6 pool). It
// imports nothing from Kubernetes; the coordinator feeds it Nodes' facts and
// writes its answers to spec.podCIDRs, which is the only place state lives.
package ipam

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
)

// ErrExhausted is returned when a pool has no free segment left.
var ErrExhausted = errors.New("pool exhausted")

// maxSegmentBits bounds a pool's bitmap to 2^20 segments (128 KiB).
const maxSegmentBits = 20

// pool hands out fixed-size segments of one prefix. A segment is free when
// nothing blocks it: no held CIDR (from this pool or any other that
// overlaps it), reserved address or service CIDR. Blocks are counted, so
// lifting one frees the segment only when it was the last; the count lives
// in a bitmap (first block) and a map (the rare further ones). Free
// segments are found with the bitmap and a rotating cursor, so allocation
// is amortized O(1). The bitmap is sparse (words that are all zero are not
// stored): a node's own /64 has 65,536 segments but usually holds a handful.
type pool struct {
	prefix  netip.Prefix
	segBits int // segment prefix length
	n       int // number of segments
	used    map[int]uint64
	more    map[int]uint32 // blocks beyond the first, per segment
	whole   int            // blocks covering the whole pool
	free    int            // segments nothing blocks, ignoring whole
	cursor  int
	down    bool // the cursor moves down (a node prefix: DESIGN.md, Pod CIDRs)
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

// blocked is how many segments are not free.
func (p *pool) blocked() int {
	if p.whole > 0 {
		return p.n
	}
	return p.n - p.free
}

func (p *pool) mark(i int) {
	if p.used[i/64]&(1<<(i%64)) != 0 {
		if p.more == nil {
			p.more = map[int]uint32{}
		}
		p.more[i]++
		return
	}
	p.used[i/64] |= 1 << (i % 64)
	p.free--
}

func (p *pool) unmark(i int) {
	if k := p.more[i]; k > 0 {
		if k == 1 {
			delete(p.more, i)
		} else {
			p.more[i] = k - 1
		}
		return
	}
	w := i / 64
	if p.used[w]&(1<<(i%64)) == 0 {
		return
	}
	if p.used[w] &^= 1 << (i % 64); p.used[w] == 0 {
		delete(p.used, w)
	}
	p.free++
}

// span returns the segments overlapping r: count of them from first, or
// whole when r covers the pool; ok is false when r does not overlap it.
func (p *pool) span(r netip.Prefix) (first, count int, whole, ok bool) {
	if r.Addr().BitLen() != p.prefix.Addr().BitLen() || !p.prefix.Overlaps(r) {
		return 0, 0, false, false
	}
	r = r.Masked()
	switch {
	case r.Bits() <= p.prefix.Bits():
		return 0, p.n, true, true
	case r.Bits() >= p.segBits:
		return p.index(r.Addr()), 1, false, true
	default:
		return p.index(r.Addr()), 1 << (p.segBits - r.Bits()), false, true
	}
}

// block counts one more block on every segment overlapping r.
func (p *pool) block(r netip.Prefix) {
	first, count, whole, ok := p.span(r)
	switch {
	case !ok:
	case whole:
		p.whole++
	default:
		for i := first; i < first+count; i++ {
			p.mark(i)
		}
	}
}

// unblock lifts one block that block(r) counted.
func (p *pool) unblock(r netip.Prefix) {
	first, count, whole, ok := p.span(r)
	switch {
	case !ok:
	case whole:
		p.whole--
	default:
		for i := first; i < first+count; i++ {
			p.unmark(i)
		}
	}
}

// segment returns the i-th segment.
func (p *pool) segment(i int) netip.Prefix { return subprefix(p.prefix, p.segBits, i) }

// index returns the segment holding addr, or -1.
func (p *pool) index(addr netip.Addr) int {
	if !p.prefix.Contains(addr) {
		return -1
	}
	off := u128Of(addr).sub(u128Of(p.prefix.Addr())).shr(uint(addr.BitLen() - p.segBits))
	return int(off.lo)
}

// firstFree finds the next free segment after the cursor; the caller
// blocks it (the allocator does, in every pool it overlaps).
func (p *pool) firstFree() (int, error) {
	if p.free == 0 || p.whole > 0 {
		return 0, fmt.Errorf("%w: %s has no free /%d", ErrExhausted, p.prefix, p.segBits)
	}
	for p.down {
		w := p.cursor / 64
		if p.used[w] == ^uint64(0) {
			p.cursor = (w*64 - 1 + p.n) % p.n
			continue
		}
		i := p.cursor
		p.cursor = (p.cursor - 1 + p.n) % p.n
		if p.used[w]&(1<<(i%64)) == 0 {
			return i, nil
		}
	}
	for {
		w := p.cursor / 64
		if p.used[w] == ^uint64(0) {
			p.cursor = ((w + 1) * 64) % p.n
			continue
		}
		i := p.cursor
		p.cursor = (p.cursor + 1) % p.n
		if p.used[w]&(1<<(i%64)) == 0 {
			return i, nil
		}
	}
}

// subprefix returns the i-th /bits inside p.
func subprefix(p netip.Prefix, bits, i int) netip.Prefix {
	a := p.Masked().Addr()
	off := u128{lo: uint64(i)}.shl(uint(a.BitLen() - bits))
	return netip.PrefixFrom(u128Of(a).add(off).addr(a.Is4()), bits)
}

// u128 is an address as a number, for segment arithmetic without big.Int.
type u128 struct{ hi, lo uint64 }

func u128Of(a netip.Addr) u128 {
	if a.Is4() {
		b := a.As4()
		return u128{lo: uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

func (u u128) addr(is4 bool) netip.Addr {
	if is4 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(u.lo))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], u.hi)
	binary.BigEndian.PutUint64(b[8:], u.lo)
	return netip.AddrFrom16(b)
}

func (u u128) add(v u128) u128 {
	lo, c := bits.Add64(u.lo, v.lo, 0)
	hi, _ := bits.Add64(u.hi, v.hi, c)
	return u128{hi, lo}
}

func (u u128) sub(v u128) u128 {
	lo, b := bits.Sub64(u.lo, v.lo, 0)
	hi, _ := bits.Sub64(u.hi, v.hi, b)
	return u128{hi, lo}
}

func (u u128) shl(n uint) u128 {
	if n >= 64 {
		return u128{hi: u.lo << (n - 64)}
	}
	return u128{u.hi<<n | u.lo>>(64-n), u.lo << n}
}

func (u u128) shr(n uint) u128 {
	if n >= 64 {
		return u128{lo: u.hi >> (n - 64)}
	}
	return u128{u.hi >> n, u.lo>>n | u.hi<<(64-n)}
}
