package controller_test

import (
	"context"
	"slices"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestANodeRegisteredAgainInAWatchGapInheritsNothing: a Node deleted and
// registered again under its name while the coordinator's watch of Nodes
// is cut is seen, after the gap, as one object replacing another (the
// relist returns the name with another UID; the deletion never comes).
// The new object gets nothing of the old one's record: not its address,
// which an honest Node took over during the gap, nor a certificate for it.
//
// attestationRequired is off, so the static checks and the record alone
// decide the new object's CSR: what the old record claims would be
// certified to whoever holds the name's identity (the bootstrap token
// mints one for any name). The API server is real; the gap and its 410
// are stood in by nodeWatchGap, as in TestListersOfARelistAreContested.
func TestANodeRegisteredAgainInAWatchGapInheritsNothing(t *testing.T) {
	gap, c := leadingBehindAGap(t, "regap", ipamSettings+"  attestationRequired: false\n")

	old := register(t, "regap-a", "10.0.5.81")
	old.publish(t, report{providerID: "talos://metal/10.0.5.81"})
	waitFor(t, 20*time.Second, "regap-a initialized, its address recorded", func() bool {
		return initialized(get(t, "regap-a")) && slices.Contains(recordedClaims(t, "regap-a"), "10.0.5.81")
	})
	oldUID := get(t, "regap-a").UID

	gap.cut()
	gap.saw("the gap's writes begin")
	if err := admin().CoreV1().Nodes().Delete(t.Context(), "regap-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "regap-a deleted", func() bool {
		_, err := admin().CoreV1().Nodes().Get(t.Context(), "regap-a", metav1.GetOptions{})
		return err != nil
	})
	// The address goes to an honest Node; the name is registered again,
	// listing it too, and never reports (it waits for its agent).
	honest := register(t, "regap-b", "10.0.5.81")
	honest.publish(t, report{providerID: "talos://metal/regap-b"})
	thief := register(t, "regap-a", "10.0.5.81")
	newUID := get(t, "regap-a").UID
	if newUID == oldUID {
		t.Fatal("regap-a was not registered again")
	}
	t.Cleanup(func() { _ = admin().CoreV1().Nodes().Delete(context.Background(), "regap-a", metav1.DeleteOptions{}) })
	gap.saw("the gap's writes end")
	gap.end()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the coordinator's requests for Nodes, and the gap:\n%s", gap.requests())
		}
	})
	waitFor(t, 10*time.Second, "the coordinator listing Nodes again", gap.relisted)
	c.syncedNow(t, "regap-a") // the list reached the informer's store

	thief.csr(t, "regap-a-serving", []string{"regap-a"}, []string{"10.0.5.81"})
	// Past csr.minAddressAge and the holds' rechecks: the old code
	// approved it within two seconds.
	c.skip(8 * time.Second)
	c.lookedAgain(t, "regap-a")
	if cond, ok := condition(t, "regap-a-serving"); ok && cond.Type == certificatesv1.CertificateApproved {
		t.Fatalf("the new regap-a was certified for the old object's address: %s", cond.Message)
	}
	// The new object's first sync releases the old one's claims and
	// prefix (the record keeps naming the old object until the new one
	// is initialized: records.Released).
	waitFor(t, 20*time.Second, "the old object's claims released", func() bool {
		rec := recordOf(t, "regap-a")
		return len(rec.Spec.Addresses) == 0 && rec.Spec.Prefix == ""
	})
	if rec := recordOf(t, "regap-a"); rec.Spec.NodeUID != string(oldUID) && rec.Spec.NodeUID != string(newUID) {
		t.Errorf("the record names %q, neither object", rec.Spec.NodeUID)
	}
	if !gap.relisted() {
		t.Error("the coordinator never listed Nodes again after the gap: the test cut nothing")
	}
}
