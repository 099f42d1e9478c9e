package main

import (
	"strings"
	"testing"
)

// The write budgets: 4 coordinator writes per node, 5 when the node was
// initialized before the coordinator saw its CSR, and never two of one kind
// beyond its budget (a duplicate approval refused as a conflict still
// counts).
func TestBudgets(t *testing.T) {
	w := func(node string, whats ...string) []write {
		var out []write
		for _, what := range whats {
			out = append(out, write{Node: node, Component: compCoordinator, What: what})
		}
		return out
	}
	const rec, patch, recUpd, approve = "create noderecords", "patch nodes", "update noderecords", "update certificatesigningrequests/approval"
	var ws []write
	ws = append(ws, w("usual", rec, patch, approve)...)
	ws = append(ws, w("late", rec, patch, patch, recUpd, approve)...)
	ws = append(ws, w("conflict", rec, patch, patch, recUpd, approve, approve)...)
	ws = append(ws, w("patches", rec, patch, patch, patch, approve)...)
	ws = append(ws, write{Node: "usual", Component: compCoordinator, What: "create events", Event: true})
	s := summarize(ws, 4)

	over := strings.Join(s.over(compCoordinator, coordinatorBudget, lateCSR(s, compCoordinator)), " ")
	if over != "conflict (6) patches (5)" {
		t.Errorf("over the total budget: %q, want conflict (6) and patches (5)", over)
	}
	kinds := strings.Join(s.overKind(compCoordinator, coordinatorKinds), " ")
	for _, want := range []string{"conflict (2× " + approve, "patches (3× " + patch} {
		if !strings.Contains(kinds, want) {
			t.Errorf("over a kind's budget: %q, want %q", kinds, want)
		}
	}
	if strings.Contains(kinds, "usual") || strings.Contains(kinds, "late ") {
		t.Errorf("honest nodes over a kind's budget: %q", kinds)
	}
	if late := lateCSR(s, compCoordinator); !late["late"] || late["usual"] || len(lateCSR(s, compAgent)) != 0 {
		t.Errorf("late CSR nodes %v", late)
	}
}
