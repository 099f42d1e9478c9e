package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Verdict is the agent's answer about a serving CSR.
type Verdict string

const (
	VerdictApprove Verdict = "approve"
	VerdictReject  Verdict = "reject"
)

// Attestation is the agent's verdict on one serving CSR, bound to the CSR's
// name and to the digest of its exact request bytes, so an attestation can
// never be replayed onto another request.
type Attestation struct {
	CSR           string  `json:"csr"`
	RequestSHA256 string  `json:"sha256"`
	Verdict       Verdict `json:"verdict"`
	Reason        string  `json:"reason,omitempty"`
	// SANs are the request's SANs (RequestSANs), covered by the signature.
	SANs []string `json:"sans,omitempty"`
	// Signature is the agent key's ed25519 signature (base64) over the node
	// name, CSR, digest, verdict and SANs; see Sign and Verify.
	Signature string `json:"sig,omitempty"`
}

type attestationWire struct {
	V int `json:"v"`
	Attestation
}

func (w attestationWire) version() int { return w.V }

// RequestDigest is the hex sha256 of a CSR's spec.request bytes.
func RequestDigest(request []byte) string {
	sum := sha256.Sum256(request)
	return hex.EncodeToString(sum[:])
}

// Approves reports whether the attestation approves exactly this CSR: the same
// name, the same request bytes, and the verdict approve.
func (a Attestation) Approves(csrName string, request []byte) bool {
	return a.Verdict == VerdictApprove && a.About(csrName, request)
}

// About reports whether the attestation was written for this CSR and request.
func (a Attestation) About(csrName string, request []byte) bool {
	return a.CSR == csrName && a.RequestSHA256 == RequestDigest(request)
}

func (a Attestation) check() error {
	if errs := validation.IsDNS1123Subdomain(a.CSR); len(errs) > 0 {
		return fmt.Errorf("csr name %q is not a valid object name", a.CSR)
	}
	if len(a.RequestSHA256) != sha256.Size*2 {
		return fmt.Errorf("sha256 %q is not a hex sha256 digest", a.RequestSHA256)
	}
	if _, err := hex.DecodeString(a.RequestSHA256); err != nil {
		return fmt.Errorf("sha256 %q is not a hex sha256 digest", a.RequestSHA256)
	}
	if a.Verdict != VerdictApprove && a.Verdict != VerdictReject {
		return fmt.Errorf("verdict %q: must be %q or %q", a.Verdict, VerdictApprove, VerdictReject)
	}
	if len(a.SANs) > 256 {
		return fmt.Errorf("%d SANs, limit 256", len(a.SANs))
	}
	if len(a.Signature) > 128 {
		return fmt.Errorf("signature is %d bytes, limit 128", len(a.Signature))
	}
	if len(a.Reason) > maxFieldBytes {
		return fmt.Errorf("reason is %d bytes, limit %d", len(a.Reason), maxFieldBytes)
	}
	return nil
}

// EncodeAttestation renders nodeinit.io/csr-attestation.
func EncodeAttestation(a Attestation) (string, error) {
	if err := a.check(); err != nil {
		return "", err
	}
	return encode(attestationWire{V: PayloadVersion, Attestation: a})
}

// DecodeAttestation parses nodeinit.io/csr-attestation.
func DecodeAttestation(value string) (Attestation, error) {
	w, err := decode[attestationWire](AnnotationCSRAttestation, value)
	if err != nil {
		return Attestation{}, err
	}
	if err := w.check(); err != nil {
		return Attestation{}, fmt.Errorf("%s: %w", AnnotationCSRAttestation, err)
	}
	return w.Attestation, nil
}

// CheckReviewName validates a CSR name as nodeinit.io/csr-review names it.
func CheckReviewName(name string) error {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("%s: %q is not a valid CSR name", AnnotationCSRReview, name)
	}
	return nil
}

// Review is the value of nodeinit.io/csr-review: the CSR the coordinator
// wants the agent to attest, and, when it asks again because the Node's
// attestation is of an earlier request under the same name, the digest
// (RequestDigest) of the request it wants attested now. Only the agent
// writes the attestation; a changed review is how the coordinator asks
// for a new one.
type Review struct {
	CSR, RequestSHA256 string
}

// String encodes the review: "<csr>", or "<csr>/<sha256>" when it asks
// again for a given request.
func (r Review) String() string {
	if r.RequestSHA256 == "" {
		return r.CSR
	}
	return r.CSR + "/" + r.RequestSHA256
}

// ParseReview decodes a nodeinit.io/csr-review value. Node-written text
// never reaches it: only the coordinator writes the annotation, but a
// node could forge one, so it is validated like any input.
func ParseReview(v string) (Review, error) {
	name, digest, asked := strings.Cut(v, "/")
	if err := CheckReviewName(name); err != nil {
		return Review{}, err
	}
	if asked {
		if b, err := hex.DecodeString(digest); err != nil || len(b) != sha256.Size || digest != strings.ToLower(digest) {
			return Review{}, fmt.Errorf("%s: %q does not end in a lower-case hex sha256 of the request", AnnotationCSRReview, v)
		}
	}
	return Review{CSR: name, RequestSHA256: digest}, nil
}
