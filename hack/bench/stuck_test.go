package main

import (
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRefusedForGood(t *testing.T) {
	at := time.Date(2026, 11, 26, 20, 0, 0, 0, time.UTC)
	csr := func(user, signer string, cond certificatesv1.RequestConditionType, msg string, after time.Duration) certificatesv1.CertificateSigningRequest {
		c := certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{Username: user, SignerName: signer}}
		if cond != "" {
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: cond, Message: msg, LastUpdateTime: metav1.NewTime(at.Add(after))}}
		}
		return c
	}
	const serving, client = certificatesv1.KubeletServingSignerName, certificatesv1.KubeAPIServerClientKubeletSignerName
	denied := func(node, msg string, after time.Duration) certificatesv1.CertificateSigningRequest {
		return csr("system:node:"+node, serving, certificatesv1.CertificateDenied, msg, after)
	}
	for _, tc := range []struct {
		name     string
		csrs     []certificatesv1.CertificateSigningRequest
		waiting  []string
		want     string
		inReason string
	}{
		{"none", nil, []string{"n1"}, "", ""},
		{"refused once, then waiting: a kubelet that asked early", []certificatesv1.CertificateSigningRequest{denied("n1", "early", 0), csr("system:node:n1", serving, "", "", 0)}, []string{"n1"}, "", ""},
		{"refused twice", []certificatesv1.CertificateSigningRequest{denied("n1", "a", 0), denied("n1", "b", time.Second)}, []string{"n1"}, "", ""},
		{"refused three times, the latest named", []certificatesv1.CertificateSigningRequest{denied("n1", "first", 0), denied("n1", "latest", 2*time.Second), denied("n1", "second", time.Second)}, []string{"n1"}, "n1", "3 serving CSRs denied, the latest: latest"},
		{"a node no longer waited for", []certificatesv1.CertificateSigningRequest{denied("n1", "x", 0), denied("n1", "x", 0), denied("n1", "x", 0)}, []string{"n2"}, "", ""},
		{"another signer's denials do not count", []certificatesv1.CertificateSigningRequest{
			csr("system:node:n1", client, certificatesv1.CertificateDenied, "x", 0), csr("system:node:n1", client, certificatesv1.CertificateDenied, "x", 0), denied("n1", "x", 0), denied("n1", "x", 0)}, []string{"n1"}, "", ""},
		{"not a node's", []certificatesv1.CertificateSigningRequest{
			csr("n1", serving, certificatesv1.CertificateDenied, "x", 0), csr("n1", serving, certificatesv1.CertificateDenied, "x", 0), csr("n1", serving, certificatesv1.CertificateDenied, "x", 0)}, []string{"n1"}, "", ""},
		{"approved ones do not count", []certificatesv1.CertificateSigningRequest{
			csr("system:node:n1", serving, certificatesv1.CertificateApproved, "", 0), denied("n1", "x", 0), denied("n1", "x", 0)}, []string{"n1"}, "", ""},
		{"the first waiting by name", []certificatesv1.CertificateSigningRequest{
			denied("b", "x", 0), denied("b", "x", 0), denied("b", "x", 0), denied("a", "y", 0), denied("a", "y", 0), denied("a", "y", 0)}, []string{"b", "a"}, "a", "y"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node, reason, ok := refusedForGood(tc.csrs, tc.waiting)
			if node != tc.want || ok != (tc.want != "") || !strings.Contains(reason, tc.inReason) {
				t.Fatalf("got %q %q %t, want %q with %q", node, reason, ok, tc.want, tc.inReason)
			}
		})
	}
}
