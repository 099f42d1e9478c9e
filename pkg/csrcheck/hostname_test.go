package csrcheck

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// Hostname squatting: squat-m lists the names of squat-v (its node name,
// and what the admin's "{node}" pattern gives it) as its own Hostnames.
// Names come from the requester's identity, so the squatter's listing
// loses: squat-v's request is never held or denied for it, and squat-m's
// own request for them is refused. A name only a "*" pattern allows is not
// the requester's by identity: another Node listing it still holds it.
func TestHostnameSquatting(t *testing.T) {
	policy := Policy{DNSPatterns: []string{"{node}.nodes.example.com", "*.nodes.example.com", "*.compute.example.com"}, ClusterDomain: "cluster.local"}
	// Names as the coordinator gives them: each Node's name, and what its
	// name is by a "{node}" pattern (IdentityOwners).
	squatted := Facts{
		Names: map[string]string{"squat-v": "squat-v", "squat-m": "squat-m", "squat-v.nodes.example.com": "squat-v"},
		Hostnames: map[string]string{
			"squat-v": "squat-m", "squat-v.nodes.example.com": "squat-m", "ip-10-0-0-1.compute.example.com": "squat-m",
		},
		APIServerNames: []string{"cp-1"},
	}
	const (
		ok      = "ok"
		held    = "held"
		refused = "refused"
	)
	for _, c := range []struct {
		name, node, san string
		want            string
		reason          string // in the refusal or hold
	}{
		{"own name, squatted", "squat-v", "squat-v", ok, ""},
		{"own name in upper case, squatted", "squat-v", "SQUAT-V", ok, ""},
		{"own {node} name, squatted", "squat-v", "squat-v.nodes.example.com", ok, ""},
		{"a * pattern name another Node lists stays held", "squat-v", "ip-10-0-0-1.compute.example.com", held, "squat-m's Hostname"},
		{"the squatter asks for the victim's name", "squat-m", "squat-v", refused, "Node squat-v's name"},
		{"the squatter asks for the victim's {node} name, which a * pattern allows", "squat-m", "squat-v.nodes.example.com", refused, "Node squat-v's name"},
		{"the squatter's own {node} name", "squat-m", "squat-m.nodes.example.com", ok, ""},
		// Identity never lifts a refusal made before it.
		{"own name, reserved", "cp-1", "cp-1", refused, "name of the API server"},
		{"own {node} name under the cluster domain", "x", "x.svc.cluster.local", refused, ".svc"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckDNSSAN(c.san, c.node, squatted, policy)
			var retry retryError
			got := ok
			switch {
			case errors.As(err, &retry):
				got = held
			case err != nil:
				got = refused
			}
			if got != c.want {
				t.Fatalf("CheckDNSSAN(%q) for %s: %s (%v), want %s", c.san, c.node, got, err, c.want)
			}
			if err != nil && !strings.Contains(err.Error(), c.reason) {
				t.Errorf("%q lacks %q", err, c.reason)
			}
		})
	}
}

func TestFromIdentity(t *testing.T) {
	policy := Policy{DNSPatterns: []string{"{node}.nodes.example.com", "*.{node}.example.com", "*.compute.example.com", "{node}"}}
	for _, c := range []struct {
		name, node string
		want       bool
	}{
		{"n1", "n1", true},
		{"N1", "n1", true},
		{"n1.nodes.example.com", "n1", true},
		{"N1.Nodes.Example.com", "n1", true},
		{"n2", "n1", false},
		{"n2.nodes.example.com", "n1", false},
		{"x.n1.nodes.example.com", "n1", false},
		{"a.n1.example.com", "n1", false}, // a "*" label is not the identity's
		{"ip-1.compute.example.com", "n1", false},
	} {
		if got := FromIdentity(c.name, c.node, policy); got != c.want {
			t.Errorf("FromIdentity(%q, %q) = %v, want %v", c.name, c.node, got, c.want)
		}
	}
}

func TestIdentityOwners(t *testing.T) {
	policy := Policy{DNSPatterns: []string{"{node}.nodes.example.com", "node-{node}.example.com", "*.{node}.example.com", "*.compute.example.com", "{node}"}}
	for _, c := range []struct {
		name string
		want []string
	}{
		{"n1", []string{"n1"}},
		// A name a pattern gives out is never a Node's own name.
		{"N1.Nodes.Example.com", []string{"n1"}},
		{"node-n1.example.com", []string{"n1"}},
		{"x.n1.nodes.example.com", []string{"x.n1"}},
		{".nodes.example.com", []string{".nodes.example.com"}},             // no empty node name
		{"a.n1.example.com", []string{"a.n1.example.com"}},                 // a "*" pattern binds no identity
		{"ip-1.compute.example.com", []string{"ip-1.compute.example.com"}}, // a "*" name that is a Node's name is that Node's
	} {
		got := IdentityOwners(c.name, policy)
		if !slices.Equal(got, c.want) {
			t.Errorf("IdentityOwners(%q) = %q, want %q", c.name, got, c.want)
		}
		for _, owner := range got {
			if !FromIdentity(c.name, owner, policy) {
				t.Errorf("IdentityOwners(%q) names %s, whose identity does not give it the name", c.name, owner)
			}
		}
	}
}

// TestSharedIdentityNames: a Node named after another's "{node}" name
// ("w.nodes.example.com", and "w" with the pattern "{node}.nodes.example.com"):
// each one's identity gives it the name, so neither is certified for it
// and neither is denied (the coordinator's facts map it, for each, to the
// other Node: SharedNames). Whichever of them registered first.
func TestSharedIdentityNames(t *testing.T) {
	policy := Policy{DNSPatterns: []string{"{node}.nodes.example.com", "*.nodes.example.com"}, ClusterDomain: "cluster.local"}
	const name = "w.nodes.example.com"
	for _, c := range []struct{ node, other string }{{"w", name}, {name, "w"}} {
		for _, san := range []string{name, "W.Nodes.Example.com"} {
			facts := Facts{SharedNames: map[string]string{name: c.other}}
			err := CheckDNSSAN(san, c.node, facts, policy)
			var retry retryError
			if !errors.As(err, &retry) || !retry.name || !strings.Contains(err.Error(), "is also Node "+c.other+"'s") {
				t.Errorf("CheckDNSSAN(%q) for %s: %v, want held as Node %s's too", san, c.node, err, c.other)
			}
		}
	}
	// w's other names are its own as before.
	for _, san := range []string{"w", "W"} {
		if err := CheckDNSSAN(san, "w", Facts{SharedNames: map[string]string{name: name}}, policy); err != nil {
			t.Errorf("w's own name %q: %v", san, err)
		}
	}
}
