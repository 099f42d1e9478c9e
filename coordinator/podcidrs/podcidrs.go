// Package podcidrs owns the coordinator's pod-CIDR allocation: the allocator (pkg/ipam) and
// what it decides from, which only the leader's Node syncs change.
package podcidrs

import (
	"net/netip"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/finalize"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/ipam"
)

// Allocator owns the pod-CIDR allocator and what it decides from, as kube-controller-manager's
// range allocator does: each allocation's Node object (UID), the Node addresses kept out of every
// segment (counted by the Nodes listing each), and the ranges no segment may overlap (services:
// ServiceCIDRs, csr.reservedAddresses, the API server's addresses), all guarded by mu. alloc is
// nil until this replica leads; Rebuild then applies what was observed meanwhile.
type Allocator struct {
	segments *prometheus.GaugeVec // nodeinit_coordinator_pool_segments
	pools    []netip.Prefix       // the configured pod pools: node addresses there are never reserved

	mu           sync.Mutex
	alloc        *ipam.Allocator
	hasV4, hasV6 bool
	reservedBy   map[netip.Addr]int
	owner        map[string]types.UID
	services     map[netip.Prefix]bool
}

func New(segments *prometheus.GaugeVec, pools []netip.Prefix) *Allocator {
	return &Allocator{segments: segments, pools: pools, reservedBy: map[netip.Addr]int{}, owner: map[string]types.UID{}, services: map[netip.Prefix]bool{}}
}

// Observe reserves the addresses a Node added and releases those it withdrew, so no Node gets a
// segment holding another's address. Addresses in a pod pool are ignored (InPool).
func (p *Allocator) Observe(added, removed []netip.Addr) {
	added = slices.DeleteFunc(slices.Clone(added), p.InPool)
	removed = slices.DeleteFunc(slices.Clone(removed), p.InPool)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ip := range added {
		if p.reservedBy[ip]++; p.reservedBy[ip] == 1 && p.alloc != nil {
			p.alloc.Reserve(ip)
		}
	}
	for _, ip := range removed {
		if p.reservedBy[ip]--; p.reservedBy[ip] <= 0 {
			delete(p.reservedBy, ip)
			if p.alloc != nil {
				p.alloc.Unreserve(ip)
			}
		}
	}
}

// InPool reports whether ip lies in a configured pod pool, where no real
// Node address is: a Node listing one never gets to keep segments out.
func (p *Allocator) InPool(ip netip.Addr) bool {
	return slices.ContainsFunc(p.pools, func(pp netip.Prefix) bool { return pp.Contains(ip) })
}

// SetServices keeps the allocator's blocked ranges equal to want.
func (p *Allocator) SetServices(want []netip.Prefix) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.alloc == nil {
		return
	}
	for _, s := range want {
		if !p.services[s] {
			p.alloc.AddServiceCIDR(s)
			p.services[s] = true
		}
	}
	for s := range p.services {
		if !slices.Contains(want, s) {
			p.alloc.RemoveServiceCIDR(s)
			delete(p.services, s)
		}
	}
}

// Rebuild takes a fresh allocator for families v4 and v6 and accounts in it for the observed
// addresses, services and Nodes' pod CIDRs; it returns the Nodes it cannot account for.
func (p *Allocator) Rebuild(alloc *ipam.Allocator, v4, v6 bool, services []netip.Prefix, nodes []corev1.Node) map[*corev1.Node]error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.alloc = alloc
	pool4, pool6 := alloc.Pools()
	p.hasV4, p.hasV6 = v4 && pool4, v6 && pool6
	for ip := range p.reservedBy {
		alloc.Reserve(ip)
	}
	// The ranges blocked beyond the configured service CIDRs, in this allocator only.
	p.services = map[netip.Prefix]bool{}
	for _, s := range services {
		alloc.AddServiceCIDR(s)
		p.services[s] = true
	}
	conflicts := map[*corev1.Node]error{}
	for i := range nodes {
		n := &nodes[i]
		p.owner[n.Name] = n.UID
		cidrs, err := finalize.PodCIDRs(n)
		if err == nil && len(cidrs) > 0 {
			err = alloc.Occupy(n.Name, cidrs)
		}
		if err != nil {
			conflicts[n] = err
		}
	}
	p.metrics()
	return conflicts
}

// Families says which families the allocator hands out segments of.
func (p *Allocator) Families() (v4, v6 bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hasV4, p.hasV6
}

// Allocate hands Node name its segments: the same ones again when it has them.
func (p *Allocator) Allocate(name string, req ipam.Request) ([]netip.Prefix, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.metrics()
	return p.alloc.Allocate(name, req)
}

// Account takes over the Node's pod CIDRs whoever wrote them (the last leader, an admin, a
// migration), dropping what an earlier Node object of the name held; it errs on an overlap.
func (p *Allocator) Account(node *corev1.Node, existing []netip.Prefix) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.alloc == nil {
		return nil
	}
	owned := p.alloc.Owned(node.Name)
	if uid, ok := p.owner[node.Name]; ok && uid != node.UID && len(owned) > 0 {
		// Re-created between two syncs: the old object's CIDRs are not the new one's.
		p.alloc.Release(node.Name)
		owned = nil
	}
	p.owner[node.Name] = node.UID
	if len(existing) == 0 || slices.Equal(owned, existing) {
		return nil
	}
	if len(owned) > 0 {
		p.alloc.Release(node.Name)
	}
	defer p.metrics()
	return p.alloc.Occupy(node.Name, existing)
}

// Release frees a deleted Node's segments and reports whether it had any.
func (p *Allocator) Release(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.owner, name)
	if p.alloc == nil || len(p.alloc.Owned(name)) == 0 {
		return false
	}
	p.alloc.Release(name)
	p.metrics()
	return true
}

// Holder is the Node whose allocated pod CIDR holds ip, "" when none.
func (p *Allocator) Holder(ip netip.Addr) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.alloc == nil {
		return ""
	}
	holder, _ := p.alloc.Holder(ip)
	return holder
}

// metrics publishes the pools' usage; p.mu is held.
func (p *Allocator) metrics() {
	for _, u := range p.alloc.Usage() {
		p.segments.WithLabelValues(u.Pool, "used").Set(float64(u.Used))
		p.segments.WithLabelValues(u.Pool, "total").Set(float64(u.Total))
	}
}
