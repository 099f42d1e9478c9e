// Package talos reads the node's facts from Talos's machined over its local
// socket, and watches them: platform metadata, system information, the
// kubelet's node name and node IPs, and the cloud public IPs Talos puts on
// the pseudo-link "external". When the socket is not usable (a static pod
// since Talos 1.13), the kernel command line gives a degraded subset.
// Talos's resource types stop here: what it hands on is pkg/facts.
package talos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
)

// DefaultSocket is machined's socket on a Talos node.
const DefaultSocket = "/system/run/machined/machine.sock"

// ExternalLink is the pseudo-link Talos puts cloud public IPs on.
const ExternalLink = "external"

// Reader watches machined.
type Reader struct {
	// Socket is machined's socket (DefaultSocket when empty).
	Socket string
	// MinBackoff and MaxBackoff bound reconnection delays (100ms and 10s when zero).
	MinBackoff, MaxBackoff time.Duration
	// Log receives connection state changes (slog.Default when nil).
	Log *slog.Logger
	// Fallback, when set, gives the facts to publish while machined refuses
	// this process (the kernel command line's, for a static pod); they are
	// marked degraded with the refusal. Machined is still retried, slowly.
	Fallback func() (facts.Talos, error)
	// Problem, when set, is told why machined cannot be used (a refusal),
	// and nil once it can.
	Problem func(error)
}

// ErrRefused is machined refusing this process its socket: it authorizes
// only the PIDs (and mount namespaces) of services it runs itself, so only
// a system extension service may read it, never a static pod (Talos 1.13+).
var ErrRefused = errors.New("machined refused this process: only a service Talos runs may read its socket (the system extension ext-nodeinit-agent, or the ContainerConfig ctr-nodeinit-agent); a static pod may not since Talos 1.13, " +
	"and under SecurityProfileConfig workloadIsolation (on in clusters created with Talos 1.14) Talos v1.14.0-v1.14.1 refuse a ContainerConfig too (they record its PID in sandboxd's namespace; fixed upstream in 41475c9c)")

// Refused reports whether err is machined's PermissionDenied.
func Refused(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrRefused) || status.Code(err) == codes.PermissionDenied {
		return true
	}
	// An Errored event carries its error as text.
	return strings.Contains(err.Error(), "code = PermissionDenied")
}

// SocketDenied says what to do when err is the kernel refusing to connect
// to machined's socket ("" when it is not). The socket is apid's (uid 50,
// mode 0755): a process needs write access to connect, which root without
// capabilities lacks, as in a ContainerConfig container by default. This is
// a setting to fix, not a wait, unlike a socket that is not there yet.
func SocketDenied(err error) string {
	if err == nil || !errors.Is(err, syscall.EACCES) && !strings.Contains(err.Error(), "connect: permission denied") {
		return ""
	}
	return "run the agent as the Talos extension service, or, as a ContainerConfig, with security.machinedAccess: true and capabilities.add: [DAC_OVERRIDE]"
}

// WithReaderRole adds the talos-role metadata machined requires on every call.
func WithReaderRole(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, roleMetadataKey, readerRole)
}

// kinds are the resources watched; AddressStatus is filtered to the external link.
var kinds = []kind{
	{runtimeNamespace, platformMetadataType},
	{hardwareNamespace, systemInformationType},
	{k8sNamespace, nodenameType},
	{k8sNamespace, nodeIPType},
	{k8sNamespace, nodeIPConfigType},
	{networkNamespace, addressStatusType},
}

// Watch calls update with a complete snapshot once every watched kind has
// been read, then after every change. It reconnects with backoff whenever
// the socket is missing or machined goes away, and re-reads everything on
// reconnection so nothing changed meanwhile is missed. It returns when ctx
// ends.
func (r *Reader) Watch(ctx context.Context, update func(facts.Talos)) error {
	log := r.logger()
	initial := r.reconnectBackoff()
	maxB := initial.Cap
	backoff := initial
	connected, refused, denied := false, false, false
	problem := func(err error) {
		if r.Problem != nil {
			r.Problem(err)
		}
	}
	for {
		began := time.Now()
		err := r.session(ctx, func(f facts.Talos) {
			if !connected {
				log.Info("reading facts from machined", "socket", r.socket())
				connected, denied = true, false
			}
			if refused {
				log.Info("machined accepts this process now; facts are no longer degraded", "socket", r.socket())
				refused = false
				problem(nil)
			}
			backoff = initial
			update(f)
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if Refused(err) {
			if !refused {
				refused = true
				err = fmt.Errorf("%w (%v)", ErrRefused, err)
				problem(err)
				r.fallBack(log, err, update)
			}
			connected = false
			backoff = refusedBackoff(initial) // each try costs machined a 5 s wait for our PID
		} else if connected {
			log.Warn("lost machined, reconnecting", "socket", r.socket(), "error", err)
			connected = false
		} else if hint := SocketDenied(err); hint != "" {
			if !denied {
				denied = true
				log.Warn("machined's socket refuses this process at connect: "+hint, "socket", r.socket(), "error", err)
				problem(fmt.Errorf("%s: %w", hint, err))
			}
		} else {
			log.Debug("machined not reachable", "socket", r.socket(), "error", err, "retry_in", backoff.Duration)
		}
		if time.Since(began) > maxB {
			backoff = initial
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff.Step()):
		}
	}
}

// reconnectBackoff spaces Watch's reconnections: MinBackoff, doubling up to
// MaxBackoff and staying there, without jitter (100ms and 10s when zero). A
// fresh one is taken after every snapshot read and every session that lasted
// longer than MaxBackoff.
func (r *Reader) reconnectBackoff() wait.Backoff {
	minB, maxB := r.MinBackoff, r.MaxBackoff
	if minB == 0 {
		minB = 100 * time.Millisecond
	}
	if maxB == 0 {
		maxB = 10 * time.Second
	}
	return wait.Backoff{Duration: minB, Factor: 2, Steps: math.MaxInt32, Cap: maxB}
}

// refusedBackoff is the backoff after machined refused this process: its
// cap at once, and at every retry until a snapshot or a long session resets it.
func refusedBackoff(b wait.Backoff) wait.Backoff {
	return wait.Backoff{Duration: b.Cap}
}

// fallBack logs a refusal once, loudly, and publishes the fallback facts.
func (r *Reader) fallBack(log *slog.Logger, err error, update func(facts.Talos)) {
	if r.Fallback == nil {
		log.Error("cannot read facts: run the agent as the Talos system extension, or with --facts=auto (the install's default: the kernel command line's facts while machined refuses)",
			"socket", r.socket(), "err", err)
		return
	}
	f, ferr := r.Fallback()
	if ferr != nil {
		log.Error("cannot read facts, and the fallback failed too", "socket", r.socket(), "err", err, "fallback_err", ferr)
		return
	}
	f.Degraded = err.Error() + "; " + f.Degraded
	log.Error("falling back to degraded facts from the kernel command line (the platform; no region, zone, instance type, instance ID or VIPs): the Node is initialized without them. For complete facts run the agent as the Talos system extension, or on a Talos release that admits a ContainerConfig under workloadIsolation",
		"socket", r.socket(), "err", err)
	update(f)
}

func (r *Reader) logger() *slog.Logger {
	if r.Log == nil {
		return slog.Default()
	}
	return r.Log
}

func (r *Reader) socket() string {
	if r.Socket == "" {
		return DefaultSocket
	}
	return r.Socket
}

// session watches until an error; it always returns a non-nil error.
func (r *Reader) session(ctx context.Context, update func(facts.Talos)) error {
	if _, err := os.Stat(r.socket()); err != nil {
		return fmt.Errorf("machined socket: %w", err)
	}
	// The same connection machinery's client.New builds for WithUnixSocket,
	// without linking every machine API it also wraps (that alone would
	// double the agent's binary).
	conn, err := grpc.NewClient("unix:///"+r.socket(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize)),
		grpc.WithSharedWriteBuffer(true), grpc.WithNoProxy())
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(WithReaderRole(ctx))
	defer cancel()

	events := make(chan event, 64)
	s := newSnapshot()
	bootstrapped := 0
	for _, k := range kinds {
		if err := watchKind(ctx, conn, k, events); err != nil {
			if optionalUnsupported(err) {
				bootstrapped++
				s.noVIPs = true
				continue
			}
			return fmt.Errorf("watching %s: %w", k.typ, err)
		}
	}
	said := false
	for {
		var e event
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e = <-events:
		}
		if err := s.apply(e, &bootstrapped); err != nil {
			return err
		}
		// Apply whatever else is already queued, then publish once.
	drain:
		for {
			select {
			case e = <-events:
				if err := s.apply(e, &bootstrapped); err != nil {
					return err
				}
			default:
				break drain
			}
		}
		if bootstrapped == len(kinds) {
			if s.noVIPs && !said {
				said = true
				r.logger().Warn("machined does not serve "+string(nodeIPConfigType)+": the shared VIPs Talos configures are unknown, so the node holding a public one publishes it as an ExternalIP (and its kubelet's serving CSR, naming it, is denied)", "socket", r.socket())
			}
			update(s.facts())
		}
	}
}

// snapshot accumulates watch events into facts.
type snapshot struct {
	f        facts.Talos
	external map[string]netip.Addr // by AddressStatus ID
	noVIPs   bool                  // machined does not serve NodeIPConfig
}

func newSnapshot() *snapshot { return &snapshot{external: map[string]netip.Addr{}} }

func (s *snapshot) apply(e event, bootstrapped *int) error {
	if e.err == nil {
		switch e.typ {
		case eventBootstrapped:
			*bootstrapped++
			return nil
		case eventCreated, eventUpdated, eventDestroyed:
			return s.set(e)
		}
		return nil // Noop, and types COSI may add
	}
	if optionalUnsupported(e.err) {
		// A machined without the optional kind: read without it.
		*bootstrapped++
		s.noVIPs = true
		return nil
	}
	return e.err
}

// set records one resource's facts, or forgets them when it is gone.
func (s *snapshot) set(e event) error {
	if err := s.decode(e); err != nil {
		return fmt.Errorf("decoding %s %s: %w", e.resourceType, e.id, err)
	}
	return nil
}

func (s *snapshot) decode(e event) error {
	gone, spec := e.typ == eventDestroyed, e.spec
	switch {
	case e.is(runtimeNamespace, platformMetadataType):
		s.f.Metadata = nil
		if !gone {
			p, err := decodePlatform(spec)
			if err != nil {
				return err
			}
			s.f.Metadata = &p
		}
	case e.is(hardwareNamespace, systemInformationType):
		s.f.System = nil
		if !gone {
			sys, err := decodeSystem(spec)
			if err != nil {
				return err
			}
			s.f.System = &sys
		}
	case e.is(k8sNamespace, nodenameType):
		s.f.Nodename = ""
		if !gone {
			name, err := decodeNodename(spec)
			if err != nil {
				return err
			}
			s.f.Nodename = name
		}
	case e.is(k8sNamespace, nodeIPType) && e.id == kubeletID:
		s.f.NodeIPs = nil
		if !gone {
			ips, err := decodeNodeIPs(spec)
			if err != nil {
				return err
			}
			s.f.NodeIPs = ips
		}
	case e.is(k8sNamespace, nodeIPConfigType) && e.id == kubeletID:
		s.f.VIPs = nil
		if !gone {
			subnets, err := decodeExcludeSubnets(spec)
			if err != nil {
				return err
			}
			s.f.VIPs = vips(subnets)
		}
	case e.is(networkNamespace, addressStatusType):
		delete(s.external, e.id)
		if !gone {
			ip, ok, err := externalAddress(spec)
			if err != nil {
				return err
			}
			if ok {
				s.external[e.id] = ip
			}
		}
	}
	return nil
}

func (e event) is(namespace, typ string) bool {
	return e.namespace == namespace && e.resourceType == typ
}

// vips are the bare addresses among NodeIPConfig's ExcludeSubnets: Talos
// (nodeip_config.go) writes the pod and service CIDRs there as CIDRs, then
// every configured VIP as an address (vip.ip and Layer2VIPConfig take
// nothing else). The CIDRs are left out: a pod CIDR range carved from the
// nodes' own IPv6 prefixes holds their public addresses. So is anything that
// does not parse.
func vips(entries []string) []netip.Addr {
	var out []netip.Addr
	for _, e := range entries {
		if ip, err := netip.ParseAddr(e); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// optionalUnsupported reports whether err is machined's access filter
// refusing the one optional kind, NodeIPConfig, as a type it does not serve
// (internal/app/resources/access.go: PermissionDenied, `resource type %q is
// not supported`): a Talos without it, which costs the agent only the VIPs
// and must not read as machined refusing this process.
func optionalUnsupported(err error) bool {
	return err != nil && strings.Contains(err.Error(), fmt.Sprintf("resource type %q is not supported", nodeIPConfigType))
}

func (s *snapshot) facts() facts.Talos {
	f := s.f
	f.NodeIPs = slices.Clone(f.NodeIPs)
	f.ExternalIPs = nil
	for _, ip := range s.external {
		if !slices.Contains(f.ExternalIPs, ip) {
			f.ExternalIPs = append(f.ExternalIPs, ip)
		}
	}
	slices.SortFunc(f.ExternalIPs, netip.Addr.Compare)
	return f
}
