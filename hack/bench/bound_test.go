package main

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/apiclient"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// TestApproveAtOnce: the bound's approver approves a kubelet serving CSR of
// a Node named with its prefix, leaves one of another signer and one of a
// Node outside its prefix alone, and leaves no goroutine behind.
func TestApproveAtOnce(t *testing.T) {
	ctx := t.Context()
	csrs := shared.admin.CertificatesV1().CertificateSigningRequests()
	create := func(node, name, signer string) {
		t.Helper()
		id, err := shared.cluster.NodeIdentity(node)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfig(apiclient.Builtin(id.Config()))
		if err != nil {
			t.Fatal(err)
		}
		req, err := requestPEM("system:node:" + node)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certificatesv1.CertificateSigningRequestSpec{Request: req, SignerName: signer,
				Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { csrs.Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{}) })
	}
	create("atonce-a", "atonce-serving", certificatesv1.KubeletServingSignerName)
	create("atonce-a", "atonce-other-signer", floorSigner)
	create("elsewhere-b", "atonce-other-node", certificatesv1.KubeletServingSignerName)
	goroutines := runtime.NumGoroutine() // the node clients' own are counted already
	stop, err := approveAtOnce(ctx, shared, 4, "atonce-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	approved := func(name string) bool {
		csr, err := csrs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range csr.Status.Conditions {
			if c.Type == certificatesv1.CertificateApproved {
				return true
			}
		}
		return false
	}
	eventually(t, 10*time.Second, "the kubelet serving CSR approved", func() bool { return approved("atonce-serving") })
	// Every CSR was offered to the approver before it started, and stop
	// returns once it has acted on every one it queued.
	stop()
	for _, name := range []string{"atonce-other-signer", "atonce-other-node"} {
		if approved(name) {
			t.Errorf("%s was approved", name)
		}
	}
	noMoreGoroutines(t, goroutines)
}

// TestInitializeAtOnce: the bound's initializer initializes a Node its agent
// has reported on (a pod CIDR, the uninitialized taint gone, other taints
// kept), leaves an unreported Node alone, and leaves no goroutine behind.
func TestInitializeAtOnce(t *testing.T) {
	ctx := t.Context()
	goroutines := runtime.NumGoroutine()
	stop, err := initializeAtOnce(ctx, shared, 4, "atonce-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	nodes := shared.admin.CoreV1().Nodes()
	create := func(name string, annotations map[string]string) {
		t.Helper()
		if _, err := nodes.Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{
				{Key: contract.TaintUninitialized, Value: "true", Effect: corev1.TaintEffectNoSchedule},
				{Key: "admin", Effect: corev1.TaintEffectNoSchedule},
			}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nodes.Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{}) })
	}
	// The silent Node first: the watch delivers it before the reported one.
	create("atonce-silent", nil)
	create("atonce-reported", map[string]string{contract.AnnotationMetadata: "{}"})
	get := func(name string) *corev1.Node {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	eventually(t, 10*time.Second, "the reported Node initialized", func() bool { return initialized(get("atonce-reported")) })
	if n := get("atonce-reported"); !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "admin" }) {
		t.Errorf("taints after the initialization: %v, want the admin's kept", n.Spec.Taints)
	}
	// The silent Node was offered before the reported one, and stop
	// returns once every Node queued was acted on.
	stop()
	if n := get("atonce-silent"); len(n.Spec.PodCIDRs) > 0 || !contract.Uninitialized(n) {
		t.Errorf("a Node with no report was written: pod CIDRs %v, taints %v", n.Spec.PodCIDRs, n.Spec.Taints)
	}
	noMoreGoroutines(t, goroutines)
}

// TestPodCIDRsAreDistinct: the bound's initializer never gives two Nodes one
// /24 within its range.
func TestPodCIDRsAreDistinct(t *testing.T) {
	seen := map[netip.Prefix]uint32{}
	for i := range uint32(1 << 15) {
		p := podCIDR(i)
		if j, dup := seen[p]; dup {
			t.Fatalf("podCIDR(%d) = podCIDR(%d) = %s", i, j, p)
		}
		if !netip.MustParsePrefix("10.128.0.0/9").Contains(p.Addr()) || p.Bits() != 24 {
			t.Fatalf("podCIDR(%d) = %s, outside 10.128.0.0/9 or not a /24", i, p)
		}
		seen[p] = i
	}
}

func noMoreGoroutines(t *testing.T, before int) {
	t.Helper()
	eventually(t, 5*time.Second, fmt.Sprintf("%d goroutines, as before", before), func() bool { return runtime.NumGoroutine() <= before })
}

// TestRunAtOnce runs `go run ./hack/bench -initialize-at-once` (BENCHMARKS.md)
// at 5 nodes: every Node initialized and certified with no
// coordinator, and the floor measured.
func TestRunAtOnce(t *testing.T) {
	after, atSight := nodesFor(t, "bound", 4000, 5), nodesFor(t, "bound", 4010, 5)
	t.Cleanup(func() { // Nodes no coordinator keeps records of: later tests' coordinators would see them
		ctx := context.Background()
		for i, sn := range slices.Concat(after, atSight) {
			floorName, _, _, _ := nodeSpec("floor", i)
			for _, name := range []string{sn.name, floorName} {
				shared.admin.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
			}
		}
		csrs, err := shared.admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		for _, c := range csrs.Items {
			if strings.HasPrefix(c.Spec.Username, "system:node:bound-") || strings.HasPrefix(c.Name, "floor-") {
				shared.admin.CertificatesV1().CertificateSigningRequests().Delete(ctx, c.Name, metav1.DeleteOptions{})
			}
		}
	})
	for _, tc := range []struct {
		name  string
		nodes []*simNode
		o     options
		want  []string
	}{
		{"approved once the last is initialized", after, options{nodes: len(after), timeout: time.Minute, floor: true},
			[]string{"registration → certificate issued", "floor: ", "storm/floor = "}},
		// The floor's Node names are taken by the run above.
		{"approved at sight during the storm", atSight, options{nodes: len(atSight), timeout: time.Minute, approveAtOnce: true},
			[]string{"registration → certificate issued", "kube-apiserver CPU to the last node initialized"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r strings.Builder
			if err := runAtOnce(t.Context(), tc.o, shared, tc.nodes, "bound-", &r); err != nil {
				t.Fatal(err)
			}
			if d := shared.watch.dupes(); len(d) > 0 {
				t.Errorf("pod CIDRs given twice by the bound or the floor: %v", d)
			}
			for _, want := range tc.want {
				if !strings.Contains(r.String(), want) {
					t.Errorf("the report has no %q:\n%s", want, r.String())
				}
			}
			for _, sn := range tc.nodes {
				if _, certified, err := sn.times(); err != nil || certified.IsZero() {
					t.Errorf("%s: no serving certificate (%v)", sn.name, err)
				}
			}
		})
	}
}
