package controller

import (
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
)

// LabelControlPlane marks control-plane Nodes. Nodes cannot set it on
// themselves (NodeRestriction), so it is a fact the coordinator may use: the
// API server's endpoint addresses are certifiable only for them.
const LabelControlPlane = "node-role.kubernetes.io/control-plane"

// clusterFacts are the cluster objects nodes cannot write that bound what a
// node may claim or certify: ServiceCIDR objects and the API server's
// endpoints (the default/kubernetes EndpointSlices).
type clusterFacts struct {
	factory      informers.SharedInformerFactory
	serviceCIDRs networkinglisters.ServiceCIDRLister
	endpoints    discoverylisters.EndpointSliceLister
}

func newClusterFacts(client kubernetes.Interface) *clusterFacts {
	// The kubernetes Service's EndpointSlices live in default; the Role in
	// coordinator/deploy grants list/watch there only.
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(metav1.NamespaceDefault),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			if o.LabelSelector == "" {
				o.LabelSelector = discoveryv1.LabelServiceName + "=kubernetes"
			}
		}))
	cf := &clusterFacts{factory: f}
	cf.endpoints = f.Discovery().V1().EndpointSlices().Lister()
	cf.serviceCIDRs = f.Networking().V1().ServiceCIDRs().Lister()
	return cf
}

// serviceCIDRs are the cluster's ServiceCIDR objects' ranges.
func (f *clusterFacts) serviceRanges() []csrcheck.Reserved {
	var out []csrcheck.Reserved
	list, _ := f.serviceCIDRs.List(labels.Everything())
	for _, s := range list {
		for _, c := range s.Spec.CIDRs {
			if p, err := netip.ParsePrefix(c); err == nil {
				out = append(out, csrcheck.Reserved{Prefix: p.Masked(), Why: "ServiceCIDR " + s.Name})
			}
		}
	}
	return out
}

// apiServerAddresses are the addresses of the kubernetes Service's endpoints.
func (f *clusterFacts) apiServerAddresses() []netip.Addr {
	var out []netip.Addr
	list, _ := f.endpoints.EndpointSlices(metav1.NamespaceDefault).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: "kubernetes"}))
	for _, s := range list {
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil && !slices.Contains(out, ip.Unmap()) {
					out = append(out, ip.Unmap())
				}
			}
		}
	}
	return out
}

// reservedFor are the ranges node may never claim or certify: the
// configured service CIDRs and pod pools, the ServiceCIDR objects, the
// admin's reserved addresses, and the API server's endpoints unless node is
// a control-plane Node (whose own address they are).
func (c *Coordinator) reservedFor(node *corev1.Node) []csrcheck.Reserved {
	out := slices.Concat(c.configReserved, c.facts.serviceRanges())
	if node == nil || !hasLabel(node, LabelControlPlane) {
		for _, ip := range c.facts.apiServerAddresses() {
			out = append(out, csrcheck.Reserved{Prefix: netip.PrefixFrom(ip, ip.BitLen()), Why: "an API server endpoint; only control-plane Nodes may name it"})
		}
	}
	return out
}

func hasLabel(node *corev1.Node, key string) bool {
	_, ok := node.Labels[key]
	return ok
}

// names maps each of the DNS names to the Node it names: a Node's name
// (authenticated: a node creates only its own Node), or else a Hostname,
// which belongs to the oldest Node listing it, so a node that lists another
// Node's hostname later cannot take it or block it.
func (c *Coordinator) names(dns []string) map[string]string {
	out := map[string]string{}
	for _, n := range dns {
		lower := strings.ToLower(n)
		if node, err := c.nodes.Get(lower); err == nil {
			out[lower] = node.Name
			continue
		}
		objs, _ := c.nodeIndex.ByIndex(byHostname, lower)
		var first *corev1.Node
		for _, o := range objs {
			node, ok := o.(*corev1.Node)
			if ok && (first == nil || node.CreationTimestamp.Before(&first.CreationTimestamp) ||
				(node.CreationTimestamp.Equal(&first.CreationTimestamp) && node.Name < first.Name)) {
				first = node
			}
		}
		if first != nil {
			out[lower] = first.Name
		}
	}
	return out
}

// hostnames indexes Nodes by their Hostname addresses.
func hostnames(obj any) ([]string, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return nil, nil
	}
	var keys []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeHostName && !slices.Contains(keys, strings.ToLower(a.Address)) && len(keys) < 8 {
			keys = append(keys, strings.ToLower(a.Address))
		}
	}
	return keys, nil
}
