package nodestate_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/nodestate"
	"github.com/talos-nodeinit/talos-nodeinit/coordinator/records"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// Whatever a node reports, the coordinator's patch sets spec.providerID only
// on a Node that still has the uninitialized taint and no providerID, only to
// the value the report asks for, and always under the resourceVersion it
// read. Rows cover: an untainted Node (registered without the taint, or
// initialized), a Node that set its own providerID first, a re-created Node
// (record of an earlier UID), adoption, requireProviderID on and off, and
// hostile values (huge, unicode, control characters, invalid UTF-8).
func TestProviderIDOnlyWhereTheNodeCouldSetItItself(t *testing.T) {
	asks := []string{"", "talos://metal/10.0.0.1", "aws:///eu-1a/i-victim",
		"x://" + strings.Repeat("a", 1020), "x://" + strings.Repeat("a", 1021), // at and over the 1 KiB field bound
		"aws:///i-\u202e1", "aws:///i-1\r\nforged", "aws:///i-\xff", "\u0430ws://i-1", "aws://i 1", "a://b://c"}
	type full struct {
		Metadata map[string]any `json:"metadata"`
		Spec     map[string]any `json:"spec"`
	}
	sets := 0
	defer func() {
		if sets == 0 {
			t.Error("no row set a providerID: the test proves nothing")
		}
		t.Logf("%d rows set a providerID", sets)
	}()
	for _, ask := range asks {
		for _, tainted := range []bool{true, false} {
			for _, have := range []string{"", "gce://p/z/own"} {
				for _, recUID := range []string{"", "uid-1", "uid-0"} { // no record, this object's, an earlier object's
					for _, require := range []bool{false, true} {
						for _, adopt := range []bool{false, true} {
							name := fmt.Sprintf("ask=%q tainted=%v have=%q rec=%q require=%v adopt=%v", ask, tainted, have, recUID, require, adopt)
							n := joined("n1", "uid-1", "10.0.0.1", agentKey(1))
							md, _ := contract.EncodeMetadata(contract.Metadata{Platform: "metal", AgentKey: agentKey(1), SetProviderID: ask})
							n.Annotations[contract.AnnotationMetadata] = md
							n.Spec.ProviderID = have
							if !tainted {
								n.Spec.Taints = nil
							}
							var rec *records.Record
							if recUID != "" {
								rec = &records.Record{Spec: records.Spec{NodeUID: recUID}}
							}
							s := settings(t, fmt.Sprintf("requireProviderID: %v\nadoptExisting: %v\n", require, adopt))
							d := decide(t, s, nodestate.Input{Node: n, Record: rec, Now: now, HasV4: true}, "10.244.3.0/24")
							if d.Patch == nil {
								continue
							}
							var p full
							if err := json.Unmarshal(d.Patch, &p); err != nil {
								t.Fatalf("%s: %v", name, err)
							}
							if p.Metadata["resourceVersion"] != "7" {
								t.Errorf("%s: patch without the resourceVersion precondition: %s", name, d.Patch)
							}
							got, set := p.Spec["providerID"]
							if !set {
								continue
							}
							sets++
							if !tainted || have != "" || got != ask || contract.CheckProviderID(ask) != nil || len(ask) > 1024 {
								t.Errorf("%s: the coordinator sets providerID %q: %s", name, got, d.Patch)
							}
						}
					}
				}
			}
		}
	}
}
