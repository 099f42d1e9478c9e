// Package netlinksource reads the node's addresses from the kernel over
// netlink, in this or another network namespace, and watches them. It hands
// them on as netaddr.Address for pkg/netaddr to classify.
package netlinksource

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr"
)

// Source reads addresses from one network namespace.
type Source struct {
	path string // "" for the process's own namespace
	ns   netns.NsHandle
	h    *netlink.Handle
	// OnWatchError, when set, hears Watch's subscription failures (a
	// non-nil error each time one fails) and its recovery (nil): while the
	// subscription is broken Watch lists the addresses every retry instead.
	OnWatchError func(error)
	// subscribeFn is subscribe; tests replace it.
	subscribeFn func() (<-chan struct{}, <-chan error, chan struct{}, error)
}

// Open opens a source on the namespace at path (for example
// /var/run/netns/node-1), or on the process's own namespace when path is "".
func Open(path string) (*Source, error) {
	s := &Source{path: path, ns: netns.None()}
	if path != "" {
		ns, err := netns.GetFromPath(path)
		if err != nil {
			return nil, fmt.Errorf("opening network namespace %s: %w", path, err)
		}
		s.ns = ns
	}
	h, err := netlink.NewHandleAt(s.ns, unix.NETLINK_ROUTE)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("netlink in %s: %w", s.where(), err)
	}
	s.h = h
	return s, nil
}

func (s *Source) where() string {
	if s.path == "" {
		return "the host network namespace"
	}
	return s.path
}

// Close releases the namespace handle and netlink socket.
func (s *Source) Close() {
	if s.h != nil {
		s.h.Close()
	}
	if s.ns.IsOpen() {
		s.ns.Close()
	}
}

// List returns every address on every link.
func (s *Source) List() ([]netaddr.Address, error) {
	links, err := s.h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links in %s: %w", s.where(), err)
	}
	type linkInfo struct {
		name string
		up   bool
	}
	byIndex := map[int]linkInfo{}
	for _, l := range links {
		a := l.Attrs()
		up := a.Flags&net.FlagUp != 0 && a.OperState != netlink.OperDown && a.OperState != netlink.OperLowerLayerDown
		byIndex[a.Index] = linkInfo{a.Name, up}
	}
	addrs, err := s.h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing addresses in %s: %w", s.where(), err)
	}
	out := make([]netaddr.Address, 0, len(addrs))
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.IPNet == nil {
			continue
		}
		ones, _ := a.Mask.Size()
		link := byIndex[a.LinkIndex]
		out = append(out, netaddr.Address{
			Prefix: netip.PrefixFrom(ip.Unmap(), ones),
			Link:   link.name, LinkUp: link.up,
			Tentative:  a.Flags&unix.IFA_F_TENTATIVE != 0,
			Deprecated: a.Flags&unix.IFA_F_DEPRECATED != 0,
			Permanent:  a.Flags&unix.IFA_F_PERMANENT != 0,
			DADFailed:  a.Flags&unix.IFA_F_DADFAILED != 0,
			Temporary:  a.Flags&unix.IFA_F_TEMPORARY != 0,
		})
	}
	slices.SortFunc(out, netaddr.Address.Compare)
	return out, nil
}

// Watch sends the full address list now and after every change, waiting
// for changes to settle for the debounce interval (bursts, such as a link
// going down with many addresses, become one update). Identical lists are
// not resent. A netlink subscription that fails or breaks is retried with
// backoff, reported to OnWatchError, and meanwhile the addresses are listed
// at every retry. The channel is closed when ctx ends.
func (s *Source) Watch(ctx context.Context, debounce time.Duration) <-chan []netaddr.Address {
	out := make(chan []netaddr.Address, 1)
	go s.watch(ctx, debounce, out)
	return out
}

func (s *Source) watch(ctx context.Context, debounce time.Duration, out chan<- []netaddr.Address) {
	defer close(out)
	backoff := resubscribeBackoff()
	var last []netaddr.Address
	sent := false
	subscribe := s.subscribeFn
	if subscribe == nil {
		subscribe = s.subscribe
	}
	broken := false
	for ctx.Err() == nil {
		events, failed, stop, err := subscribe()
		if err == nil {
			if broken && s.OnWatchError != nil {
				s.OnWatchError(nil)
			}
			broken = false
			// (Re)subscribed: list once, so nothing missed while down is lost.
			last, sent = s.emit(ctx, out, last, sent)
			backoff = resubscribeBackoff()
			err = s.loop(ctx, debounce, events, failed, out, &last, &sent)
			close(stop)
		}
		if ctx.Err() != nil {
			return
		}
		// The subscription failed or broke: say so, and list now and at
		// every retry, so that no change waits for it to come back.
		broken = true
		if s.OnWatchError != nil {
			s.OnWatchError(fmt.Errorf("netlink subscription in %s: %w", s.where(), err))
		}
		last, sent = s.emit(ctx, out, last, sent)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff.Step()):
		}
	}
}

// resubscribeBackoff spaces the retries of a failed subscription (and so the
// listings meanwhile): 100ms, doubling up to 5s and staying there, without
// jitter. A fresh one is taken after every successful subscription.
func resubscribeBackoff() wait.Backoff {
	return wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Steps: math.MaxInt32, Cap: 5 * time.Second}
}

func (s *Source) subscribe() (<-chan struct{}, <-chan error, chan struct{}, error) {
	stop := make(chan struct{})
	events := make(chan struct{}, 1)
	failed := make(chan error, 1)
	notify := func() {
		select {
		case events <- struct{}{}:
		default:
		}
	}
	onErr := func(err error) {
		select {
		case failed <- err:
		default:
		}
	}
	addrCh := make(chan netlink.AddrUpdate, 64)
	linkCh := make(chan netlink.LinkUpdate, 64)
	ns := s.ns
	if err := netlink.AddrSubscribeWithOptions(addrCh, stop, netlink.AddrSubscribeOptions{Namespace: &ns, ErrorCallback: onErr, ReceiveBufferSize: 1 << 20}); err != nil {
		close(stop)
		return nil, nil, nil, err
	}
	if err := netlink.LinkSubscribeWithOptions(linkCh, stop, netlink.LinkSubscribeOptions{Namespace: &ns, ErrorCallback: onErr, ReceiveBufferSize: 1 << 20}); err != nil {
		close(stop)
		return nil, nil, nil, err
	}
	go func() {
		for {
			select {
			case _, ok := <-addrCh:
				if !ok {
					onErr(fmt.Errorf("address subscription closed"))
					return
				}
				notify()
			case _, ok := <-linkCh:
				if !ok {
					onErr(fmt.Errorf("link subscription closed"))
					return
				}
				notify()
			case <-stop:
				return
			}
		}
	}()
	return events, failed, stop, nil
}

func (s *Source) loop(ctx context.Context, debounce time.Duration, events <-chan struct{}, failed <-chan error, out chan<- []netaddr.Address, last *[]netaddr.Address, sent *bool) error {
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-failed:
			return err
		case <-events:
			if timer == nil {
				timer = time.After(debounce)
			}
		case <-timer:
			timer = nil
			*last, *sent = s.emit(ctx, out, *last, *sent)
		}
	}
}

// emit lists and sends the addresses unless they equal the last ones sent.
func (s *Source) emit(ctx context.Context, out chan<- []netaddr.Address, last []netaddr.Address, sent bool) ([]netaddr.Address, bool) {
	addrs, err := s.List()
	if err != nil || (sent && slices.Equal(addrs, last)) {
		return last, sent
	}
	select {
	case out <- addrs:
		return addrs, true
	case <-ctx.Done():
		return last, sent
	}
}
