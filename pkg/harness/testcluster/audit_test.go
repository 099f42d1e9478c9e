package testcluster

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAuditSkipsTheLineBeingWritten: the API server appends to its audit
// log while a test reads it, so the last line may be cut. Audit returns
// the complete lines, and the cut one on the next read.
func TestAuditSkipsTheLineBeingWritten(t *testing.T) {
	c := &Cluster{dir: t.TempDir(), opts: Options{AuditLog: true}}
	line := `{"verb":"create","stage":"ResponseComplete","objectRef":{"resource":"nodes","name":"a"},"responseStatus":{"code":201}}` + "\n"
	whole := line + line
	for cut := 0; cut <= len(line); cut++ {
		if err := os.WriteFile(filepath.Join(c.dir, "audit.log"), []byte(line+whole[len(line):len(line)+cut]), 0o600); err != nil {
			t.Fatal(err)
		}
		events, err := c.Audit()
		want := 1
		if cut == len(line) {
			want = 2
		}
		if err != nil || len(events) != want {
			t.Fatalf("with %d bytes of the second line written: %d events, %v; want %d", cut, len(events), err, want)
		}
	}
	if err := os.WriteFile(filepath.Join(c.dir, "audit.log"), []byte("not json\n"+line), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Audit(); err == nil {
		t.Error("a complete line that is not JSON: no error")
	}
}
