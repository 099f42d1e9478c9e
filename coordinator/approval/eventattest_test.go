package approval

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
)

// Anyone can create an Event: what one carries stands for the agent's
// approval only when it is an approval of exactly this request, signed
// with the enrolled key for the requesting node. Every other Event is
// ignored, whoever made it.
func TestEventApproves(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	_, thief, _ := ed25519.GenerateKey(rand.Reader)
	good := request(t, "csr-good", []string{"node-a"}, "10.0.0.1")
	again := request(t, "csr-good", []string{"node-a"}, "10.0.0.1") // the same name, another request
	wider := request(t, "csr-wide", []string{"node-a"}, "10.0.0.1", "10.0.0.2")
	sansOf := func(r csrcheck.Request) []string {
		parsed, err := csrcheck.Parse(r.PEM)
		if err != nil {
			t.Fatal(err)
		}
		return contract.RequestSANs(parsed)
	}
	attest := func(r csrcheck.Request, v contract.Verdict, node string, k ed25519.PrivateKey) contract.Attestation {
		return contract.Attestation{CSR: r.Name, RequestSHA256: contract.RequestDigest(r.PEM), Verdict: v, SANs: sansOf(r)}.Sign(node, k)
	}
	renamed := attest(good, contract.VerdictApprove, "node-a", key)
	renamed.CSR = "csr-other"
	fewerSANs := attest(wider, contract.VerdictApprove, "node-a", key)
	fewerSANs.SANs = sansOf(good)
	fewerSANs = fewerSANs.Sign("node-a", key)
	unsigned := attest(good, contract.VerdictApprove, "node-a", key)
	unsigned.Signature = ""

	for _, c := range []struct {
		name     string
		a        contract.Attestation
		r        csrcheck.Request
		node     string
		enrolled ed25519.PublicKey
		ok       bool
	}{
		{"the agent's approval of this request", attest(good, contract.VerdictApprove, "node-a", key), good, "node-a", pub, true},
		{"signed with a key that is not enrolled", attest(good, contract.VerdictApprove, "node-a", thief), good, "node-a", pub, false},
		{"unsigned", unsigned, good, "node-a", pub, false},
		{"no key enrolled", attest(good, contract.VerdictApprove, "node-a", key), good, "node-a", nil, false},
		{"a rejection (only the Node carries those)", attest(good, contract.VerdictReject, "node-a", key), good, "node-a", pub, false},
		{"signed for another node, replayed onto this one's CSR", attest(good, contract.VerdictApprove, "node-b", key), good, "node-a", pub, false},
		{"of another request under the same name", attest(good, contract.VerdictApprove, "node-a", key), again, "node-a", pub, false},
		{"of another CSR", renamed, good, "node-a", pub, false},
		{"naming fewer SANs than the request has", fewerSANs, wider, "node-a", pub, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := EventApproves(c.a, c.r.Name, c.r.PEM, c.node, c.enrolled, sansOf(c.r))
			if (err == nil) != c.ok {
				t.Errorf("EventApproves = %v, want ok=%v", err, c.ok)
			}
		})
	}
}

// The agent's own signed verdict on exactly this request, on its Node,
// stands over any Event: a rejection it wrote there is never outweighed by
// an approval someone copied into an Event. Anything else on the Node
// leaves the Events to speak.
func TestOwnVerdictStandsOverEvents(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	_, thief, _ := ed25519.GenerateKey(rand.Reader)
	good := request(t, "csr-good", []string{"node-a"}, "10.0.0.1")
	again := request(t, "csr-good", []string{"node-a"}, "10.0.0.1")
	parsed, err := csrcheck.Parse(good.PEM)
	if err != nil {
		t.Fatal(err)
	}
	sans := contract.RequestSANs(parsed)
	verdict := func(r csrcheck.Request, v contract.Verdict, k ed25519.PrivateKey) *contract.Attestation {
		a := contract.Attestation{CSR: r.Name, RequestSHA256: contract.RequestDigest(r.PEM), Verdict: v, SANs: sans}.Sign("node-a", k)
		return &a
	}
	for _, c := range []struct {
		name   string
		onNode *contract.Attestation
		want   bool
	}{
		{"the agent's rejection of this request", verdict(good, contract.VerdictReject, key), true},
		{"the agent's approval of this request", verdict(good, contract.VerdictApprove, key), true},
		{"nothing on the Node", nil, false},
		{"a rejection signed with another key", verdict(good, contract.VerdictReject, thief), false},
		{"the agent's rejection of another request under the name", verdict(again, contract.VerdictReject, key), false},
	} {
		if got := OwnVerdict(c.onNode, good.Name, good.PEM, "node-a", pub, sans); got != c.want {
			t.Errorf("%s: OwnVerdict = %v, want %v", c.name, got, c.want)
		}
	}
	if OwnVerdict(verdict(good, contract.VerdictReject, key), good.Name, good.PEM, "node-a", nil, sans) {
		t.Error("with no key enrolled, nothing on the Node is the agent's own")
	}
}
