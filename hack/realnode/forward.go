package realnode

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/vishvananda/netns"
)

// Forwarder accepts TCP connections on an address inside a network
// namespace and relays each to a target in the test's own namespace. It is
// how a node namespace reaches the control plane on the host's 127.0.0.1,
// the way Talos's KubePrism (127.0.0.1:7445) reaches the API servers.
type Forwarder struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
}

// Forward listens on addr inside the namespace at nsPath (the listening
// socket belongs to the namespace it was created in) and relays to target.
func Forward(nsPath, addr, target string) (*Forwarder, error) {
	ln, err := listenIn(nsPath, addr)
	if err != nil {
		return nil, err
	}
	f := &Forwarder{ln: ln, target: target}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

func listenIn(nsPath, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inNamespace(nsPath, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listening on %s in %s: %w", addr, nsPath, err)
	}
	return ln, nil
}

// DialIn connects to addr from inside the network namespace at nsPath: a
// socket belongs to the namespace it was created in.
func DialIn(nsPath, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNamespace(nsPath, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	})
	return c, err
}

// inNamespace runs fn on an OS thread switched into the namespace at nsPath.
func inNamespace(nsPath string, fn func() error) error {
	runtime.LockOSThread()
	host, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer host.Close()
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("opening network namespace %s: %w", nsPath, err)
	}
	defer ns.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := netns.Set(host); err != nil {
		// The thread is stuck in the wrong namespace: keep it locked so the
		// runtime retires it instead of reusing it.
		return fmt.Errorf("returning to the host network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

func (f *Forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		go f.relay(c)
	}
}

func (f *Forwarder) relay(c net.Conn) {
	defer c.Close()
	t, err := net.Dial("tcp", f.target)
	if err != nil {
		return
	}
	defer t.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(t, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, t); done <- struct{}{} }()
	<-done
}

// Addr is the listening address.
func (f *Forwarder) Addr() string { return f.ln.Addr().String() }

// Close stops accepting; relays in flight end with their connections.
func (f *Forwarder) Close() {
	_ = f.ln.Close()
	f.wg.Wait()
}
