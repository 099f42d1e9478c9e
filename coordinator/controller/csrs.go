package controller

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/approval"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/nodestate"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
)

// heldReasons name the Event for each reason a CSR is held pending.
var heldReasons = map[approval.Category]string{
	approval.CategoryRenewalNamesChanged:   "RenewalNamesChanged",
	approval.CategoryFloodGuard:            "ApprovalPaused",
	approval.CategoryNoEnrolledKey:         "NoEnrolledAgentKey",
	approval.CategoryNotAdopted:            "NodeNotAdopted",
	approval.CategoryRecordUnreadable:      "NodeRecordUnreadable",
	approval.CategoryAgentKeyChanged:       "AgentKeyChanged",
	approval.CategoryAddressClaimed:        "AddressClaimedByOtherNode",
	approval.CategoryNameClaimed:           "NameClaimedByOtherNode",
	approval.CategoryRecordOfAnotherObject: "NodeRecordOfEarlierObject",
	approval.CategoryAttestationInvalid:    "AttestationIgnored",
	approval.CategoryAskedAgain:            "AttestationAskedAgain",
}

// syncCSRs decides Node name's kubelet's pending serving CSRs and writes the decisions; the record
// follows decisions taken elsewhere. It returns what those left pending want of the Node's review.
// node is nil when no Node has the name.
func (c *Coordinator) syncCSRs(ctx context.Context, name string, node *corev1.Node) ([]approval.Want, error) {
	objs, _ := c.ownCSRs.ByIndex(byNode, name)
	csrs := make([]*certificatesv1.CertificateSigningRequest, 0, len(objs))
	for _, o := range objs {
		if csr, ok := o.(*certificatesv1.CertificateSigningRequest); ok {
			csrs = append(csrs, csr)
		}
	}
	// Oldest first: a renewal is decided after the certificate it renews.
	slices.SortFunc(csrs, func(a, b *certificatesv1.CertificateSigningRequest) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
	var wants []approval.Want
	var errs []error
	for _, csr := range csrs {
		if !pending(csr) {
			var err error
			if c.servingChanges(csr, c.notes.decidedLive(csr.UID)) {
				err = c.followDecision(ctx, csr)
			}
			if err == nil {
				c.notes.looked(csr.UID) // live only until the first look
			}
			errs = append(errs, err)
			continue
		}
		d, err := c.decideCSR(ctx, csr, node, func(after time.Duration) { c.nodeQueue.AddAfter(name, after) })
		if err != nil {
			errs = append(errs, err)
		} else if d.Action != approval.Approve && d.Action != approval.Deny {
			wants = append(wants, approval.WantOf(csr.Name, csr.CreationTimestamp.Time, d))
		}
	}
	for _, uid := range c.notes.unissued(name) {
		err := c.servingGone(ctx, name, uid)
		if err == nil {
			c.notes.forgetUnissued(name, uid)
		}
		errs = append(errs, err)
	}
	return wants, errors.Join(errs...)
}

// syncStranger decides a CSR whose requester is no node: denied by csrcheck, never recorded.
func (c *Coordinator) syncStranger(ctx context.Context, name string) error {
	csr, err := c.csr(name)
	if apierrors.IsNotFound(err) {
		c.forget("csr", name)
		return nil
	}
	if err != nil || !pending(csr) {
		return err
	}
	_, err = c.decideCSR(ctx, csr, nil, func(after time.Duration) { c.csrQueue.AddAfter(name, after) })
	return err
}

// decideCSR decides one pending CSR of node (nil: none) and acts on it: writes the decision, holds
// it with an Event, or requeues it for when it stops waiting.
func (c *Coordinator) decideCSR(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, node *corev1.Node, requeue func(time.Duration)) (approval.Decision, error) {
	now := c.clock.Now()
	in := c.approvalInput(csr, node, now)
	if in.Review == csr.Name && in.ReviewRequested.IsZero() {
		// Asked before this replica led: the timeout starts now.
		c.notes.asked(csr.Name, csr.UID, now)
		in.ReviewRequested = now
	}
	d := approval.Decide(in)
	if node != nil {
		// Kubelets ask for serving certificates, so joins wait for theirs (csr.initWait). An
		// identity without a Node, such as one a bootstrap token mints, does not turn the wait on.
		c.servingCSRs.Store(true)
		if d.AskAgain {
			c.notes.askAgain(csr.Name, csr.UID, now)
		}
	}
	reason, ok := heldReasons[d.Category]
	if d.AskAgain {
		reason, ok = heldReasons[approval.CategoryAskedAgain], true
	}
	if ok {
		c.say(csr, "csr", csr.Name, corev1.EventTypeWarning, reason, d.Reason)
	}
	switch d.Action {
	case approval.Approve, approval.Deny:
		return d, c.decide(ctx, csr, d)
	case approval.Retry:
		return d, fmt.Errorf("CSR %s: %s", csr.Name, d.Reason)
	case approval.Wait, approval.Hold:
		if d.After > 0 {
			requeue(d.After)
		}
	case approval.TimedOut:
		c.say(csr, "csr", csr.Name, corev1.EventTypeWarning, "AttestationTimeout", d.Reason)
		c.m.CSRDecisions.WithLabelValues(string(d.Action), string(d.Category)).Inc()
	}
	return d, nil
}

// approvalInput gathers approval.Decide's input from what nodes cannot write (records, cluster
// objects, observations) and, as requests and attestations only, the Node. It writes nothing.
func (c *Coordinator) approvalInput(csr *certificatesv1.CertificateSigningRequest, self *corev1.Node, now time.Time) approval.Input {
	nodeName := csrcheck.NodeName(csr.Spec.Username)
	in := approval.Input{
		CSR: csrcheck.FromCSR(csr), Created: csr.CreationTimestamp.Time, ReviewRequested: c.notes.askedAt(csr.Name, csr.UID), Policy: c.policy,
		AttestationRequired: c.settings.AttestationRequired(), Timeout: c.settings.CSR.AttestationTimeout.Duration,
		OnTimeout: c.settings.CSR.OnTimeout, Renewals: c.settings.CSR.Renewals, Now: now,
	}
	in.Pending, in.MaxPending = c.pendingCount()
	if self == nil {
		return in // not registered (yet): Decide says so
	}
	in.Node = &csrcheck.Node{Name: self.Name, Addresses: self.Status.Addresses}
	if review, err := contract.ParseReview(self.Annotations[contract.AnnotationCSRReview]); err == nil {
		in.Review = review.CSR
		in.ReviewAgain = review.CSR == csr.Name && review.RequestSHA256 == contract.RequestDigest(csr.Spec.Request)
	}
	if a, err := contract.DecodeAttestation(self.Annotations[contract.AnnotationCSRAttestation]); err == nil {
		in.Attestation = &a
	}
	if md, err := contract.DecodeMetadata(self.Annotations[contract.AnnotationMetadata]); err == nil {
		in.PublishedKey = md.AgentKey
	}
	in.Facts = csrcheck.Facts{Reserved: c.reservedFor(self), Claims: map[netip.Addr]string{}, PodCIDROf: map[netip.Addr]string{}, Bound: map[netip.Addr]string{}, Seen: c.observer.Seen(self.Name, self.UID, now)}
	if parsed, err := in.CSR.Parse(); err == nil {
		in.Facts.Names, in.Facts.Hostnames, in.Facts.SharedNames = c.names(parsed.DNSNames, self.Name, now)
		in.Facts.ReservedNames, in.Facts.APIServerNames, in.Facts.ControlPlane = c.settings.CSR.ReservedNames, c.cfg.APIServerNames, c.controlPlane(self)
		for _, raw := range parsed.IPAddresses {
			ip, ok := netip.AddrFromSlice(raw)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			if err := records.Bound(c.inventory, self.Name, ip); err != nil {
				in.Facts.Bound[ip] = err.Error()
			}
			if owner := c.claimant(self, ip); owner != "" {
				in.Facts.Claims[ip] = owner
			}
			if holder := c.cidrs.Holder(ip); holder != "" {
				in.Facts.PodCIDROf[ip] = holder
			}
		}
	}
	rec, err := c.records.Get(nodeName)
	in.RecordUnreadable = err
	in.RecordOfAnotherObject = nodestate.StaleRecord(self, rec) != nil
	in.NotAdopted = rec != nil && rec.Spec.NotAdopted && rec.Spec.NodeUID == string(self.UID) && !c.settings.AdoptExisting
	if rec != nil && rec.Spec.NodeUID == string(self.UID) {
		// An address counts as stable only for as long as it is both observed and recorded.
		for _, cl := range rec.Spec.Addresses {
			if ip, err := netip.ParseAddr(cl.IP); err == nil {
				if age := now.Sub(cl.Since); age < in.Facts.Seen[ip] {
					in.Facts.Seen[ip] = age
				}
			}
		}
		in.EnrolledKey = enrolledKey(rec, self.UID)
	}
	if rec != nil {
		// The last certificate outlives the Node object, and so does the renewal rule.
		in.PreviousSANs = c.previousSANs(rec, now)
	}
	if in.Review != "" && in.Review != csr.Name {
		if other, err := c.csr(in.Review); err == nil && pending(other) && csrcheck.NodeName(other.Spec.Username) == nodeName {
			in.ReviewBusy = true
		}
	}
	return in
}

// previousSANs are the SANs of the node's last approved, still valid certificate, for the renewal
// rule; nil when none (records.Serving.Certified). The CSR being decided is compared too, whatever
// its name: the recorded one's request names the same SANs, and another object under a freed name
// is a new request like any other.
func (c *Coordinator) previousSANs(rec *records.Record, now time.Time) []string {
	s := rec.Spec.Serving
	if s == nil {
		return nil
	}
	return s.Certified(c.servingApproved(s), now)
}

func approved(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, cond := range csr.Status.Conditions {
		if cond.Type == certificatesv1.CertificateApproved {
			return true
		}
	}
	return false
}

// pendingCount counts pending serving CSRs as approval.FloodCount does (only requesters with a
// Node, each at most twice), with the flood guard's limit.
func (c *Coordinator) pendingCount() (count, limit int) {
	byRequester := map[string]int{}
	for _, o := range c.csrIndex.List() {
		if csr, ok := o.(*certificatesv1.CertificateSigningRequest); ok && pending(csr) {
			if node := csrcheck.NodeName(csr.Spec.Username); node != "" {
				byRequester[node]++
			}
		}
	}
	count = approval.FloodCount(byRequester, c.nodeExists)
	limit = approval.FloodLimit(c.settings.CSR.MaxPending)
	c.m.PendingCSRs.Set(float64(count))
	guard := 0.0
	if limit > 0 && count > limit {
		guard = 1
	}
	c.m.FloodGuard.Set(guard) // from the count, not from whichever CSR synced last
	return count, limit
}

// servingUnderReview is the record of the certificate the initializing
// patch asks the agent to attest: approved, it needs no further write.
func (c *Coordinator) servingUnderReview(node, name string) *records.Serving {
	csr, err := c.csr(name)
	if err != nil || csrcheck.NodeName(csr.Spec.Username) != node {
		// Made again under the name by another identity: not this Node's kubelet's.
		return nil
	}
	parsed, err := csrcheck.FromCSR(csr).Parse()
	if err != nil {
		return nil
	}
	return c.serving(csr, contract.RequestSANs(parsed))
}

// serving is what the record keeps of csr's certificate, whose request names sans.
func (c *Coordinator) serving(csr *certificatesv1.CertificateSigningRequest, sans []string) *records.Serving {
	valid := c.settings.CertificateDuration(csr.Spec.ExpirationSeconds) // at most
	return &records.Serving{CSR: csr.Name, UID: string(csr.UID), SANs: sans, ValidUntil: c.clock.Now().Add(valid).UTC().Truncate(time.Second)}
}

// review is the serving CSR the agent should attest now (approval.Handoff), with what the record
// keeps of it when the Node is initialized with the review.
func (c *Coordinator) review(node *corev1.Node, wants []approval.Want) nodestate.Review {
	current, _ := contract.ParseReview(node.Annotations[contract.AnnotationCSRReview])
	name := approval.Handoff(current.CSR, wants)
	r := nodestate.Review{Ask: contract.Review{CSR: name}}
	if name == "" {
		return r
	}
	// The attestation names this CSR but another request (deleted and made again): ask again, for
	// the request now under the name. Only what the enrolled key signed counts, and the ask depends
	// only on the attestation and the CSR, so it stays put however the decision moves.
	var attested *string // the request under this name the agent answered for
	if att, err := contract.DecodeAttestation(node.Annotations[contract.AnnotationCSRAttestation]); err == nil && att.CSR == name {
		rec, _ := c.records.Get(node.Name)
		if key := enrolledKey(rec, node.UID); key != nil && att.Verify(node.Name, key, att.SANs) == nil {
			attested = &att.RequestSHA256
		}
	}
	if csr, err := c.csr(name); err == nil {
		// By digest if already asked so (the ask stays; its timeout is the last), if no answer came
		// in time (Decision.AskAgain), or if another request was answered.
		digest := contract.RequestDigest(csr.Spec.Request)
		if (current.CSR == name && current.RequestSHA256 == digest) ||
			c.notes.again(name, csr.UID) ||
			(attested != nil && *attested != digest) {
			r.Ask.RequestSHA256 = digest
		}
	}
	if contract.Uninitialized(node) {
		r.Serving = c.servingUnderReview(node.Name, name)
	}
	return r
}

// enrolledKey is the agent key rec enrols for Node object uid; nil when none or rec is another's.
func enrolledKey(rec *records.Record, uid types.UID) ed25519.PublicKey {
	if rec == nil || rec.Spec.NodeUID != string(uid) || rec.Spec.AgentKey == "" {
		return nil
	}
	key, err := contract.DecodeAgentKey(rec.Spec.AgentKey)
	if err != nil {
		return nil
	}
	return key
}

// noteServing turns the joins' wait on for a record naming a still valid serving certificate: only
// the coordinator writes records, naming only kubelets' CSRs, so a leader starting after the issued
// CSRs were deleted (an hour after issue) still learns that kubelets ask.
func (c *Coordinator) noteServing(obj any) {
	if c.servingCSRs.Load() {
		return
	}
	if r, err := records.Decoded(obj); err == nil && r.Spec.Serving != nil && c.clock.Now().Before(r.Spec.Serving.ValidUntil) {
		c.servingCSRs.Store(true)
	}
}

// kubeletAsked reports whether node's kubelet made a serving CSR since the Node's creation (not an
// earlier object's): pending, or decided since (by this replica too, ahead of its informer).
func (c *Coordinator) kubeletAsked(node *corev1.Node) bool {
	since := node.CreationTimestamp.Time
	objs, _ := c.ownCSRs.ByIndex(byNode, node.Name)
	return slices.ContainsFunc(objs, func(o any) bool {
		csr, ok := o.(*certificatesv1.CertificateSigningRequest)
		return ok && !csr.CreationTimestamp.Time.Before(since)
	})
}

// recordNames reports whether node's record names this CSR object as its serving certificate.
func (c *Coordinator) recordNames(node string, csr *certificatesv1.CertificateSigningRequest) bool {
	rec, err := c.records.Get(node)
	return err == nil && rec != nil && rec.Spec.Serving.Is(csr.Name, string(csr.UID))
}

// servingChanges reports whether a CSR decided by someone else changes the record's serving
// certificate: denied, never approved, and named (a request, not a certificate), or approved by
// hand and not named. Approved live (this update is the decision) it is the newest; seen later (a
// new leader's list) only when the named CSR is older and still there (one gone could be either).
// The coordinator's own decisions are recorded before they are written, so change nothing.
func (c *Coordinator) servingChanges(csr *certificatesv1.CertificateSigningRequest, live bool) bool {
	node := csrcheck.NodeName(csr.Spec.Username)
	if node == "" {
		return false
	}
	rec, err := c.records.Get(node)
	if err != nil || rec == nil {
		return false
	}
	s := rec.Spec.Serving
	named := s.Is(csr.Name, string(csr.UID))
	switch {
	case denied(csr) && !approved(csr):
		return named
	case approved(csr) && !named && s != nil:
		prev, err := c.csr(s.CSR)
		if err != nil || !s.Is(prev.Name, string(prev.UID)) {
			return live // the recorded one gone: only a decision seen now is known to be newer
		}
		if live {
			return !csr.CreationTimestamp.Before(&prev.CreationTimestamp) // not the older of two approved at once
		}
		return prev.CreationTimestamp.Before(&csr.CreationTimestamp)
	case approved(csr) && !named:
		return live
	}
	return false
}

// followDecision has the record follow another's decision: approved, recorded; denied, cleared.
func (c *Coordinator) followDecision(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) error {
	d := approval.Decision{Action: approval.Deny}
	if approved(csr) {
		parsed, err := csrcheck.FromCSR(csr).Parse()
		if err != nil {
			return nil // approved by hand, unparsable: nothing to compare with
		}
		d = approval.Decision{Action: approval.Approve, SANs: contract.RequestSANs(parsed)}
	}
	return c.recordServing(ctx, csr, d)
}

// servingGone clears node's record's certificate whose request uid was deleted unapproved.
func (c *Coordinator) servingGone(ctx context.Context, node, uid string) error {
	rec, err := c.records.Get(node)
	if err != nil || rec == nil || rec.Spec.Serving == nil || rec.Spec.Serving.UID != uid {
		return nil // unreadable (nothing is decided from it), or no longer naming it
	}
	next := rec.Spec
	next.Serving = rec.Spec.Serving.Cleared(c.clock.Now())
	_, err = c.putRecord(ctx, node, rec, &next)
	return err
}

// servingApproved reports whether a record's certificate was approved: its request is approved, or
// gone (issued CSRs are deleted an hour on); the record names one before its approval is written.
func (c *Coordinator) servingApproved(s *records.Serving) bool {
	req, err := c.csr(s.CSR)
	return err != nil || !s.Is(req.Name, string(req.UID)) || approved(req)
}

func denied(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, cond := range csr.Status.Conditions {
		if cond.Type == certificatesv1.CertificateDenied || cond.Type == certificatesv1.CertificateFailed {
			return true
		}
	}
	return false
}

// recordServing keeps the record's serving SANs true after a decision: set on approving another CSR
// object than the recorded one (records.Renewing), cleared down to the certificate it renewed on
// denying the recorded one (Serving.Cleared).
func (c *Coordinator) recordServing(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, d approval.Decision) error {
	nodeName := csrcheck.NodeName(csr.Spec.Username)
	rec, err := c.records.Get(nodeName)
	if err != nil || rec == nil {
		return err
	}
	next := rec.Spec
	switch {
	case d.Action == approval.Approve && !rec.Spec.Serving.Is(csr.Name, string(csr.UID)):
		prev := rec.Spec.Serving
		renewing := records.Renewing(prev, prev != nil && c.servingApproved(prev), *c.serving(csr, d.SANs), c.clock.Now())
		next.Serving = &renewing
	case d.Action == approval.Deny && rec.Spec.Serving.Is(csr.Name, string(csr.UID)):
		next.Serving = rec.Spec.Serving.Cleared(c.clock.Now())
	default:
		return nil
	}
	_, err = c.putRecord(ctx, nodeName, rec, &next)
	return err
}

func (c *Coordinator) decide(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, d approval.Decision) error {
	cond := certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "NodeinitApproved", Message: d.Reason,
		LastUpdateTime: metav1.Now(),
	}
	typ := corev1.EventTypeNormal
	if d.Action == approval.Deny {
		cond.Type, cond.Reason, typ = certificatesv1.CertificateDenied, "NodeinitDenied", corev1.EventTypeWarning
	}
	if d.Action == approval.Approve {
		// The record names the certificate first, so a crash never leaves one unrecorded.
		if err := c.recordServing(ctx, csr, d); err != nil {
			return err
		}
	}
	update := csr.DeepCopy()
	update.Status.Conditions = append(update.Status.Conditions, cond)
	decided, err := c.client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, update, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		c.m.NodeWrites.WithLabelValues("approval", "error").Inc()
		if apierrors.IsNotFound(err) {
			if d.Action == approval.Approve {
				// Gone before its approval: the record, which named it first, must not count it as
				// issued; the rest of this sync clears it.
				c.notes.unissue(csrcheck.NodeName(csr.Spec.Username), string(csr.UID))
			}
			return nil
		}
		return fmt.Errorf("%s CSR %s: %w", d.Action, csr.Name, err)
	}
	trimCSR(decided)
	c.ownCSRs.Mutation(decided)
	c.m.NodeWrites.WithLabelValues("approval", "ok").Inc()
	c.m.CSRDecisions.WithLabelValues(string(d.Action), string(d.Category)).Inc()
	if d.Action == approval.Deny {
		// Only a denial gets an Event: an approval is in the CSR's condition, as
		// kube-controller-manager's approver does, one Event fewer per join.
		c.recorder.Event(csr, typ, cond.Reason, d.Reason)
		if err := c.recordServing(ctx, csr, d); err != nil {
			c.log.Warn("could not clear the record's serving certificate", "csr", csr.Name, "err", err)
		}
	}
	c.log.Info("CSR decided", "csr", csr.Name, "requestor", csr.Spec.Username, "decision", d.Action, "reason", d.Reason)
	return nil
}
