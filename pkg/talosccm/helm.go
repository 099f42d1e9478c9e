package talosccm

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/yamlstrict"
)

// ipamFragment is the coordinator's ipam section derived from Talos CCM's
// Helm values.
type ipamFragment struct {
	enabled                    bool
	families                   []string
	ipv4Pool, ipv6Pool         string
	ipv4MaskSize, ipv6MaskSize int
}

func (f *ipamFragment) yaml() string {
	var b strings.Builder
	b.WriteString("ipam:\n")
	if !f.enabled {
		b.WriteString("  enabled: false\n")
		return b.String()
	}
	b.WriteString("  enabled: true\n")
	fmt.Fprintf(&b, "  families: [%s]\n", strings.Join(f.families, ", "))
	if f.ipv4Pool != "" {
		fmt.Fprintf(&b, "  ipv4Pool: %s\n", f.ipv4Pool)
	}
	if f.ipv4MaskSize != 0 {
		fmt.Fprintf(&b, "  ipv4MaskSize: %d\n", f.ipv4MaskSize)
	}
	if f.ipv6Pool != "" {
		fmt.Fprintf(&b, "  ipv6Pool: %q\n", f.ipv6Pool)
	}
	if f.ipv6MaskSize != 0 {
		fmt.Fprintf(&b, "  ipv6MaskSize: %d\n", f.ipv6MaskSize)
	}
	return b.String()
}

// chartDefaultControllers is enabledControllers in Talos CCM's chart values.
var chartDefaultControllers = []string{"cloud-node", "node-csr-approval"}

// helmValues reads what Talos CCM's Helm values say beyond transformations:
// which controllers ran (node-ipam-controller becomes the coordinator's
// ipam) and the flags they took.
func (m *migration) helmValues(values *yaml.Node) *ipamFragment {
	controllers := chartDefaultControllers
	ck, cv := yamlstrict.Entry(values, "enabledControllers")
	if cv != nil && cv.Kind == yaml.SequenceNode {
		controllers = nil
		for _, c := range cv.Content {
			controllers = append(controllers, c.Value)
		}
	}
	for _, c := range controllers {
		switch c {
		case "cloud-node", "node-csr-approval", "node-ipam-controller":
		default:
			m.note(ck, "enabledControllers: %s has no counterpart here (Talos CCM does not implement it either)", c)
		}
	}
	ip := &ipamFragment{enabled: slices.Contains(controllers, "node-ipam-controller")}
	if !ip.enabled {
		m.note(ck, "enabledControllers has no node-ipam-controller: the coordinator's ipam is off too (ipam.enabled: false); kube-controller-manager keeps allocating pod CIDRs")
	}
	cloudAllocator := false
	_, args := yamlstrict.Entry(values, "extraArgs")
	if args != nil && args.Kind == yaml.SequenceNode {
		for _, a := range args.Content {
			flag, val, _ := strings.Cut(strings.TrimLeft(a.Value, "-"), "=")
			switch flag {
			case "allocate-node-cidrs":
			case "cidr-allocator-type":
				cloudAllocator = val == "CloudAllocator"
			case "node-cidr-mask-size-ipv4":
				ip.ipv4MaskSize, _ = strconv.Atoi(val)
			case "node-cidr-mask-size-ipv6":
				ip.ipv6MaskSize, _ = strconv.Atoi(val)
				m.note(a, "--node-cidr-mask-size-ipv6=%s becomes ipam.ipv6MaskSize, which sizes segments of ipv6Pool; segments of a node's own prefix are /80 of a /64 (or shorter) prefix, as in Talos CCM", val)
			case "cluster-cidr":
				for _, c := range strings.Split(val, ",") {
					if p, err := netip.ParsePrefix(strings.TrimSpace(c)); err == nil && p.Addr().Is4() {
						ip.ipv4Pool = p.String()
					} else if err == nil {
						ip.ipv6Pool = p.String()
					}
				}
			default:
				m.note(a, "extraArgs %s has no counterpart in talos-nodeinit", a.Value)
			}
		}
	}
	if ip.enabled {
		ip.families = []string{"ipv4"}
		if cloudAllocator || ip.ipv6Pool != "" {
			ip.families = append(ip.families, "ipv6")
		}
		if ip.ipv4Pool == "" {
			m.note(args, "Talos CCM took IPv4 pod CIDRs from --cluster-cidr, not given here: the coordinator uses 10.244.0.0/16 (Talos's default pod subnet); set ipam.ipv4Pool to your cluster's pod subnet if it differs")
		}
	}
	var other []string
	for i := 0; i+1 < len(values.Content); i += 2 {
		switch k := values.Content[i].Value; k {
		case "transformations", "enabledControllers", "extraArgs":
		default:
			other = append(other, k)
		}
	}
	if len(other) > 0 {
		m.note(nil, "Helm values %s are Talos CCM's Deployment settings: the coordinator's are in coordinator/deploy (or its chart)", strings.Join(other, ", "))
	}
	return ip
}
