package main

import (
	"os"
	"runtime"
	"testing"
)

// sizeBudget is the most the agent binary may weigh, built as the release
// builds it (static, -trimpath, stripped: gobuild, the Makefile and the
// Dockerfile) for linux/amd64: issue 50's 25 MB. pkg/talos reads machined
// with bare grpc, speaking COSI's watch and decoding the resources from the
// wire, so that neither machinery's resource packages (they link the whole
// machine API and config world) nor COSI's client and generated API are
// in it. What remains is mostly client-go and apimachinery, the runtime,
// net/http and grpc; k8s.io/api/core/v1 alone is about 3.5 MB.
const sizeBudget = 25_000_000

func TestAgentBinaryWithinBudget(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("the budget is for linux/amd64, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	fi, err := os.Stat(agentBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > sizeBudget {
		t.Errorf("the agent binary is %.2f MB, over its budget of %.0f MB: find what grew with `go tool nm -size -sort size` on an unstripped build, and keep what the agent does not run out of it (TestAgentLinksOnlyWhatItRuns)",
			float64(fi.Size())/1e6, float64(sizeBudget)/1e6)
	}
	t.Logf("the agent binary is %.2f MB (budget %.0f MB)", float64(fi.Size())/1e6, float64(sizeBudget)/1e6)
}
