package controller_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/controller"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
)

// A node's serving CSRs are decided one at a time, so the renewal rule
// sees every approval before the next decision: of two requests with other
// names, each approvable alone and attested at the same moment (root on
// the node holds the agent's key), at most one is approved while the
// other's certificate is valid. The record names the first before its
// approval, as the join writes it when the CSR came first, so that
// approval writes no record; two CSR workers deciding both at once each
// read no approved certificate, and both were approved.
func TestOneDecisionPerNodeAtATime(t *testing.T) {
	c := startCoordinator(t, "one-at-a-time", ipamSettings)
	recs := dynamic.NewForConfigOrDie(cluster.Admin()).Resource(records.GVR)
	const nodes = 4
	var ns []*simNode
	for i := range nodes {
		n := register(t, fmt.Sprintf("one-at-a-time-%d", i), fmt.Sprintf("10.0.63.%d", i+1))
		n.publish(t, report{providerID: "talos://metal/" + n.ip.String()})
		ns = append(ns, n)
	}
	waitFor(t, 15*time.Second, "every node initialized", func() bool {
		for _, n := range ns {
			if !initialized(get(t, n.name)) {
				return false
			}
		}
		return true
	})
	c.settled()
	for _, n := range ns {
		n.csr(t, n.name+"-first", []string{n.name}, []string{n.ip.String()})
		// Another request with other names (its name alone), as the
		// thief on the node files it.
		n.csr(t, n.name+"-other", []string{n.name}, nil)
		first, err := n.self.CertificatesV1().CertificateSigningRequests().Get(t.Context(), n.name+"-first", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := csrcheck.Parse(first.Spec.Request)
		if err != nil {
			t.Fatal(err)
		}
		serving := records.Serving{CSR: first.Name, UID: string(first.UID), SANs: contract.RequestSANs(parsed), ValidUntil: time.Now().Add(365 * 24 * time.Hour).UTC().Truncate(time.Second)}
		u, err := recs.Patch(t.Context(), n.name, types.MergePatchType, mustJSON(t, map[string]any{"spec": map[string]any{"serving": serving}}), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the coordinator's store has "+n.name+"'s record", func() bool {
			return controller.RecordVersion(c.Coordinator, n.name) == u.GetResourceVersion()
		})
	}
	var wg sync.WaitGroup
	for _, n := range ns {
		for _, csr := range []string{n.name + "-first", n.name + "-other"} {
			wg.Go(func() { n.approveOnNode(t, csr) })
		}
	}
	wg.Wait()
	for _, n := range ns {
		waitFor(t, 15*time.Second, "a decision on one of "+n.name+"'s requests", func() bool {
			a, _ := condition(t, n.name+"-first")
			b, _ := condition(t, n.name+"-other")
			return a.Type == certificatesv1.CertificateApproved || b.Type == certificatesv1.CertificateApproved
		})
	}
	for _, n := range ns {
		c.lookedAgain(t, n.name) // the other decision, if any, is in
	}
	for _, n := range ns {
		a, _ := condition(t, n.name+"-first")
		b, _ := condition(t, n.name+"-other")
		if a.Type == certificatesv1.CertificateApproved && b.Type == certificatesv1.CertificateApproved {
			t.Errorf("%s: both requests approved, with other names, while the first certificate is valid", n.name)
		}
	}
}
