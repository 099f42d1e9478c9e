package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/grants"
)

// problem is one check's finding: the key, what is wrong, and what to do instead.
type problem struct{ path, msg, fix string }

// checkClusterName: the name becomes the clustername label's value, so it must be a label value.
func checkClusterName(name string) []problem {
	if name == "" {
		return nil
	}
	if errs := validation.IsValidLabelValue(name); len(errs) > 0 {
		// validation's own message quotes its regexp; say it plainly.
		return []problem{{"clusterName", fmt.Sprintf("%q is not a valid label value (it becomes %s)", name, contract.LabelClusterName),
			"use at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"}}
	}
	return nil
}

// checkDuration refuses a negative duration, and a zero the file sets (it would mean the default).
func checkDuration(path string, d time.Duration, set bool, min time.Duration) []problem {
	switch {
	case d < 0:
		return []problem{{path, fmt.Sprintf("%v is negative", d), "give a positive duration such as 90s, 2m or 720h"}}
	case set && d == 0:
		return []problem{{path, "0 is not a duration the coordinator can use", "remove the key for the default, or give a positive duration"}}
	case d > 0 && d < min:
		return []problem{{path, fmt.Sprintf("%v is shorter than %v", d, min), fmt.Sprintf("give at least %v", min)}}
	}
	return nil
}

// checkWait checks a wait where 0 means "never": not negative, at most max.
func checkWait(path string, d, max time.Duration) []problem {
	switch {
	case d < 0:
		return []problem{{path, fmt.Sprintf("%v is negative", d), "give 0 (never wait) or a positive duration such as 3s"}}
	case d > max:
		return []problem{{path, fmt.Sprintf("%v is longer than %v", d, max), fmt.Sprintf("give at most %v, or 0 to never wait", max)}}
	}
	return nil
}

// minCertificateDuration is the shortest spec.expirationSeconds Kubernetes
// accepts on a CSR (10 minutes): a smaller cap denies every CSR.
const minCertificateDuration = 10 * time.Minute

// checkPatterns refuses malformed patterns, and allow entries that match only keys never granted:
// such an entry does nothing, against what its writer expects.
func checkPatterns(path string, ps Patterns, taints bool) []problem {
	var out []problem
	for field, list := range map[string][]string{"allow": ps.Allow, "deny": ps.Deny} {
		for i, p := range list {
			at := fmt.Sprintf("%s.%s[%d]", path, field, i)
			if i := strings.Index(p, "*"); p == "" || (i >= 0 && i != len(p)-1) {
				out = append(out, problem{at, fmt.Sprintf("pattern %q: want an exact key or a prefix ending in a single trailing *", p), `write "example.com/role" or "example.com/*"`})
				continue
			}
			// A deny pattern no key can match would silently deny nothing.
			if why := patternShape(p); why != "" {
				out = append(out, problem{at, fmt.Sprintf("pattern %q matches no %s key: %s", p, map[bool]string{true: "taint", false: "label"}[taints], why),
					`keys are lower-case DNS names, "/", then letters, digits, "-", "_" or "."; write "example.com/role" or "example.com/*"`})
				continue
			}
			if field != "allow" {
				continue
			}
			if why := neverGranted(p, taints); why != "" {
				out = append(out, problem{at, fmt.Sprintf("%q is never granted: %s", p, why), "remove it; an admin sets such keys on the Node directly"})
			}
		}
	}
	return out
}

// patternShape says why p can match no label or taint key, "" when it can: keys are an optional
// lower-case DNS prefix and "/", then a name (validation.IsQualifiedName).
func patternShape(p string) string {
	prefix, wild := strings.CutSuffix(p, "*")
	if !wild {
		if errs := validation.IsQualifiedName(p); len(errs) > 0 {
			return strings.Join(errs, "; ")
		}
		return ""
	}
	domain, name, slash := strings.Cut(prefix, "/")
	if !slash {
		// Either a domain still being written, or a name without a domain.
		if strings.Trim(domain, "abcdefghijklmnopqrstuvwxyz0123456789-.") == "" || strings.Trim(domain, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == "" {
			return ""
		}
		return "it holds characters no key has"
	}
	switch {
	case domain == "":
		return "it starts with /"
	case len(validation.IsDNS1123Subdomain(domain)) > 0:
		return "the part before / must be a lower-case DNS name"
	case strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "":
		return "the part after / holds characters no key has"
	}
	return ""
}

// neverGranted says why pattern (an exact key, or every key of a prefix) is never granted.
func neverGranted(pattern string, taints bool) string {
	if taints {
		if pattern == contract.TaintUninitialized {
			return "the uninitialized taint is the coordinator's own"
		}
		return ""
	}
	prefix, wild := strings.CutSuffix(pattern, "*")
	if !wild {
		return grants.NeverGrantedLabel(pattern)
	}
	// A prefix whose every match is refused for its domain (node-restriction.kubernetes.io).
	if domain, _, ok := strings.Cut(prefix, "/"); ok {
		return grants.NeverGrantedLabel(domain + "/x")
	}
	return ""
}

// checkPrefixes parses a list of CIDRs and refuses host bits.
func checkPrefixes(path string, list []string) []problem {
	var out []problem
	for i, s := range list {
		at := fmt.Sprintf("%s[%d]", path, i)
		p, err := netip.ParsePrefix(s)
		if err != nil {
			out = append(out, problem{at, fmt.Sprintf("%q is not a CIDR", s), "write it as address/bits, e.g. 10.96.0.0/12"})
			continue
		}
		if p != p.Masked() {
			out = append(out, problem{at, fmt.Sprintf("%s has host bits set", p), fmt.Sprintf("write %s", p.Masked())})
		}
		if p.Addr().Is4In6() {
			// Addresses are compared unmapped: such a range would match none.
			out = append(out, problem{at, fmt.Sprintf("%s is an IPv4-mapped IPv6 range, which no address is compared with", p), "write it as IPv4"})
		}
	}
	return out
}

// checkNodePatterns refuses two "{node}" patterns that can derive one name for two Nodes:
// "{node}.nodes.example.com" for a and "{node}.example.com" for a.nodes both give
// a.nodes.example.com, and one Node would wait for the other.
func checkNodePatterns(path string, patterns []string) []problem {
	var out []problem
	for i, p := range patterns {
		b1, a1, ok1 := strings.Cut(strings.ToLower(p), "{node}")
		if !ok1 || strings.Contains(p, "*") {
			continue
		}
		for j := i + 1; j < len(patterns); j++ {
			q := patterns[j]
			b2, a2, ok2 := strings.Cut(strings.ToLower(q), "{node}")
			if !ok2 || strings.Contains(q, "*") || b1 == b2 && a1 == a2 {
				continue
			}
			if (strings.HasSuffix(a1, a2) || strings.HasSuffix(a2, a1)) && (strings.HasPrefix(b1, b2) || strings.HasPrefix(b2, b1)) {
				out = append(out, problem{fmt.Sprintf("%s[%d]", path, j), fmt.Sprintf("%q and %q can derive one name for two Nodes", p, q),
					"keep one of them: a \"{node}\" pattern's name must belong to one Node"})
			}
		}
	}
	return out
}

// checkPool: a pool is a CIDR of its family with no host bits.
func checkPool(path, s string, want4 bool) []problem {
	if s == "" {
		return nil
	}
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		return []problem{{path, fmt.Sprintf("%q is not a CIDR", s), "write it as address/bits, e.g. 10.244.0.0/16"}}
	case p.Addr().Is4() != want4:
		fam := map[bool]string{true: "IPv4", false: "IPv6"}[want4]
		return []problem{{path, fmt.Sprintf("%s is not %s", p, fam), "put an IPv4 range in ipv4Pool and an IPv6 range in ipv6Pool"}}
	case p != p.Masked():
		return []problem{{path, fmt.Sprintf("%s has host bits set", p), fmt.Sprintf("write %s", p.Masked())}}
	}
	return nil
}

// checkMaskSize: a node's pod CIDR must fit in the pool and hold pods.
func checkMaskSize(path string, size int, set bool, pool string, bits int) []problem {
	if !set {
		return nil
	}
	lo := 0
	if p, err := netip.ParsePrefix(pool); err == nil {
		lo = p.Bits()
	}
	if size <= lo || size > bits-2 {
		return []problem{{path, fmt.Sprintf("%d does not fit", size), fmt.Sprintf("want more than the pool's /%d and at most %d", lo, bits-2)}}
	}
	return nil
}

// checkInt refuses an integer outside [lo, hi], even an explicit zero (it would mean the default).
func checkInt(path string, v int, set bool, lo, hi int) []problem {
	if (set || v != 0) && (v < lo || v > hi) {
		return []problem{{path, fmt.Sprintf("%d is out of range", v), fmt.Sprintf("want %d to %d", lo, hi)}}
	}
	return nil
}

// checkEnum refuses a value not among the allowed ones.
func checkEnum[T ~string](path string, v T, allowed ...T) []problem {
	if slices.Contains(allowed, v) {
		return nil
	}
	s := make([]string, len(allowed))
	for i, a := range allowed {
		s[i] = string(a)
	}
	return []problem{{path, fmt.Sprintf("%q is not a choice", v), "want " + strings.Join(s, " or ")}}
}

// checkAddresses: reservedAddresses are addresses or CIDRs.
func checkAddresses(path string, list []string) []problem {
	var out []problem
	for i, s := range list {
		if _, err := parsePrefixOrAddr(s); err != nil {
			out = append(out, problem{fmt.Sprintf("%s[%d]", path, i), fmt.Sprintf("%q is not an address or a CIDR", s), "write 192.0.2.10 or 192.0.2.0/24"})
		}
	}
	return out
}

// checkDNSNames: reservedNames are DNS names.
func checkDNSNames(path string, list []string) []problem {
	var out []problem
	for i, s := range list {
		if errs := validation.IsDNS1123Subdomain(strings.ToLower(s)); len(errs) > 0 {
			out = append(out, problem{fmt.Sprintf("%s[%d]", path, i), fmt.Sprintf("%q is not a DNS name: %s", s, strings.Join(errs, "; ")), ""})
		}
	}
	return out
}
