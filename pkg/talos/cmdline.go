package talos

import (
	"fmt"
	"os"

	"github.com/siderolabs/go-procfs/procfs"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
)

// DegradedCmdline explains facts taken from the kernel command line.
const DegradedCmdline = "machined's socket is not available (static pods may not use it since Talos 1.13): " +
	"platform and hostname come from the kernel command line; region, zone, instance type, provider ID, " +
	"system information and external addresses are unknown"

// FromCmdline reads talos.platform and talos.hostname from a kernel command
// line file (normally /proc/cmdline). The facts are marked degraded.
func FromCmdline(path string) (facts.Talos, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return facts.Talos{}, fmt.Errorf("reading the kernel command line: %w", err)
	}
	return ParseCmdline(string(data)), nil
}

// ParseCmdline is FromCmdline on the command line's text.
func ParseCmdline(cmdline string) facts.Talos {
	c := procfs.NewCmdline(cmdline)
	md := &facts.Platform{}
	if v := c.Get("talos.platform").First(); v != nil {
		md.Platform = *v
	}
	if v := c.Get("talos.hostname").First(); v != nil {
		md.Hostname = *v
	}
	return facts.Talos{Metadata: md, Nodename: md.Hostname, Degraded: DegradedCmdline}
}
