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
	// Node is the Node the claims are for; Inventory binds networks to node names (Bound).
	Node      string
	Inventory []Binding
}

// Binding gives the addresses of Networks to the Nodes whose names match
// one of Names (path.Match patterns: "web-*", "cp-[0-9]").
type Binding struct {
	Names    []string
	Networks []netip.Prefix
}

// Bound is the inventory invariant: an address in a bound network belongs only to Nodes listed by
// the most specific binding holding it (of two bindings of one network, either); an address no
// binding holds goes to its first claimant. It returns why node may not hold ip, or nil.
func Bound(inventory []Binding, node string, ip netip.Addr) error {
	names, ok := boundTo(inventory, netip.PrefixFrom(ip, ip.BitLen()))
	if !ok || Names(names, node) {
		return nil
	}
	return fmt.Errorf("%s is in the inventory for Nodes %v, not this one", ip, names)
}

// boundTo is the names listed by the most specific bindings holding all of r; ok is false when
// no binding holds r.
func boundTo(inventory []Binding, r netip.Prefix) (names []string, ok bool) {
	best := -1
	for _, b := range inventory {
		for _, n := range b.Networks {
			if n.Bits() > r.Bits() || !n.Contains(r.Addr()) || n.Bits() < best {
				continue
			}
			if n.Bits() > best {
				best, names = n.Bits(), nil
			}
			names = append(names, b.Names...)
		}
	}
	return names, best >= 0
}

// Names reports whether one of the path.Match patterns matches node.
func Names(patterns []string, node string) bool {
	return slices.ContainsFunc(patterns, func(pat string) bool { ok, _ := path.Match(pat, node); return ok })
}

// BoundElsewhere are the parts of r the inventory gives to Nodes other than node: r itself when
// its most specific binding does not list node, else each bound network inside r whose own does
// not. No segment carved for node from r may overlap one, whatever its size.
func BoundElsewhere(inventory []Binding, node string, r netip.Prefix) []netip.Prefix {
	r = r.Masked()
	if names, ok := boundTo(inventory, r); ok && !Names(names, node) {
		return []netip.Prefix{r}
	}
	var out []netip.Prefix
	for _, b := range inventory {
		for _, n := range b.Networks {
			n = n.Masked()
			if n.Bits() <= r.Bits() || !r.Contains(n.Addr()) || slices.Contains(out, n) {
				continue
			}
			if names, _ := boundTo(inventory, n); !Names(names, node) {
				out = append(out, n)
			}
		}
	}
	return out
}

// Holding is something another Node's record holds near a prefix: the node prefix it carves
// from (Prefix), or an address it claimed (Addr) and since when.
type Holding struct {
	Node   string
	Prefix netip.Prefix
	Addr   netip.Addr
	Since  time.Time
}

// PrefixRules are the admin's choices of who may carve pod segments from which node prefixes.
type PrefixRules struct {
	// Inventory binds networks to Node names.
	Inventory []Binding
	// FirstClaim networks' node prefixes go to the first Node to list an address in them
	// (ipam.firstClaimPrefixes): the admin's opt-in to trust on first use.
	FirstClaim []netip.Prefix
	// Shared are the networks every Node in them carves from (ipam.sharedPrefixes).
	Shared []netip.Prefix
}

// Entitled is the first half of the prefix invariant: node may carve from set only when set lies
// in a shared prefix (shared), or the most specific binding holding set's unit lists node, or no
// binding holds it and it lies in a first-claim network. why says what refuses it, "" if nothing.
func (r PrefixRules) Entitled(node string, set netip.Prefix) (shared bool, why string) {
	if within(r.Shared, set) {
		return true, ""
	}
	u := unit(set)
	if names, ok := boundTo(r.Inventory, u); ok {
		if Names(names, node) {
			return false, ""
		}
		return false, fmt.Sprintf("node prefix %s is in the inventory for Nodes %v, not this one", u, names)
	}
	if within(r.FirstClaim, u) {
		return false, ""
	}
	return false, fmt.Sprintf("node prefix %s is bound to no Node in the coordinator's inventory and lies in no ipam.firstClaimPrefixes network: pod segments are carved only from a prefix the admin gave this Node (add it to inventory with this Node's name)", u)
}

// within reports whether p lies inside one of nets.
func within(nets []netip.Prefix, p netip.Prefix) bool {
	return slices.ContainsFunc(nets, func(n netip.Prefix) bool { return n.Bits() <= p.Bits() && n.Contains(p.Addr()) })
}

// PrefixHolder is the second half of the prefix invariant: a node prefix's unit (the prefix, or
// the /64 holding a longer one) is carved for at most one entitled Node, never around another's
// address. It returns who holds p against node, "" if none: an entitled Node whose carved prefix
// overlaps p's unit, else the one with the earliest address there, unless mine (node's own
// earliest; zero: none) is earlier; ties go by name. near is what others hold or list around p;
// a Node not entitled to p, or holding an address the inventory gives to others, holds nothing.
func (r PrefixRules) PrefixHolder(node string, p netip.Prefix, mine time.Time, near []Holding) string {
	region := unit(p)
	holder, at := "", time.Time{}
	for _, h := range near {
		if h.Node == node {
			continue
		}
		if _, why := r.Entitled(h.Node, p); why != "" {
			continue
		}
		switch {
		case h.Prefix.IsValid() && unit(h.Prefix).Overlaps(region):
			return h.Node
		case h.Addr.IsValid() && region.Contains(h.Addr) && Bound(r.Inventory, h.Node, h.Addr) == nil:
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

// NodePrefix is the prefix a Node's record holds after a sync that wants a segment from set
// (ipam.SegmentFor's), held before; holder is who holds set against it, or why says it is not
// entitled. Shared prefixes are never recorded. A Node with pod CIDRs (existing) takes set only
// when one lies in it and nobody holds it (a record from before prefixes were kept).
func (r PrefixRules) NodePrefix(node string, set netip.Prefix, mine time.Time, held string, near []Holding, existing []netip.Prefix) (prefix, holder, why string) {
	shared, why := r.Entitled(node, set)
	switch {
	case why != "":
		return held, "", why
	case held == set.String() || shared:
		return held, "", ""
	}
	if holder = r.PrefixHolder(node, set, mine, near); holder != "" {
		return held, holder, ""
	}
	if len(existing) > 0 && !slices.ContainsFunc(existing, func(p netip.Prefix) bool { return set.Contains(p.Addr()) }) {
		return held, "", "" // its pod CIDR is not from this prefix
	}
	return set.String(), "", ""
}

// Earliest is when node's earliest address inside set was first seen, from its claims' dates
// and firstSeen for unrecorded ones; zero when it has none there.
func Earliest(set netip.Prefix, claims []Claim, firstSeen map[netip.Addr]time.Time) time.Time {
	mine := time.Time{}
	earlier := func(t time.Time) {
		if !t.IsZero() && (mine.IsZero() || t.Before(mine)) {
			mine = t
		}
	}
	for _, cl := range claims {
		if ip, err := netip.ParseAddr(cl.IP); err == nil && set.Contains(ip) {
			earlier(cl.Since)
		}
	}
	for ip, t := range firstSeen {
		if set.Contains(ip) {
			earlier(t)
		}
	}
	return mine
}

// InPrefix returns the Node other than node whose carved prefix holds ip, "" if none: an address
// there is that Node's alone.
func InPrefix(node string, ip netip.Addr, near []Holding) string {
	for _, h := range near {
		if h.Node != node && h.Prefix.IsValid() && unit(h.Prefix).Contains(ip) {
			return h.Node
		}
	}
	return ""
}

// unit is what a Node owns when it carves from p: the whole /64 of a longer p (so no one takes a
// /96 beside another's claim, or claims beside a carved /96), else p itself.
func unit(p netip.Prefix) netip.Prefix {
	if p.Bits() > 64 {
		u, _ := p.Addr().Prefix(64)
		return u
	}
	return p.Masked()
}

// NextClaims is a Node's recorded addresses after it reported current: claims still reported
// keep their time, withdrawn ones go, and new ones are recorded only if certifiable, held by no
// other record (others) and under the cap. A new claim dates from firstSeen, never later than
// now: others would name any Node that held it before. refused says why each was not recorded.
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
