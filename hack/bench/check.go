package main

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// expectedLabels is every label a bench node must carry once initialized,
// and no other: the kubelet's, the agent's (from metadata and the bench
// rule) and the coordinator's (the granted role, Talos CCM compatibility).
func expectedLabels(sn *simNode) map[string]string {
	return map[string]string{
		"kubernetes.io/hostname": sn.name,
		"kubernetes.io/os":       "linux", "beta.kubernetes.io/os": "linux",
		"kubernetes.io/arch": "amd64", "beta.kubernetes.io/arch": "amd64",
		"topology.kubernetes.io/region":    sn.meta.Region,
		"topology.kubernetes.io/zone":      sn.meta.Zone,
		"node.kubernetes.io/instance-type": sn.meta.InstanceType,
		"example.com/bench":                "true",
		"node-role.kubernetes.io/worker":   "",
	}
}

// checkNode checks one node's end state: initialized, a pod CIDR per family
// (IPv6 from its own /64, not holding its address), exactly the expected
// labels and addresses, and the Talos providerID.
func checkNode(sn *simNode, n *corev1.Node) error {
	if n == nil {
		return fmt.Errorf("%s: no Node", sn.name)
	}
	var problems []string
	if !initialized(n) {
		problems = append(problems, "not initialized")
	}
	if len(n.Spec.PodCIDRs) != 2 {
		problems = append(problems, fmt.Sprintf("podCIDRs %v, want one IPv4 and one IPv6", n.Spec.PodCIDRs))
	} else if p, err := netip.ParsePrefix(n.Spec.PodCIDRs[1]); err != nil || !sn.ip6.Masked().Contains(p.Addr()) || p.Contains(sn.ip6.Addr()) {
		problems = append(problems, fmt.Sprintf("IPv6 pod CIDR %s is not a segment of %s free of the node's address", n.Spec.PodCIDRs[1], sn.ip6.Masked()))
	}
	filtered := maps.Clone(n.Labels)
	for k := range filtered {
		if strings.HasPrefix(k, "node.cloudprovider.kubernetes.io/") || strings.HasPrefix(k, "nodeinit.io/") {
			delete(filtered, k) // compatibility and contract labels are checked by their own tests
		}
	}
	if want := expectedLabels(sn); !maps.Equal(filtered, want) {
		problems = append(problems, fmt.Sprintf("labels %v, want %v", filtered, want))
	}
	var addrs []string
	for _, a := range n.Status.Addresses {
		addrs = append(addrs, string(a.Type)+"="+a.Address)
	}
	if want := expectedAddresses(sn); !slices.Equal(addrs, want) {
		problems = append(problems, fmt.Sprintf("addresses %v, want %v", addrs, want))
	}
	if want := "talos://metal/" + sn.ip.String(); n.Spec.ProviderID != want {
		problems = append(problems, fmt.Sprintf("providerID %q, want %q", n.Spec.ProviderID, want))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s", sn.name, strings.Join(problems, "; "))
}

// expectedAddresses: a global IPv6 address is an ExternalIP, as with Talos CCM.
func expectedAddresses(sn *simNode) []string {
	return []string{"InternalIP=" + sn.ip.String(), "ExternalIP=" + sn.ip6.Addr().String(), "Hostname=" + sn.name}
}

// checkAll checks every node and that no pod CIDR was ever seen on two Nodes.
func (e *env) checkAll(nodes []*simNode) error {
	var errs []error
	for _, d := range e.watch.dupes() {
		errs = append(errs, fmt.Errorf("pod CIDR assigned twice: %s", d))
	}
	for _, sn := range nodes {
		if err := checkNode(sn, e.watch.get(sn.name)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 10 {
		errs = append(errs[:10], fmt.Errorf("... and %d more", len(errs)-10))
	}
	return errors.Join(errs...)
}
