package controller

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/finalize"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/ipam"
)

// checkPool warns once per leadership when Nodes hold IPv4 pod CIDRs outside ipam.ipv4Pool: it is
// probably not the cluster's pod subnet. Their CIDRs are taken over all the same.
func (c *Coordinator) checkPool(nodes []corev1.Node) {
	pool, err := netip.ParsePrefix(c.settings.IPAM.IPv4Pool)
	if v4, _ := c.settings.Families(); err != nil || !v4 || !c.settings.IPAMEnabled() {
		return // without IPv4 from ipam, another allocator's CIDRs are its own business
	}
	cidrs := make(map[string][]netip.Prefix, len(nodes))
	for i := range nodes {
		if cs, err := finalize.PodCIDRs(&nodes[i]); err == nil {
			cidrs[nodes[i].Name] = cs
		}
	}
	outside := ipam.OutsidePool(cidrs, pool)
	c.m.PodCIDRsOutsidePool.Set(float64(len(outside)))
	if len(outside) > 0 {
		c.log.Warn("Nodes hold IPv4 pod CIDRs outside ipam.ipv4Pool: is it the cluster's pod subnet (cluster.network.podSubnets)? Nodes that join get segments from the pool, which the CNI may not route",
			"pool", pool, "nodes", len(outside), "first", outside[:min(3, len(outside))], "example", cidrs[outside[0]])
	}
}
