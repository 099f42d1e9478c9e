package controller_test

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// csr.enrolment: approve enrols no key on first use: even the first join of
// a name waits, with an AgentKeyNotEnrolled Event on its Node naming the
// key and the one command, until an admin runs that command; its serving
// CSR is held meanwhile and approved afterwards.
func TestEnrolmentApprove(t *testing.T) {
	c := startCoordinator(t, "enrol", ipamSettings+"  enrolment: approve\n")
	n := register(t, "enrol-a", "10.0.26.1")
	n.publish(t, report{providerID: "talos://metal/10.0.26.1"})
	waitFor(t, 10*time.Second, "enrol-a initialized", func() bool { return initialized(get(t, "enrol-a")) })
	waitFor(t, 10*time.Second, "AgentKeyNotEnrolled Event", func() bool { return len(events(t, "enrol-a", "AgentKeyNotEnrolled")) > 0 })
	key := contract.EncodeAgentKey(n.key.Public().(ed25519.PublicKey))
	if msg := events(t, "enrol-a", "AgentKeyNotEnrolled")[0].Message; !strings.Contains(msg, key) || !strings.Contains(msg, "kubectl patch noderecord enrol-a") {
		t.Errorf("the Event does not show the key and the command: %q", msg)
	}
	recs := dynamic.NewForConfigOrDie(cluster.Admin()).Resource(records.GVR)
	u, err := recs.Get(t.Context(), "enrol-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := records.FromUnstructured(u)
	if rec.Spec.AgentKey != "" || rec.Spec.PendingAgentKey != key {
		t.Fatalf("record: agentKey %q (want none), pendingAgentKey %q (want %q)", rec.Spec.AgentKey, rec.Spec.PendingAgentKey, key)
	}

	c.settled()
	n.csr(t, "enrol-a-serving", []string{"enrol-a"}, []string{"10.0.26.1"})
	waitFor(t, 10*time.Second, "NoEnrolledAgentKey Event", func() bool { return len(events(t, "enrol-a-serving", "NoEnrolledAgentKey")) > 0 })
	if c, decided := condition(t, "enrol-a-serving"); decided {
		t.Fatalf("decided before the admin enrolled the key: %+v", c)
	}

	// The admin checked the key the Event shows against the agent's log.
	// Before they run the command, whoever holds the node's credential
	// publishes another key, which the coordinator records as pending:
	// the command they copied must not enrol that one.
	command := events(t, "enrol-a", "AgentKeyNotEnrolled")[0].Message
	_, patch, ok := strings.Cut(command, "--type=json -p '")
	patch, _, _ = strings.Cut(patch, "'")
	if !ok || patch == "" {
		t.Fatalf("no JSON patch in the Event: %q", command)
	}
	honest := n.key
	_, n.key, _ = ed25519.GenerateKey(nil)
	n.publish(t, report{providerID: "talos://metal/10.0.26.1"})
	swapped := contract.EncodeAgentKey(n.key.Public().(ed25519.PublicKey))
	waitFor(t, 10*time.Second, "the other key pending", func() bool {
		u, err := recs.Get(t.Context(), "enrol-a", metav1.GetOptions{})
		rec, _ := records.FromUnstructured(u)
		return err == nil && rec.Spec.PendingAgentKey == swapped
	})
	if _, err := recs.Patch(t.Context(), "enrol-a", types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
		u, _ := recs.Get(t.Context(), "enrol-a", metav1.GetOptions{})
		rec, _ := records.FromUnstructured(u)
		t.Fatalf("the command the admin checked enrolled %q, a key published after it (checked: %q)", rec.Spec.AgentKey, key)
	}
	n.key = honest
	n.publish(t, report{providerID: "talos://metal/10.0.26.1"})
	waitFor(t, 10*time.Second, "the checked key pending again", func() bool {
		u, err := recs.Get(t.Context(), "enrol-a", metav1.GetOptions{})
		rec, _ := records.FromUnstructured(u)
		return err == nil && rec.Spec.PendingAgentKey == key
	})
	if _, err := recs.Patch(t.Context(), "enrol-a", types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	n.attest(t, "enrol-a-serving", "")
	waitFor(t, 15*time.Second, "decision", func() bool { _, ok := condition(t, "enrol-a-serving"); return ok })
	if c, _ := condition(t, "enrol-a-serving"); c.Type != certificatesv1.CertificateApproved {
		t.Errorf("after the admin's command: %s %q, want Approved", c.Type, c.Message)
	}
}
