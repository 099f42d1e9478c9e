// Package controller is the agent's run loop: it reads the node's facts
// (machined, netlink, the rules), computes the desired Node with
// pkg/desired, and writes only the difference to its own Node with the
// kubelet's credentials. It also attests the serving CSRs the coordinator
// asks it to review.
//
// Inputs: Talos facts, kernel addresses, the Node (watched by name), the
// kubelet credentials on disk. Output: labels, annotations and
// status.addresses of this one Node, in one nodes/status patch, and its
// providerID only when no coordinator is to initialize it. Nothing else is
// ever written.
package controller

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/talos-nodeinit/talos-nodeinit/agent/nodeclient"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/csrcheck"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/desired"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/kubecreds"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr/netlinksource"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/rules"
)

// Config is everything the run loop needs. Zero durations take the defaults.
type Config struct {
	// NodeName overrides the node name Talos reports (required in degraded mode).
	NodeName string
	// Kubeconfig is the kubelet's kubeconfig; its certificate files are
	// reread every CredentialsPoll and the client rebuilt when they change.
	Kubeconfig      string
	CredentialsPoll time.Duration // default 2s
	// Facts streams Talos facts: (*talos.Reader).Watch, or a degraded source.
	Facts func(ctx context.Context, update func(facts.Talos)) error
	// NetNS is the network namespace to read addresses from ("" = own).
	NetNS string
	// Debounce lets address bursts settle (default 50ms).
	Debounce   time.Duration
	Rules      *rules.Rules
	Classifier netaddr.Classifier
	Policy     desired.ProviderIDPolicy
	Version    string
	Log        *slog.Logger
	Metrics    *Metrics
	// MinBackoff and MaxBackoff bound retries after API errors (200ms, 30s).
	MinBackoff, MaxBackoff time.Duration
	// ProviderIDRecheck is how long a providerID the API server refused
	// (an admission policy) waits before it is asked for again (10m, as
	// the coordinator waits): a policy may be lifted.
	ProviderIDRecheck time.Duration
	// Key is the agent's own key (pkg/agentkey): its public half goes into
	// the metadata annotation for the coordinator to enrol, and it signs
	// every attestation.
	Key ed25519.PrivateKey
	// KubeletServingCert is the kubelet's current serving certificate
	// (/var/lib/kubelet/pki/kubelet-server-current.pem): the agent vouches
	// for a serving request only when its kubelet would be asking
	// (csrcheck.RenewalDue). Empty: not read (every request is its
	// kubelet's as far as the agent can tell).
	KubeletServingCert string
}

// Agent is one node's run loop.
type Agent struct {
	cfg Config
	log *slog.Logger
	m   *Metrics

	mu           sync.Mutex
	notReady     error
	factsProblem error

	pub      ed25519.PublicKey
	agentKey string // pub, as published

	// Owned by the loop goroutine.
	nodeName  string
	facts     *facts.Talos
	addrs     []netaddr.Address
	haveAddrs bool
	client    *nodeclient.Client
	informer  *nodeInformer
	// lastWrite is the Node the last patch returned; each new watch
	// starts with it as its own write (adopt), while the credentials name
	// the same API server (apiServer: its address and CA).
	lastWrite *corev1.Node
	apiServer string
	attested  map[string]string
	answered  string            // the last csr-review value answered
	lastLog   map[string]string // dedupes repeated warnings
	// refusedProviderID is the providerID the API server refused this
	// agent (admission, validation: a refusal for good), at refusedAt. It
	// is not asked for again before ProviderIDRecheck, unless the agent
	// wants another.
	refusedProviderID string
	refusedAt         time.Time
	// missingSince is when a synced watch first lacked the Node, foundAt
	// when a direct read first found it all the same; recheck asks the loop
	// to sync again soon (see checkWatch).
	missingSince time.Time
	foundAt      time.Time
	// readErr is the last direct read of the Node that failed otherwise
	// than NotFound (an API server unreachable, or refusing the node's
	// credentials); nil once a read gets an answer.
	readErr error
	recheck bool
}

// New validates the config and fills in defaults.
func New(cfg Config) (*Agent, error) {
	if cfg.Kubeconfig == "" || cfg.Facts == nil || cfg.Rules == nil {
		return nil, errors.New("controller: Kubeconfig, Facts and Rules are required")
	}
	if len(cfg.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("controller: Key, the agent's ed25519 key, is required")
	}
	pub := cfg.Key.Public().(ed25519.PublicKey)
	if cfg.Policy == "" {
		cfg.Policy = desired.ProviderIDFromMetadata
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.CredentialsPoll, 2*time.Second)
	def(&cfg.Debounce, 50*time.Millisecond)
	def(&cfg.MinBackoff, 200*time.Millisecond)
	def(&cfg.MaxBackoff, 30*time.Second)
	def(&cfg.ProviderIDRecheck, 10*time.Minute)
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if len(cfg.Classifier.Excluded) == 0 {
		cfg.Classifier = netaddr.NewClassifier()
	}
	return &Agent{
		cfg: cfg, log: cfg.Log, m: cfg.Metrics, nodeName: cfg.NodeName,
		pub: pub, agentKey: contract.EncodeAgentKey(pub),
		notReady: errors.New("starting"), attested: map[string]string{}, lastLog: map[string]string{},
	}, nil
}

// Ready returns nil once the Node matches the desired state and the facts
// source has no problem, else why not.
func (a *Agent) Ready() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.factsProblem != nil {
		return a.factsProblem
	}
	return a.notReady
}

// SetFactsProblem is told by the facts source why it cannot be used (machined
// refusing this process), and nil once it can; until then the agent is not
// ready, whatever it managed on fallback facts.
func (a *Agent) SetFactsProblem(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.factsProblem = err
}

func (a *Agent) setReady(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.notReady = err
	if err == nil {
		a.m.Ready.Set(1)
	} else {
		a.m.Ready.Set(0)
	}
}

// Run runs until ctx ends. It returns an error only for a configuration the
// agent can never work with (a network namespace that cannot be opened);
// everything transient is retried with backoff.
func (a *Agent) Run(ctx context.Context) error {
	src, err := netlinksource.Open(a.cfg.NetNS)
	if err != nil {
		return fmt.Errorf("reading addresses: %w", err)
	}
	defer src.Close()
	var watchBroken atomic.Bool
	src.OnWatchError = func(err error) {
		switch {
		case err != nil && !watchBroken.Swap(true):
			a.log.Warn("address changes are not watched: listing the addresses at every retry instead", "err", err)
		case err == nil && watchBroken.Swap(false):
			a.log.Info("address changes are watched again")
		}
	}
	addrs := src.Watch(ctx, a.cfg.Debounce)

	factUpdates := make(chan facts.Talos, 1)
	go func() {
		if err := a.cfg.Facts(ctx, func(f facts.Talos) { replace(factUpdates, f) }); err != nil && ctx.Err() == nil {
			a.log.Error("facts source stopped", "err", err)
		}
	}()

	creds, err := kubecreds.Load(a.cfg.Kubeconfig)
	if err != nil {
		a.log.Warn("waiting for the kubelet's kubeconfig", "err", err)
	} else {
		a.useCredentials(creds)
	}
	credUpdates := kubecreds.Watch(ctx, a.cfg.Kubeconfig, a.cfg.CredentialsPoll, creds)

	nodeEvents := make(chan struct{}, 1)
	backoff := retryBackoff(a.cfg)
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer func() {
		if a.informer != nil {
			a.informer.stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			a.log.Info("stopping")
			return nil
		case f := <-factUpdates:
			a.factsChanged(f)
		case list, ok := <-addrs:
			if !ok {
				return nil
			}
			a.addrs, a.haveAddrs = list, true
		case l, ok := <-credUpdates:
			if !ok {
				return nil
			}
			a.log.Info("kubelet credentials changed; rebuilding the client")
			a.m.CredReloads.Inc()
			a.useCredentials(l)
		case <-nodeEvents:
		case <-retry.C:
		}
		a.startInformer(nodeEvents)
		a.recheck = false
		switch err := a.sync(ctx); {
		case err == nil:
			backoff = retryBackoff(a.cfg)
			switch in := a.providerIDRecheckIn(a.refusedProviderID); {
			case a.recheck:
				retry.Reset(time.Second)
			case in > 0:
				retry.Reset(in) // ask again for the refused providerID
			}
		default:
			a.m.Syncs.WithLabelValues("error").Inc()
			a.setReady(err)
			in := backoff.Step()
			a.log.Warn("sync failed; retrying", "err", err, "in", in)
			retry.Reset(in)
		}
	}
}

// retryBackoff spaces the retries of a failing sync: MinBackoff, doubling
// up to MaxBackoff and staying there, without jitter. A fresh one is taken
// after every successful sync.
func retryBackoff(cfg Config) wait.Backoff {
	return wait.Backoff{Duration: cfg.MinBackoff, Factor: 2, Steps: math.MaxInt32, Cap: cfg.MaxBackoff}
}

func (a *Agent) factsChanged(f facts.Talos) {
	if f.Degraded != "" {
		a.m.FactsDegraded.Set(1)
		a.once("degraded", f.Degraded, func() { a.log.Warn("facts are degraded", "why", f.Degraded) })
	} else {
		a.m.FactsDegraded.Set(0)
	}
	a.facts = &f
	if a.nodeName == "" && f.Nodename != "" {
		a.nodeName = f.Nodename
		a.log.Info("node name from Talos", "node", a.nodeName)
	} else if f.Nodename != "" && f.Nodename != a.nodeName {
		a.once("nodename", f.Nodename, func() {
			a.log.Warn("Talos reports another node name; keeping the one in use", "talos", f.Nodename, "using", a.nodeName)
		})
	}
}

func (a *Agent) useCredentials(l kubecreds.Loaded) {
	cfg := l.Config
	cfg.UserAgent = "nodeinit-agent/" + a.cfg.Version
	cfg.QPS, cfg.Burst = 5, 10
	cs, err := nodeclient.New(cfg)
	if err != nil {
		a.log.Error("building a client from the kubelet's kubeconfig", "err", err)
		return
	}
	a.client = cs
	if a.nodeName == "" {
		// Machined may never tell (it refuses a ContainerConfig under
		// workloadIsolation on Talos v1.14.0-v1.14.1): the credentials'
		// own identity is the one Node they may write anyway.
		if name, err := l.NodeName(); err == nil {
			a.nodeName = name
			a.log.Info("node name from the kubelet's client certificate", "node", name)
		}
	}
	if server := cfg.Host + "\x00" + cfg.CAFile + "\x00" + string(cfg.CAData); server != a.apiServer {
		// Another API server: the last patch's version says nothing there.
		a.apiServer, a.lastWrite = server, nil
	}
	if a.informer != nil {
		// The old watch authenticated with the old certificate; start over.
		a.informer.stop()
		a.informer = nil
	}
}

func (a *Agent) startInformer(events chan struct{}) {
	if a.informer != nil || a.client == nil || a.nodeName == "" {
		return
	}
	a.adopt(watchNode(a.client, a.nodeName, func() { replace(events, struct{}{}) }))
	a.missingSince, a.foundAt = time.Time{}, time.Time{} // a new watch gets its own time
}

// adopt makes n the agent's watch of its Node. The last Node a patch
// returned goes with it: a new watch's first list may be older than that
// patch (where client-go falls back from a streaming list to a list at
// resourceVersion 0, served from the API server's watch cache), and a sync
// reading it would send the patch's removals again.
func (a *Agent) adopt(n *nodeInformer) {
	a.informer = n
	if a.lastWrite != nil {
		n.wrote(a.lastWrite)
	}
}

// wrote records a Node a patch returned, for the syncs to read until the
// watch delivers it or something newer.
func (a *Agent) wrote(n *corev1.Node) {
	a.lastWrite = n
	if a.informer != nil {
		a.informer.wrote(n)
	}
}

// observed is the newest Node known: from the watch, or from a patch
// response the watch has not caught up with yet (client-go's
// MutationCache over the informer's store). A deleted Node is nil: wait
// for the kubelet to register it again.
func (a *Agent) observed() *corev1.Node {
	if a.informer == nil || !a.informer.synced() {
		return nil
	}
	return a.informer.get()
}

func (a *Agent) sync(ctx context.Context) error {
	switch {
	case a.client == nil:
		return a.waiting("the kubelet's kubeconfig")
	case a.nodeName == "":
		return a.waiting("the node name from Talos, the kubelet's client certificate, or --node-name")
	case a.facts == nil:
		return a.waiting("facts from machined")
	case !a.haveAddrs:
		return a.waiting("addresses from the kernel")
	}
	node := a.observed()
	if node == nil {
		a.checkWatch(ctx)
		if err := a.readErr; err != nil {
			a.once("read", err.Error(), func() {
				a.log.Warn("cannot read this node's Node from the API server: check the kubeconfig's server and the kubelet's credentials", "node", a.nodeName, "err", err)
			})
			return a.waiting("the API server, which did not answer a read of Node " + a.nodeName + ": " + err.Error())
		}
		a.once("read", "", nil) // answered: a failure again is said again
		return a.waiting("Node " + a.nodeName + " to be registered by the kubelet")
	}
	a.missingSince, a.foundAt = time.Time{}, time.Time{}
	a.readErr = nil
	a.once("read", "", nil) // the Node is here: a failing read later is said again
	want, ok, err := desired.Compute(desired.Inputs{
		NodeName: a.nodeName, Talos: *a.facts, Addresses: a.addrs, Classifier: a.cfg.Classifier,
		Rules: a.cfg.Rules, Policy: a.cfg.Policy, AgentVersion: a.cfg.Version, AgentKey: a.agentKey,
		ProvidedNodeIPs: providedNodeIPs(node),
	})
	if err != nil {
		// The facts themselves are unusable; retrying cannot help until they change.
		a.once("compute", err.Error(), func() { a.log.Error("cannot compute the desired Node", "err", err) })
		a.setReady(err)
		a.m.Syncs.WithLabelValues("error").Inc()
		return nil
	}
	if !ok {
		return a.waiting("platform metadata from machined")
	}
	a.once("rule-errors", strings.Join(want.Rules.Errors, "\n"), func() {
		for _, e := range want.Rules.Errors {
			a.log.Warn("rule output left out", "err", e)
		}
	})
	p, err := desired.Diff(node, want)
	if err != nil {
		return err
	}
	if p.ProviderIDConflict != "" {
		a.once("providerid", p.ProviderIDConflict, func() {
			a.log.Warn("the Node already has another providerID, which can never change; leaving it",
				"node", p.ProviderIDConflict, "wanted", want.ProviderID)
		})
	}
	// The report and the addresses in one write: the coordinator never sees
	// the metadata annotation without the addresses it describes.
	if p.Status != nil {
		if err := a.patch(ctx, "status", p.Status, "status"); err != nil {
			return err
		}
	}
	// A providerID patch that fails must not hold the attestations back:
	// they go first. Refused for good (an admission policy), the value is
	// remembered and asked for again only after ProviderIDRecheck; any
	// other error is retried.
	var specErr error
	if p.Spec != nil && a.providerIDRecheckIn(want.ProviderID) == 0 {
		specErr = a.patch(ctx, "spec", p.Spec, "")
		switch {
		case apierrors.IsForbidden(specErr) || apierrors.IsInvalid(specErr):
			a.refusedProviderID, a.refusedAt = want.ProviderID, time.Now()
			a.log.Warn("the API server refused this node's providerID (an admission policy?); leaving it unset, asking again later",
				"node", a.nodeName, "providerID", want.ProviderID, "in", a.cfg.ProviderIDRecheck, "err", specErr)
			specErr = nil
		case specErr == nil:
			a.refusedProviderID = ""
		}
	}
	if err := a.attest(ctx, a.observed(), want); err != nil {
		return errors.Join(specErr, err)
	}
	if specErr != nil {
		return specErr
	}
	a.m.Syncs.WithLabelValues("ok").Inc()
	a.lastLog["waiting"] = ""
	a.setReady(nil)
	return nil
}

// providerIDRecheckIn is how long until the providerID id may be asked
// for: 0 unless the API server refused it less than ProviderIDRecheck ago.
func (a *Agent) providerIDRecheckIn(id string) time.Duration {
	if id == "" || id != a.refusedProviderID {
		return 0
	}
	return max(0, a.cfg.ProviderIDRecheck-time.Since(a.refusedAt))
}

// watchCheckAfter is how long the Node may be missing from a synced watch
// before the agent reads it directly, in case the watch missed it.
const watchCheckAfter = 5 * time.Second

// checkWatch is the safety net for a watch that does not deliver the Node:
// one that missed its creation, or one whose first sync never completes
// (seen on a freshly started API server). Once the Node has been missing
// for watchCheckAfter, it reads the Node (a node may read itself), and
// again every watchCheckAfter. A watch is only restarted when a read finds
// the Node that an earlier read, at least watchCheckAfter before, found
// too: a watch that is merely late (seconds, under a join storm's load)
// delivers in the meantime, and restarting it would add a watch and its
// initial list to the load. So a watch that never delivers is restarted
// about 2 × watchCheckAfter after the Node went missing. A new watch
// starts these clocks again. The loop retries every second while the Node
// is missing.
func (a *Agent) checkWatch(ctx context.Context) {
	if a.informer == nil {
		return
	}
	if a.missingSince.IsZero() {
		a.missingSince = time.Now()
	}
	a.recheck = true
	if time.Since(a.missingSince) < watchCheckAfter {
		return
	}
	asked := time.Now()
	a.missingSince = asked
	_, err := a.client.GetNode(ctx, a.nodeName)
	a.readErr = nil
	if err != nil {
		if apierrors.IsNotFound(err) {
			a.foundAt = time.Time{}
		} else if ctx.Err() == nil {
			a.readErr = err // said in sync, until a read gets an answer
		}
		return // not registered yet (or unreachable): keep waiting
	}
	if a.foundAt.IsZero() {
		a.foundAt = asked // the Node existed when the read was sent
		a.log.Info("the Node exists but its watch has not delivered it yet; giving the watch time",
			"node", a.nodeName, "watch_synced", a.informer.synced(), "restart_in", watchCheckAfter)
		return
	}
	if time.Since(a.foundAt) < watchCheckAfter {
		return
	}
	a.log.Warn("the Node exists but its watch has not delivered it; restarting the watch",
		"node", a.nodeName, "watch_synced", a.informer.synced(), "found", time.Since(a.foundAt).Round(time.Second))
	a.m.WatchRestarts.Inc()
	a.foundAt = time.Time{}
	a.informer.stop()
	a.informer = nil
}

func (a *Agent) waiting(what string) error {
	err := errors.New("waiting for " + what)
	a.once("waiting", what, func() { a.log.Info("waiting", "for", what) })
	a.m.Syncs.WithLabelValues("waiting").Inc()
	a.setReady(err)
	return nil
}

func (a *Agent) patch(ctx context.Context, kind string, body []byte, subresource string) error {
	n, err := a.client.PatchNode(ctx, a.nodeName, body, subresource)
	if err != nil {
		a.m.Writes.WithLabelValues(kind, "error").Inc()
		return fmt.Errorf("patching Node %s (%s): %w", a.nodeName, kind, err)
	}
	a.m.Writes.WithLabelValues(kind, "ok").Inc()
	a.wrote(n)
	a.log.Info("updated Node", "node", a.nodeName, "part", kind, "patch", string(body))
	return nil
}

// attest answers the coordinator's nodeinit.io/csr-review request. node is
// nil when the watch has just seen the Node deleted: nothing to answer.
func (a *Agent) attest(ctx context.Context, node *corev1.Node, want desired.State) error {
	if node == nil {
		return nil
	}
	value := node.Annotations[contract.AnnotationCSRReview]
	if value == "" {
		return nil
	}
	review, err := contract.ParseReview(value)
	if err != nil {
		a.once("review", value, func() { a.log.Warn("ignoring an invalid csr-review annotation", "err", err) })
		return nil
	}
	name := review.CSR
	// An attestation this key did not sign (an older agent's, or one written
	// with the kubelet's credential) counts for nothing: it is replaced. One
	// of another request than the review asks for is answered again.
	prev, prevErr := contract.DecodeAttestation(node.Annotations[contract.AnnotationCSRAttestation])
	ours := prevErr == nil && prev.CSR == name && prev.Verify(a.nodeName, a.pub, prev.SANs) == nil
	if ours && a.attested[name] == prev.RequestSHA256 && (review.RequestSHA256 == "" || review.RequestSHA256 == prev.RequestSHA256 || a.answered == value) {
		// Answered already; an ask for a request the CSR no longer has (the
		// coordinator's cache lagged) costs one GET, not one per sync.
		return nil
	}
	csr, err := a.client.GetCSR(ctx, name)
	if apierrors.IsNotFound(err) {
		a.once("review-missing", name, func() { a.log.Warn("the CSR to review does not exist", "csr", name) })
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting CSR %s to attest: %w", name, err)
	}
	digest := contract.RequestDigest(csr.Spec.Request)
	if ours && prev.RequestSHA256 == digest {
		a.attested, a.answered = map[string]string{name: digest}, value
		return nil
	}
	att := csrcheck.Attest(csrcheck.FromCSR(csr), a.nodeName, ownNames(want), publishedIPs(want))
	if att.Verdict == contract.VerdictApprove {
		// The request names only this node's own: is its kubelet asking?
		// Anyone with the bootstrap token can mint this node's identity.
		if parsed, err := csrcheck.Parse(csr.Spec.Request); err == nil {
			if due, why := csrcheck.RenewalDue(a.servingCert(), att.SANs, parsed.Subject, time.Now()); !due {
				att.Verdict, att.Reason = contract.VerdictReject, why
			}
		}
	}
	att = att.Sign(a.nodeName, a.cfg.Key)
	encoded, err := contract.EncodeAttestation(att)
	if err != nil {
		return err
	}
	body := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, contract.AnnotationCSRAttestation, encoded)
	if err := a.patch(ctx, "attestation", body, ""); err != nil {
		return err
	}
	a.attested, a.answered = map[string]string{name: digest}, value
	a.m.Attestations.WithLabelValues(string(att.Verdict)).Inc()
	a.log.Info("attested serving CSR", "csr", name, "verdict", att.Verdict, "reason", att.Reason)
	return nil
}

// servingCert is the kubelet's current serving certificate, nil when it
// has none yet (a node that just joined) or it cannot be read, which is
// said once.
func (a *Agent) servingCert() *x509.Certificate {
	if a.cfg.KubeletServingCert == "" {
		return nil
	}
	data, err := os.ReadFile(a.cfg.KubeletServingCert)
	if errors.Is(err, fs.ErrNotExist) {
		a.once("serving-cert-missing", a.cfg.KubeletServingCert, func() {
			a.log.Info("the kubelet has no serving certificate here yet: a request with this node's own SANs is vouched for as its first (if the kubelet keeps its certificates elsewhere, set --kubelet-serving-cert)", "path", a.cfg.KubeletServingCert)
		})
		return nil
	}
	if err != nil {
		a.once("serving-cert", a.cfg.KubeletServingCert, func() {
			a.log.Warn("cannot read the kubelet's serving certificate: every serving request with this node's own SANs is vouched for", "path", a.cfg.KubeletServingCert, "err", err)
		})
		return nil
	}
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type == "CERTIFICATE" {
			if c, err := x509.ParseCertificate(block.Bytes); err == nil {
				return c
			}
			break
		}
	}
	a.once("serving-cert", a.cfg.KubeletServingCert, func() {
		a.log.Warn("the kubelet's serving certificate file holds no certificate", "path", a.cfg.KubeletServingCert)
	})
	return nil
}

// ownNames are the DNS names the node answers to: its Hostname and DNS addresses.
func ownNames(want desired.State) []string {
	var names []string
	for _, addr := range want.Addresses {
		switch addr.Type {
		case corev1.NodeHostName, corev1.NodeInternalDNS, corev1.NodeExternalDNS:
			names = append(names, addr.Address)
		}
	}
	return names
}

// publishedIPs are the IP addresses the node publishes in status.addresses:
// those its kubelet asks for. Its other addresses (on lo, an excluded or
// down link, a deprecated one) are in no honest request.
func publishedIPs(want desired.State) []netip.Addr {
	var ips []netip.Addr
	for _, addr := range want.Addresses {
		switch addr.Type {
		case corev1.NodeInternalIP, corev1.NodeExternalIP:
			if ip, err := netip.ParseAddr(addr.Address); err == nil {
				ips = append(ips, ip.Unmap())
			}
		}
	}
	return ips
}

// providedNodeIPs reads the kubelet's --node-ip from its annotation.
func providedNodeIPs(node *corev1.Node) []netip.Addr {
	var ips []netip.Addr
	for s := range strings.SplitSeq(node.Annotations[contract.AnnotationProvidedNodeIP], ",") {
		if ip, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
			ips = append(ips, ip)
		}
	}
	return ips
}

// once runs log when the value under key differs from the last one seen,
// so a persisting condition is logged once, not on every sync.
func (a *Agent) once(key, value string, log func()) {
	if a.lastLog[key] == value {
		return
	}
	a.lastLog[key] = value
	if value != "" {
		log()
	}
}

// replace puts v in a one-slot channel, dropping a value not yet read.
func replace[T any](ch chan T, v T) {
	for {
		select {
		case ch <- v:
			return
		default:
			select {
			case <-ch:
			default:
			}
		}
	}
}

// nodeInformer watches one Node by name; own holds the Nodes the agent's
// patches returned until the watch delivers them, so a sync reads its own
// writes instead of writing them again.
type nodeInformer struct {
	inf    cache.SharedIndexInformer
	own    cache.MutationCache
	name   string
	cancel context.CancelFunc
}

// watchNode starts watching the Node name.
func watchNode(c *nodeclient.Client, name string, changed func()) *nodeInformer {
	n := newNodeInformer(c.WatchNode(name), name, changed)
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go n.inf.Run(ctx.Done())
	return n
}

func newNodeInformer(lw cache.ListerWatcher, name string, changed func()) *nodeInformer {
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	})
	// One key, the agent's own Node: kept until the watch delivers it or
	// something newer, however late (an expired write would bring back the
	// view before it, and a sync would send its removals again).
	own := cache.NewIntegerResourceVersionMutationCacheWithOptions(klog.Background(), inf.GetStore(),
		cache.MutationCacheOptions{Indexer: inf.GetIndexer(), TTL: 24 * time.Hour, MaxCacheSize: 1})
	return &nodeInformer{inf: inf, own: own, name: name}
}

func (n *nodeInformer) synced() bool { return n.inf.HasSynced() }
func (n *nodeInformer) stop()        { n.cancel() }

// wrote records a Node a patch returned.
func (n *nodeInformer) wrote(node *corev1.Node) { n.own.Mutation(node) }

func (n *nodeInformer) get() *corev1.Node {
	obj, ok, err := n.own.GetByKey(n.name)
	if err != nil || !ok {
		return nil
	}
	node, _ := obj.(*corev1.Node)
	return node
}
