package approval

import (
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck/csrtest"
)

func request(t *testing.T, name string, dns []string, ips ...string) csrcheck.Request {
	t.Helper()
	return csrcheck.Request{
		Name: name, Username: "system:node:node-a", Groups: []string{"system:nodes", "system:authenticated"},
		SignerName: certificatesv1.KubeletServingSignerName,
		Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		PEM:        csrtest.PEM(t, nil, "node-a", dns, ips...),
	}
}

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	nodeA := &csrcheck.Node{Name: "node-a", Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: "node-a"}}}
	nodeB := csrcheck.Node{Name: "node-b", Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.2"}}}
	owners := csrcheck.Owners([]csrcheck.Node{*nodeA, nodeB})
	good := request(t, "csr-good", []string{"node-a"}, "10.0.0.1")
	other := request(t, "csr-good", []string{"node-a"}, "10.0.0.1") // same name, another request
	attest := func(r csrcheck.Request, v contract.Verdict, reason string) *contract.Attestation {
		return &contract.Attestation{CSR: r.Name, RequestSHA256: contract.RequestDigest(r.PEM), Verdict: v, Reason: reason}
	}
	base := func(r csrcheck.Request) Input {
		return Input{CSR: r, Created: now.Add(-10 * time.Second), Node: nodeA, Owners: owners, AttestationRequired: true,
			Timeout: time.Minute, OnTimeout: config.StayPending, Now: now}
	}
	for _, tc := range []struct {
		name     string
		in       func() Input
		action   Action
		inReason string
	}{
		{"good CSR, no review yet: ask the agent", func() Input { return base(good) }, RequestReview, ""},
		{"review asked, no attestation: wait", func() Input { in := base(good); in.Review = good.Name; return in }, Wait, ""},
		{"another CSR of the node under review: wait", func() Input { in := base(good); in.Review, in.ReviewBusy = "csr-older", true; return in }, Wait, ""},
		{"matching attestation approves", func() Input {
			in := base(good)
			in.Attestation = attest(good, contract.VerdictApprove, "ok")
			return in
		}, Approve, "attested"},
		{"agent rejection denies with its reason", func() Input {
			in := base(good)
			in.Attestation = attest(good, contract.VerdictReject, "IP SAN 10.9.9.9 is not on this node's interfaces")
			return in
		}, Deny, "10.9.9.9"},
		{"attestation for a different request hash denies", func() Input {
			in := base(good)
			in.Attestation = attest(other, contract.VerdictApprove, "ok")
			return in
		}, Deny, "another request"},
		{"attestation of another CSR is ignored", func() Input {
			in := base(good)
			in.Review = good.Name
			a := attest(good, contract.VerdictApprove, "ok")
			a.CSR = "csr-else"
			in.Attestation = a
			return in
		}, Wait, ""},
		{"no attestation by the timeout: stays pending", func() Input { in := base(good); in.Created = now.Add(-2 * time.Minute); return in }, TimedOut, "no attestation"},
		{"no attestation by the timeout, approve policy", func() Input {
			in := base(good)
			in.Created, in.OnTimeout = now.Add(-2*time.Minute), config.ApproveOnChecks
			return in
		}, Approve, "static checks alone"},
		{"attestation not required", func() Input { in := base(good); in.AttestationRequired = false; return in }, Approve, ""},
		{"unknown node: retry", func() Input { in := base(good); in.Node = nil; return in }, Retry, ""},
		{"another node's IP: denied before any attestation", func() Input {
			in := base(request(t, "csr-b", []string{"node-a"}, "10.0.0.2"))
			in.Attestation = attest(in.CSR, contract.VerdictApprove, "forged")
			return in
		}, Deny, "10.0.0.2"},
		{"another node's name", func() Input { return base(request(t, "csr-n", []string{"node-a", "node-b"})) }, Deny, "node-b"},
		{"wildcard", func() Input { return base(request(t, "csr-w", []string{"*.node-a"})) }, Deny, "wildcard"},
		{"upper-case KUBERNETES", func() Input { return base(request(t, "csr-k", []string{"node-a", "KUBERNETES"})) }, Deny, "KUBERNETES"},
		{"IP-only with a foreign IP", func() Input { return base(request(t, "csr-ip", nil, "10.0.0.2")) }, Deny, "10.0.0.2"},
		{"client-auth usage", func() Input {
			r := request(t, "csr-c", []string{"node-a"})
			r.Usages = append(r.Usages, certificatesv1.UsageClientAuth)
			return base(r)
		}, Deny, "client auth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.in())
			if d.Action != tc.action || !strings.Contains(d.Reason, tc.inReason) || d.Category == "" {
				t.Fatalf("Decide = %+v, want %s with %q in the reason", d, tc.action, tc.inReason)
			}
			if d.Action == Wait && d.After <= 0 {
				t.Fatalf("wait without a delay: %+v", d)
			}
		})
	}
}
