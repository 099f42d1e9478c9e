package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	helmregistry "helm.sh/helm/v3/pkg/registry"
)

// `make release` against a registry on 127.0.0.1: the images (both
// platforms), the extension and the chart are pushed, what the registry
// then serves has the digests the assets pin, the chart from the registry
// renders the coordinator by digest, the install patches pass Talos's
// validation with the agent by digest, and SHA256SUMS matches the files.
func TestReleaseToALocalRegistry(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	reg := strings.TrimPrefix(srv.URL, "http://") + "/talos-nodeinit"
	k, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	version, err := Release(k, CoordinatorImage)
	if err != nil {
		t.Fatal(err)
	}
	bin, out := t.TempDir(), t.TempDir()
	if b, err := exec.Command("make", "-C", "../..", "-s", "images", "extension", "VERSION="+version, "BIN="+bin).CombinedOutput(); err != nil {
		t.Fatalf("make images extension: %v\n%s", err, b)
	}
	// cosign, built from its module, and a key pair.
	cosign, keys := buildCosign(t), t.TempDir()
	for _, dir := range []string{keys, filepath.Join(keys, "other")} {
		_ = os.MkdirAll(dir, 0o755)
		gen := exec.Command(cosign, "generate-key-pair")
		gen.Dir, gen.Env = dir, append(os.Environ(), "COSIGN_PASSWORD=")
		if b, err := gen.CombinedOutput(); err != nil {
			t.Fatalf("cosign generate-key-pair: %v\n%s", err, b)
		}
	}
	t.Setenv("COSIGN_PASSWORD", "")
	p := Publish{Version: version, Registry: reg, Bin: bin, Deploy: deployDir, Chart: "../../coordinator/chart/nodeinit-coordinator", Extdir: extensionDir, Out: out,
		SignKey: filepath.Join(keys, "cosign.key"), Cosign: cosign}
	pub, err := p.Run()
	if err != nil {
		t.Fatal(err)
	}
	digests := map[string]string{}
	for _, x := range pub {
		digests[x.Name] = x.Digest
		t.Logf("pushed %s@%s", x.Ref, x.Digest)
	}
	// Signed: each artifact verifies with the release key (Run checked it
	// too) and not with another.
	for _, x := range pub {
		ref := x.Ref + "@" + x.Digest
		common := []string{"--insecure-ignore-tlog=true", "--allow-insecure-registry", "--allow-http-registry", ref}
		if b, err := exec.Command(cosign, append([]string{"verify", "--key", filepath.Join(keys, "cosign.pub")}, common...)...).CombinedOutput(); err != nil {
			t.Errorf("cosign verify %s: %v\n%s", ref, err, b)
		}
		if _, err := exec.Command(cosign, append([]string{"verify", "--key", filepath.Join(keys, "other", "cosign.pub")}, common...)...).CombinedOutput(); err == nil {
			t.Errorf("%s verifies with a key that did not sign it", ref)
		}
	}
	// What the registry serves.
	for _, img := range []string{"nodeinit-coordinator", "nodeinit-agent-pod", "nodeinit-agent"} {
		ref, err := name.ParseReference(reg+"/"+img+":"+version, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		idx, err := remote.Index(ref)
		if err != nil {
			t.Fatalf("%s: %v", img, err)
		}
		d, _ := idx.Digest()
		im, _ := idx.IndexManifest()
		if d.String() != digests[img] || len(im.Manifests) != 2 {
			t.Errorf("%s: the registry serves %s with %d platforms; released %s, want 2", img, d, len(im.Manifests), digests[img])
		}
	}
	// The assets pin every image by digest, and SHA256SUMS matches them.
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(sums))
	n := 0
	for sc.Scan() {
		sum, file, _ := strings.Cut(sc.Text(), "  ")
		b, err := os.ReadFile(filepath.Join(out, file))
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%x", sha256.Sum256(b)) != sum {
			t.Errorf("SHA256SUMS: %s does not match", file)
		}
		n++
	}
	if n < 5 {
		t.Errorf("SHA256SUMS lists %d files", n)
	}
	manifest, _ := os.ReadFile(filepath.Join(out, "nodeinit-coordinator.yaml"))
	if !bytes.Contains(manifest, []byte("image: "+reg+"/nodeinit-coordinator:"+version+"@"+digests["nodeinit-coordinator"]+"\n")) {
		t.Error("nodeinit-coordinator.yaml does not run the released coordinator by digest")
	}
	for file, typ := range map[string]machine.Type{InstallControlPlane: machine.TypeControlPlane, InstallWorker: machine.TypeWorker} {
		b, err := os.ReadFile(filepath.Join(out, file))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := installed(t, FormMultidoc, typ, b)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if got := cfg.ContainerConfigs()[0].Image(); !strings.HasSuffix(got, "@"+digests["nodeinit-agent-pod"]) {
			t.Errorf("%s: the agent image %s is not the released one by digest", file, got)
		}
		if !bytes.Contains(b, []byte("nodeinit-coordinator:"+version+"@"+digests["nodeinit-coordinator"])) {
			t.Errorf("%s: the coordinator is not pinned by digest", file)
		}
	}
	for _, img := range []string{"nodeinit-coordinator", "nodeinit-agent-pod"} {
		sbom, err := os.ReadFile(filepath.Join(out, img+".spdx.json"))
		if err != nil || !bytes.Contains(sbom, []byte(`"spdxVersion"`)) || !bytes.Contains(sbom, []byte("k8s.io/client-go")) {
			t.Errorf("%s.spdx.json: %v, want an SPDX document listing the binary's modules", img, err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "nodeinit-v1alpha1.yaml")); err != nil {
		t.Errorf("no install patch for clusters created with Talos 1.13: %v", err)
	}
	// The chart, pulled from the registry, renders the released coordinator by digest.
	c, err := helmregistry.NewClient(helmregistry.ClientOptPlainHTTP(), helmregistry.ClientOptWriter(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.Pull(reg + "/charts/nodeinit-coordinator:" + strings.TrimPrefix(version, "v"))
	if err != nil {
		t.Fatalf("pulling the chart: %v", err)
	}
	chrt, err := loader.LoadArchive(bytes.NewReader(ch.Chart.Data))
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(chrt, map[string]any{}, chartutil.ReleaseOptions{Name: "nodeinit-coordinator", Namespace: "kube-system"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := engine.Render(chrt, vals)
	if err != nil {
		t.Fatal(err)
	}
	want := "image: \"" + reg + "/nodeinit-coordinator:" + version + "@" + digests["nodeinit-coordinator"] + "\""
	found := false
	for _, doc := range rendered {
		found = found || strings.Contains(doc, want)
	}
	if !found {
		t.Errorf("the released chart does not render %s", want)
	}
	// Refused: a version the sources do not pin, a registry that is not one.
	for _, bad := range []Publish{{Version: "v9.9.9", Registry: reg}, {Version: version, Registry: "not a registry"}} {
		bad.Bin, bad.Deploy, bad.Chart, bad.Extdir, bad.Out = bin, deployDir, p.Chart, extensionDir, t.TempDir()
		if _, err := bad.Run(); err == nil {
			t.Errorf("release with VERSION=%s REGISTRY=%s: accepted", bad.Version, bad.Registry)
		}
	}
}

// buildCosign builds cosign CosignVersion from its module (the Go build
// cache keeps it after the first time) and returns its path.
func buildCosign(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "install", "github.com/sigstore/cosign/v2/cmd/cosign@"+CosignVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building cosign %s from its module: %v\n%s", CosignVersion, err, b)
	}
	return filepath.Join(dir, "cosign")
}
