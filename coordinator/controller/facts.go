package controller

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
)

// LabelControlPlane marks control-plane Nodes. Nodes cannot set it on themselves (NodeRestriction),
// so the API server's endpoint addresses are certifiable only for them.
const LabelControlPlane = "node-role.kubernetes.io/control-plane"

// clusterFacts are cluster objects nodes cannot write that bound what a node may claim or certify:
// ServiceCIDRs and the API server's endpoints (the default/kubernetes EndpointSlices).
type clusterFacts struct {
	factory   informers.SharedInformerFactory
	endpoints discoverylisters.EndpointSliceLister
	// ServiceCIDRs (Kubernetes 1.33+) have their own unfiltered factory; nil where not served.
	scFactory    informers.SharedInformerFactory
	serviceCIDRs networkinglisters.ServiceCIDRLister
	client       kubernetes.Interface
}

// start starts the informers and returns the HasSynced functions to wait on.
func (f *clusterFacts) start(stop <-chan struct{}, log func(msg string, args ...any), changed func()) []cache.InformerSynced {
	endpoints := f.factory.Discovery().V1().EndpointSlices().Informer()
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { changed() }, UpdateFunc: func(any, any) { changed() }, DeleteFunc: func(any) { changed() },
	}
	_, _ = endpoints.AddEventHandler(handler) // the API server's addresses are kept out of pod CIDRs
	synced := []cache.InformerSynced{endpoints.HasSynced}
	if served(f.client, "networking.k8s.io/v1", "servicecidrs") {
		f.scFactory = informers.NewSharedInformerFactory(f.client, 0)
		f.serviceCIDRs = f.scFactory.Networking().V1().ServiceCIDRs().Lister()
		inf := f.scFactory.Networking().V1().ServiceCIDRs().Informer()
		_, _ = inf.AddEventHandler(handler)
		synced = append(synced, inf.HasSynced)
		f.scFactory.Start(stop)
	} else {
		log("ServiceCIDR objects are not served (Kubernetes before 1.33): only ipam.serviceCIDRs are reserved")
	}
	f.factory.Start(stop)
	return synced
}

func (f *clusterFacts) shutdown() {
	f.factory.Shutdown()
	if f.scFactory != nil {
		f.scFactory.Shutdown()
	}
}

// served reports whether the API server serves resource in groupVersion.
func served(client kubernetes.Interface, groupVersion, resource string) bool {
	list, err := client.Discovery().ServerResourcesForGroupVersion(groupVersion)
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true
		}
	}
	return false
}

func newClusterFacts(client kubernetes.Interface) *clusterFacts {
	// The Role in coordinator/deploy grants list/watch in default only, where these slices live.
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(metav1.NamespaceDefault),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			if o.LabelSelector == "" {
				o.LabelSelector = discoveryv1.LabelServiceName + "=kubernetes"
			}
		}))
	cf := &clusterFacts{factory: f, client: client}
	cf.endpoints = f.Discovery().V1().EndpointSlices().Lister()
	return cf
}

// serviceRanges are the cluster's ServiceCIDR objects' ranges.
func (f *clusterFacts) serviceRanges() []csrcheck.Reserved {
	var out []csrcheck.Reserved
	if f.serviceCIDRs == nil {
		return nil
	}
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

// reservedFor are the ranges node may never claim or certify: the configured service CIDRs, pod
// pools and reserved addresses, ServiceCIDRs, and the API server's addresses as they apply to node
// (csrcheck.APIServerAddresses).
func (c *Coordinator) reservedFor(node *corev1.Node) []csrcheck.Reserved {
	return slices.Concat(c.configReserved, c.facts.serviceRanges(),
		csrcheck.APIServerAddresses(c.facts.apiServerAddresses(), c.cfg.APIServerIPs, node != nil && c.controlPlane(node)))
}

// controlPlane reports whether node has the control-plane label (the coordinator never grants it).
func (c *Coordinator) controlPlane(node *corev1.Node) bool {
	_, ok := node.Labels[LabelControlPlane]
	return ok
}

// names sorts the DNS names of self's request by who else may have them. A name's owners are the
// Nodes whose identity gives it (csrcheck.IdentityOwners: authenticated, a node creates only its
// own Node) and any whose record holds an approved, valid certificate for it
// (records.ServingHolders), which outlives a deleted Node object; owners with such a certificate
// win against owners without. A name another owner has and self's identity does not give maps to
// that owner in names (refused); one self's identity gives too maps to it in shared (certified to
// neither while both are there: held, never denied, as the first owner may be the squatter). A name
// no identity gives ("*" patterns only) is nobody's. One another Node lists as its Hostname goes in
// hosts (node-written: held, never denied).
func (c *Coordinator) names(dns []string, self string, now time.Time) (names, hosts, shared map[string]string) {
	names, hosts, shared = map[string]string{}, map[string]string{}, map[string]string{}
	for _, n := range dns {
		lower := strings.ToLower(n)
		if owner, _ := csrcheck.PatternOwner(lower, c.policy); owner == "" {
			// A Node's own name is its own, even against one a "*" pattern certified first (its
			// renewal loses it), and never another's while that Node exists.
			if lower == strings.ToLower(self) {
				continue
			}
			if c.nodeExists(lower) {
				names[lower] = lower
				continue
			}
		}
		// The requester's identity is authenticated, its Node in the informer yet or not.
		identity := csrcheck.IdentityOwners(lower, c.policy)
		owners := slices.Clone(identity)
		if slices.Contains(identity, self) || slices.ContainsFunc(identity, c.nodeExists) {
			// A name some Node's identity gives also belongs to whoever holds a certificate for it.
			// One only a "*" pattern allows stays nobody's: several Nodes may carry it.
			for _, h := range c.records.ServingHolders(lower) {
				if !slices.Contains(owners, h) {
					owners = append(owners, h)
				}
			}
		}
		var others, certified []string
		for _, o := range owners {
			has := c.certifies(o, lower, now)
			if has {
				certified = append(certified, o)
			}
			if o != self && (has || slices.Contains(identity, o) && c.nodeExists(o)) {
				others = append(others, o)
			}
		}
		mine := slices.Contains(identity, self) || slices.Contains(certified, self)
		if slices.Contains(certified, self) {
			// Owners without a certificate for it do not count against one with.
			others = slices.DeleteFunc(others, func(o string) bool { return !slices.Contains(certified, o) })
		}
		switch {
		case len(others) > 0 && !mine:
			// Identity owners come first: the name is theirs, or a deleted Node's certificate's.
			names[lower] = others[0]
			continue
		case len(others) > 0:
			shared[lower] = others[0]
			continue
		case mine:
			// Self's by identity (csrcheck.FromIdentity) or certificate, within allowed patterns.
			continue
		}
		objs, _ := c.nodeIndex.ByIndex(byHostname, lower)
		for _, o := range objs {
			if node, ok := o.(*corev1.Node); ok && node.Name != self {
				hosts[lower] = node.Name
				break
			}
		}
	}
	return names, hosts, shared
}

// nodeExists reports whether a Node of that name is in the informer.
func (c *Coordinator) nodeExists(name string) bool {
	_, err := c.nodes.Get(name)
	return err == nil
}

// certifies reports whether Node name's record holds an approved serving certificate for dns valid
// at now: one whose request is still there unapproved is a request (as in previousSANs).
func (c *Coordinator) certifies(name, dns string, now time.Time) bool {
	rec, err := c.records.Get(name)
	if err != nil || rec == nil {
		return false
	}
	s := rec.Spec.Serving
	if !s.NamesDNS(dns) {
		return false
	}
	return s.Certified(c.servingApproved(s), now) != nil
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
