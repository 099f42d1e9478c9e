// Package controller runs the coordinator: a leader-elected replica whose Node and CSR workqueues
// call the pure cores (finalize, approval, pkg/ipam) and write their answers.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/nodestate"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/observe"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/podcidrs"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
)

// ErrLostLeadership is returned by Run when another replica took the lease.
var ErrLostLeadership = errors.New("lost the leader lease")

// FieldManager names the coordinator's writes.
const FieldManager = "nodeinit-coordinator"

// Config is what the coordinator runs with. Zero durations take defaults.
type Config struct {
	Client kubernetes.Interface
	// Dynamic reads and writes NodeRecords (same credentials as Client).
	Dynamic  dynamic.Interface
	Settings *config.Config
	// Lease in Namespace; Identity is this replica's name (pod name).
	Namespace, LeaseName, Identity            string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// NodeWorkers and CSRWorkers default to 64 and 16: a sync waits on the API server, not the CPU,
	// and a join's Node sync makes two writes in a row.
	NodeWorkers, CSRWorkers int
	Log                     *slog.Logger
	Metrics                 *Metrics
	// REST, when set, is used before leading to read the API server's serving certificate.
	REST *rest.Config
	// APIServerNames and APIServerIPs are the SANs of the API server's certificate: never certified
	// for a node, except a control-plane Node's own name and addresses.
	APIServerNames []string
	APIServerIPs   []netip.Addr
	// InitializedEvents records a Normal Initialized Event per join, one more write each. Off, a
	// join shows in the Node, the log and nodeinit_coordinator_node_time_to_initialized_seconds;
	// Warnings are always recorded.
	InitializedEvents bool
	// Clock is the coordinator's time (nil: the real clock); tests step it instead of sleeping.
	Clock clock.PassiveClock
	// WaitingLogAfter (0: 30 s) is how long after registration a Node still waiting is logged.
	WaitingLogAfter time.Duration
}

// Coordinator is one replica.
type Coordinator struct {
	cfg      Config
	clock    clock.PassiveClock
	client   kubernetes.Interface
	settings *config.Config
	log      *slog.Logger
	m        *Metrics
	policy   csrcheck.Policy
	recorder record.EventRecorder

	// Inputs besides the configuration: own records, objects nodes cannot write, own observations.
	records        *records.Store
	facts          *clusterFacts
	observer       *observe.Observer
	listOrder      *observe.ListOrder // which list, if any, delivered a Node event
	inventory      []records.Binding  // the admin's bindings of names to networks
	configReserved []csrcheck.Reserved
	desired        nodestate.Settings     // what nodestate.Decide reads of the configuration
	notes          *csrNotes              // what the Node syncs remember of serving CSRs: reviews asked, decisions seen
	handlersSynced []cache.InformerSynced // each informer handler has seen the initial list (handle)
	servingCSRs    atomic.Bool            // kubelets ask for serving certificates (a CSR, or a record naming one): joins wait (csr.initWait)
	cidrs          *podcidrs.Allocator    // the allocator and what it decides from
	nodeStatus     *nodeStatus            // the Node reconciler's gauges: Nodes waiting, Nodes left alone
	said           *said                  // the last message of each Event reason per object
	claimLocks     addrLocks              // claims are decided and recorded under their addresses' locks
	refusedIDs     refusedIDs             // providerIDs the API server refused, per Node object

	blockedMu sync.Mutex // blockedChanged: one computes and applies at a time

	factory    informers.SharedInformerFactory
	csrFactory informers.SharedInformerFactory
	nodes      corelisters.NodeLister
	csrIndex   cache.Indexer
	nodeIndex  cache.Indexer
	// ownNodes overlays the Node cache with this replica's patch answers until the informer has
	// them: a sync reads its own writes instead of patching a stale resourceVersion into a 409.
	ownNodes cache.MutationCache
	// ownCSRs does the same for the CSRs this replica decided, so none is decided twice.
	ownCSRs cache.MutationCache
	// nodeQueue is keyed by Node name: one sync owns the Node, its record and its kubelet's serving
	// CSRs, registered or not, and never runs twice at once. csrQueue has other requesters' CSRs.
	nodeQueue workqueue.TypedRateLimitingInterface[string]
	csrQueue  workqueue.TypedRateLimitingInterface[string]
	leading   atomic.Bool // the queues take keys (leaderQueue)

	state sync.Mutex
	ready error
}

const byNode = "byNode"

// byHostname, byAddress (InternalIP and ExternalIP, at most maxNodeAddresses) and bySlash64 (IPv6
// /64s) index Nodes; the informer updates indexes before its handlers run.
const (
	byHostname = "byHostname"
	byAddress  = "byAddress"
	bySlash64  = "bySlash64"
)

// New builds a replica; nothing runs until Run.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Client == nil || cfg.Dynamic == nil || cfg.Settings == nil {
		return nil, errors.New("controller: Client, Dynamic and Settings are required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.LeaseDuration, 15*time.Second)
	def(&cfg.RenewDeadline, 10*time.Second)
	def(&cfg.RetryPeriod, 2*time.Second)
	if cfg.NodeWorkers <= 0 {
		cfg.NodeWorkers = 64
	}
	if cfg.CSRWorkers <= 0 {
		cfg.CSRWorkers = 16
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "kube-system"
	}
	if cfg.LeaseName == "" {
		cfg.LeaseName = "nodeinit-coordinator"
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	desired := nodestate.NewSettings(cfg.Settings)
	c := &Coordinator{
		desired: desired, notes: newCSRNotes(), cidrs: podcidrs.New(cfg.Metrics.PoolSegments, cfg.Settings.Pools()), nodeStatus: newNodeStatus(cfg.Metrics, cfg.Log), said: &said{last: map[string]string{}}, inventory: desired.Inventory,
		cfg: cfg, client: cfg.Client, settings: cfg.Settings, log: cfg.Log, m: cfg.Metrics, policy: cfg.Settings.CSRPolicy(),
		records: records.NewStore(cfg.Dynamic), facts: newClusterFacts(cfg.Client), observer: observe.New(cfg.Settings.MaxNodeAddresses, cfg.Clock), clock: cfg.Clock,
		configReserved: cfg.Settings.Reserved(),
		ready:          errors.New("starting"),
	}
	c.csrQueue = leaderQueue{workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "csrs", MetricsProvider: cfg.Metrics.Queues}), &c.leading}
	c.nodeQueue = leaderQueue{newNodeQueue("nodes", c.joining, cfg.Metrics.Queues), &c.leading}
	c.factory = informers.NewSharedInformerFactory(cfg.Client, 0)
	c.csrFactory = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", certificatesv1.KubeletServingSignerName).String()
	}))
	c.listOrder = observe.NewListOrder(cache.ToListerWatcherWithContext(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cfg.Client.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cfg.Client.CoreV1().Nodes().Watch(ctx, o)
		},
	}, cfg.Client)), func(obj runtime.Object, list uint32) {
		if n, ok := obj.(*corev1.Node); ok {
			c.observer.Pend(n, list)
		}
	}, c.observer.DropList)
	nodeInf := c.factory.InformerFor(&corev1.Node{}, func(kubernetes.Interface, time.Duration) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformerWithOptions(c.listOrder, &corev1.Node{}, cache.SharedIndexInformerOptions{Indexers: cache.Indexers{}})
	})
	c.listOrder.StoreOf(nodeInf.GetStore())
	csrInf := c.csrFactory.Certificates().V1().CertificateSigningRequests()
	c.nodes = corelisters.NewNodeLister(nodeInf.GetIndexer())
	if err := csrInf.Informer().AddIndexers(cache.Indexers{byNode: func(obj any) ([]string, error) {
		if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok {
			if n := csrcheck.NodeName(csr.Spec.Username); n != "" {
				return []string{n}, nil
			}
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	c.csrIndex = csrInf.Informer().GetIndexer()
	c.ownCSRs = cache.NewIntegerResourceVersionMutationCacheWithOptions(klog.Background(), csrInf.Informer().GetStore(),
		cache.MutationCacheOptions{Indexer: c.csrIndex, TTL: ownWritesTTL, MaxCacheSize: 10000})
	if err := nodeInf.AddIndexers(nodeIndexers(cfg.Settings.MaxNodeAddresses)); err != nil {
		return nil, err
	}
	c.nodeIndex = nodeInf.GetIndexer()
	_ = nodeInf.SetTransform(func(obj any) (any, error) {
		if n, ok := obj.(*corev1.Node); ok {
			trimNode(n)
		}
		return obj, nil
	})
	c.ownNodes = cache.NewIntegerResourceVersionMutationCacheWithOptions(klog.Background(), nodeInf.GetStore(),
		cache.MutationCacheOptions{Indexer: c.nodeIndex, TTL: ownWritesTTL, MaxCacheSize: 10000})
	c.handle(nodeInf, cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, firstList bool) {
			caughtUp(c.ownNodes, obj)
			c.nodeChanged(obj, c.listed(obj, firstList))
		},
		UpdateFunc: func(_, obj any) {
			caughtUp(c.ownNodes, obj)
			c.nodeChanged(obj, c.listed(obj, false))
		},
		DeleteFunc: func(obj any) {
			gone(c.ownNodes, obj)
			if n, ok := obj.(*corev1.Node); ok {
				obj = cache.DeletedFinalStateUnknown{Key: n.Name, Obj: n}
			}
			c.nodeChanged(obj, 0)
		},
	})
	_ = csrInf.Informer().SetTransform(func(obj any) (any, error) {
		if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok {
			trimCSR(csr)
		}
		return obj, nil
	})
	c.handle(csrInf.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			caughtUp(c.ownCSRs, obj)
			c.enqueueCSR(obj)
		},
		UpdateFunc: func(oldObj, obj any) {
			caughtUp(c.ownCSRs, obj)
			old, _ := oldObj.(*certificatesv1.CertificateSigningRequest)
			if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok && !pending(csr) && old != nil && pending(old) {
				// This update is the decision, anyone's: the record follows it (servingChanges).
				c.notes.decided(csr.UID)
			}
			c.enqueueCSR(obj)
		},
		DeleteFunc: func(obj any) {
			gone(c.ownCSRs, obj)
			lastSeen := false // a watch gap: the object as last seen, maybe before its approval
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj, lastSeen = d.Obj, true
			}
			csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
			if !ok {
				return
			}
			c.forget("csr", csr.Name)
			c.notes.gone(csr.Name, csr.UID)
			if node := csrcheck.NodeName(csr.Spec.Username); node != "" {
				if !lastSeen && !approved(csr) && c.recordNames(node, csr) {
					// Deleted unapproved: the record names a request, not a certificate.
					c.notes.unissue(node, string(csr.UID))
				}
				c.nodeQueue.Add(node) // its review may move on
			}
		},
	})
	// A changed record resyncs its Node (a re-enrolled key) and the Nodes waiting for addresses it
	// released; one naming a valid serving certificate turns the joins' wait on.
	c.handle(c.records.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			c.noteServing(obj)
			c.m.RecordsUnreadable.Add(unreadable(obj))
		},
		UpdateFunc: func(old, obj any) {
			c.noteServing(obj)
			c.recordChanged(old, obj)
			c.m.RecordsUnreadable.Add(unreadable(obj) - unreadable(old))
		},
		DeleteFunc: func(obj any) {
			c.recordChanged(obj, nil)
			c.m.RecordsUnreadable.Sub(unreadable(obj))
		},
	})
	return c, nil
}

// unreadable is 1 for a record or tombstone this version cannot read, else 0.
func unreadable(obj any) float64 {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if c, ok := obj.(*records.Cached); ok && c.Err != nil {
		return 1
	}
	return 0
}

// handle registers h on inf. Run waits until h, not only the store (HasSynced), has seen the
// initial list, so a new leader syncs nothing before the handlers seeded what they keep.
func (c *Coordinator) handle(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) {
	if reg, err := inf.AddEventHandler(h); err == nil {
		c.handlersSynced = append(c.handlersSynced, reg.HasSynced)
	}
}

func (c *Coordinator) recordChanged(old, obj any) {
	if d, ok := old.(cache.DeletedFinalStateUnknown); ok {
		old = d.Obj
	}
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(old)
	if err != nil {
		return
	}
	// Its Node's CSRs and claims are decided from it: sync now, not after its backoff.
	c.nodeQueue.Add(key)
	released := map[string]bool{}
	for _, ip := range records.Claimed(old) {
		released[ip] = true
	}
	for _, ip := range records.Claimed(obj) {
		delete(released, ip)
	}
	if len(released) > 0 {
		c.log.Debug("record released addresses", "record", key, "released", released)
	}
	for ip := range released {
		nodes, _ := c.nodeIndex.ByIndex(byAddress, ip)
		for _, n := range nodes {
			if node, ok := n.(*corev1.Node); ok && node.Name != key {
				c.nodeQueue.Add(node.Name)
			}
		}
	}
}

// nodeIndexers are the Node informer's indexes, over at most maxAddrs addresses per Node.
func nodeIndexers(maxAddrs int) cache.Indexers {
	addresses := func(obj any, key func(netip.Addr) (string, bool)) ([]string, error) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return nil, nil
		}
		var keys []string
		for _, ip := range nodestate.Addresses(n, maxAddrs) {
			if k, ok := key(ip); ok && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		return keys, nil
	}
	return cache.Indexers{
		byHostname: hostnames,
		byAddress: func(obj any) ([]string, error) {
			return addresses(obj, func(ip netip.Addr) (string, bool) { return ip.String(), true })
		},
		bySlash64: func(obj any) ([]string, error) {
			return addresses(obj, func(ip netip.Addr) (string, bool) {
				p, err := ip.Prefix(64)
				return p.String(), err == nil && ip.Is6()
			})
		},
	}
}

// listed is the informer's list that delivered this Node (0: its watch).
func (c *Coordinator) listed(obj any, firstList bool) uint32 {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return 0
	}
	if list := c.listOrder.Take(n.Name, n.ResourceVersion); list != 0 {
		return list
	}
	if firstList {
		return c.listOrder.FirstList()
	}
	return 0
}

// nodeChanged handles a Node event from list (0: the watch). Nodes a list delivers began to list
// their new addresses at some earlier time, in no order the coordinator can know.
func (c *Coordinator) nodeChanged(obj any, list uint32) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	var added, removed []netip.Addr
	switch o := obj.(type) {
	case *corev1.Node:
		added, removed = c.observer.Observe(o, c.clock.Now(), list)
	case cache.DeletedFinalStateUnknown:
		var uid types.UID
		if n, ok := o.Obj.(*corev1.Node); ok {
			uid = n.UID
		}
		removed = c.observer.Forget(key, uid)
		c.listOrder.Forget(key, uid)
	}
	// A Node's addresses are reserved while it reports them; withdrawn ones are released.
	c.cidrs.Observe(added, removed)
	c.nodeQueue.Add(key)
}

// blockedChanged sets the allocator's blocked ranges as ServiceCIDRs or API endpoints change.
func (c *Coordinator) blockedChanged() {
	// Handlers run on their own goroutines: an older computation applied last would drop a block.
	c.blockedMu.Lock()
	defer c.blockedMu.Unlock()
	c.cidrs.SetServices(c.blockedRanges())
}

// blockedRanges are what no pod CIDR may overlap besides the configured service CIDRs: ServiceCIDR
// objects, csr.reservedAddresses and the API server's addresses (certificate IPs, a VIP,
// endpoints), which no Node lists, so no listing keeps them out of a segment.
func (c *Coordinator) blockedRanges() []netip.Prefix {
	var out []netip.Prefix
	add := func(p netip.Prefix) {
		if p.IsValid() && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, r := range c.facts.serviceRanges() {
		add(r.Prefix)
	}
	for _, r := range c.settings.ReservedAddresses() {
		add(r)
	}
	for _, ip := range slices.Concat(c.cfg.APIServerIPs, c.facts.apiServerAddresses()) {
		ip = ip.Unmap()
		add(netip.PrefixFrom(ip, ip.BitLen()))
	}
	return out
}

// trimNode drops managed fields and the image list (up to 50 per Node): on thousands of Nodes they
// are most of the cache. Nodes are only merge-patched, so nothing dropped is written back.
func trimNode(n *corev1.Node) {
	n.ManagedFields = nil
	n.Status.Images = nil
}

// trimCSR keeps of a node-written CSR only what a decision reads: no managed fields, and an
// oversized request cut but still too large to parse.
func trimCSR(csr *certificatesv1.CertificateSigningRequest) {
	csr.ManagedFields = nil
	if len(csr.Spec.Request) > csrcheck.MaxRequestBytes {
		csr.Spec.Request = csr.Spec.Request[:csrcheck.MaxRequestBytes+1]
	}
}

// enqueueCSR queues a CSR's sync: its requester's Node's, or its own for a non-node requester.
func (c *Coordinator) enqueueCSR(obj any) {
	csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
	if !ok {
		return
	}
	if node := csrcheck.NodeName(csr.Spec.Username); node != "" {
		c.nodeQueue.Add(node)
	} else if pending(csr) {
		c.csrQueue.Add(csr.Name)
	}
}

func pending(csr *certificatesv1.CertificateSigningRequest) bool {
	return !approved(csr) && !denied(csr)
}

// Ready is nil for a synced standby, and for a leader once rebuilt and its workers run.
func (c *Coordinator) Ready() error {
	c.state.Lock()
	defer c.state.Unlock()
	return c.ready
}

func (c *Coordinator) setReady(err error) {
	c.state.Lock()
	defer c.state.Unlock()
	c.ready = err
}

// apiProbe is how often a starting coordinator retries the API server.
const apiProbe = 500 * time.Millisecond

// retry runs try every apiProbe until it succeeds (true) or ctx ends (false); each failure is the
// readiness error, logged when it changes.
func (c *Coordinator) retry(ctx context.Context, what string, try func() error) bool {
	last := ""
	err := wait.PollUntilContextCancel(ctx, apiProbe, true, func(context.Context) (bool, error) {
		err := try()
		if err == nil {
			if last != "" {
				c.log.Info(what + ": succeeded")
			}
			return true, nil
		}
		c.setReady(fmt.Errorf("%s: %w", what, err))
		if msg := err.Error(); msg != last {
			c.log.Warn(what+"; retrying", "err", err, "retry", apiProbe)
			last = msg
		}
		return false, nil
	})
	return err == nil
}

// probeAPI lists a Node and a serving CSR, checks the records are served, and reads the API
// server's certificate SANs once.
func (c *Coordinator) probeAPI(ctx context.Context) error {
	if _, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return err
	}
	if _, err := c.client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{Limit: 1,
		FieldSelector: fields.OneTermEqualSelector("spec.signerName", certificatesv1.KubeletServingSignerName).String()}); err != nil {
		return err
	}
	// The kubernetes EndpointSlices too: a manifest applied in pieces may allow them seconds later,
	// and an informer refused them would sit in its reflector's backoff.
	if _, err := c.client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{Limit: 1,
		LabelSelector: discoveryv1.LabelServiceName + "=kubernetes"}); err != nil {
		return err
	}
	// Without its records the coordinator cannot decide anything safely.
	if err := c.records.Installed(ctx); err != nil {
		return err
	}
	if c.cfg.REST != nil && c.cfg.APIServerNames == nil && c.cfg.APIServerIPs == nil {
		names, ips, err := APIServerSANs(ctx, c.cfg.REST)
		if err != nil {
			return err
		}
		c.cfg.APIServerNames, c.cfg.APIServerIPs = names, ips
		c.log.Info("the API server's certificate names and addresses are never certified for a node", "names", names, "ips", ips)
	}
	return nil
}

// Run keeps the informers warm, campaigns for the lease, and leads until ctx ends (nil) or the
// lease is lost (ErrLostLeadership).
func (c *Coordinator) Run(ctx context.Context) error {
	// The Event pipeline shuts down last, after the workers drained, so their Events are flushed.
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events("")})
	c.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: FieldManager, Host: c.cfg.Identity})
	defer c.nodeQueue.ShutDown()
	defer c.csrQueue.ShutDown()
	// Informers started during an outage sit in the reflector's backoff (up to 30 s) long after
	// the API server is back.
	if !c.retry(ctx, "waiting for the API server", func() error { return c.probeAPI(ctx) }) {
		return nil // ctx ended
	}
	// The informers run on their own context, cancelled before the Shutdowns below wait: ctx is
	// still live after a lost lease, and waiting on it would hang the process.
	informers, stopInformers := context.WithCancel(ctx)
	c.factory.Start(informers.Done())
	c.csrFactory.Start(informers.Done())
	factsSynced := c.facts.start(informers.Done(), c.log.Info, c.blockedChanged)
	var recordsDone sync.WaitGroup
	recordsDone.Go(func() { c.records.Informer().Run(informers.Done()) })
	defer recordsDone.Wait()
	defer c.factory.Shutdown()
	defer c.csrFactory.Shutdown()
	defer c.facts.shutdown()
	defer stopInformers()
	synced := append(factsSynced, c.factory.Core().V1().Nodes().Informer().HasSynced,
		c.csrFactory.Certificates().V1().CertificateSigningRequests().Informer().HasSynced,
		c.records.Informer().HasSynced)
	if !cache.WaitForCacheSync(ctx.Done(), append(synced, c.handlersSynced...)...) {
		return ctx.Err()
	}
	c.setReady(nil) // a synced standby is ready to take over
	c.log.Info("caches synced; campaigning for the lease", "lease", c.cfg.Namespace+"/"+c.cfg.LeaseName, "identity", c.cfg.Identity)

	lost := make(chan struct{})
	// Not client-go's ReleaseOnCancel, which gives the lease back while workers may still write:
	// the workers drain first, then release gives it back.
	var started atomic.Bool
	drained := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: c.cfg.Namespace, Name: c.cfg.LeaseName},
			Client:     c.client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: c.cfg.Identity},
		},
		LeaseDuration: c.cfg.LeaseDuration, RenewDeadline: c.cfg.RenewDeadline, RetryPeriod: c.cfg.RetryPeriod,
		Name: c.cfg.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				started.Store(true)
				defer close(drained)
				c.lead(ctx)
			},
			OnStoppedLeading: func() {
				c.m.Leader.Set(0)
				if ctx.Err() == nil {
					close(lost)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	le.Run(ctx)
	led := started.Load()
	if led {
		<-drained // every worker has returned: no write of this replica is in flight
	}
	select {
	case <-lost:
		c.log.Error("lost the leader lease; exiting so a fresh process starts as a standby")
		return ErrLostLeadership
	default:
		if led {
			c.release()
		}
		return nil
	}
}

// release gives the lease back once workers drained, so a standby need not wait out the lease.
func (c *Coordinator) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	leases := c.client.CoordinationV1().Leases(c.cfg.Namespace)
	l, err := leases.Get(ctx, c.cfg.LeaseName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != c.cfg.Identity {
		return
	}
	now := metav1.NewMicroTime(time.Now())
	empty, one := "", int32(1)
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.AcquireTime, l.Spec.RenewTime = &empty, &one, &now, &now
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		c.log.Warn("could not release the lease; a standby takes over when it expires", "err", err)
		return
	}
	c.log.Info("workers drained; released the lease")
}

// lead rebuilds the allocator, releases the records of Nodes deleted while no coordinator led, then
// runs the workers until leadership ends.
func (c *Coordinator) lead(ctx context.Context) {
	start := time.Now()
	c.m.Leader.Set(1)
	// From here the handlers queue changes; earlier ones are queued below, once the workers run.
	c.leading.Store(true)
	defer c.leading.Store(false)
	c.setReady(errors.New("leader: rebuilding the allocator"))
	// From a fresh LIST, not the cache: the previous leader's last writes may not be in it.
	var nodes []corev1.Node
	if !c.retry(ctx, "leader: listing Nodes to rebuild the allocator", func() (err error) {
		nodes, err = c.listFresh(ctx)
		return err
	}) {
		return
	}
	if err := c.rebuild(nodes); err != nil {
		c.log.Error("cannot build the allocator", "err", err)
		c.setReady(err)
		return
	}
	// Before any worker decides, release the claims of Nodes deleted while no coordinator led.
	first := true
	if !c.retry(ctx, "leader: reconciling NodeRecords with Nodes", func() error {
		if !first {
			// A conflict: someone wrote meanwhile; decide from fresh lists.
			if fresh, err := c.listFresh(ctx); err == nil {
				nodes = fresh
			}
		}
		first = false
		n, err := c.reconcileRecords(ctx, nodes)
		if err == nil && n > 0 {
			c.log.Info("released the records of Nodes deleted while no coordinator led", "records", n)
		}
		return err
	}) {
		return
	}
	took := time.Since(start)
	c.m.RebuildSeconds.Set(took.Seconds())
	c.log.Info("leading", "identity", c.cfg.Identity, "rebuild", took)
	var wg sync.WaitGroup
	for range c.cfg.NodeWorkers {
		wg.Go(func() { work(ctx, c.nodeQueue, c.syncNode, c.log) })
	}
	for range c.cfg.CSRWorkers {
		wg.Go(func() { work(ctx, c.csrQueue, c.syncStranger, c.log) })
	}
	for _, n := range c.listNodes() {
		c.nodeQueue.Add(n.Name)
	}
	for _, csr := range c.csrIndex.List() {
		c.enqueueCSR(csr) // a requester without a Node too
	}
	c.setReady(nil)
	<-ctx.Done()
	c.nodeQueue.ShutDown()
	c.csrQueue.ShutDown()
	wg.Wait()
}

// csr is CSR name as this replica last saw or wrote it.
func (c *Coordinator) csr(name string) (*certificatesv1.CertificateSigningRequest, error) {
	return readBack[*certificatesv1.CertificateSigningRequest](c.ownCSRs, certificatesv1.Resource("certificatesigningrequests"), name)
}

// node is Node name as this replica last saw or wrote it.
func (c *Coordinator) node(name string) (*corev1.Node, error) {
	return readBack[*corev1.Node](c.ownNodes, corev1.Resource("nodes"), name)
}

// ownWritesTTL is how long an own write the informer has not delivered stays cached. It is no bound
// on the informer's lag: an expired one reads as the version before, a decided CSR as pending (no
// renewal rule for the node's next request, its names owned by no certificate), so handlers drop
// entries as they catch up (caughtUp, gone).
const ownWritesTTL = 24 * time.Hour

// caughtUp drops a cached own write the informer has delivered obj for.
func caughtUp(m cache.MutationCache, obj any) {
	if o, ok := obj.(runtime.Object); ok {
		m.OnAddOrUpdate(o)
	}
}

// gone drops a cached own write of an object the informer saw deleted.
func gone(m cache.MutationCache, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if o, ok := obj.(runtime.Object); ok {
		m.OnDelete(o)
	}
}

// readBack reads name through a cache of own writes over its informer; a missing one is NotFound.
func readBack[T any](m cache.MutationCache, resource schema.GroupResource, name string) (T, error) {
	var zero T
	obj, exists, err := m.GetByKey(name)
	if err != nil {
		return zero, err
	}
	o, ok := obj.(T)
	if !exists || !ok {
		return zero, apierrors.NewNotFound(resource, name)
	}
	return o, nil
}

func (c *Coordinator) listNodes() []*corev1.Node {
	nodes, _ := c.nodes.List(labels.Everything())
	return nodes
}

// listFresh lists every Node from the API server, in pages.
func (c *Coordinator) listFresh(ctx context.Context) ([]corev1.Node, error) {
	var out []corev1.Node
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := c.client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, list.Items...)
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}

func (c *Coordinator) rebuild(nodes []corev1.Node) error {
	alloc, err := c.settings.Allocator()
	if err != nil {
		return err
	}
	v4, v6 := c.settings.Families()
	c.checkPool(nodes)
	for n, err := range c.cidrs.Rebuild(alloc, v4, v6, c.blockedRanges(), nodes) {
		c.m.PodCIDRConflicts.Inc()
		c.recorder.Eventf(n, corev1.EventTypeWarning, "PodCIDRConflict", "cannot account for this node's pod CIDRs: %v", err)
	}
	// A ServiceCIDR added during the rebuild found no allocator to tell: read the ranges again.
	c.blockedChanged()
	return nil
}

// work runs one queue's sync until shutdown; failures are requeued with backoff, never dropped.
func work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], sync func(context.Context, string) error, log *slog.Logger) {
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		if err := sync(ctx, key); err != nil {
			if ctx.Err() == nil {
				log.Warn("sync failed; retrying", "key", key, "err", err, "retries", q.NumRequeues(key))
			}
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}

// said is the last message of each Event reason per object: a persisting condition is one Event.
type said struct {
	mu   sync.Mutex
	last map[string]string // kind/name/reason → message
}

// news records msg under key and reports whether it differs from the last; "" forgets key.
func (s *said) news(key, msg string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if msg == "" {
		delete(s.last, key)
		return false
	}
	same := s.last[key] == msg
	s.last[key] = msg
	return !same
}

// say records an Event unless this reason and message were the last said of the object.
func (c *Coordinator) say(obj runtime.Object, kind, name, typ, reason, msg string) (said bool) {
	said = c.said.news(kind+"/"+name+"/"+reason, msg)
	if said {
		c.recorder.Event(obj, typ, reason, msg)
	}
	return said
}

// forget drops what was said of an object that is gone.
func (c *Coordinator) forget(kind, name string) {
	c.said.mu.Lock()
	defer c.said.mu.Unlock()
	prefix := kind + "/" + name + "/"
	for k := range c.said.last {
		if strings.HasPrefix(k, prefix) {
			delete(c.said.last, k)
		}
	}
}
