package contract

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestMetadataRoundTripAndDeterminism(t *testing.T) {
	m := Metadata{
		Platform: "metal", Hostname: "n1", Region: "eu", Zone: "eu-1", InstanceType: "c1",
		InstanceID: "i-1", ProviderID: "talos://metal/192.0.2.1", Spot: true,
		InternalDNS: "n1.internal", ExternalDNS: "n1.example.com", AgentVersion: "v0.1.0",
	}
	a, err := EncodeMetadata(m)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := EncodeMetadata(m)
	if a != b {
		t.Fatalf("encoding not deterministic:\n%s\n%s", a, b)
	}
	if !strings.HasPrefix(a, `{"v":1,`) {
		t.Fatalf("payload does not start with its version: %s", a)
	}
	got, err := DecodeMetadata(a)
	if err != nil {
		t.Fatal(err)
	}
	if got != m {
		t.Fatalf("round trip: got %+v, want %+v", got, m)
	}
}

func TestRequestedLabelsDeterministicAcrossMapOrder(t *testing.T) {
	first := map[string]string{}
	second := map[string]string{}
	keys := []string{"node-role.kubernetes.io/web", "a.example.com/x", "z", "node.cloudprovider.kubernetes.io/y"}
	for i, k := range keys {
		first[k] = "v"
		second[keys[len(keys)-1-i]] = "v"
	}
	a, err := EncodeRequestedLabels(first)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := EncodeRequestedLabels(second)
	if a != b {
		t.Fatalf("same labels, different bytes:\n%s\n%s", a, b)
	}
	got, err := DecodeRequestedLabels(a)
	if err != nil || !reflect.DeepEqual(got, first) {
		t.Fatalf("round trip: %v %v", got, err)
	}
	empty, _ := EncodeRequestedLabels(nil)
	if empty != `{"v":1,"labels":{}}` {
		t.Fatalf("empty labels encode as %s", empty)
	}
}

func TestKeysAndTaintsNormalised(t *testing.T) {
	a, _ := EncodeKeys([]string{"b", "a", "b"})
	b, _ := EncodeKeys([]string{"a", "b"})
	if a != b || a != `{"v":1,"keys":["a","b"]}` {
		t.Fatalf("keys: %s vs %s", a, b)
	}
	keys, err := DecodeKeys(AnnotationOwnedLabels, a)
	if err != nil || !reflect.DeepEqual(keys, []string{"a", "b"}) {
		t.Fatalf("keys round trip: %v %v", keys, err)
	}

	t1 := Taint{Key: "example.com/a", Value: "x", Effect: corev1.TaintEffectNoSchedule}
	t2 := Taint{Key: "example.com/b", Effect: corev1.TaintEffectNoExecute}
	x, _ := EncodeRequestedTaints([]Taint{t2, t1, t2})
	y, _ := EncodeRequestedTaints([]Taint{t1, t2})
	if x != y {
		t.Fatalf("taints: %s vs %s", x, y)
	}
	taints, err := DecodeRequestedTaints(x)
	if err != nil || !reflect.DeepEqual(taints, []Taint{t1, t2}) {
		t.Fatalf("taints round trip: %v %v", taints, err)
	}
}

func TestPrefixesKeepOrderAndDropDuplicates(t *testing.T) {
	p1 := netip.MustParsePrefix("2001:db8:1:2::/64")
	p2 := netip.MustParsePrefix("2001:db8:ff00::/56")
	s, err := EncodePrefixes([]netip.Prefix{p2, p1, netip.MustParsePrefix("2001:db8:ff00::1/56")})
	if err != nil {
		t.Fatal(err)
	}
	if s != `{"v":1,"prefixes":["2001:db8:ff00::/56","2001:db8:1:2::/64"]}` {
		t.Fatalf("prefixes encode as %s", s)
	}
	got, err := DecodePrefixes(s)
	if err != nil || !reflect.DeepEqual(got, []netip.Prefix{p2, p1}) {
		t.Fatalf("round trip: %v %v", got, err)
	}
	if _, err := EncodePrefixes([]netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}); err == nil {
		t.Fatal("an IPv4 prefix was accepted")
	}
}

func TestAttestationBindsNameAndRequest(t *testing.T) {
	req := []byte("-----BEGIN CERTIFICATE REQUEST-----\n...")
	a := Attestation{CSR: "csr-abc", RequestSHA256: RequestDigest(req), Verdict: VerdictApprove}
	s, err := EncodeAttestation(a)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeAttestation(s)
	if err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	cases := []struct {
		name    string
		csr     string
		request []byte
		verdict Verdict
		want    bool
	}{
		{"same CSR and request", "csr-abc", req, VerdictApprove, true},
		{"other CSR name", "csr-other", req, VerdictApprove, false},
		{"other request bytes", "csr-abc", append([]byte{}, append(req, 'x')...), VerdictApprove, false},
		{"reject verdict", "csr-abc", req, VerdictReject, false},
	}
	for _, c := range cases {
		att := a
		att.Verdict = c.verdict
		if got := att.Approves(c.csr, c.request); got != c.want {
			t.Errorf("%s: Approves = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestDecodeRefuses lists hostile or broken annotations every reader must
// refuse with an error rather than act on.
func TestDecodeRefuses(t *testing.T) {
	huge := `{"v":1,"labels":{"a":"` + strings.Repeat("x", MaxPayloadBytes) + `"}}`
	cases := []struct {
		name    string
		decode  func(string) error
		value   string
		wantErr string
	}{
		{"not JSON", decodeLabels, `{"v":1,`, "not valid JSON"},
		{"no version", decodeLabels, `{"labels":{}}`, "unsupported payload version"},
		{"future version", decodeLabels, `{"v":2,"labels":{}}`, "unsupported payload version 2"},
		{"string version", decodeLabels, `{"v":"1","labels":{}}`, "not valid JSON"},
		{"over 64 KiB", decodeLabels, huge, "payload too large"},
		{"invalid label key", decodeLabels, `{"v":1,"labels":{"a b":"x"}}`, `label key "a b"`},
		{"invalid label value", decodeLabels, `{"v":1,"labels":{"a":"x y"}}`, `value "x y"`},
		{"labels of wrong type", decodeLabels, `{"v":1,"labels":["a"]}`, "cannot unmarshal"},
		{"taint bad effect", decodeTaints, `{"v":1,"taints":[{"key":"a","effect":"Evict"}]}`, `effect "Evict"`},
		{"taint empty key", decodeTaints, `{"v":1,"taints":[{"key":"","effect":"NoSchedule"}]}`, `taint key ""`},
		{"prefix IPv4", decodePrefixes, `{"v":1,"prefixes":["10.0.0.0/8"]}`, "not an IPv6 prefix"},
		{"prefix host bits", decodePrefixes, `{"v":1,"prefixes":["2001:db8::1/64"]}`, "host bits"},
		{"prefix garbage", decodePrefixes, `{"v":1,"prefixes":["nope"]}`, "nope"},
		{"attestation short digest", decodeAttestation, `{"v":1,"csr":"c","sha256":"ab","verdict":"approve"}`, "not a hex sha256"},
		{"attestation bad verdict", decodeAttestation, `{"v":1,"csr":"c","sha256":"` + strings.Repeat("a", 64) + `","verdict":"yes"}`, `verdict "yes"`},
		{"attestation bad name", decodeAttestation, `{"v":1,"csr":"../x","sha256":"` + strings.Repeat("a", 64) + `","verdict":"approve"}`, "not a valid object name"},
		{"metadata huge field", decodeMetadata, `{"v":1,"platform":"` + strings.Repeat("p", 2000) + `"}`, "field platform"},
		{"keys invalid", decodeOwned, `{"v":1,"keys":["-bad-"]}`, `label key "-bad-"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.decode(c.value)
			if err == nil {
				t.Fatalf("accepted %.80s", c.value)
			}
			if !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("error %q does not mention %q", err, c.wantErr)
			}
		})
	}
	if _, err := DecodeRequestedLabels(`{"v":3}`); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("future version error is not ErrUnsupportedVersion: %v", err)
	}
}

func decodeLabels(s string) error      { _, err := DecodeRequestedLabels(s); return err }
func decodeTaints(s string) error      { _, err := DecodeRequestedTaints(s); return err }
func decodePrefixes(s string) error    { _, err := DecodePrefixes(s); return err }
func decodeAttestation(s string) error { _, err := DecodeAttestation(s); return err }
func decodeMetadata(s string) error    { _, err := DecodeMetadata(s); return err }
func decodeOwned(s string) error       { _, err := DecodeKeys(AnnotationOwnedLabels, s); return err }

func TestInDomain(t *testing.T) {
	for key, want := range map[string]bool{
		AnnotationCSRReview: true, "nodeinit.io/x": true, "x.nodeinit.io/y": true, "a.b.nodeinit.io/c": true, "NodeInit.IO/x": true,
		"nodeinit.io": false, "notnodeinit.io/x": false, "nodeinit.io.example.com/x": false, "example.com/nodeinit.io": false, "": false,
	} {
		if got := InDomain(key); got != want {
			t.Errorf("InDomain(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestNodeMaySetLabel(t *testing.T) {
	cases := []struct {
		key  string
		want bool
	}{
		{"topology.kubernetes.io/zone", true},
		{"topology.kubernetes.io/region", true},
		{"node.kubernetes.io/instance-type", true},
		{"node.kubernetes.io/anything", true},
		{"sub.node.kubernetes.io/x", true},
		{"kubelet.kubernetes.io/x", true},
		{"kubernetes.io/hostname", true},
		{"kubernetes.io/arch", true},
		{"example.com/x", true},
		{"plain", true},
		{"node-role.kubernetes.io/worker", false},
		{"node-role.kubernetes.io/control-plane", false},
		{"node.cloudprovider.kubernetes.io/platform", false},
		{"kubernetes.io/other", false},
		{"foo.k8s.io/x", false},
		{"k8s.io/x", false},
		{"node-restriction.kubernetes.io/x", false},
		{"a.node-restriction.kubernetes.io/x", false},
		{"notkubernetes.io/x", true},
	}
	for _, c := range cases {
		if got := NodeMaySetLabel(c.key); got != c.want {
			t.Errorf("NodeMaySetLabel(%q) = %v, want %v", c.key, got, c.want)
		}
	}
}

const base64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

func TestAttestationSignature(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	sans := []string{"dns:n1", "ip:10.0.0.1"}
	a := Attestation{CSR: "csr-1", RequestSHA256: RequestDigest([]byte("req")), Verdict: VerdictApprove, SANs: sans}.Sign("n1", key)
	if err := a.Verify("n1", pub, sans); err != nil {
		t.Fatalf("a good signature: %v", err)
	}
	enc, _ := EncodeAttestation(a)
	if back, err := DecodeAttestation(enc); err != nil || back.Verify("n1", pub, sans) != nil {
		t.Fatalf("the signature does not survive the annotation: %v", err)
	}
	for name, c := range map[string]struct {
		a    Attestation
		node string
		pub  ed25519.PublicKey
		sans []string
	}{
		"another key":                         {a, "n1", otherPub, sans},
		"another node":                        {a, "n2", pub, sans},
		"other SANs":                          {a, "n1", pub, []string{"dns:n1", "ip:10.96.0.1"}},
		"verdict flipped":                     {func() Attestation { b := a; b.Verdict = VerdictReject; return b }(), "n1", pub, sans},
		"another CSR":                         {func() Attestation { b := a; b.CSR = "csr-2"; return b }(), "n1", pub, sans},
		"another request":                     {func() Attestation { b := a; b.RequestSHA256 = RequestDigest([]byte("x")); return b }(), "n1", pub, sans},
		"unsigned (the kubelet credential's)": {func() Attestation { b := a; b.Signature = ""; return b }(), "n1", pub, sans},
		"garbage signature":                   {func() Attestation { b := a; b.Signature = "!!"; return b }(), "n1", pub, sans},
		// Re-encodings of the genuine signature: equal bytes, other text.
		"the signature with a line break": {func() Attestation { b := a; b.Signature = a.Signature[:40] + "\n" + a.Signature[40:]; return b }(), "n1", pub, sans},
		"the signature with a CR LF":      {func() Attestation { b := a; b.Signature = a.Signature + "\r\n"; return b }(), "n1", pub, sans},
		"the signature with other trailing bits": {func() Attestation {
			b := a
			// 64 bytes encode to 86 characters and "==": the last one
			// carries 2 bits and 4 unused ones, which decoding ignores.
			last := strings.IndexByte(base64Alphabet, a.Signature[85])
			b.Signature = a.Signature[:85] + string(base64Alphabet[last^1]) + a.Signature[86:]
			return b
		}(), "n1", pub, sans},
	} {
		if err := c.a.Verify(c.node, c.pub, c.sans); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
	if _, err := DecodeAgentKey(EncodeAgentKey(pub)); err != nil {
		t.Error(err)
	}
	// A key has one spelling, Encode's: the enrolled key spelled otherwise
	// (line breaks, other unused trailing bits) is no key, so no string
	// comparison of keys can tell it apart from itself.
	canonical := EncodeAgentKey(pub)
	b64 := strings.TrimPrefix(canonical, "ed25519:") // 32 bytes: 43 characters and "="; the last carries 2 unused bits
	last := strings.IndexByte(base64Alphabet, b64[42])
	for _, bad := range []string{"", "ed25519:", "rsa:AAAA", "ed25519:!!", "ed25519:AAAA",
		"ed25519:" + b64[:20] + "\n" + b64[20:], "ed25519:" + b64[:20] + "\r\n" + b64[20:],
		"ed25519:" + b64[:42] + string(base64Alphabet[last^1]) + "="} {
		if _, err := DecodeAgentKey(bad); err == nil {
			t.Errorf("agent key %q accepted", bad)
		}
	}
}

func TestReviewRoundTrip(t *testing.T) {
	digest := RequestDigest([]byte("a request"))
	for _, tc := range []struct {
		value string
		want  Review
		bad   bool
	}{
		{value: "csr-abc", want: Review{CSR: "csr-abc"}},
		{value: "csr-abc/" + digest, want: Review{CSR: "csr-abc", RequestSHA256: digest}},
		{value: "", bad: true},
		{value: "CSR_bad", bad: true},
		{value: "csr-abc/", bad: true},
		{value: "csr-abc/xyz", bad: true},
		{value: "csr-abc/" + strings.ToUpper(digest), bad: true},
		{value: "csr-abc/" + digest + "/x", bad: true},
		{value: "csr-abc/" + digest[:62], bad: true},
	} {
		got, err := ParseReview(tc.value)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseReview(%q) = %+v, want an error", tc.value, got)
			}
			continue
		}
		if err != nil || got != tc.want || got.String() != tc.value {
			t.Errorf("ParseReview(%q) = %+v, %v; String %q", tc.value, got, err, got.String())
		}
	}
}

// A providerID the coordinator sets for a node is <provider>://<id>;
// anything else a node reports as setProviderId is refused.
func TestCheckProviderID(t *testing.T) {
	for _, ok := range []string{"talos://metal/10.0.0.1", "talos://metal/2001:db8::1", "aws:///eu-west-1a/i-0abc",
		"gce://proj/zone/name", "hcloud://123", "equinix-metal://uuid", "azure:///subscriptions/x/resourceGroups/y", "someproviderID:///some-id", "a_b.c://x"} {
		if err := CheckProviderID(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "i-0abc", "://x", "aws://", "a b://x", "a/b://x", "aws:///eu 1a/i-1",
		"aws:///i-1\n", "aws:///i-1\x00", "aws:///i-\u00e9", "aws:///i-1\t", " aws:///i-1"} {
		if err := CheckProviderID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
		// The rest of the report stands: the coordinator refuses the ID alone.
		md, _ := EncodeMetadata(Metadata{Platform: "metal", SetProviderID: bad})
		if m, err := DecodeMetadata(md); err != nil || m.Platform != "metal" {
			t.Errorf("a report asking for providerID %q: %v", bad, err)
		}
	}
}
