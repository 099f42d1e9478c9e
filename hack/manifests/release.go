package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/registry"
	"sigs.k8s.io/yaml"

	"github.com/talos-nodeinit/talos-nodeinit/hack/internal/ociimage"
	"github.com/talos-nodeinit/talos-nodeinit/hack/internal/spdx"
)

// Publish is what `make release` publishes: the two images the nodes run,
// the extension image, the Helm chart as an OCI artifact, and the install
// assets, every image reference in them pinned by digest.
type Publish struct {
	Version  string // vX.Y.Z: the tag of everything pushed
	Registry string // host[:port]/path the images and the chart go to
	Bin      string // make's BIN: bin/images/… and bin/extension/oci (make images extension)
	Deploy   string // coordinator/deploy
	Chart    string // coordinator/chart/nodeinit-coordinator
	Extdir   string // extension/
	Out      string // where the assets are written
	// SignKey, when set, is a cosign private key file: every image and the
	// chart are signed with it (keyed, no transparency log), and the
	// signatures verified against the key's public half (SignKey's
	// .pub sibling) before the assets are written. COSIGN_PASSWORD is the
	// key's password, as cosign reads it.
	SignKey string
	// Cosign is the cosign binary (default: cosign on PATH).
	Cosign string
}

// CosignVersion is the cosign `make release` signs with; the tests build it
// from its module.
const CosignVersion = "v2.6.5"

// Published is one pushed artifact.
type Published struct {
	Name, Ref, Digest string
}

// Run pushes and renders; it returns what it published.
func (r Publish) Run() ([]Published, error) {
	if !strings.HasPrefix(r.Version, "v") || strings.ContainsAny(r.Version, "/:@ ") {
		return nil, fmt.Errorf("VERSION=%q: want a release tag like v0.2.0", r.Version)
	}
	if r.Registry == "" || !repository.MatchString(r.Registry+"/x") {
		return nil, fmt.Errorf("REGISTRY=%q: want host[:port]/path, like registry.example.com/talos-nodeinit", r.Registry)
	}
	k, err := os.ReadFile(filepath.Join(r.Deploy, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	pinned, err := Release(k, CoordinatorImage)
	if err != nil {
		return nil, err
	}
	if pinned != r.Version {
		return nil, fmt.Errorf("VERSION=%s, but coordinator/deploy pins the coordinator image at %s: set its newTag (and the chart's version) to the release first", r.Version, pinned)
	}
	opts := []name.Option{}
	if insecure(r.Registry) {
		opts = append(opts, name.Insecure)
	}
	var out []Published
	for _, img := range []struct{ name, layout string }{
		{"nodeinit-coordinator", filepath.Join(r.Bin, "images", "nodeinit-coordinator")},
		{"nodeinit-agent-pod", filepath.Join(r.Bin, "images", "nodeinit-agent-pod")},
		{"nodeinit-agent", filepath.Join(r.Bin, "extension", "oci")}, // the Talos system extension
	} {
		idx, err := ociimage.LayoutIndex(img.layout, ociimage.RefName(r.Version))
		if err != nil {
			return nil, fmt.Errorf("%s: %w (run make images extension VERSION=%s first)", img.name, err, r.Version)
		}
		ref, err := name.ParseReference(r.Registry+"/"+img.name+":"+r.Version, opts...)
		if err != nil {
			return nil, err
		}
		// Credentials as docker and crane find them (docker login's config.json).
		if err := remote.WriteIndex(ref, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return nil, fmt.Errorf("pushing %s: %w", ref, err)
		}
		d, err := idx.Digest()
		if err != nil {
			return nil, err
		}
		out = append(out, Published{Name: img.name, Ref: ref.String(), Digest: d.String()})
	}
	coordinator, agentPod := out[0], out[1]

	// An SPDX SBOM of each image's binary, from its Go build information
	// (the extension carries its own inside the image, as Talos lists it).
	files := map[string][]byte{}
	for _, img := range []struct{ name, binary string }{{"nodeinit-coordinator", "nodeinit-coordinator"}, {"nodeinit-agent-pod", "nodeinit-agent"}} {
		sbom, err := sbomOf(filepath.Join(r.Bin, "images", img.name), r.Version, img.binary)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", img.name, err)
		}
		files[img.name+".spdx.json"] = sbom
	}

	// The install assets, each image by digest.
	_, rendered, err := renderCoordinator(r.Deploy, CoordinatorImage, r.Registry+"/nodeinit-coordinator")
	if err != nil {
		return nil, err
	}
	manifest := pinDigest(Manifest(r.Version, rendered), coordinator)
	files["nodeinit-coordinator.yaml"] = manifest
	// Every form and mode: the container patches publish the kernel
	// command line's facts where workloadIsolation keeps machined closed
	// (--facts=auto); the extension ones need the extension in the image.
	for _, mode := range []Mode{ModeContainer, ModeExtension} {
		for _, form := range []Form{FormMultidoc, FormV1Alpha1} {
			in := Install{Form: form, Mode: mode, Coordinator: r.Registry + "/nodeinit-coordinator"}
			if mode == ModeContainer {
				in.AgentImage = agentPod.Ref + "@" + agentPod.Digest
			}
			patches, err := in.Render(r.Deploy, r.Extdir)
			if err != nil {
				return nil, err
			}
			for f, b := range patches {
				if f == InstallObjects || mode == ModeExtension && f == InstallRemove {
					continue // the container mode's uninstall deletes the same documents
				}
				if form == FormV1Alpha1 && f != InstallAll {
					continue // the multidoc form's uninstall serves both: it deletes the same documents
				}
				name := strings.TrimSuffix(f, ".yaml") + map[Form]string{FormMultidoc: "", FormV1Alpha1: "-v1alpha1"}[form] + map[Mode]string{ModeContainer: "", ModeExtension: "-extension"}[mode] + ".yaml"
				files[name] = pinDigest(b, coordinator)
			}
		}
	}

	// The chart, its default image the release's, by digest.
	chart, err := r.pushChart(coordinator)
	if err != nil {
		return nil, err
	}
	out = append(out, chart)

	if r.SignKey != "" {
		if err := r.sign(out); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(r.Out, 0o755); err != nil {
		return nil, err
	}
	var sums, refs bytes.Buffer
	for _, f := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		if err := os.WriteFile(filepath.Join(r.Out, f), files[f], 0o644); err != nil {
			return nil, err
		}
		fmt.Fprintf(&sums, "%x  %s\n", sha256.Sum256(files[f]), f)
	}
	for _, p := range out {
		fmt.Fprintf(&refs, "%s %s@%s\n", p.Name, p.Ref, p.Digest)
	}
	if err := os.WriteFile(filepath.Join(r.Out, "SHA256SUMS"), sums.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return out, os.WriteFile(filepath.Join(r.Out, "images.txt"), refs.Bytes(), 0o644)
}

// pushChart packages the chart with the release's image and digest as its
// defaults and pushes it to oci://REGISTRY/charts.
func (r Publish) pushChart(coordinator Published) (Published, error) {
	ch, err := loader.Load(r.Chart)
	if err != nil {
		return Published{}, err
	}
	if v := "v" + ch.Metadata.Version; v != r.Version || ch.Metadata.AppVersion != r.Version {
		return Published{}, fmt.Errorf("the chart is version %s, appVersion %s; VERSION=%s: set both first", ch.Metadata.Version, ch.Metadata.AppVersion, r.Version)
	}
	img, _ := ch.Values["image"].(map[string]any)
	if img == nil {
		return Published{}, errors.New("the chart's values have no image")
	}
	img["repository"] = r.Registry + "/nodeinit-coordinator"
	img["digest"] = coordinator.Digest
	values, err := yaml.Marshal(ch.Values)
	if err != nil {
		return Published{}, err
	}
	for _, f := range ch.Raw {
		if f.Name == chartutil.ValuesfileName {
			f.Data = append([]byte("# nodeinit-coordinator "+r.Version+", as released to "+r.Registry+".\n"), values...)
		}
	}
	dir, err := os.MkdirTemp("", "chart")
	if err != nil {
		return Published{}, err
	}
	defer os.RemoveAll(dir)
	tgz, err := chartutil.Save(ch, dir)
	if err != nil {
		return Published{}, err
	}
	data, err := os.ReadFile(tgz)
	if err != nil {
		return Published{}, err
	}
	opts := []registry.ClientOption{registry.ClientOptWriter(&bytes.Buffer{})}
	// docker login's credentials, which `helm registry login` would also write.
	if dir := os.Getenv("DOCKER_CONFIG"); dir != "" {
		opts = append(opts, registry.ClientOptCredentialsFile(filepath.Join(dir, "config.json")))
	} else if home, err := os.UserHomeDir(); err == nil {
		opts = append(opts, registry.ClientOptCredentialsFile(filepath.Join(home, ".docker", "config.json")))
	}
	if insecure(r.Registry) {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	c, err := registry.NewClient(opts...)
	if err != nil {
		return Published{}, err
	}
	ref := r.Registry + "/charts/" + ch.Metadata.Name + ":" + ch.Metadata.Version
	res, err := c.Push(data, ref)
	if err != nil {
		return Published{}, fmt.Errorf("pushing the chart to oci://%s: %w", ref, err)
	}
	return Published{Name: "chart", Ref: ref, Digest: res.Manifest.Digest}, nil
}

// sign signs every published artifact by digest with cosign and the key,
// then verifies each signature with the public key: a release whose
// signatures do not verify writes no assets.
func (r Publish) sign(pub []Published) error {
	cosign := r.Cosign
	if cosign == "" {
		var err error
		if cosign, err = exec.LookPath("cosign"); err != nil {
			return fmt.Errorf("COSIGN_KEY is set but cosign is not on PATH: go install github.com/sigstore/cosign/v2/cmd/cosign@%s", CosignVersion)
		}
	}
	pubKey := strings.TrimSuffix(r.SignKey, filepath.Ext(r.SignKey)) + ".pub"
	if _, err := os.Stat(pubKey); err != nil {
		return fmt.Errorf("the public half of COSIGN_KEY: %w (cosign generate-key-pair writes both)", err)
	}
	for _, p := range pub {
		ref := p.Ref + "@" + p.Digest
		args := []string{"sign", "--key", r.SignKey, "--tlog-upload=false", "--yes"}
		verify := []string{"verify", "--key", pubKey, "--insecure-ignore-tlog=true"}
		if insecure(r.Registry) {
			args = append(args, "--allow-insecure-registry", "--allow-http-registry")
			verify = append(verify, "--allow-insecure-registry", "--allow-http-registry")
		}
		if out, err := exec.Command(cosign, append(args, ref)...).CombinedOutput(); err != nil {
			return fmt.Errorf("cosign sign %s: %w\n%s", ref, err, out)
		}
		if out, err := exec.Command(cosign, append(verify, ref)...).CombinedOutput(); err != nil {
			return fmt.Errorf("cosign verify %s: %w\n%s", ref, err, out)
		}
	}
	return nil
}

// sbomOf is the SPDX document of binary in the image layout's first
// platform image (both platforms are built from the same module versions).
func sbomOf(layoutDir, version, binary string) ([]byte, error) {
	imgs, err := ociimage.ReadLayout(layoutDir, ociimage.RefName(version))
	if err != nil {
		return nil, err
	}
	files, err := ociimage.Contents(imgs[0].Image)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if strings.TrimPrefix(f.Path, "/") != binary {
			continue
		}
		bi, err := buildinfo.Read(bytes.NewReader(f.Data))
		if err != nil {
			return nil, fmt.Errorf("%s has no Go build information: %w", binary, err)
		}
		doc, err := spdx.For(spdx.Binary{Name: binary, Version: version, License: "Apache-2.0",
			Namespace: "https://github.com/talos-nodeinit/talos-nodeinit/spdx"}, bi)
		if err != nil {
			return nil, err
		}
		return doc.JSON()
	}
	return nil, fmt.Errorf("the image holds no %s", binary)
}

// pinDigest pins every reference to the pushed image's tag to its digest.
func pinDigest(b []byte, p Published) []byte {
	return bytes.ReplaceAll(b, []byte(p.Ref+"\n"), []byte(p.Ref+"@"+p.Digest+"\n"))
}

// insecure: a registry on the loopback is spoken to over plain HTTP (the
// tests', or one a user runs locally); every other over HTTPS.
func insecure(reg string) bool {
	host := strings.SplitN(reg, "/", 2)[0]
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
