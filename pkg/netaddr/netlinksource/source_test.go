package netlinksource_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr/netlinksource"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr/netnstest"
)

// watcher follows a namespace's addresses through Source.Watch.
type watcher struct {
	t       *testing.T
	updates <-chan []netaddr.Address
	c       netaddr.Classifier
	last    []netaddr.Address
}

func watch(t *testing.T, ns *netnstest.NS, extraExcluded ...string) *watcher {
	t.Helper()
	src, err := netlinksource.Open(ns.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &watcher{t: t, updates: src.Watch(ctx, 50*time.Millisecond), c: netaddr.NewClassifier(extraExcluded...)}
}

// until waits for the classified state to satisfy cond and returns how long it took.
func (w *watcher) until(what string, cond func(ips []netip.Addr, prefixes []netip.Prefix) bool) time.Duration {
	w.t.Helper()
	start := time.Now()
	deadline := time.After(5 * time.Second)
	for {
		if w.last != nil && cond(w.c.ExternalIPs(w.last), w.c.GlobalPrefixes(w.last)) {
			return time.Since(start)
		}
		select {
		case a, ok := <-w.updates:
			if !ok {
				w.t.Fatal("watch closed")
			}
			w.last = a
		case <-deadline:
			w.t.Fatalf("timed out waiting for %s; external %v prefixes %v", what, w.c.ExternalIPs(w.last), w.c.GlobalPrefixes(w.last))
		}
	}
}

func ips(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, x := range s {
		out = append(out, netip.MustParseAddr(x))
	}
	return out
}

func prefixes(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

func TestAddAndRemoveAddresses(t *testing.T) {
	ns := netnstest.New(t)
	ns.AddIFB("eth0")
	w := watch(t, ns)
	w.until("an empty start", func(i []netip.Addr, p []netip.Prefix) bool { return len(i) == 0 })

	ns.AddAddr("eth0", "203.0.113.5/24")
	ns.AddAddr("eth0", "2001:db8:1:2::5/64", "nodad")
	ns.AddAddr("eth0", "10.0.0.5/24")
	took := w.until("both addresses", func(i []netip.Addr, p []netip.Prefix) bool {
		return slices.Equal(i, ips("203.0.113.5", "2001:db8:1:2::5")) && slices.Equal(p, prefixes("2001:db8:1:2::/64"))
	})
	t.Logf("address add seen after %s", took)

	ns.DelAddr("eth0", "2001:db8:1:2::5/64")
	took = w.until("the IPv6 address gone", func(i []netip.Addr, p []netip.Prefix) bool {
		return slices.Equal(i, ips("203.0.113.5")) && len(p) == 0
	})
	t.Logf("address removal seen after %s", took)
	ns.DelAddr("eth0", "203.0.113.5/24")
	w.until("no external address", func(i []netip.Addr, p []netip.Prefix) bool { return len(i) == 0 })
}

func TestTentativeBecomesValid(t *testing.T) {
	ns := netnstest.New(t)
	ns.AddVeth("eth0", "peer0")
	w := watch(t, ns)
	ns.AddAddr("eth0", "2001:db8:9::1/64") // with DAD: tentative for about a second
	sawTentative := false
	for !sawTentative {
		select {
		case a := <-w.updates:
			w.last = a
			for _, x := range a {
				if x.Prefix.Addr() == netip.MustParseAddr("2001:db8:9::1") && x.Tentative {
					sawTentative = true
					if got := w.c.ExternalIPs(a); len(got) != 0 {
						t.Fatalf("a tentative address was classified external: %v", got)
					}
				}
			}
		case <-time.After(3 * time.Second):
			t.Fatal("never saw the address as tentative")
		}
	}
	took := w.until("DAD to finish", func(i []netip.Addr, p []netip.Prefix) bool {
		return slices.Equal(i, ips("2001:db8:9::1")) && slices.Equal(p, prefixes("2001:db8:9::/64"))
	})
	t.Logf("tentative → valid after %s", took)
}

func TestLinkDown(t *testing.T) {
	ns := netnstest.New(t)
	ns.AddIFB("eth0")
	ns.AddIFB("eth1")
	ns.AddAddr("eth0", "203.0.113.5/24")
	ns.AddAddr("eth1", "198.51.100.5/24")
	w := watch(t, ns)
	w.until("both links", func(i []netip.Addr, p []netip.Prefix) bool { return len(i) == 2 })
	ns.SetLink("eth0", false)
	took := w.until("eth0's address to drop out", func(i []netip.Addr, p []netip.Prefix) bool {
		return slices.Equal(i, ips("198.51.100.5"))
	})
	t.Logf("link down seen after %s", took)
	ns.SetLink("eth0", true)
	w.until("eth0 back", func(i []netip.Addr, p []netip.Prefix) bool { return len(i) == 2 })
}

func TestSeveralLinksAndExclusions(t *testing.T) {
	ns := netnstest.New(t)
	for _, l := range []string{"eth0", "eth1", "cilium_host", "flannel1", "mgmt0"} {
		ns.AddIFB(l)
	}
	ns.AddAddr("eth0", "203.0.113.5/24")
	ns.AddAddr("eth1", "2001:db8:1::1/64", "nodad")
	ns.AddAddr("cilium_host", "192.0.2.10/32")
	ns.AddAddr("flannel1", "2001:db8:ff::1/64", "nodad")
	ns.AddAddr("mgmt0", "198.51.100.9/24")
	w := watch(t, ns, "mgmt*")
	w.until("only real links", func(i []netip.Addr, p []netip.Prefix) bool {
		return slices.Equal(i, ips("203.0.113.5", "2001:db8:1::1")) && slices.Equal(p, prefixes("2001:db8:1::/64"))
	})
}

func TestSlash128Only(t *testing.T) {
	ns := netnstest.New(t)
	ns.AddIFB("eth0")
	ns.AddAddr("eth0", "2001:db8:7::7/128", "nodad")
	w := watch(t, ns)
	w.until("the /128 as an IP without a prefix", func(i []netip.Addr, p []netip.Prefix) bool {
		return slices.Equal(i, ips("2001:db8:7::7")) && len(p) == 0
	})
}

func TestTwoGlobalPrefixes(t *testing.T) {
	ns := netnstest.New(t)
	ns.AddIFB("eth0")
	ns.AddAddr("eth0", "2001:db8:a::1/64", "nodad")
	ns.AddAddr("eth0", "2001:db8:b:100::1/56", "nodad")
	w := watch(t, ns)
	w.until("two prefixes", func(i []netip.Addr, p []netip.Prefix) bool {
		return slices.Equal(p, prefixes("2001:db8:a::/64", "2001:db8:b:100::/56"))
	})
}

func TestOpenMissingNamespace(t *testing.T) {
	if _, err := netlinksource.Open("/var/run/netns/does-not-exist"); err == nil {
		t.Fatal("opened a namespace that does not exist")
	}
}

// A netlink subscription that keeps failing is reported, and the
// addresses are still followed, by listing at every retry. Before, the
// failure was dropped (`_ = err`) and nothing was ever sent.
func TestBrokenSubscriptionIsReportedAndPolled(t *testing.T) {
	ns := netnstest.New(t)
	ns.AddIFB("eth0")
	ns.AddAddr("eth0", "203.0.113.5/24")
	src, err := netlinksource.Open(ns.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	netlinksource.BreakSubscriptions(src)
	reported := make(chan error, 100)
	src.OnWatchError = func(err error) {
		select {
		case reported <- err:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &watcher{t: t, updates: src.Watch(ctx, 50*time.Millisecond), c: netaddr.NewClassifier()}
	w.until("the address, listed without a subscription", func(i []netip.Addr, p []netip.Prefix) bool { return slices.Equal(i, ips("203.0.113.5")) })
	select {
	case err := <-reported:
		if err == nil || !strings.Contains(err.Error(), "subscription refused") {
			t.Errorf("reported %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the broken subscription was never reported")
	}
	ns.AddAddr("eth0", "198.51.100.7/24")
	took := w.until("a new address, by polling", func(i []netip.Addr, p []netip.Prefix) bool {
		return slices.Equal(i, ips("198.51.100.7", "203.0.113.5"))
	})
	t.Logf("seen by polling after %s", took)
}
