package telemetry

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

// Durations in JSON logs read as durations, not nanosecond integers, at
// any depth; text logs already print them so.
func TestJSONDurations(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("lease", "renew-deadline", 1500*time.Millisecond, slog.Group("retry", "period", 2*time.Second), "count", 3)
	var line struct {
		Renew string         `json:"renew-deadline"`
		Retry map[string]any `json:"retry"`
		Count int            `json:"count"`
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if line.Renew != "1.5s" || line.Retry["period"] != "2s" || line.Count != 3 {
		t.Errorf("got %s, want renew-deadline \"1.5s\", retry.period \"2s\", count 3", buf.String())
	}
}

// client-go logs through klog; after RouteKlog every klog line is one of
// the logger's own (JSON here), at the matching level, and klog's
// verbosity follows --log-level: V(4) lines only with debug.
func TestKlogGoesThroughSlog(t *testing.T) {
	defer klog.ClearLogger()
	for _, level := range []string{"info", "debug"} {
		var buf bytes.Buffer
		log, err := NewLogger(&buf, level, "json")
		if err != nil {
			t.Fatal(err)
		}
		RouteKlog(log)
		klog.InfoS("successfully acquired lease", "lease", "kube-system/nodeinit-coordinator", "after", 3*time.Second)
		klog.ErrorS(errors.New("boom"), "error retrieving resource lock")
		klog.V(4).InfoS("a verbose reflector line")
		klog.Flush()
		var lines []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("%s: klog wrote a line that is not JSON: %q", level, l)
			}
			lines = append(lines, m)
		}
		want := 2
		if level == "debug" {
			want = 3
		}
		if len(lines) != want {
			t.Fatalf("%s: %d lines, want %d:\n%s", level, len(lines), want, buf.String())
		}
		if lines[0]["msg"] != "successfully acquired lease" || lines[0]["level"] != "INFO" || lines[0]["lease"] != "kube-system/nodeinit-coordinator" || lines[0]["after"] != "3s" {
			t.Errorf("%s: info line %v", level, lines[0])
		}
		if lines[1]["level"] != "ERROR" || lines[1]["err"] != "boom" && lines[1]["error"] != "boom" {
			t.Errorf("%s: error line %v", level, lines[1])
		}
	}
}
