package records

import (
	"fmt"
	"net/netip"
	"path"
	"slices"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
)

// ClaimPolicy bounds what a Node's report can make the coordinator record.
type ClaimPolicy struct {
	// Networks are the admin-declared node networks; Reserved the ranges no
	// Node address may be (service CIDRs, pod pools, the API server).
	Networks []netip.Prefix
	Reserved []csrcheck.Reserved
	// Max caps a Node's recorded addresses.
	Max int
	// Node is the Node the claims are for, and Inventory the admin's
	// bindings of node names to networks: an address inside a bound
	// network is recorded only for a Node whose name the binding lists,
	// whoever listed it first.
	Node      string
	Inventory []Binding
}

// Binding gives the addresses of Networks to the Nodes whose names match
// one of Names (path.Match patterns: "web-*", "cp-[0-9]").
type Binding struct {
	Names    []string
	Networks []netip.Prefix
}

// Bound is the inventory invariant: an address inside a network the
// inventory binds belongs only to Nodes whose name that binding lists
// (when several bindings hold it, any one of them may list the Node); an
// address no binding holds goes to its first claimant. It returns why
// node may not hold ip, or nil.
func Bound(inventory []Binding, node string, ip netip.Addr) error {
	var bound []string
	for _, b := range inventory {
		if !slices.ContainsFunc(b.Networks, func(n netip.Prefix) bool { return n.Contains(ip) }) {
			continue
		}
		for _, pat := range b.Names {
			if ok, _ := path.Match(pat, node); ok {
				return nil
			}
		}
		bound = append(bound, b.Names...)
	}
	if bound == nil {
		return nil
	}
	return fmt.Errorf("%s is in the inventory for Nodes %v, not this one", ip, bound)
}

// Holding is something another Node's record holds near a prefix: the
// node prefix it carves from (Prefix), or an address it claimed (Addr)
// and since when.
type Holding struct {
	Node   string
	Prefix netip.Prefix
	Addr   netip.Addr
	Since  time.Time
}

// PrefixHolder is the prefix invariant: a node prefix is carved for at
// most one Node, and never around an address recorded for another. The
// unit of ownership is the prefix, or the /64 holding a longer one. It
// returns the Node that holds p against node ("" when node may carve from
// it): one whose record carves from a prefix whose unit overlaps p's, or
// else the one with the earliest recorded address in p's unit (first claim wins,
// then the name, as for addresses), given that node's own earliest
// address inside p was recorded at mine (zero: it has none there, and
// any other claimant wins). near is what other records hold
// around p (the Node's own entries are ignored). Prefixes inside shared
// (the admin's ipam.sharedPrefixes) are carved by every Node in them.
func PrefixHolder(node string, p netip.Prefix, mine time.Time, near []Holding, shared []netip.Prefix) string {
	if slices.ContainsFunc(shared, func(s netip.Prefix) bool { return s.Bits() <= p.Bits() && s.Contains(p.Addr()) }) {
		return ""
	}
	region := unit(p)
	holder, at := "", time.Time{}
	for _, h := range near {
		switch {
		case h.Node == node:
		case h.Prefix.IsValid() && unit(h.Prefix).Overlaps(region):
			return h.Node
		case h.Addr.IsValid() && region.Contains(h.Addr):
			if holder == "" || h.Since.Before(at) || h.Since.Equal(at) && h.Node < holder {
				holder, at = h.Node, h.Since
			}
		}
	}
	if holder != "" && (mine.IsZero() || at.Before(mine) || at.Equal(mine) && holder < node) {
		return holder
	}
	return ""
}

// NodePrefix is what a Node's record says about node prefixes after a
// sync that wants a pod segment from set (the prefix ipam.SegmentFor
// carves from): prefix is the one it holds afterwards (held before), and
// holder the other Node that holds set against it ("" when it may carve).
// A prefix inside shared is never recorded. A Node with pod CIDRs
// (existing) keeps what it holds, and takes set only when its pod CIDR lies
// in it and nobody else holds it (a record from before prefixes were kept).
func NodePrefix(node string, set netip.Prefix, claims []Claim, held string, near []Holding, shared []netip.Prefix, existing []netip.Prefix) (prefix, holder string) {
	if held == set.String() {
		return held, ""
	}
	mine := time.Time{}
	for _, cl := range claims {
		if ip, err := netip.ParseAddr(cl.IP); err == nil && set.Contains(ip) && (mine.IsZero() || cl.Since.Before(mine)) {
			mine = cl.Since
		}
	}
	if holder = PrefixHolder(node, set, mine, near, shared); holder != "" {
		return held, holder
	}
	if slices.ContainsFunc(shared, func(s netip.Prefix) bool { return s.Bits() <= set.Bits() && s.Contains(set.Addr()) }) {
		return held, ""
	}
	if len(existing) > 0 && !slices.ContainsFunc(existing, func(p netip.Prefix) bool { return set.Contains(p.Addr()) }) {
		return held, "" // its pod CIDR is not from this prefix
	}
	return set.String(), ""
}

// InPrefix returns the Node whose carved prefix holds ip, other than node
// ("" when none): an address there is that Node's alone, never recorded
// for another.
func InPrefix(node string, ip netip.Addr, near []Holding) string {
	for _, h := range near {
		if h.Node != node && h.Prefix.IsValid() && unit(h.Prefix).Contains(ip) {
			return h.Node
		}
	}
	return ""
}

// unit is what one Node owns when it carves from p: the whole /64 for a
// longer prefix (so that no one takes a /96 of a /64 another Node claimed
// first, or claims an address beside a carved /96), p itself otherwise.
func unit(p netip.Prefix) netip.Prefix {
	if p.Bits() > 64 {
		u, _ := p.Addr().Prefix(64)
		return u
	}
	return p.Masked()
}

// NextClaims is a Node's recorded addresses after the coordinator saw it
// report current: claims it still reports keep their time, withdrawn ones
// are released, and new ones are recorded only when certifiable at all,
// held by no other record (others), and under the cap. A new claim dates
// from firstSeen (when the coordinator first saw the Node list it, and
// has seen it listed since), never later than now: no other Node held or
// listed it before, or others would name that Node. refused says why each
// address was not recorded.
func NextClaims(prev []Claim, current []netip.Addr, others map[netip.Addr]string, firstSeen map[netip.Addr]time.Time, pol ClaimPolicy, now time.Time) (next []Claim, refused []string) {
	have := map[netip.Addr]bool{}
	for _, c := range prev {
		ip, err := netip.ParseAddr(c.IP)
		if err != nil || !slices.Contains(current, ip) || have[ip] || len(next) >= pol.Max {
			continue
		}
		if err := Bound(pol.Inventory, pol.Node, ip); err != nil {
			// An inventory added since: the binding wins over the claim.
			have[ip] = true
			refused = append(refused, err.Error())
			continue
		}
		have[ip] = true
		next = append(next, c)
	}
	for _, ip := range current {
		ip = ip.Unmap()
		if have[ip] {
			continue
		}
		have[ip] = true
		if err := csrcheck.Certifiable(ip, pol.Networks, pol.Reserved); err != nil {
			refused = append(refused, err.Error())
			continue
		}
		if err := Bound(pol.Inventory, pol.Node, ip); err != nil {
			refused = append(refused, err.Error())
			continue
		}
		if owner := others[ip]; owner != "" {
			refused = append(refused, fmt.Sprintf("%s is Node %s's (recorded for it first, or inside its node prefix)", ip, owner))
			continue
		}
		if len(next) >= pol.Max {
			refused = append(refused, fmt.Sprintf("%s: the Node already has %d recorded addresses (the limit)", ip, pol.Max))
			continue
		}
		since := now
		if t, ok := firstSeen[ip]; ok && t.Before(now) {
			since = t
		}
		next = append(next, Claim{IP: ip.String(), Since: since.UTC()})
	}
	return next, refused
}

// ClaimedIPs parses a record's addresses.
func ClaimedIPs(claims []Claim) []netip.Addr {
	var ips []netip.Addr
	for _, c := range claims {
		if ip, err := netip.ParseAddr(c.IP); err == nil {
			ips = append(ips, ip)
		}
	}
	return ips
}
