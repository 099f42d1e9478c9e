package main

// The bounds: what an approver and an initializer with no trust model at
// all reach on this machine, to tell our cost from the API server's,
// kube-controller-manager's and the simulated nodes'.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/apiclient"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// approveAtOnce approves every pending kubelet serving CSR as soon as its
// watch sees it, with no check at all: the approver no implementation can
// beat. With it, registration → certificate is the kubelet's ask plus
// kube-controller-manager's signer, and nothing of ours; the bench uses it to
// bound the certificate's latency (-approve-at-once), never to run a join.
// It approves only the CSRs of Nodes named with prefix.
func approveAtOnce(ctx context.Context, e *env, workers int, prefix string) (stop func(), err error) {
	return atOnce(ctx, e, workers,
		func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Certificates().V1().CertificateSigningRequests().Informer()
		},
		func(obj any) bool {
			csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
			return ok && csr.Spec.SignerName == certificatesv1.KubeletServingSignerName && len(csr.Status.Conditions) == 0 &&
				strings.HasPrefix(csr.Spec.Username, "system:node:"+prefix)
		}, approve)
}

// initializeAtOnce initializes every Node named with prefix the moment its
// watch sees the agent's report, in one admin patch (an IPv4 pod CIDR, the
// uninitialized taint gone), with no record, no check, no review, no labels
// and no providerID: less than any initializer that waits for the agent's
// report can do. Run in place of the coordinator (-initialize-at-once), it
// shows what storm/floor such an initializer reaches on this machine,
// kubelets and agents included.
func initializeAtOnce(ctx context.Context, e *env, workers int, prefix string) (stop func(), err error) {
	var cidrs sync.Map // Node name → its /24, kept across retries
	return atOnce(ctx, e, workers,
		func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
			return f.Core().V1().Nodes().Informer()
		},
		func(obj any) bool {
			n, ok := obj.(*corev1.Node)
			return ok && strings.HasPrefix(n.Name, prefix) && contract.Uninitialized(n) && n.Annotations[contract.AnnotationMetadata] != ""
		},
		func(ctx context.Context, cs kubernetes.Interface, store cache.Store, name string) error {
			c, _ := cidrs.LoadOrStore(name, podCIDR(boundCIDRs.Add(1)))
			return initializeNode(ctx, cs, store, name, c.(netip.Prefix))
		})
}

// atOnce runs workers that call act, as admin with no client-side rate
// limit, for each object of informer's kind that want holds for, retrying
// after 5 ms, doubling to 1 s. It returns once every object of the first
// list has been offered to want; stop ends the workers once they have
// acted on every key queued, and returns; it may be called more than
// once.
func atOnce(ctx context.Context, e *env, workers int,
	informer func(informers.SharedInformerFactory) cache.SharedIndexInformer, want func(any) bool,
	act func(ctx context.Context, cs kubernetes.Interface, store cache.Store, name string) error,
) (stop func(), err error) {
	cfg := apiclient.Builtin(e.cluster.Admin())
	cfg.QPS, cfg.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(cs, 0)
	inf := informer(factory)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, time.Second))
	enqueue := func(obj any) {
		if want(obj) {
			if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
				q.Add(key)
			}
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	if err != nil {
		cancel()
		q.ShutDown()
		return nil, err
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		cancel()
		q.ShutDown()
		factory.Shutdown()
		return nil, fmt.Errorf("the %T informer did not sync", inf)
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				name, shut := q.Get()
				if shut {
					return
				}
				if err := act(ctx, cs, inf.GetStore(), name); err != nil && ctx.Err() == nil {
					q.AddRateLimited(name)
				} else {
					q.Forget(name)
				}
				q.Done(name)
			}
		})
	}
	return sync.OnceFunc(func() {
		q.ShutDownWithDrain() // every key queued is acted on first
		q.ShutDown()          // and the delaying queue's own loop ends
		cancel()
		wg.Wait()
		factory.Shutdown()
	}), nil
}

func approve(ctx context.Context, cs kubernetes.Interface, store cache.Store, name string) error {
	obj, ok, err := store.GetByKey(name)
	if err != nil || !ok {
		return err
	}
	csr := obj.(*certificatesv1.CertificateSigningRequest).DeepCopy()
	if len(csr.Status.Conditions) > 0 {
		return nil
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
		Reason: "BenchApprovedAtOnce", Message: "approved at once, unchecked: the bench's bound on certificate latency",
	})
	_, err = cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, name, csr, metav1.UpdateOptions{})
	return err
}

// boundCIDRs counts the /24s initializeAtOnce gave in this process, so no
// two of its runs give one twice.
var boundCIDRs atomic.Uint32

// podCIDR is the i-th /24 of 10.128.0.0/9 (32,768 of them).
func podCIDR(i uint32) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(128 + i/256%128), byte(i % 256), 0}), 24)
}

func initializeNode(ctx context.Context, cs kubernetes.Interface, store cache.Store, name string, cidr netip.Prefix) error {
	obj, ok, err := store.GetByKey(name)
	if err != nil || !ok {
		return err
	}
	n := obj.(*corev1.Node)
	if !contract.Uninitialized(n) {
		return nil
	}
	var taints []corev1.Taint
	for _, t := range n.Spec.Taints {
		if t.Key != contract.TaintUninitialized {
			taints = append(taints, t)
		}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": n.ResourceVersion},
		"spec":     map[string]any{"podCIDR": cidr.String(), "podCIDRs": []string{cidr.String()}, "taints": taints},
	})
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// runAtOnce is the storm with initializeAtOnce in place of the coordinator,
// then, once the last Node is initialized, approveAtOnce (so the storm
// carries no approvals and no certificates), then the floor after the same
// pause as `make bench`'s: the storm/floor an initializer reaches that does
// nothing but initialize at the agent's report, for the Nodes named with
// prefix. With o.approveAtOnce the approver runs from the start instead, so
// the certificates flow during the storm, as they do in ours and in any
// approver's that does not hold them back. -joined-first does not apply;
// -floor=false skips the floor.
func runAtOnce(ctx context.Context, o options, e *env, nodes []*simNode, prefix string, r *strings.Builder) error {
	step("initializing at once, unchecked (-initialize-at-once): no coordinator")
	stopInit, err := initializeAtOnce(ctx, e, boundWorkers, prefix)
	if err != nil {
		return err
	}
	defer stopInit()
	approveNow := func() (func(), error) { return approveAtOnce(ctx, e, boundCSRWorkers, prefix) }
	stopApprove := func() {}
	if o.approveAtOnce {
		step("approving serving CSRs at sight during the storm, unchecked (-approve-at-once)")
		if stopApprove, err = approveNow(); err != nil {
			return err
		}
		defer stopApprove()
	}
	cpuBefore := e.cpu(nil)
	initialized := make(chan snapshot, 1)
	stormCtx, stormDone := context.WithTimeout(ctx, o.timeout)
	defer stormDone()
	go func() { initialized <- e.onceInitialized(stormCtx, nil, nodes) }()
	step("storm: %d agents start; once all wait for their Node, the kubelets register at once", o.nodes)
	if err := e.storm(ctx, nodes); err != nil {
		return err
	}
	atInit := <-initialized
	if !o.approveAtOnce {
		step("every Node initialized (or -timeout); approving their serving CSRs at sight, unchecked")
		if stopApprove, err = approveNow(); err != nil {
			return err
		}
		defer stopApprove()
	}
	if _, err := e.waitConverged(ctx, nodes, o.timeout); err != nil {
		return err
	}
	cpuAfter := e.cpu(nil)
	stopApprove()
	stopInit()
	apiInit := atInit.cpu["kube-apiserver"] - cpuBefore["kube-apiserver"]
	lat := e.latencies(nodes)
	lat.print(r)
	fmt.Fprintf(r, "CPU seconds during the storm:")
	for _, k := range []string{"kube-apiserver", "etcd", "kube-controller-manager", machinedProcess, benchProcess} {
		fmt.Fprintf(r, " %s %.1f;", k, (cpuAfter[k] - cpuBefore[k]).Seconds())
	}
	fmt.Fprintf(r, "\nkube-apiserver CPU to the last node initialized: %.1f s\n", apiInit.Seconds())
	if o.floor {
		for _, sn := range nodes {
			sn.stopAgent()
		}
		time.Sleep(2*time.Second + o.quiet) // make bench's settle and quiet window
		step("floor: the 5 unavoidable writes of %d joins, as fast as possible", o.nodes)
		before := e.cpu(nil)["kube-apiserver"]
		took, err := floor(ctx, e, "floor", o.nodes, false)
		if err != nil {
			return err
		}
		cpu := e.cpu(nil)["kube-apiserver"] - before
		fmt.Fprintf(r, "floor: %s for %d joins; storm/floor = %.2f; kube-apiserver CPU %.1f s, storm/floor = %.2f\n", took.Round(time.Millisecond), o.nodes,
			lat.span.Seconds()/took.Seconds(), cpu.Seconds(), apiInit.Seconds()/cpu.Seconds())
	}
	fmt.Print("\n" + r.String())
	if o.approveAtOnce {
		fmt.Println("-initialize-at-once -approve-at-once: no coordinator ran; the bench initialized each Node at its agent's report and approved each serving CSR at sight, during the storm, unchecked: an initializer and approver that do nothing else, not a run of ours")
	} else {
		fmt.Println("-initialize-at-once: no coordinator ran; the bench initialized each Node at its agent's report, then approved each serving CSR once the last was initialized, unchecked: an initializer that does nothing else, not a run of ours")
	}
	return nil
}

const (
	// boundWorkers and boundCSRWorkers are the coordinator's default
	// --node-workers and --csr-workers.
	boundWorkers, boundCSRWorkers = 64, 16
	// nodePrefix begins the storm's Node names (run: e.prepare(ctx, "node", …)).
	nodePrefix = "node-"
)
