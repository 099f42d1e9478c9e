package controller_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestTheRenewalRuleOutlivesAnUnwrittenApproval: the record names a
// request before its approval is written, so that no certificate is ever
// unrecorded. A request renewing the node's certificate with the same
// names, whose approval then fails (an API error, a leader change, or a
// second request of the node decided in that window), must not lift the
// renewal rule: a request with other names is still held while the first
// certificate is valid, and stays held when the renewing request is denied
// by hand. The API server is real; a transport wrapper fails the
// coordinator's approvals of the renewing request.
func TestTheRenewalRuleOutlivesAnUnwrittenApproval(t *testing.T) {
	var failing atomic.Value // the CSR whose approvals fail
	failing.Store("")
	cfg, _ := approvalsFailing(t, &failing, http.StatusInternalServerError)
	c := startCoordinatorAs(t, "renewal", ipamSettings+"  attestationRequired: false\n", cfg)

	n := register(t, "ren-a", "10.0.5.95")
	n.publish(t, report{providerID: "talos://metal/ren-a", externalIPs: []string{"10.0.5.96"}})
	waitFor(t, 20*time.Second, "ren-a initialized", func() bool { return initialized(get(t, "ren-a")) })
	c.settled()

	decided := func(name string) (certificatesv1.CertificateSigningRequestCondition, bool) { return condition(t, name) }
	n.csr(t, "ren-a-1", []string{"ren-a"}, []string{"10.0.5.95"})
	waitFor(t, 20*time.Second, "ren-a-1 decided", func() bool { _, ok := decided("ren-a-1"); return ok })
	if cond, _ := decided("ren-a-1"); cond.Type != certificatesv1.CertificateApproved {
		t.Fatalf("ren-a-1: %s %q", cond.Type, cond.Message)
	}
	first := recordOf(t, "ren-a").Spec.Serving

	// The renewal, with the same names: recorded, its approval failing.
	failing.Store("ren-a-2")
	n.csr(t, "ren-a-2", []string{"ren-a"}, []string{"10.0.5.95"})
	waitFor(t, 20*time.Second, "the record naming ren-a-2", func() bool {
		s := recordOf(t, "ren-a").Spec.Serving
		return s != nil && s.CSR == "ren-a-2"
	})
	if _, ok := decided("ren-a-2"); ok {
		t.Fatal("ren-a-2 was decided: the wrapper failed nothing")
	}

	// Other names, both the node's own, recorded and settled.
	n.csr(t, "ren-a-3", []string{"ren-a"}, []string{"10.0.5.95", "10.0.5.96"})
	waitFor(t, 20*time.Second, "ren-a-3 held or decided", func() bool {
		_, ok := decided("ren-a-3")
		return ok || len(events(t, "ren-a-3", "RenewalNamesChanged")) > 0
	})
	if cond, ok := decided("ren-a-3"); ok {
		t.Fatalf("ren-a-3, with other names while ren-a-1 is valid: %s %q", cond.Type, cond.Message)
	}

	// The renewal denied by hand: the first certificate's names stay.
	csr, err := admin().CertificatesV1().CertificateSigningRequests().Get(t.Context(), "ren-a-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: "Test", Message: "denied by hand", LastUpdateTime: metav1.Now()})
	if _, err := admin().CertificatesV1().CertificateSigningRequests().UpdateApproval(t.Context(), "ren-a-2", csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the record no longer naming ren-a-2", func() bool {
		s := recordOf(t, "ren-a").Spec.Serving
		return s == nil || s.CSR != "ren-a-2"
	})
	s := recordOf(t, "ren-a").Spec.Serving
	if s == nil || !slices.Equal(s.SANs, first.SANs) || !s.ValidUntil.Equal(first.ValidUntil) {
		t.Fatalf("after the renewal's denial the record keeps %+v, want ren-a-1's names until its end (%v, %v)", s, first.SANs, first.ValidUntil)
	}
	// A change of the Node syncs its pending CSRs again: still held.
	n.publish(t, report{providerID: "talos://metal/ren-a", externalIPs: []string{"10.0.5.96"}, requested: map[string]string{"node.cloudprovider.kubernetes.io/x": "y"}})
	c.syncedNow(t, "ren-a")
	if cond, ok := decided("ren-a-3"); ok {
		t.Fatalf("ren-a-3 after the renewal's denial: %s %q", cond.Type, cond.Message)
	}
}

// approvalsFailing is the coordinator's identity with its approvals of the
// CSR named in failing answered with code, as an API server would.
func approvalsFailing(t *testing.T, failing *atomic.Value, code int) (*rest.Config, *atomic.Int32) {
	t.Helper()
	var failed atomic.Int32
	cfg := rest.CopyConfig(coordinatorIdentity(t))
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if name := failing.Load().(string); name != "" && req.Method == http.MethodPut &&
				strings.HasSuffix(req.URL.Path, "/certificatesigningrequests/"+name+"/approval") {
				reason := map[int]string{http.StatusNotFound: "NotFound"}[code]
				if reason == "" {
					reason = "InternalError"
				}
				failed.Add(1)
				body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the test fails this approval","reason":%q,"code":%d}`, reason, code)
				return &http.Response{StatusCode: code, Status: http.StatusText(code), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
					Header: http.Header{"Content-Type": []string{"application/json"}}, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req}, nil
			}
			return rt.RoundTrip(req)
		})
	})
	return cfg, &failed
}

// TestARequestGoneBeforeItsApprovalLeavesNoCertificate: the record names a
// request before its approval is written; when the request is gone by then
// (deleted: the approval answers NotFound), the record no longer names it.
// Left there, a request never approved would count as a certificate (a gone
// request counts as issued) until its end date: for the renewal rule and
// the names' ownership.
func TestARequestGoneBeforeItsApprovalLeavesNoCertificate(t *testing.T) {
	var failing atomic.Value
	failing.Store("gone-a-1")
	cfg, failed := approvalsFailing(t, &failing, http.StatusNotFound)
	c := startCoordinatorAs(t, "goneapproval", ipamSettings+"  attestationRequired: false\n", cfg)
	n := register(t, "gone-a", "10.0.5.101")
	n.publish(t, report{providerID: "talos://metal/gone-a"})
	waitFor(t, 20*time.Second, "gone-a initialized", func() bool { return initialized(get(t, "gone-a")) })
	c.settled()
	n.csr(t, "gone-a-1", []string{"gone-a"}, []string{"10.0.5.101"})
	// Its approval is answered NotFound: the record may name it for that
	// moment, then must not.
	waitFor(t, 20*time.Second, "the approval of gone-a-1 answered NotFound", func() bool { return failed.Load() > 0 })
	waitFor(t, 10*time.Second, "the record not naming gone-a-1", func() bool {
		s := recordOf(t, "gone-a").Spec.Serving
		return s == nil || s.CSR != "gone-a-1"
	})
}
