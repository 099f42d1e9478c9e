package testcluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

// auditPolicy logs every mutating request at Metadata level and nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// AuditEvent is the part of an audit.k8s.io/v1 Event the tests count.
type AuditEvent struct {
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	// StageTimestamp is when the response was complete.
	StageTimestamp time.Time `json:"stageTimestamp"`
}

// AuditLogPath is where the API server writes its audit log (Options.AuditLog).
func (c *Cluster) AuditLogPath() string { return c.path("audit.log") }

// Audit returns the mutating requests the API server has logged, in order,
// dry runs apart (they write nothing). Requires Options.AuditLog.
func (c *Cluster) Audit() ([]AuditEvent, error) {
	if !c.opts.AuditLog {
		return nil, fmt.Errorf("the cluster was started without Options.AuditLog")
	}
	raw, err := os.ReadFile(c.AuditLogPath())
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// The API server appends while tests read: a last line without its
	// newline is still being written, and is read next time.
	raw = raw[:bytes.LastIndexByte(raw, '\n')+1]
	var events []AuditEvent
	for line := range bytes.Lines(raw) {
		var e AuditEvent
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("audit log line: %w", err)
		}
		if (e.Stage == "ResponseComplete" || e.Stage == "Panic") && !strings.Contains(e.RequestURI, "dryRun=") {
			events = append(events, e)
		}
	}
	return events, nil
}
