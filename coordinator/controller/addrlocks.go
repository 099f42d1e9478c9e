package controller

import (
	"net/netip"
	"slices"
	"sync"
)

// addrLocks serialize the syncs that decide claims on one address or one IPv6 /64 (node prefixes
// are decided under it), and nothing else: Nodes sharing neither never wait on each other.
type addrLocks struct{ keyLocks[netip.Prefix] }

// keyLocks is a lock per key, held only while someone holds or waits for it.
type keyLocks[K comparable] struct {
	mu   sync.Mutex
	held map[K]*keyLock
}

type keyLock struct {
	sync.Mutex
	refs int // holders and waiters; the entry goes with the last
}

// lockKeys are the lock keys of ips: each address as a full-length prefix and each IPv6 address's
// /64, sorted and without repeats, so that every caller locks in the same order.
func lockKeys(ips []netip.Addr) []netip.Prefix {
	var keys []netip.Prefix
	for _, ip := range ips {
		ip = ip.Unmap()
		keys = append(keys, netip.PrefixFrom(ip, ip.BitLen()))
		if ip.Is6() {
			p, _ := ip.Prefix(64)
			keys = append(keys, p)
		}
	}
	slices.SortFunc(keys, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(keys)
}

// lock locks ips (see lockKeys) in order and returns the unlock.
func (l *addrLocks) lock(ips []netip.Addr) func() { return l.lockAll(lockKeys(ips)) }

// lockAll locks keys in the order given (every caller sorts them alike) and returns the unlock.
func (l *keyLocks[K]) lockAll(keys []K) func() {
	entries := make([]*keyLock, len(keys))
	for i, k := range keys {
		l.mu.Lock()
		if l.held == nil {
			l.held = map[K]*keyLock{}
		}
		e := l.held[k]
		if e == nil {
			e = &keyLock{}
			l.held[k] = e
		}
		e.refs++
		l.mu.Unlock()
		e.Lock()
		entries[i] = e
	}
	return func() {
		for i, e := range slices.Backward(entries) {
			l.release(keys[i], e)
		}
	}
}

// release unlocks key's entry e, which goes with its last holder or waiter.
func (l *keyLocks[K]) release(key K, e *keyLock) {
	e.Unlock()
	l.mu.Lock()
	if e.refs--; e.refs == 0 {
		delete(l.held, key)
	}
	l.mu.Unlock()
}

// size is how many keys are held or waited for.
func (l *keyLocks[K]) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}
