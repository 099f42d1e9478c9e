package controller_test

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/controller"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck/csrtest"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/syncbuf"
)

// In a cluster whose kubelets ask for serving certificates, a kubelet that
// asks a little after its agent reported (kubelet 1.37 asks once its Node
// watch has the Node, up to a second later) has its CSR's review asked in
// the initializing patch: the coordinator creates the record and patches
// the Node once each, and the approval writes no record update, for the
// record already names the certificate. Initializing first cost a second
// Node patch (the review request) and a record update before the approval.
func TestJoinWaitsForItsKubeletsCSR(t *testing.T) {
	// A longer wait than the default's 3s: the test's one-second delay
	// stays inside it on a loaded machine.
	startCoordinator(t, "initwait", waitingSettings("10s"))
	// Another Node's kubelet asks (its review, in its initializing patch,
	// says the coordinator has decided its CSR): this cluster's kubelets do.
	other := register(t, "initwait-a", "10.0.7.1")
	other.csr(t, "initwait-a-serving", []string{"initwait-a"}, []string{"10.0.7.1"})
	other.publish(t, report{providerID: "talos://metal/10.0.7.1"})
	other.attest(t, "initwait-a-serving", "")
	lateJoin(t, "initwait-b", "10.0.7.2")
	if !initialized(get(t, "initwait-b")) {
		t.Fatal("not initialized")
	}
	if got, want := joinWrites(t, "initwait-b"), "Node patches 1, record creates 1, record updates 0"; got != want {
		t.Errorf("coordinator writes for a join whose kubelet asked after its report: %s, want %s", got, want)
	}
	if r, _ := contract.ParseReview(get(t, "initwait-b").Annotations[contract.AnnotationCSRReview]); r.CSR != "initwait-b-serving" {
		t.Errorf("csr-review %q", r.CSR)
	}
}

// A kubelet that never asks (it has no rotate-server-certificates) holds
// its Node's initialization csr.initWait after registration, no longer.
func TestJoinWaitsNoLongerThanInitWait(t *testing.T) {
	startCoordinator(t, "initwait-never", waitingSettings("3s"))
	other := register(t, "initwait-c", "10.0.7.3")
	other.csr(t, "initwait-c-serving", []string{"initwait-c"}, []string{"10.0.7.3"})
	other.publish(t, report{providerID: "talos://metal/10.0.7.3"})
	other.attest(t, "initwait-c-serving", "") // waits for its review: the CSR was decided
	n := register(t, "initwait-d", "10.0.7.4")
	n.publish(t, report{providerID: "talos://metal/10.0.7.4"})
	waitFor(t, 10*time.Second, "initialized", func() bool { return initialized(get(t, "initwait-d")) })
	created := get(t, "initwait-d").CreationTimestamp.Time
	for _, e := range coordinatorWrites(t, "nodes", "initwait-d") {
		if e.Verb == "patch" && e.ResponseStatus.Code < 300 {
			// Creation times are whole seconds; the upper bound leaves a
			// loaded machine time to sync once the wait is over.
			if waited := e.StageTimestamp.Sub(created); waited < 2*time.Second || waited > 9*time.Second {
				t.Errorf("initialized %v after registration, want about csr.initWait (3s)", waited)
			}
			return
		}
	}
	t.Fatal("no initializing patch in the audit log")
}

// An identity without a Node (the bootstrap token every Talos worker
// carries mints system:node:<any name>) that files serving CSRs does not
// turn the joins' wait on: in a cluster whose kubelets ask for nothing, a
// join is initialized once its agent has reported, not csr.initWait later.
func TestNodelessCSRsTurnNoWaitOn(t *testing.T) {
	// Pending CSRs that earlier tests left, of Nodes that exist, would, and
	// so would their records' certificates.
	if err := admin().CertificatesV1().CertificateSigningRequests().DeleteCollection(t.Context(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	recs := dynamic.NewForConfigOrDie(cluster.Admin()).Resource(records.GVR)
	list, err := recs.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range list.Items {
		if _, ok, _ := unstructured.NestedMap(u.Object, "spec", "serving"); ok {
			if _, err := recs.Patch(t.Context(), u.GetName(), types.MergePatchType, []byte(`{"spec":{"serving":null}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var log syncbuf.Buffer
	startCoordinatorAs(t, "initwait-nodeless", waitingSettings("20s"), coordinatorIdentity(t), func(c *controller.Config) {
		c.Log = slog.New(slog.NewTextHandler(io.MultiWriter(&log, testWriter{t}), nil)).With("coordinator", "initwait-nodeless")
	})
	id, err := cluster.NodeIdentity("initwait-ghost")
	if err != nil {
		t.Fatal(err)
	}
	ghost := kubernetes.NewForConfigOrDie(id.Config())
	if _, err := ghost.CertificatesV1().CertificateSigningRequests().Create(t.Context(), &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "initwait-ghost-serving"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: csrtest.PEM(t, nil, "initwait-ghost", []string{"initwait-ghost"}), SignerName: certificatesv1.KubeletServingSignerName,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The sync point: the coordinator has looked at the CSR and found no
	// Node for it.
	waitFor(t, 10*time.Second, "the CSR synced", func() bool {
		return strings.Contains(log.String(), "CSR initwait-ghost-serving: node:")
	})
	n := register(t, "initwait-e", "10.0.7.5")
	n.publish(t, report{providerID: "talos://metal/10.0.7.5"})
	waitFor(t, 10*time.Second, "initialized without waiting csr.initWait (20s)", func() bool { return initialized(get(t, "initwait-e")) })
}

// A coordinator that starts leading (an upgrade, a leader change) in a
// cluster whose kubelets were certified, but where no serving CSR is left
// (kube-controller-manager deletes them an hour after issuing), learns from
// its NodeRecords that kubelets ask: the next join waits for its kubelet's
// CSR as it would have with the earlier leader, and costs no more writes.
func TestRecordedCertificatesTurnTheWaitOn(t *testing.T) {
	first := startCoordinator(t, "initwait-first", waitingSettings("10s"))
	certifiedJoin(t, "initwait-f", "10.0.7.6", 10*time.Second)
	waitFor(t, 10*time.Second, "the record names the certificate", func() bool {
		r := record(t, "initwait-f")
		return r != nil && r.Spec.Serving != nil
	})
	first.stop()
	if err := admin().CertificatesV1().CertificateSigningRequests().DeleteCollection(t.Context(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	startCoordinator(t, "initwait-next", waitingSettings("10s"))
	lateJoin(t, "initwait-g", "10.0.7.7")
	if got, want := joinWrites(t, "initwait-g"), "Node patches 1, record creates 1, record updates 0"; got != want {
		t.Errorf("coordinator writes for the first join after a leader change: %s, want %s (the join did not wait for its kubelet)", got, want)
	}
}

// lateJoin plays a join whose kubelet asks for its serving certificate a
// second after its agent reported, as kubelet 1.37 may (it asks once its
// Node watch has the Node), and returns once the CSR is approved.
func lateJoin(t *testing.T, name, ip string) {
	t.Helper()
	n := register(t, name, ip)
	n.publish(t, report{providerID: "talos://metal/" + ip})
	time.Sleep(time.Second)
	n.csr(t, name+"-serving", []string{name}, []string{ip})
	n.attest(t, name+"-serving", "")
	waitApproved(t, name+"-serving", 15*time.Second)
}

// certifiedJoin plays a join whose kubelet asks for its serving
// certificate before its agent reports, and returns once the CSR is
// approved, within the given time.
func certifiedJoin(t *testing.T, name, ip string, within time.Duration) {
	t.Helper()
	n := register(t, name, ip)
	n.csr(t, name+"-serving", []string{name}, []string{ip})
	n.publish(t, report{providerID: "talos://metal/" + ip})
	n.attest(t, name+"-serving", "")
	waitApproved(t, name+"-serving", within)
}

// waitApproved waits until the CSR is approved.
func waitApproved(t *testing.T, csr string, within time.Duration) {
	t.Helper()
	waitFor(t, within, csr+" approved", func() bool {
		c, _ := condition(t, csr)
		return c.Type == certificatesv1.CertificateApproved
	})
}

// joinWrites counts the coordinator's Node patches, record creates and
// record updates for node, from the audit log.
func joinWrites(t *testing.T, node string) string {
	t.Helper()
	count := func(resource, verb string) (n int) {
		for _, e := range coordinatorWrites(t, resource, node) {
			if e.Verb == verb && e.Stage == "ResponseComplete" {
				n++
			}
		}
		return n
	}
	return fmt.Sprintf("Node patches %d, record creates %d, record updates %d", count("nodes", "patch"), count("noderecords", "create"), count("noderecords", "update"))
}

// record reads node's NodeRecord as an admin would; nil when there is none.
func record(t *testing.T, node string) *records.Record {
	t.Helper()
	u, err := dynamic.NewForConfigOrDie(cluster.Admin()).Resource(records.GVR).Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	r, err := records.FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitingSettings are ipamSettings with joins waiting for their kubelet's
// CSR up to wait (the other tests' settings never wait).
func waitingSettings(wait string) string {
	return strings.Replace(ipamSettings, "initWait: 0s", "initWait: "+wait, 1)
}
