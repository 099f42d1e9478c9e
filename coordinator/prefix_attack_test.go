package main

import (
	"crypto/ed25519"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// prefixConfig is the attacked cluster's configuration for node prefixes:
// 2001:db8:f0::/44 is the one network whose node prefixes go to their first
// claimant (the admin's opt-in); elsewhere only the inventory gives one.
const prefixConfig = `
clusterName: prod
nodeNetworks: [10.0.0.0/8, "2001:db8::/32"]
ipam:
  families: [ipv4, ipv6] # IPv6 only from nodes' own prefixes (no ipv6Pool)
  ipv4Pool: 10.244.0.0/16
  serviceCIDRs: [10.96.0.0/16]
  firstClaimPrefixes: ["2001:db8:f0::/44"]
  sharedPrefixes: ["2001:db8:66:6::/64"]
csr:
  attestationTimeout: 20s
  minAddressAge: 1s
inventory:
- nodes: [future-1]
  networks: ["2001:db8:12:1::/64"]
- nodes: [tiny-1]
  networks: ["2001:db8:f3:1::/112"]
- nodes: [wide-1]
  networks: [10.0.40.0/24]
- nodes: [narrow-1]
  networks: [10.0.40.7/32]
- nodes: [wide48-*]
  networks: ["2001:db8:48::/48"]
- nodes: [n56]
  networks: ["2001:db8:48:5600::/56"]
`

// startPrefixCoordinator runs the real coordinator binary with cfg (and
// extra appended to it), and waits until it leads.
func startPrefixCoordinator(t *testing.T, id, extra string) *proc {
	t.Helper()
	kc := coordinatorKubeconfig(t, "coordinator-"+id)
	cfg := filepath.Join(t.TempDir(), "coordinator.yaml")
	if err := os.WriteFile(cfg, []byte(prefixConfig+extra), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, id, kc, cfg)
	stop := func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM) // the lease is released
			_ = p.cmd.Wait()
		}
	}
	t.Cleanup(stop)
	until(t, 30*time.Second, id+" leads", func() bool { return holder(t, adminClient()) == id })
	leader = p
	return p
}

// registered is a node whose kubelet registered with an IPv4 and an IPv6
// address and whose agent reported prefix, but not yet its key: it waits
// to be initialized.
func registered(t *testing.T, name, ip4, ip6, prefix string) *actor {
	t.Helper()
	a := newActor(t, name, ip4, true)
	a.status(internal(ip4), internal(ip6), hostname(name))
	prefixes, err := contract.EncodePrefixes([]netip.Prefix{netip.MustParsePrefix(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	a.annotate(map[string]string{contract.AnnotationPrefixes: prefixes})
	return a
}

// The node-prefix class (SECURITY.md class 3) and the inventory (class 8),
// tried as issue 48 found them, with variants, through real node
// identities against the real coordinator binary. The attacker holds an
// agent key of its own (a node it joined with the bootstrap token).
func TestPrefixAttacks(t *testing.T) {
	p := startPrefixCoordinator(t, "prefixes", "")
	// A leader change: the running coordinator stops (its lease released)
	// and another, of this test's lifetime, leads with extra inventory.
	top := t
	restart := func(id, extra string) {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Wait()
		p = startPrefixCoordinator(top, id, extra)
	}

	// Shape 1: the victim registered and lists its own address in its /64,
	// not yet initialized; the attacker reports an address there and the
	// /64 as its own. Outside first-claim networks a listing gives nobody
	// a prefix; inside one, the victim listed first and carves.
	t.Run("a prefix goes to the node that has it, not to the first reporter", func(t *testing.T) {
		for i, c := range []struct{ net, victimIP, attackerIP, prefix, attackerPrefix string }{
			{"default", "2001:db8:11:1::10", "2001:db8:11:1:7::99", "2001:db8:11:1::/64", ""},
			{"first claim", "2001:db8:f1:1::10", "2001:db8:f1:1:7::99", "2001:db8:f1:1::/64", ""},
			{"first claim, a /96 reported", "2001:db8:f1:2::10", "2001:db8:f1:2::7:99", "2001:db8:f1:2::/96", ""},
			// The attacker's /96 holds none of the victim's addresses, but
			// its /64, the unit of ownership, does (from a review).
			{"first claim, the attacker's /96 beside the victim's address", "2001:db8:f1:3::10", "2001:db8:f1:3:ffff::5", "2001:db8:f1:3::/64", "2001:db8:f1:3:ffff::/96"},
		} {
			if c.attackerPrefix == "" {
				c.attackerPrefix = c.prefix
			}
			octet := byte(1 + i)
			victim := registered(t, "s1-victim-"+string(rune('a'+i)), netip.AddrFrom4([4]byte{10, 0, 41, octet}).String(), c.victimIP, c.prefix)
			attacker := v6Join(t, victim.name+"-attacker", netip.AddrFrom4([4]byte{10, 0, 42, octet}).String(), c.attackerIP, c.attackerPrefix)
			unit, _ := netip.MustParseAddr(c.victimIP).Prefix(64)
			if got, ok := v6PodCIDROk(t, attacker.name); ok && unit.Overlaps(got) {
				t.Fatalf("%s: the attacker got %s from the victim's /64", c.net, got)
			}
			victim.report(nil, victim.key.Public().(ed25519.PublicKey))
			until(t, 20*time.Second, victim.name+" initialized", func() bool { return !contract.Uninitialized(getNode(t, victim.name)) })
			got, ok := v6PodCIDROk(t, victim.name)
			switch {
			case c.net == "default" && ok:
				t.Fatalf("default: the victim carved %s from a /64 no inventory gives it", got)
			case c.net == "default":
				t.Logf("default: nobody carves; on the victim: %s", eventWith(t, victim.name, "PrefixNotEntitled"))
			case !ok || !unit.Overlaps(got):
				t.Fatalf("%s: the victim, first to list an address in its /64, got %v", c.net, getNode(t, victim.name).Spec.PodCIDRs)
			default:
				t.Logf("%s: the victim carves %s; on the attacker: %s", c.net, got, eventWith(t, attacker.name, "PrefixHeldByOtherNode"))
			}
		}
	})

	// Shape 2: the attacker reports the /64 of a machine that joins later.
	// Not bound to it, the /64 gives it nothing; the machine it is bound to
	// joins with a low address and is certified for it. In a first-claim
	// network the first claimant carves from the top down, never over the
	// low addresses hosts use.
	t.Run("a future node's address", func(t *testing.T) {
		early := v6Join(t, "s2-early", "10.0.43.1", "2001:db8:12:1:abcd::1", "2001:db8:12:1::/64")
		if got, ok := v6PodCIDROk(t, early.name); ok {
			t.Fatalf("the early reporter got %s", got)
		}
		future := v6Join(t, "future-1", "10.0.43.2", "2001:db8:12:1::10", "2001:db8:12:1::/64")
		got := v6PodCIDR(t, future.name)
		if got.Contains(netip.MustParseAddr("2001:db8:12:1::10")) || got.Contains(netip.MustParseAddr("2001:db8:12:1::1")) {
			t.Fatalf("future-1's own segment %s holds the low end", got)
		}
		future.certified("future-1-serving", []string{"future-1"}, "2001:db8:12:1::10")

		fc := v6Join(t, "s2-firstclaim", "10.0.43.3", "2001:db8:f2:1:abcd::1", "2001:db8:f2:1::/64")
		seg := v6PodCIDR(t, fc.name)
		for _, low := range []string{"2001:db8:f2:1::1", "2001:db8:f2:1::10", "2001:db8:f2:1::ffff", "2001:db8:f2:1:0:1::1"} {
			if seg.Contains(netip.MustParseAddr(low)) {
				t.Fatalf("the first claimant's segment %s holds the low address %s", seg, low)
			}
		}
		t.Logf("first claim carves %s", seg)
	})

	// Shape 3: a /112 bound to one Node inside a /64 another carves from.
	// The carve avoids every range the inventory binds to others, whatever
	// its size, and the bound Node is certified for its address.
	t.Run("a binding narrower than the unit of carving", func(t *testing.T) {
		for i, own := range []string{"2001:db8:f3:1:1::9", "2001:db8:f3:1:ffff::9"} {
			name := []string{"s3-carver", "s3-carver-top"}[i]
			if i == 1 {
				deleteNode(t, "s3-carver")
			}
			carver := v6Join(t, name, netip.AddrFrom4([4]byte{10, 0, 44, byte(1 + i)}).String(), own, "2001:db8:f3:1::/64")
			seg := v6PodCIDR(t, carver.name)
			if seg.Overlaps(netip.MustParsePrefix("2001:db8:f3:1::/112")) {
				t.Fatalf("%s's segment %s overlaps tiny-1's /112", name, seg)
			}
		}
		tiny := v6Join(t, "tiny-1", "10.0.44.9", "2001:db8:f3:1::5", "2001:db8:f3:1::/64")
		tiny.certified("tiny-1-serving", []string{"tiny-1"}, "2001:db8:f3:1::5")
	})

	// Shape 4: overlapping bindings, the most specific wins. wide-1's /24
	// holds narrow-1's /32: wide-1 is never certified for it, listed
	// first or not; narrow-1 is.
	t.Run("overlapping bindings: the most specific wins", func(t *testing.T) {
		wide := newActor(t, "wide-1", "10.0.40.5", true)
		wide.status(internal("10.0.40.5"), internal("10.0.40.7"), hostname("wide-1"))
		wide.report(nil, wide.key.Public().(ed25519.PublicKey))
		until(t, 20*time.Second, "wide-1 initialized", func() bool { return !contract.Uninitialized(getNode(t, "wide-1")) })
		wide.csr("wide-1-narrows", []string{"wide-1"}, "10.0.40.5", "10.0.40.7")
		wide.attest("wide-1-narrows", wide.key)
		if why := refused(t, "wide-1-narrows"); !strings.Contains(why, "10.0.40.7") {
			t.Fatalf("wide-1-narrows: %s; want it refused for narrow-1's address", why)
		} else {
			t.Logf("wide-1-narrows: %s", why)
		}
		wide.certified("wide-1-own", []string{"wide-1"}, "10.0.40.5")
		narrow := honestJoin(t, "narrow-1", "10.0.40.7", nil)
		narrow.certified("narrow-1-serving", []string{"narrow-1"}, "10.0.40.7")
	})

	// In a shared prefix (one link, many nodes), a later Node's address
	// inside an existing segment: that Node carves elsewhere, its CSR naming
	// the address is denied with the fix, never left waiting, and the
	// Node carries an Event naming the holder.
	t.Run("a later address inside a shared prefix's segment", func(t *testing.T) {
		first := v6Join(t, "sh-first", "10.0.46.1", "2001:db8:66:6::1", "2001:db8:66:6::/64")
		seg := v6PodCIDR(t, first.name)
		inSeg := seg.Addr().Next().String()
		later := v6Join(t, "sh-later", "10.0.46.2", inSeg, "2001:db8:66:6::/64")
		if got := v6PodCIDR(t, later.name); got.Overlaps(seg) || got.Contains(netip.MustParseAddr(inSeg)) {
			t.Fatalf("sh-later got %s beside sh-first's %s", got, seg)
		}
		t.Logf("on sh-later: %s", eventWith(t, later.name, "AddressInOtherPodCIDR"))
		later.csr("sh-later-serving", []string{"sh-later"}, "10.0.46.2", inSeg)
		later.attest("sh-later-serving", later.key)
		if why := refused(t, "sh-later-serving"); !strings.HasPrefix(why, "denied") || !strings.Contains(why, "kubectl delete node sh-first") {
			t.Fatalf("sh-later-serving: %s; want it denied with the fix", why)
		}
		later.certified("sh-later-v4", []string{"sh-later"}, "10.0.46.2")
	})

	// Nested bindings of a /48 and a /56, and a leader change between the
	// listing and the carve: the Node the /56 names carves from the /64
	// holding its address, after the new leader took over; a Node the /48
	// names, listing an address inside the /56, gets nothing there.
	t.Run("a /48 and a /56, and a leader change before the carve", func(t *testing.T) {
		n56 := registered(t, "n56", "10.0.47.1", "2001:db8:48:5601::10", "2001:db8:48:5600::/56")
		intruder := v6Join(t, "wide48-1", "10.0.47.2", "2001:db8:48:5601::99", "2001:db8:48:5601::/64")
		if got, ok := v6PodCIDROk(t, intruder.name); ok && netip.MustParsePrefix("2001:db8:48:5600::/56").Overlaps(got) {
			t.Fatalf("wide48-1 carved %s inside the /56 bound to n56", got)
		}
		restart("prefixes-next", "")
		n56.report(nil, n56.key.Public().(ed25519.PublicKey))
		until(t, 20*time.Second, "n56 initialized", func() bool { return !contract.Uninitialized(getNode(t, "n56")) })
		got := v6PodCIDR(t, "n56")
		if !netip.MustParsePrefix("2001:db8:48:5601::/64").Overlaps(got) || got.Contains(netip.MustParseAddr("2001:db8:48:5601::99")) {
			t.Fatalf("n56 got %s: want a segment of its /64 holding none of the listed addresses", got)
		}
		wideOwn := v6Join(t, "wide48-2", "10.0.47.3", "2001:db8:48:7::10", "2001:db8:48:7::/64")
		if got := v6PodCIDR(t, wideOwn.name); !netip.MustParsePrefix("2001:db8:48:7::/64").Overlaps(got) {
			t.Fatalf("wide48-2 got %s outside its own bound /64", got)
		}
	})

	// Shape 5: a binding added after a carve. The carve stands (pod CIDRs
	// never change), the conflict is reported on both Nodes with the
	// command that resolves it, and no certificate is issued for the
	// contested address meanwhile. The entitled Node still carves its own
	// segment from its /64.
	t.Run("a binding added after a carve", func(t *testing.T) {
		carver := v6Join(t, "s5-carver", "10.0.45.1", "2001:db8:f5:1:abcd::1", "2001:db8:f5:1::/64")
		seg := v6PodCIDR(t, carver.name)
		restart("prefixes-rebound", `- nodes: [s5-owner]
  networks: ["2001:db8:f5:1::/64"]
`)
		t.Logf("on the carver: %s", eventWith(t, carver.name, "PodCIDRInBoundNetwork"))
		inSeg := seg.Addr().Next().String()
		owner := v6Join(t, "s5-owner", "10.0.45.2", inSeg, "2001:db8:f5:1::/64")
		ev := eventWith(t, owner.name, "AddressInOtherPodCIDR")
		if !strings.Contains(ev, "s5-carver") || !strings.Contains(ev, "kubectl delete node s5-carver") {
			t.Fatalf("the owner's Event does not name the holder and the fix: %s", ev)
		}
		owner.csr("s5-owner-serving", []string{"s5-owner"}, "10.0.45.2", inSeg)
		owner.attest("s5-owner-serving", owner.key)
		if c, _ := csrCondition(t, "s5-owner-serving"); c.Type == certificatesv1.CertificateApproved {
			t.Fatal("an address inside another Node's pod CIDR was certified")
		}
		t.Logf("s5-owner-serving: %s", refused(t, "s5-owner-serving"))
		carver.csr("s5-carver-serving", []string{"s5-carver"}, "10.0.45.1", "2001:db8:f5:1:abcd::1")
		carver.attest("s5-carver-serving", carver.key)
		if c, _ := csrCondition(t, "s5-carver-serving"); c.Type == certificatesv1.CertificateApproved {
			t.Fatal("the carver was certified for an address the inventory now binds to another Node")
		}
		t.Logf("s5-carver-serving: %s", refused(t, "s5-carver-serving"))
		if got, ok := v6PodCIDROk(t, owner.name); !ok || got.Overlaps(seg) || !netip.MustParsePrefix("2001:db8:f5:1::/64").Overlaps(got) {
			t.Fatalf("the entitled owner's pod CIDRs: %v", getNode(t, owner.name).Spec.PodCIDRs)
		}
		if slices.Contains(getNode(t, carver.name).Spec.PodCIDRs, seg.String()) == false {
			t.Fatalf("the carve was taken back: %v", getNode(t, carver.name).Spec.PodCIDRs)
		}
	})
}
