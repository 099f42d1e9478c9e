package controller

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// blocks reports whether lock(ips) waits while another holds held.
func blocks(l *addrLocks, held, ips []netip.Addr) bool {
	unlock := l.lock(held)
	got := make(chan func(), 1)
	go func() { got <- l.lock(ips) }()
	select {
	case u := <-got:
		u()
		unlock()
		return false
	case <-time.After(50 * time.Millisecond):
		unlock()
		(<-got)()
		return true
	}
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// Two syncs wait on each other exactly when their Nodes share an address or
// an IPv6 /64: the invariant the claims rest on, and no more. The old
// stripes failed the "never waits" rows for some pairs (hash collisions).
func TestAddrLocksExactlyTheSharedOnes(t *testing.T) {
	for _, tc := range []struct {
		a, b []netip.Addr
		wait bool
	}{
		{addrs("10.0.0.1"), addrs("10.0.0.1"), true},
		{addrs("10.0.0.1", "10.0.0.2"), addrs("10.0.0.3", "10.0.0.2"), true},
		{addrs("2001:db8:1:2::1"), addrs("2001:db8:1:2::99"), true}, // one /64: node prefixes
		{addrs("::ffff:10.0.0.1"), addrs("10.0.0.1"), true},         // mapped is the address
		{addrs("10.0.0.1"), addrs("10.0.0.2"), false},
		{addrs("2001:db8:1:2::1"), addrs("2001:db8:1:3::1"), false},
		{addrs("10.0.0.1", "2001:db8:1:2::1"), addrs("10.0.0.2", "2001:db8:1:3::1"), false},
		{nil, addrs("10.0.0.1"), false},
	} {
		l := &addrLocks{}
		if got := blocks(l, tc.a, tc.b); got != tc.wait {
			t.Errorf("%v held, lock %v: waited %v, want %v", tc.a, tc.b, got, tc.wait)
		}
		if n := l.size(); n != 0 {
			t.Errorf("%v then %v: %d keys left held", tc.a, tc.b, n)
		}
	}
}

// Syncs of 500 Nodes, each with its own IPv4 address and /64, in every
// order: none ever waits for another (no false sharing), and the lock table
// is empty afterwards.
func TestAddrLocksDisjointNodesNeverWait(t *testing.T) {
	l := &addrLocks{}
	nodes := make([][]netip.Addr, 500)
	for i := range nodes {
		nodes[i] = addrs(fmt.Sprintf("10.%d.%d.10", i/256, i%256), fmt.Sprintf("2001:db8:%x::10", i+1), fmt.Sprintf("2001:db8:%x::11", i+1))
	}
	var held []func()
	for _, i := range rand.Perm(len(nodes)) {
		got := make(chan func(), 1)
		go func() { got <- l.lock(nodes[i]) }()
		select {
		case u := <-got:
			held = append(held, u)
		case <-time.After(time.Second):
			for _, u := range held {
				u()
			}
			(<-got)()
			t.Fatalf("node %d waited while %d other Nodes, none sharing an address, were being synced", i, len(held))
		}
	}
	for _, u := range held {
		u()
	}
	if n := l.size(); n != 0 {
		t.Errorf("%d keys left held", n)
	}
}

// Under contention on shared addresses no two holders of one address ever
// overlap, whatever the order of the keys each asks for (no deadlock).
func TestAddrLocksMutualExclusion(t *testing.T) {
	l := &addrLocks{}
	pool := addrs("10.0.0.1", "10.0.0.2", "10.0.0.3", "2001:db8::1", "2001:db8::2", "2001:db8:0:1::1")
	inside := map[netip.Addr]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 200 {
				var mine []netip.Addr
				for _, a := range pool {
					if r.IntN(3) == 0 {
						mine = append(mine, a)
					}
				}
				r.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
				unlock := l.lock(mine)
				mu.Lock()
				for _, a := range mine {
					if inside[a]++; inside[a] > 1 {
						t.Errorf("%v held twice at once", a)
					}
				}
				mu.Unlock()
				mu.Lock()
				for _, a := range mine {
					inside[a]--
				}
				mu.Unlock()
				unlock()
			}
		})
	}
	wg.Wait()
	if n := l.size(); n != 0 {
		t.Errorf("%d keys left held", n)
	}
}
