package records

import (
	"fmt"
	"net/netip"
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
}

// NextClaims is a Node's recorded addresses after the coordinator saw it
// report current: claims it still reports keep their time, withdrawn ones
// are released, and new ones are recorded only when certifiable at all,
// held by no other record (others), and under the cap. refused says why
// each address was not recorded.
func NextClaims(prev []Claim, current []netip.Addr, others map[netip.Addr]string, pol ClaimPolicy, now time.Time) (next []Claim, refused []string) {
	have := map[netip.Addr]bool{}
	for _, c := range prev {
		ip, err := netip.ParseAddr(c.IP)
		if err != nil || !slices.Contains(current, ip) || have[ip] || len(next) >= pol.Max {
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
		if owner := others[ip]; owner != "" {
			refused = append(refused, fmt.Sprintf("%s is recorded as Node %s's address", ip, owner))
			continue
		}
		if len(next) >= pol.Max {
			refused = append(refused, fmt.Sprintf("%s: the Node already has %d recorded addresses (the limit)", ip, pol.Max))
			continue
		}
		next = append(next, Claim{IP: ip.String(), Since: now.UTC()})
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
