// Package netnstest makes throwaway network namespaces for tests, with ifb
// and veth links (this kernel has no dummy driver), driven by iproute2.
// Processes stay in the host namespace and read the test namespace through
// its path, as the agent does with --netns.
package netnstest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// NS is a network namespace that is deleted when the test ends.
type NS struct {
	Name string
	// Path is /var/run/netns/<Name>, for netlinksource.Open and --netns.
	Path string
	t    testing.TB
}

// New creates a namespace with its loopback up. It fails the test, with the
// fix, when the test is not root or iproute2 is missing.
func New(t testing.TB) *NS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("network-namespace tests need root: run `sudo make test` (or the tests as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("network-namespace tests need iproute2's `ip`: apt-get install -y iproute2")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	n := &NS{Name: "nit-" + hex.EncodeToString(b), t: t}
	n.Path = "/var/run/netns/" + n.Name
	run(t, "ip", "netns", "add", n.Name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.Name).Run() })
	n.IP("link", "set", "lo", "up")
	return n
}

// IP runs `ip -n <ns> args...` and fails the test on error.
func (n *NS) IP(args ...string) {
	n.t.Helper()
	run(n.t, "ip", append([]string{"-n", n.Name}, args...)...)
}

// AddIFB adds an ifb link and sets it up. ifb links are NOARP, so IPv6
// addresses on them skip duplicate address detection.
func (n *NS) AddIFB(name string) {
	n.t.Helper()
	n.IP("link", "add", name, "type", "ifb")
	n.IP("link", "set", name, "up")
}

// AddVeth adds a veth pair inside the namespace and sets both ends up, so
// IPv6 addresses on them go through real DAD (tentative, then valid).
func (n *NS) AddVeth(a, b string) {
	n.t.Helper()
	n.IP("link", "add", a, "type", "veth", "peer", "name", b)
	n.IP("link", "set", a, "up")
	n.IP("link", "set", b, "up")
}

// AddAddr adds an address; extra is passed through (for example "nodad").
func (n *NS) AddAddr(link, cidr string, extra ...string) {
	n.t.Helper()
	n.IP(append([]string{"addr", "add", cidr, "dev", link}, extra...)...)
}

// DelAddr removes an address.
func (n *NS) DelAddr(link, cidr string) {
	n.t.Helper()
	n.IP("addr", "del", cidr, "dev", link)
}

// SetLink sets a link up or down.
func (n *NS) SetLink(link string, up bool) {
	n.t.Helper()
	state := "down"
	if up {
		state = "up"
	}
	n.IP("link", "set", link, state)
}

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}
