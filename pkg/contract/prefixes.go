package contract

import (
	"fmt"
	"net/netip"
)

// maxPrefixes bounds how many prefixes a node may report.
const maxPrefixes = 16

type prefixesWire struct {
	V        int      `json:"v"`
	Prefixes []string `json:"prefixes"`
}

func (w prefixesWire) version() int { return w.V }

// EncodePrefixes renders the nodeinit.io/prefixes annotation. Order is kept
// (preferred first); duplicates are dropped.
func EncodePrefixes(prefixes []netip.Prefix) (string, error) {
	w := prefixesWire{V: PayloadVersion, Prefixes: []string{}}
	seen := map[netip.Prefix]bool{}
	for _, p := range prefixes {
		if err := checkPrefix(p); err != nil {
			return "", err
		}
		p = p.Masked()
		if !seen[p] {
			seen[p] = true
			w.Prefixes = append(w.Prefixes, p.String())
		}
	}
	return encode(w)
}

// DecodePrefixes parses the nodeinit.io/prefixes annotation.
func DecodePrefixes(value string) ([]netip.Prefix, error) {
	w, err := decode[prefixesWire](AnnotationPrefixes, value)
	if err != nil {
		return nil, err
	}
	if len(w.Prefixes) > maxPrefixes {
		return nil, fmt.Errorf("%s: %d prefixes, limit %d", AnnotationPrefixes, len(w.Prefixes), maxPrefixes)
	}
	out := make([]netip.Prefix, 0, len(w.Prefixes))
	for _, s := range w.Prefixes {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", AnnotationPrefixes, err)
		}
		if err := checkPrefix(p); err != nil {
			return nil, fmt.Errorf("%s: %w", AnnotationPrefixes, err)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("%s: prefix %s has host bits set (want %s)", AnnotationPrefixes, p, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}

func checkPrefix(p netip.Prefix) error {
	if !p.IsValid() || !p.Addr().Is6() || p.Addr().Is4In6() {
		return fmt.Errorf("prefix %s is not an IPv6 prefix", p)
	}
	return nil
}
