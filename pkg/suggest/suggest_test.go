package suggest

import "testing"

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"labels", "labels", 0}, {"Labels", "labels", 0}, {"lables", "labels", 2},
		{"nodeselector", "nodeSelector", 0}, {"platfrom", "platform", 2}, {"zoné", "zone", 1}, {"", "abc", 3},
	} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestTypo(t *testing.T) {
	known := []string{"ipam", "grants", "csr", "clusterName", "nodeNetworks"}
	for _, tc := range []struct {
		word, want string
		ok         bool
	}{
		{"ipma", "ipam", true},
		{"clustername", "clusterName", true},
		{"nodeNetwork", "nodeNetworks", true},
		{"colour", "csr", false}, // nearest, but too far to be a typo
		{"grnats", "grants", true},
	} {
		got, ok := Typo(tc.word, known)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("Typo(%q) = %q, %v; want %q, %v", tc.word, got, ok, tc.want, tc.ok)
		}
	}
	if got, d := Nearest("x", nil); got != "" || d != -1 {
		t.Errorf("Nearest with no candidates = %q, %d", got, d)
	}
}
