// Package controller runs the coordinator: leader election on a Lease,
// informers on Nodes and kubelet-serving CSRs, and two workqueues whose
// sync functions call the pure cores (finalize, approval, pkg/ipam) and
// write their answers with the coordinator's ServiceAccount.
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
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/approval"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/finalize"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/ipam"
)

// ErrLostLeadership is returned by Run when another replica took the lease.
var ErrLostLeadership = errors.New("lost the leader lease")

// FieldManager names the coordinator's writes.
const FieldManager = "nodeinit-coordinator"

// Config is what the coordinator runs with. Zero durations take defaults.
type Config struct {
	Client   kubernetes.Interface
	Settings *config.Config
	// Lease in Namespace; Identity is this replica's name (pod name).
	Namespace, LeaseName, Identity            string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// NodeWorkers and CSRWorkers sync in parallel (default 4 each).
	NodeWorkers, CSRWorkers int
	Log                     *slog.Logger
	Metrics                 *Metrics
}

// Coordinator is one replica.
type Coordinator struct {
	cfg      Config
	client   kubernetes.Interface
	settings *config.Config
	log      *slog.Logger
	m        *Metrics
	policy   csrcheck.Policy
	recorder record.EventRecorder

	factory    informers.SharedInformerFactory
	csrFactory informers.SharedInformerFactory
	nodes      corelisters.NodeLister
	csrs       certlisters.CertificateSigningRequestLister
	csrIndex   cache.Indexer
	nodeIndex  cache.Indexer
	nodeQueue  workqueue.TypedRateLimitingInterface[string]
	csrQueue   workqueue.TypedRateLimitingInterface[string]

	mu       sync.Mutex // guards alloc and the fields below
	alloc    *ipam.Allocator
	hasV4    bool
	hasV6    bool
	lastSaid map[string]string // dedupes repeated Events per object and reason

	state sync.Mutex
	ready error
}

const byNode = "byNode"

// byAddress indexes Nodes by their InternalIP and ExternalIP addresses, so a
// CSR decision looks up who else claims an address instead of scanning
// every Node.
const byAddress = "byAddress"

// New builds a replica; nothing runs until Run.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Client == nil || cfg.Settings == nil {
		return nil, errors.New("controller: Client and Settings are required")
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
		cfg.NodeWorkers = 4
	}
	if cfg.CSRWorkers <= 0 {
		cfg.CSRWorkers = 4
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
	policy, err := cfg.Settings.CSRPolicy()
	if err != nil {
		return nil, err
	}
	c := &Coordinator{
		cfg: cfg, client: cfg.Client, settings: cfg.Settings, log: cfg.Log, m: cfg.Metrics, policy: policy,
		lastSaid: map[string]string{}, ready: errors.New("starting"),
		nodeQueue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodes"}),
		csrQueue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "csrs"}),
	}

	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cfg.Client.CoreV1().Events("")})
	c.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: FieldManager, Host: cfg.Identity})

	c.factory = informers.NewSharedInformerFactory(cfg.Client, 0)
	c.csrFactory = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", certificatesv1.KubeletServingSignerName).String()
	}))
	nodeInf := c.factory.Core().V1().Nodes()
	csrInf := c.csrFactory.Certificates().V1().CertificateSigningRequests()
	c.nodes, c.csrs = nodeInf.Lister(), csrInf.Lister()
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
	if err := nodeInf.Informer().AddIndexers(cache.Indexers{byAddress: func(obj any) ([]string, error) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return nil, nil
		}
		var keys []string
		for _, ip := range csrcheck.NodeIPs(csrcheck.Node{Name: n.Name, Addresses: n.Status.Addresses}) {
			keys = append(keys, ip.String())
		}
		return keys, nil
	}}); err != nil {
		return nil, err
	}
	c.nodeIndex = nodeInf.Informer().GetIndexer()
	_, _ = nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.nodeChanged(obj) },
		UpdateFunc: func(_, obj any) { c.nodeChanged(obj) },
		DeleteFunc: func(obj any) { c.nodeChanged(obj) },
	})
	_, _ = csrInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueCSR(obj) },
		UpdateFunc: func(_, obj any) { c.enqueueCSR(obj) },
	})
	return c, nil
}

func (c *Coordinator) nodeChanged(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	if node, ok := obj.(*corev1.Node); ok {
		// Every Node's addresses are reserved as soon as they are seen, so no
		// node is handed a segment holding another node's address.
		c.mu.Lock()
		if c.alloc != nil {
			for _, ip := range finalize.Addresses(node) {
				c.alloc.Reserve(ip)
			}
		}
		c.mu.Unlock()
	}
	c.nodeQueue.Add(key)
	// The node's review/attestation may have changed: its pending CSRs resync.
	objs, _ := c.csrIndex.ByIndex(byNode, key)
	for _, o := range objs {
		c.enqueueCSR(o)
	}
}

func (c *Coordinator) enqueueCSR(obj any) {
	if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok && pending(csr) {
		c.csrQueue.Add(csr.Name)
	}
}

func pending(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, cond := range csr.Status.Conditions {
		if cond.Type == certificatesv1.CertificateApproved || cond.Type == certificatesv1.CertificateDenied || cond.Type == certificatesv1.CertificateFailed {
			return false
		}
	}
	return true
}

// Ready is nil for a healthy standby, and for a leader once its allocator is
// rebuilt and its workers run.
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

// waitForAPI returns once the coordinator can list Nodes and CSRs. A process
// restarted during an API-server outage would otherwise start its informers
// into client-go's reflector backoff (up to 30 s between tries) and stay
// behind long after the API server is back. It returns ctx's error.
func (c *Coordinator) waitForAPI(ctx context.Context) error {
	logged := false
	for {
		_, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			_, err = c.client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{Limit: 1,
				FieldSelector: fields.OneTermEqualSelector("spec.signerName", certificatesv1.KubeletServingSignerName).String()})
		}
		if err == nil {
			if logged {
				c.log.Info("the API server answers")
			}
			return nil
		}
		c.setReady(fmt.Errorf("waiting for the API server: %w", err))
		if !logged {
			c.log.Warn("waiting for the API server", "err", err, "retry", apiProbe)
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(apiProbe):
		}
	}
}

// Run keeps the informers warm, campaigns for the lease, and leads until
// ctx ends (nil) or the lease is lost (ErrLostLeadership).
func (c *Coordinator) Run(ctx context.Context) error {
	defer c.nodeQueue.ShutDown()
	defer c.csrQueue.ShutDown()
	if err := c.waitForAPI(ctx); err != nil {
		return nil // ctx ended
	}
	// The informers stop with informers, which is cancelled before the
	// Shutdowns below wait for them: on a lost lease the caller's ctx is
	// still live, and waiting on it would hang the process instead of
	// letting it exit and restart as a standby.
	informers, stopInformers := context.WithCancel(ctx)
	c.factory.Start(informers.Done())
	c.csrFactory.Start(informers.Done())
	defer c.factory.Shutdown()
	defer c.csrFactory.Shutdown()
	defer stopInformers()
	if !cache.WaitForCacheSync(ctx.Done(), c.factory.Core().V1().Nodes().Informer().HasSynced,
		c.csrFactory.Certificates().V1().CertificateSigningRequests().Informer().HasSynced) {
		return ctx.Err()
	}
	c.setReady(nil) // a synced standby is ready to take over
	c.log.Info("caches synced; campaigning for the lease", "lease", c.cfg.Namespace+"/"+c.cfg.LeaseName, "identity", c.cfg.Identity)

	lost := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: c.cfg.Namespace, Name: c.cfg.LeaseName},
			Client:     c.client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: c.cfg.Identity},
		},
		LeaseDuration: c.cfg.LeaseDuration, RenewDeadline: c.cfg.RenewDeadline, RetryPeriod: c.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            c.cfg.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: c.lead,
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
	select {
	case <-lost:
		c.log.Error("lost the leader lease; exiting so a fresh process starts as a standby")
		return ErrLostLeadership
	default:
		return nil
	}
}

// lead rebuilds the allocator from every Node's spec.podCIDRs, then runs the
// workers until leadership ends.
func (c *Coordinator) lead(ctx context.Context) {
	start := time.Now()
	c.m.Leader.Set(1)
	c.setReady(errors.New("leader: rebuilding the allocator"))
	if err := c.rebuild(); err != nil {
		c.log.Error("cannot build the allocator", "err", err)
		c.setReady(err)
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
		wg.Go(func() { work(ctx, c.csrQueue, c.syncCSR, c.log) })
	}
	for _, n := range c.listNodes() {
		c.nodeQueue.Add(n.Name)
	}
	csrs, _ := c.csrs.List(labels.Everything())
	for _, csr := range csrs {
		c.enqueueCSR(csr)
	}
	c.setReady(nil)
	<-ctx.Done()
	c.nodeQueue.ShutDown()
	c.csrQueue.ShutDown()
	wg.Wait()
}

func (c *Coordinator) listNodes() []*corev1.Node {
	nodes, _ := c.nodes.List(labels.Everything())
	return nodes
}

func (c *Coordinator) rebuild() error {
	alloc, err := c.settings.Allocator()
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.alloc = alloc
	for _, u := range alloc.Usage() {
		switch u.Pool {
		case "ipv4":
			c.hasV4 = u.Total > 0
		case "ipv6":
			c.hasV6 = u.Total > 0
		}
	}
	nodes := c.listNodes()
	for _, n := range nodes {
		for _, ip := range finalize.Addresses(n) {
			alloc.Reserve(ip)
		}
	}
	for _, n := range nodes {
		cidrs, err := finalize.PodCIDRs(n)
		if err == nil && len(cidrs) > 0 {
			err = alloc.Occupy(n.Name, cidrs)
		}
		if err != nil {
			c.recorder.Eventf(n, corev1.EventTypeWarning, "PodCIDRConflict", "cannot account for this node's pod CIDRs: %v", err)
		}
	}
	c.poolMetrics()
	return nil
}

func (c *Coordinator) poolMetrics() {
	for _, u := range c.alloc.Usage() {
		c.m.PoolSegments.WithLabelValues(u.Pool, "used").Set(float64(u.Used))
		c.m.PoolSegments.WithLabelValues(u.Pool, "total").Set(float64(u.Total))
	}
}

// work runs one queue's sync until the queue shuts down; failures are
// requeued with backoff, never dropped.
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

// say records an Event unless the same reason and message were said last
// time for this object: a persisting condition is one Event, not a stream.
func (c *Coordinator) say(obj runtime.Object, kind, name, typ, reason, msg string) {
	key := kind + "/" + name + "/" + reason
	c.mu.Lock()
	same := c.lastSaid[key] == msg
	c.lastSaid[key] = msg
	c.mu.Unlock()
	if !same {
		c.recorder.Event(obj, typ, reason, msg)
	}
}

func (c *Coordinator) forget(kind, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	prefix := kind + "/" + name + "/"
	for k := range c.lastSaid {
		if strings.HasPrefix(k, prefix) {
			delete(c.lastSaid, k)
		}
	}
}

func (c *Coordinator) syncNode(ctx context.Context, name string) error {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		// Released only now that the object is gone.
		c.mu.Lock()
		if len(c.alloc.Owned(name)) > 0 {
			c.alloc.Release(name)
			c.poolMetrics()
			c.log.Info("released pod CIDRs of a deleted node", "node", name)
			defer c.retryWaitingForCIDRs()
		}
		c.mu.Unlock()
		c.forget("node", name)
		return nil
	}
	if err != nil {
		return err
	}
	rep := finalize.Read(node)
	if len(rep.Problems) > 0 {
		c.say(node, "node", name, corev1.EventTypeWarning, "MalformedAgentReport", "ignored: "+strings.Join(rep.Problems, "; "))
	}
	uninitialized := finalize.Uninitialized(node)
	var waiting []string
	if uninitialized {
		waiting = finalize.Waiting(node, rep, c.settings.RequireProviderID)
	}
	existing, err := finalize.PodCIDRs(node)
	if err != nil {
		c.say(node, "node", name, corev1.EventTypeWarning, "InvalidPodCIDR", err.Error())
		return nil
	}

	var cidrs []netip.Prefix
	req := finalize.Request(node, rep, c.hasV4, c.hasV6)
	if c.settings.IPAMEnabled() && len(existing) == 0 && len(waiting) == 0 {
		// Every Node's addresses, this one's included, were reserved by
		// nodeChanged (and by rebuild) before this sync could run.
		c.mu.Lock()
		cidrs, err = c.alloc.Allocate(name, req)
		c.poolMetrics()
		c.mu.Unlock()
		if err != nil {
			c.m.Allocations.WithLabelValues(poolOf(req, netip.Prefix{}), "error").Inc()
			c.say(node, "node", name, corev1.EventTypeWarning, "PodCIDRAllocationFailed", err.Error())
			return fmt.Errorf("allocating pod CIDRs for %s: %w", name, err)
		}
	}
	if len(waiting) > 0 {
		// Nothing is written before the node can be initialized: then CIDRs,
		// labels, taints and the taint removal go in one patch.
		return nil
	}
	initialize := uninitialized
	var review string
	if initialize {
		review = c.reviewAtInit(name)
	}
	plan, err := finalize.Compute(node, rep, finalize.Inputs{
		Grants: c.settings.Grants, ClusterName: c.settings.ClusterName, CIDRs: cidrs, Initialize: initialize, Review: review,
	})
	if err != nil {
		return err
	}
	if len(plan.Refused) > 0 {
		c.m.GrantsRefused.WithLabelValues("request").Add(float64(len(plan.Refused)))
		c.say(node, "node", name, corev1.EventTypeWarning, "GrantRefused", strings.Join(plan.Refused, "; "))
	}
	if plan.Patch == nil {
		return nil
	}
	if _, err := c.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, plan.Patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		c.m.NodeWrites.WithLabelValues("finalize", "error").Inc()
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile; the delete event releases
		}
		return fmt.Errorf("patching node %s: %w", name, err)
	}
	c.m.NodeWrites.WithLabelValues("finalize", "ok").Inc()
	if review != "" {
		c.m.NodeWrites.WithLabelValues("review", "ok").Inc()
	}
	if len(cidrs) > 0 {
		for _, p := range cidrs {
			c.m.Allocations.WithLabelValues(poolOf(req, p), "ok").Inc()
		}
		if !initialize { // the Initialized Event names them
			c.recorder.Eventf(node, corev1.EventTypeNormal, "PodCIDRAssigned", "pod CIDRs %v", cidrs)
		}
	}
	if initialize {
		took := time.Since(node.CreationTimestamp.Time)
		c.m.NodeInitTime.Observe(took.Seconds())
		c.recorder.Eventf(node, corev1.EventTypeNormal, "Initialized", "initialized %v after registration: pod CIDRs %v, granted labels %v", took.Round(time.Millisecond), cidrs, plan.Granted)
		c.log.Info("node initialized", "node", name, "podCIDRs", cidrs, "granted", plan.Granted, "after", took)
	} else {
		c.log.Info("node updated", "node", name, "patch", string(plan.Patch))
	}
	return nil
}

// retryWaitingForCIDRs requeues the Nodes still without pod CIDRs: freed
// segments may be what they wait for.
func (c *Coordinator) retryWaitingForCIDRs() {
	for _, n := range c.listNodes() {
		if len(n.Spec.PodCIDRs) == 0 && n.Spec.PodCIDR == "" {
			c.nodeQueue.Add(n.Name)
		}
	}
}

func poolOf(req ipam.Request, p netip.Prefix) string {
	switch {
	case p.IsValid() && p.Addr().Is4():
		return "ipv4"
	case p.IsValid() && req.IPv6Prefix.IsValid() && req.IPv6Prefix.Overlaps(p):
		return "node-prefix"
	case p.IsValid():
		return "ipv6"
	case req.IPv6Prefix.IsValid():
		return "node-prefix"
	}
	return "pool"
}

func (c *Coordinator) syncCSR(ctx context.Context, name string) error {
	csr, err := c.csrs.Get(name)
	if apierrors.IsNotFound(err) {
		c.forget("csr", name)
		return nil
	}
	if err != nil || !pending(csr) {
		return err
	}
	in, node := c.approvalInput(csr, time.Now())
	nodeName := csrcheck.NodeName(csr.Spec.Username)
	d := approval.Decide(in)
	switch d.Action {
	case approval.Approve, approval.Deny:
		return c.decide(ctx, csr, d)
	case approval.Retry:
		return fmt.Errorf("CSR %s: %s", name, d.Reason)
	case approval.RequestReview:
		if age := in.Now.Sub(in.Created); node != nil && finalize.Uninitialized(node) && age < reviewGrace {
			// The initializing patch carries the review request; if the
			// node is not initialized within the grace, ask on its own.
			c.csrQueue.AddAfter(name, reviewGrace-age)
			return nil
		}
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, contract.AnnotationCSRReview, name)
		if _, err := c.client.CoreV1().Nodes().Patch(ctx, nodeName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
			c.m.NodeWrites.WithLabelValues("review", "error").Inc()
			return fmt.Errorf("asking node %s to attest CSR %s: %w", nodeName, name, err)
		}
		c.m.NodeWrites.WithLabelValues("review", "ok").Inc()
		c.csrQueue.AddAfter(name, in.Timeout-in.Now.Sub(in.Created))
	case approval.Wait:
		c.csrQueue.AddAfter(name, d.After)
	case approval.TimedOut:
		c.say(csr, "csr", name, corev1.EventTypeWarning, "AttestationTimeout", d.Reason)
		c.m.CSRDecisions.WithLabelValues(string(d.Action), d.Category).Inc()
	}
	return nil
}

// reviewGrace is how long a CSR from an uninitialized node waits for the
// initializing patch to carry its review request.
const reviewGrace = 30 * time.Second

// approvalInput gathers what approval.Decide needs for csr: the requesting
// Node, its review and attestation annotations, and the other Nodes that
// claim its addresses.
func (c *Coordinator) approvalInput(csr *certificatesv1.CertificateSigningRequest, now time.Time) (approval.Input, *corev1.Node) {
	nodeName := csrcheck.NodeName(csr.Spec.Username)
	in := approval.Input{
		CSR: csrcheck.FromCSR(csr), Created: csr.CreationTimestamp.Time, Policy: c.policy,
		AttestationRequired: c.settings.AttestationRequired(), Timeout: c.settings.CSR.AttestationTimeout.Duration,
		OnTimeout: c.settings.CSR.OnTimeout, Now: now,
	}
	self, err := c.nodes.Get(nodeName)
	if err != nil {
		self = nil // not registered (yet): Decide says so
	}
	if self != nil {
		in.Node = &csrcheck.Node{Name: self.Name, Addresses: self.Status.Addresses}
		in.Review = self.Annotations[contract.AnnotationCSRReview]
		if a, err := contract.DecodeAttestation(self.Annotations[contract.AnnotationCSRAttestation]); err == nil {
			in.Attestation = &a
		}
		in.Owners = c.owners(csrcheck.NodeIPs(*in.Node))
	}
	if in.Review != "" && in.Review != csr.Name {
		if other, err := c.csrs.Get(in.Review); err == nil && pending(other) && csrcheck.NodeName(other.Spec.Username) == nodeName {
			in.ReviewBusy = true
		}
	}
	return in, self
}

// owners are the Nodes claiming each of ips: the only addresses whose owners
// the CSR checks consult are the requesting Node's own.
func (c *Coordinator) owners(ips []netip.Addr) csrcheck.AddressOwners {
	owners := csrcheck.AddressOwners{}
	for _, ip := range ips {
		objs, _ := c.nodeIndex.ByIndex(byAddress, ip.String())
		for _, o := range objs {
			if n, ok := o.(*corev1.Node); ok && !slices.Contains(owners[ip], n.Name) {
				owners[ip] = append(owners[ip], n.Name)
			}
		}
		slices.Sort(owners[ip])
	}
	return owners
}

// reviewAtInit names the node's pending CSR that needs review now, so the
// initializing patch can ask for it; "" when none does.
func (c *Coordinator) reviewAtInit(name string) string {
	objs, _ := c.csrIndex.ByIndex(byNode, name)
	var newest *certificatesv1.CertificateSigningRequest
	for _, o := range objs {
		if csr, ok := o.(*certificatesv1.CertificateSigningRequest); ok && pending(csr) &&
			(newest == nil || csr.CreationTimestamp.After(newest.CreationTimestamp.Time)) {
			newest = csr
		}
	}
	if newest == nil {
		return ""
	}
	if in, _ := c.approvalInput(newest, time.Now()); approval.Decide(in).Action == approval.RequestReview {
		return newest.Name
	}
	return ""
}

func (c *Coordinator) decide(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, d approval.Decision) error {
	cond := certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "NodeinitApproved", Message: d.Reason,
		LastUpdateTime: metav1.Now(),
	}
	typ := corev1.EventTypeNormal
	if d.Action == approval.Deny {
		cond.Type, cond.Reason, typ = certificatesv1.CertificateDenied, "NodeinitDenied", corev1.EventTypeWarning
	}
	update := csr.DeepCopy()
	update.Status.Conditions = append(update.Status.Conditions, cond)
	if _, err := c.client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, update, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
		c.m.NodeWrites.WithLabelValues("approval", "error").Inc()
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("%s CSR %s: %w", d.Action, csr.Name, err)
	}
	c.m.NodeWrites.WithLabelValues("approval", "ok").Inc()
	c.m.CSRDecisions.WithLabelValues(string(d.Action), d.Category).Inc()
	if d.Action == approval.Deny {
		// An approval is recorded in the CSR's condition, as
		// kube-controller-manager's approver does: one Event fewer per join.
		c.recorder.Event(csr, typ, cond.Reason, d.Reason)
	}
	c.log.Info("CSR decided", "csr", csr.Name, "requestor", csr.Spec.Username, "decision", d.Action, "reason", d.Reason)
	return nil
}
