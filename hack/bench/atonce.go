package main

import (
	"context"
	"sync"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/apiclient"
)

// approveAtOnce approves every pending kubelet serving CSR as soon as its
// watch sees it, with no check at all: the approver no implementation can
// beat. With it, registration → certificate is the kubelet's ask plus
// kube-controller-manager's signer, and nothing of ours; the bench uses it to
// bound the certificate's latency (-approve-at-once), never to run a join.
// It stops when ctx ends and returns once its workers have.
func approveAtOnce(ctx context.Context, e *env, workers int) (stop func(), err error) {
	cfg := apiclient.Builtin(e.cluster.Admin())
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(cs, 0)
	inf := factory.Certificates().V1().CertificateSigningRequests().Informer()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	pending := func(obj any) {
		csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
		if ok && csr.Spec.SignerName == certificatesv1.KubeletServingSignerName && len(csr.Status.Conditions) == 0 {
			q.Add(csr.Name)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    pending,
		UpdateFunc: func(_, obj any) { pending(obj) },
	}); err != nil {
		cancel()
		return nil, err
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				name, shut := q.Get()
				if shut {
					return
				}
				if err := approve(ctx, cs, inf.GetStore(), name); err != nil && ctx.Err() == nil {
					q.AddRateLimited(name)
				} else {
					q.Forget(name)
				}
				q.Done(name)
			}
		})
	}
	return func() {
		cancel()
		q.ShutDown()
		wg.Wait()
		factory.Shutdown()
	}, nil
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
