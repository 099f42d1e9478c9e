package main

import (
	"runtime"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestApproveAtOnce: the bound's approver approves a kubelet serving CSR,
// leaves a CSR of any other signer alone, and leaves no goroutine behind.
func TestApproveAtOnce(t *testing.T) {
	ctx := t.Context()
	goroutines := runtime.NumGoroutine()
	stop, err := approveAtOnce(ctx, shared, 4)
	if err != nil {
		t.Fatal(err)
	}
	csrs := shared.admin.CertificatesV1().CertificateSigningRequests()
	create := func(name, signer string) {
		t.Helper()
		req, err := requestPEM("system:node:" + name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := csrs.Create(ctx, &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certificatesv1.CertificateSigningRequestSpec{Request: req, SignerName: signer,
				Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { csrs.Delete(ctx, name, metav1.DeleteOptions{}) })
	}
	create("atonce-serving", certificatesv1.KubeletServingSignerName)
	create("atonce-other", floorSigner)
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
	deadline := time.Now().Add(10 * time.Second)
	for !approved("atonce-serving") {
		if time.Now().After(deadline) {
			t.Fatal("the kubelet serving CSR was not approved within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // the other CSR had as long
	if approved("atonce-other") {
		t.Error("a CSR of another signer was approved")
	}
	stop()
	deadline = time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goroutines {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after stop, %d before", runtime.NumGoroutine(), goroutines)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
