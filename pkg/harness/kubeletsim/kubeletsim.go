// Package kubeletsim stands in for a kubelet running with
// --cloud-provider=external and --node-ip. It registers its Node with the
// node's own credentials exactly as the kubelet does, and obtains its serving
// certificate with client-go's certificate manager, the code the kubelet uses.
package kubeletsim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/certificate"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// Config describes one simulated kubelet.
type Config struct {
	// NodeName is the Node's name (and the kubelet's hostname).
	NodeName string
	// NodeIPs is --node-ip: one address, or one per family for dual-stack.
	NodeIPs []netip.Addr
	// Identity authenticates as system:node:<NodeName>.
	Identity *rest.Config
	// CertDir receives kubelet-server-current.pem, as in /var/lib/kubelet/pki.
	CertDir string
	// ServingDNSNames and ServingIPs, when set, replace the SANs the kubelet
	// would derive from its Node's addresses: a hostile or broken kubelet.
	ServingDNSNames []string
	ServingIPs      []netip.Addr
	// AskWhenSeen makes the serving-certificate manager ask as kubelet 1.37
	// does: nothing until its Node watch has delivered the Node, whose
	// addresses may by then include those the agent published. Without it,
	// the stand-in asks for the registration's addresses as soon as it has
	// registered, earlier than a kubelet: the default, which hack/demo and
	// the tests were written against (see BENCHMARKS.md, fourth stop of
	// issue 23, for what asking late changes).
	AskWhenSeen bool
	// OnRetry, when set, is told each registration attempt that failed
	// with an error a retry may cure, before the wait for the next: a
	// test learns that the API server was asked.
	OnRetry func(error)
}

// Kubelet is a registered, simulated kubelet.
type Kubelet struct {
	cfg    Config
	client kubernetes.Interface

	mu        sync.Mutex
	addresses []corev1.NodeAddress
	issued    []*x509.Certificate
	changed   chan struct{} // closed and replaced on every issuance
	asked     int           // templates the certificate manager asked for
	answered  int           // of them, those it got

	stop    context.CancelFunc
	watch   sync.WaitGroup // the Node watch
	synced  func() bool
	manager certificate.Manager
}

// Start is the kubelet before it registers: its client, and its watch on
// its own Node, which the kubelet starts with itself (NewMainKubelet's node
// informer, field-selected by name), so the connection it registers over
// is already open. Stop ends it.
func Start(ctx context.Context, cfg Config) (*Kubelet, error) {
	k, err := newKubelet(cfg)
	if err != nil {
		return nil, err
	}
	k.startWatch(ctx)
	return k, nil
}

// Register starts a kubelet and registers its Node (see the method); the
// Node watch starts with StartServing.
func Register(ctx context.Context, cfg Config) (*Kubelet, error) {
	k, err := newKubelet(cfg)
	if err != nil {
		return nil, err
	}
	if err := k.Register(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

func newKubelet(cfg Config) (*Kubelet, error) {
	if cfg.NodeName == "" || len(cfg.NodeIPs) == 0 || cfg.Identity == nil {
		return nil, errors.New("kubeletsim: NodeName, NodeIPs and Identity are required")
	}
	// As the kubelet talks (its contentType default): protobuf, and gzip
	// left to client-go's default.
	identity := rest.CopyConfig(cfg.Identity)
	identity.ContentType = runtime.ContentTypeProtobuf
	identity.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	client, err := kubernetes.NewForConfig(identity)
	if err != nil {
		return nil, err
	}
	return &Kubelet{cfg: cfg, client: client, changed: make(chan struct{})}, nil
}

// Register creates the Node as the kubelet does on first start: tainted
// uninitialized, the provided-node-ip annotation, and the InternalIP and
// Hostname addresses. A Node that already exists is kept (a kubelet restart).
func (k *Kubelet) Register(ctx context.Context) error {
	cfg := k.cfg
	ips := make([]string, 0, len(cfg.NodeIPs))
	addresses := make([]corev1.NodeAddress, 0, len(cfg.NodeIPs)+1)
	for _, ip := range cfg.NodeIPs {
		ips = append(ips, ip.String())
		addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
	}
	addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: cfg.NodeName})
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: cfg.NodeName,
			Labels: map[string]string{
				"kubernetes.io/hostname": cfg.NodeName,
				"kubernetes.io/os":       "linux", "beta.kubernetes.io/os": "linux",
				"kubernetes.io/arch": "amd64", "beta.kubernetes.io/arch": "amd64",
			},
			Annotations: map[string]string{contract.AnnotationProvidedNodeIP: strings.Join(ips, ",")},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: contract.TaintUninitialized, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Addresses: addresses,
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "kubeletsim is posting ready status", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
			}},
		},
	}
	if !cfg.AskWhenSeen {
		// Before the create: the watch may deliver the Node, with newer
		// addresses, before the create returns.
		k.mu.Lock()
		if k.addresses == nil {
			k.addresses = addresses
		}
		k.mu.Unlock()
	}
	if err := register(ctx, k.client, node, cfg.OnRetry); err != nil {
		return fmt.Errorf("registering node %s: %w", cfg.NodeName, err)
	}
	return nil
}

// register creates the Node until it succeeds, as the kubelet's
// registerWithAPIServer does (100 ms, doubling up to 7 s), on errors that
// may pass: the API server unreachable, too busy to finish a TLS handshake,
// timing out or shedding load. A refusal (NodeRestriction, validation)
// fails at once, where the kubelet would log it and try again forever.
func register(ctx context.Context, client kubernetes.Interface, node *corev1.Node, onRetry func(error)) error {
	step := 100 * time.Millisecond
	for {
		_, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		switch {
		case err == nil || apierrors.IsAlreadyExists(err):
			return nil
		case !mayPass(err):
			return err
		}
		if onRetry != nil {
			onRetry(err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(step):
		}
		step = min(2*step, 7*time.Second)
	}
}

// mayPass tells an error a retry may cure from a refusal. A server whose
// certificate does not verify is a refusal: the configuration is wrong.
func mayPass(err error) bool {
	var (
		status    apierrors.APIStatus
		unknownCA x509.UnknownAuthorityError
		invalid   x509.CertificateInvalidError
		host      x509.HostnameError
		verify    *tls.CertificateVerificationError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &invalid) || errors.As(err, &host) || errors.As(err, &verify) {
		return false
	}
	if !errors.As(err, &status) {
		return true // no answer from the API server
	}
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err)
}

// startWatch starts the watch on the kubelet's own Node, which keeps its
// addresses for the serving certificate; Stop ends it.
func (k *Kubelet) startWatch(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	k.stop = cancel
	lw := cache.NewListWatchFromClient(k.client.CoreV1().RESTClient(), "nodes", "", fields.OneTermEqualSelector("metadata.name", k.cfg.NodeName))
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Node{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    k.observe,
			UpdateFunc: func(_, n any) { k.observe(n) },
		},
	})
	k.synced = informer.HasSynced
	k.watch.Go(func() { informer.RunWithContext(ctx) })
}

// Addresses are the Node's addresses as the kubelet last saw them: those
// its next serving certificate asks for.
func (k *Kubelet) Addresses() []corev1.NodeAddress {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.addresses)
}

// Watching reports whether the Node watch has synced.
func (k *Kubelet) Watching() bool { return k.synced != nil && k.synced() }

// Serving reports whether StartServing has started the serving-certificate
// manager.
func (k *Kubelet) Serving() bool { return k.manager != nil }

// Client is the kubelet's clientset (node credentials).
func (k *Kubelet) Client() kubernetes.Interface { return k.client }

// StartServing starts the serving-certificate manager, before or after
// Register. It asks for the registration's addresses once registered
// (with AskWhenSeen, as kubelet 1.37, whose template reads the Node from
// its node informer: nothing until the watch has delivered the Node, then
// its status.addresses; client-go's manager looks for a template every
// second), and asks again when the Node's addresses change.
func (k *Kubelet) StartServing(ctx context.Context) error {
	store, err := certificate.NewFileStore("kubelet-server", k.cfg.CertDir, k.cfg.CertDir, "", "")
	if err != nil {
		return err
	}
	m, err := certificate.NewManager(&certificate.Config{
		Name:             "kubelet-serving",
		ClientsetFn:      func(*tls.Certificate) (kubernetes.Interface, error) { return k.client, nil },
		GetTemplate:      k.template,
		SignerName:       certificatesv1.KubeletServingSignerName,
		GetUsages:        certificate.DefaultKubeletServingGetUsages,
		CertificateStore: &notifyingStore{Store: store, k: k},
	})
	if err != nil {
		return err
	}
	if k.stop == nil {
		k.startWatch(ctx)
	}
	k.manager = m
	m.Start()
	return nil
}

func (k *Kubelet) observe(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok || len(node.Status.Addresses) == 0 {
		return
	}
	k.mu.Lock()
	k.addresses = slices.Clone(node.Status.Addresses)
	k.mu.Unlock()
}

// template is the kubelet's CSR template: CN=system:node:<name>,
// O=system:nodes, SANs from the Node's addresses (or the configured override).
func (k *Kubelet) template() *x509.CertificateRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.asked++
	dns, ips := sansFromAddresses(k.addresses)
	if k.cfg.ServingDNSNames != nil || k.cfg.ServingIPs != nil {
		dns, ips = k.cfg.ServingDNSNames, nil
		for _, ip := range k.cfg.ServingIPs {
			ips = append(ips, net.IP(ip.AsSlice()))
		}
	}
	if len(dns) == 0 && len(ips) == 0 {
		return nil
	}
	k.answered++
	return &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "system:node:" + k.cfg.NodeName, Organization: []string{"system:nodes"}},
		DNSNames:    dns,
		IPAddresses: ips,
	}
}

// sansFromAddresses mirrors the kubelet: names from Hostname, InternalDNS and
// ExternalDNS; IPs from InternalIP and ExternalIP; duplicates dropped.
func sansFromAddresses(addresses []corev1.NodeAddress) (dns []string, ips []net.IP) {
	seen := map[string]bool{}
	for _, a := range addresses {
		if seen[a.Address] {
			continue
		}
		seen[a.Address] = true
		switch a.Type {
		case corev1.NodeHostName, corev1.NodeInternalDNS, corev1.NodeExternalDNS:
			dns = append(dns, a.Address)
		case corev1.NodeInternalIP, corev1.NodeExternalIP:
			if ip := net.ParseIP(a.Address); ip != nil {
				ips = append(ips, ip)
			}
		}
	}
	return dns, ips
}

// TemplateAsks counts the times the serving-certificate manager asked
// for a template, and how many of them got one (a CSR to send): a test
// knows the manager looked.
func (k *Kubelet) TemplateAsks() (asked, answered int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.asked, k.answered
}

// Issued returns every serving certificate issued so far, oldest first.
func (k *Kubelet) Issued() []*x509.Certificate {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.issued)
}

// WaitForCertificate blocks until at least n certificates have been issued
// and returns the newest.
func (k *Kubelet) WaitForCertificate(ctx context.Context, n int) (*x509.Certificate, error) {
	for {
		k.mu.Lock()
		count, changed := len(k.issued), k.changed
		var newest *x509.Certificate
		if count > 0 {
			newest = k.issued[count-1]
		}
		k.mu.Unlock()
		if count >= n {
			return newest, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("node %s: waiting for serving certificate #%d: %w", k.cfg.NodeName, n, ctx.Err())
		case <-changed:
		}
	}
}

// Stop stops the certificate manager and the Node watch, and waits for the
// watch. client-go's certificate manager offers no wait: its context ends
// every request and wait, but not its rotation loop's sleep until the next
// rotation deadline, which outlives Stop with the manager's run
// (pkg/harness/leakcheck allows those two).
func (k *Kubelet) Stop() {
	if k.manager != nil {
		k.manager.Stop()
	}
	if k.stop != nil {
		k.stop()
	}
	k.watch.Wait()
}

// notifyingStore records each certificate the manager stores, which happens
// exactly when a CSR was approved and signed.
type notifyingStore struct {
	certificate.Store
	k *Kubelet
}

func (s *notifyingStore) Update(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	cert, err := s.Store.Update(certPEM, keyPEM)
	if err != nil || cert == nil || cert.Leaf == nil {
		return cert, err
	}
	s.k.mu.Lock()
	s.k.issued = append(s.k.issued, cert.Leaf)
	close(s.k.changed)
	s.k.changed = make(chan struct{})
	s.k.mu.Unlock()
	return cert, nil
}
