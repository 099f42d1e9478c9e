package main

import (
	"testing"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/config"
)

// What users actually hold passes `nodeinit-coordinator validate` as is:
// the rendered install file (many objects, the ConfigMap among them) and
// `helm template` output of the chart, default and with a configuration
// of their own; a bad one is refused with its position in that output.
func TestRenderedConfigValidates(t *testing.T) {
	manifest, _ := outputs(t)
	chart, err := helmTemplate(t, "kube-system", nil)
	if err != nil {
		t.Fatal(err)
	}
	custom, err := helmTemplate(t, "nodeinit", map[string]any{"config": "clusterName: prod\nipam: {ipv4Pool: 10.50.0.0/16}\n"})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := helmTemplate(t, "nodeinit", map[string]any{"config": "clusterName: \"bad name!\"\n"})
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"nodeinit-coordinator.yaml": manifest, "helm template": chart, "helm template with config": custom} {
		c, err := config.Parse(data)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if c.IPAM.IPv4Pool == "" || c.IPAM.IPv4Pool == config.DefaultIPv4Pool && name == "helm template with config" {
			t.Errorf("%s: the configuration was not read (pool %q)", name, c.IPAM.IPv4Pool)
		}
	}
	if _, err := config.Parse(bad); err == nil {
		t.Error("helm template with clusterName \"bad name!\": accepted")
	} else {
		t.Logf("refused as it should be: %v", err)
	}
}
