package csrcheck

import (
	"strings"
	"testing"
)

// TestCheckDNSNameRefusesFolding covers names the x509 parser would never
// hand us today, in case it ever does: CheckDNSName must not rely on it.
func TestCheckDNSNameRefusesFolding(t *testing.T) {
	allowed := []string{"k8s-node", "node-a"}
	for _, name := range []string{"\u212a8s-node", "nоde-a", "NODE-A\u0130", "node-a\x00"} {
		err := CheckDNSName(name, allowed)
		if err == nil || !(strings.Contains(err.Error(), "not ASCII") || strings.Contains(err.Error(), "not a valid DNS name")) {
			t.Errorf("CheckDNSName(%q) = %v", name, err)
		}
	}
	if err := CheckDNSName("Node-A", allowed); err != nil {
		t.Errorf("own name in upper case refused: %v", err)
	}
}
