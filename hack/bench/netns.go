package main

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// namespace is a named network namespace (/var/run/netns/<name>) with lo up
// and an ifb eth0 holding the node's addresses. It is made through netlink,
// not iproute2: a thousand nodes would be five thousand `ip` processes.
type namespace struct {
	name string
	path string
}

func newNamespace(name string, addrs []netip.Prefix) (*namespace, error) {
	_ = netns.DeleteNamed(name) // left over from a killed run
	h, err := createNamed(name)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", name, err)
	}
	defer h.Close()
	ns := &namespace{name: name, path: "/var/run/netns/" + name}
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		ns.close()
		return nil, err
	}
	defer nl.Close()
	if err := ns.setup(nl, addrs); err != nil {
		ns.close()
		return nil, fmt.Errorf("netns %s: %w", name, err)
	}
	return ns, nil
}

// createNamed creates the namespace on a locked thread and puts that thread
// back where it was, so Go can reuse it.
func createNamed(name string) (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return netns.None(), err
	}
	defer orig.Close()
	h, err := netns.NewNamed(name)
	if serr := netns.Set(orig); serr != nil {
		// This thread is stuck in the new namespace: never reuse it.
		runtime.LockOSThread()
		return netns.None(), serr
	}
	return h, err
}

func (ns *namespace) setup(nl *netlink.Handle, addrs []netip.Prefix) error {
	lo, err := nl.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := nl.LinkSetUp(lo); err != nil {
		return err
	}
	if err := nl.LinkAdd(&netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}}); err != nil {
		return fmt.Errorf("adding ifb eth0 (modprobe ifb?): %w", err)
	}
	eth0, err := nl.LinkByName("eth0")
	if err != nil {
		return err
	}
	if err := nl.LinkSetUp(eth0); err != nil {
		return err
	}
	for _, p := range addrs {
		if err := addAddr(nl, eth0, p); err != nil {
			return err
		}
	}
	return nil
}

// addAddr puts p on link, IPv6 without duplicate address detection.
func addAddr(nl *netlink.Handle, link netlink.Link, p netip.Prefix) error {
	a, err := netlink.ParseAddr(p.String())
	if err != nil {
		return err
	}
	if p.Addr().Is6() {
		a.Flags |= 0x02 // IFA_F_NODAD
	}
	if err := nl.AddrAdd(link, a); err != nil {
		return fmt.Errorf("adding %s: %w", p, err)
	}
	return nil
}

// eth0 runs fn with a netlink handle in the namespace and its eth0.
func (ns *namespace) eth0(fn func(nl *netlink.Handle, eth0 netlink.Link) error) error {
	h, err := netns.GetFromPath(ns.path)
	if err != nil {
		return err
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		return err
	}
	defer nl.Close()
	l, err := nl.LinkByName("eth0")
	if err != nil {
		return err
	}
	return fn(nl, l)
}

// setLink sets eth0 up or down (the link-flap fault).
func (ns *namespace) setLink(up bool) error {
	return ns.eth0(func(nl *netlink.Handle, l netlink.Link) error {
		if up {
			return nl.LinkSetUp(l)
		}
		return nl.LinkSetDown(l)
	})
}

// ensureAddr puts p on eth0 unless it is there already.
func (ns *namespace) ensureAddr(p netip.Prefix) error {
	return ns.eth0(func(nl *netlink.Handle, l netlink.Link) error {
		if err := addAddr(nl, l, p); err != nil && !errors.Is(err, syscall.EEXIST) {
			return err
		}
		return nil
	})
}

func (ns *namespace) close() { _ = netns.DeleteNamed(ns.name) }
