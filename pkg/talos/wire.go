package talos

import (
	"fmt"
	"net/netip"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
)

// The kinds the reader watches and what machined's API asks of a reader, as
// machinery names them (wire_test.go holds them to machinery's). Their specs
// are decoded from the wire rather than through machinery's resource
// packages, which link the whole machine API and machine-config world (CEL,
// every config document) into the agent.
const (
	runtimeNamespace  = "runtime"
	hardwareNamespace = "hardware"
	k8sNamespace      = "k8s"
	networkNamespace  = "network"

	platformMetadataType  = "PlatformMetadatas.talos.dev"
	systemInformationType = "SystemInformations.hardware.talos.dev"
	nodenameType          = "Nodenames.kubernetes.talos.dev"
	nodeIPType            = "NodeIPs.kubernetes.talos.dev"
	nodeIPConfigType      = "NodeIPConfigs.kubernetes.talos.dev"
	addressStatusType     = "AddressStatuses.net.talos.dev"

	// kubeletID is the NodeIP and NodeIPConfig that are the kubelet's.
	kubeletID = "kubelet"

	// roleMetadataKey and readerRole are the talos-role metadata machined
	// requires on every call; maxMessageSize is the largest message it sends.
	roleMetadataKey = "talos-role"
	readerRole      = "os:reader"
	maxMessageSize  = 32 * 1024 * 1024
)

// decodePlatform decodes a PlatformMetadataSpec.
func decodePlatform(b []byte) (facts.Platform, error) {
	var p facts.Platform
	err := eachField(b, func(f field) error {
		switch f.num {
		case 1:
			return f.string(&p.Platform)
		case 2:
			return f.string(&p.Hostname)
		case 3:
			return f.string(&p.Region)
		case 4:
			return f.string(&p.Zone)
		case 5:
			return f.string(&p.InstanceType)
		case 6:
			return f.string(&p.InstanceID)
		case 7:
			return f.string(&p.ProviderID)
		case 8:
			return f.bool(&p.Spot)
		case 9:
			return f.string(&p.InternalDNS)
		case 10:
			return f.string(&p.ExternalDNS)
		case 11:
			return f.mapEntry(&p.Tags)
		}
		return nil
	})
	return p, err
}

// decodeSystem decodes a SystemInformationSpec; BIOSVersion came last, as 8.
func decodeSystem(b []byte) (facts.System, error) {
	var s facts.System
	err := eachField(b, func(f field) error {
		switch f.num {
		case 1:
			return f.string(&s.Manufacturer)
		case 2:
			return f.string(&s.ProductName)
		case 3:
			return f.string(&s.Version)
		case 4:
			return f.string(&s.SerialNumber)
		case 5:
			return f.string(&s.UUID)
		case 6:
			return f.string(&s.WakeUpType)
		case 7:
			return f.string(&s.SKUNumber)
		case 8:
			return f.string(&s.BIOSVersion)
		}
		return nil
	})
	return s, err
}

// decodeNodename returns a NodenameSpec's node name.
func decodeNodename(b []byte) (string, error) {
	var name string
	err := eachField(b, func(f field) error {
		if f.num == 1 {
			return f.string(&name)
		}
		return nil
	})
	return name, err
}

// decodeNodeIPs returns a NodeIPSpec's addresses.
func decodeNodeIPs(b []byte) ([]netip.Addr, error) {
	var ips []netip.Addr
	err := eachField(b, func(f field) error {
		if f.num != 1 {
			return nil
		}
		ip, err := f.addr()
		if err != nil {
			return err
		}
		ips = append(ips, ip)
		return nil
	})
	return ips, err
}

// decodeExcludeSubnets returns a NodeIPConfigSpec's ExcludeSubnets.
func decodeExcludeSubnets(b []byte) ([]string, error) {
	var subnets []string
	err := eachField(b, func(f field) error {
		if f.num != 2 {
			return nil
		}
		var s string
		if err := f.string(&s); err != nil {
			return err
		}
		subnets = append(subnets, s)
		return nil
	})
	return subnets, err
}

// externalAddress returns the address of an AddressStatusSpec on the
// "external" pseudo-link (ok is false for any other link). Its Address is a
// common.NetIPPrefix: the IP's 4 or 16 bytes as 1, its length as 2.
func externalAddress(spec []byte) (ip netip.Addr, ok bool, err error) {
	var link string
	var ipBytes []byte
	err = eachField(spec, func(f field) error {
		switch f.num {
		case 1:
			prefix, err := f.message()
			if err != nil {
				return err
			}
			return eachField(prefix, func(f field) error {
				if f.num == 1 {
					return f.bytes(&ipBytes)
				}
				return nil
			})
		case 7:
			return f.string(&link)
		}
		return nil
	})
	if err != nil || link != ExternalLink {
		return netip.Addr{}, false, err
	}
	ip, ok = netip.AddrFromSlice(ipBytes)
	if !ok {
		return netip.Addr{}, false, fmt.Errorf("address of %d bytes", len(ipBytes))
	}
	return ip.Unmap(), true, nil
}

// field is one field of a message's wire form.
type field struct {
	num protowire.Number
	typ protowire.Type
	// val is a varint's value; raw is a length-delimited field's bytes.
	val uint64
	raw []byte
}

// eachField calls f with every field of a message's wire form, in order;
// it stops at the first error, f's or the wire's. Fields f does not know
// are skipped, as protobuf does.
func eachField(b []byte, f func(field) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("field tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		fd := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			fd.val, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			fd.raw, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(fd); err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
	}
	return nil
}

func (f field) want(typ protowire.Type, what string) error {
	if f.typ != typ {
		return fmt.Errorf("wire type %d, want %s", f.typ, what)
	}
	return nil
}

func (f field) string(dst *string) error {
	if err := f.want(protowire.BytesType, "a string"); err != nil {
		return err
	}
	*dst = string(f.raw)
	return nil
}

func (f field) bytes(dst *[]byte) error {
	if err := f.want(protowire.BytesType, "bytes"); err != nil {
		return err
	}
	*dst = f.raw
	return nil
}

func (f field) message() ([]byte, error) {
	return f.raw, f.want(protowire.BytesType, "a message")
}

func (f field) uint64(dst *uint64) error {
	if err := f.want(protowire.VarintType, "a varint"); err != nil {
		return err
	}
	*dst = f.val
	return nil
}

func (f field) bool(dst *bool) error {
	if err := f.want(protowire.VarintType, "a bool"); err != nil {
		return err
	}
	*dst = f.val != 0
	return nil
}

// mapEntry adds one entry of a map<string, string> (a message of key 1 and
// value 2) to m, making m if it is nil.
func (f field) mapEntry(m *map[string]string) error {
	entry, err := f.message()
	if err != nil {
		return err
	}
	var k, v string
	err = eachField(entry, func(f field) error {
		switch f.num {
		case 1:
			return f.string(&k)
		case 2:
			return f.string(&v)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[k] = v
	return nil
}

// addr decodes a netip.Addr as machinery's protoenc encoder writes it: a
// common.NetIP message holding the address's MarshalBinary form. Bare
// MarshalBinary bytes (0, 4 or 16 of them, as older encoders wrote) are read
// too, as machinery's decoder reads them.
func (f field) addr() (netip.Addr, error) {
	b, err := f.message()
	if err != nil {
		return netip.Addr{}, err
	}
	if len(b) != 0 && len(b) != 4 && len(b) != 16 {
		var ip []byte
		err := eachField(b, func(f field) error {
			if f.num == 1 {
				return f.bytes(&ip)
			}
			return nil
		})
		if err != nil {
			return netip.Addr{}, err
		}
		b = ip
	}
	var ip netip.Addr
	if err := ip.UnmarshalBinary(b); err != nil {
		return netip.Addr{}, err
	}
	return ip, nil
}
