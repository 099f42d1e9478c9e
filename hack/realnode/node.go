// Package realnode runs one real Kubernetes node for the end-to-end test:
// containerd and runc from the host's packages, the real kubelet, in a
// network namespace of its own joined by a veth link to a control-plane
// namespace, and a mount namespace of its own (so the kubelet's and the
// containers' mounts, and the kernel settings the kubelet insists on, never
// touch the host). No image comes from a registry: the pod sandbox image is
// built here and every image is imported into containerd's k8s.io namespace.
package realnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/talos-nodeinit/talos-nodeinit/hack/internal/ociimage"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/daemon"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/machined"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/testcluster"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/netaddr/netnstest"
)

// The node's link: eth0 in the node namespace, cp0 in the control-plane
// namespace, one /24 between them. Every node has a control-plane namespace
// of its own, so CPIP is the same for all; NodeIP is the default node
// address (Spec.NodeIP).
const (
	NodeIP = "10.77.0.2"
	CPIP   = "10.77.0.1"
	// APIServerPort is where the control-plane namespace serves the API
	// (relayed to the test cluster on the host's 127.0.0.1).
	APIServerPort = 6443
	// KubePrismAddr is Talos's node-local API endpoint, relayed the same way.
	KubePrismAddr = "127.0.0.1:7445"
	// PauseImage is the pod sandbox image, built by BuildPause.
	PauseImage = "pause.talos-nodeinit.invalid/pause:local" // .invalid never resolves: never pulled
)

// Spec describes the node.
type Spec struct {
	Name string
	// KubeletBin is the kubelet binary (hack/kube-tools with KUBE_TOOLS_BINS
	// including kubelet).
	KubeletBin string
	// Images are docker-archive tarballs imported into containerd besides
	// the pause image (for example bin/images/<image>-<arch>.tar).
	Images []string
	// NodeIP is the node's address in 10.77.0.0/24 (default NodeIP):
	// distinct for each node of a cluster.
	NodeIP string
	// StaticPods are pod manifests (JSON or YAML) put in the kubelet's
	// staticPodPath; with any, the node also has the files a Talos node
	// has where the agent's static pod mounts them (talosPaths).
	StaticPods [][]byte
	// AgentBin, when set, is the nodeinit-agent binary run beside the
	// kubelet (see startAgent).
	AgentBin string
}

// Node is a running node; everything stops when the test ends.
type Node struct {
	Spec
	Dir     string // containerd's and the kubelet's files
	NodeNS  *netnstest.NS
	CPNS    *netnstest.NS
	Socket  string // containerd's CRI socket
	CertDir string // the kubelet's serving certificate lands here
	// Identity is the kubelet's client certificate (the agent's too).
	Identity *testcluster.NodeIdentity
	// Machined is the node's machined (with AgentBin).
	Machined *machined.Node

	cgroupRoot string // the kubelet's --cgroup-root, under every hierarchy
	holder     *daemon.Process
	containerd *daemon.Process
	kubelet    *daemon.Process
	agent      *daemon.Process
	forwarders []*Forwarder

	machined    *machined.Process
	machinedLog *os.File
}

// Start brings the node up against cluster: network, mount namespace,
// containerd with the images imported, then the kubelet with a pre-issued
// node client certificate. It returns once containerd answers; the caller
// waits for the Node object.
func Start(ctx context.Context, t *testing.T, cluster *testcluster.Cluster, spec Spec) *Node {
	t.Helper()
	for _, bin := range []string{"containerd", "ctr", "runc", "nsenter", "unshare"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is missing: run hack/realnode/setup.sh (as root)", bin)
		}
	}
	sweepStale(t)
	if spec.NodeIP == "" {
		spec.NodeIP = NodeIP
	}
	// Short: containerd's socket path must fit a sockaddr_un.
	dir, err := os.MkdirTemp("", "rn-")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	n := &Node{Spec: spec, Dir: dir, Socket: filepath.Join(dir, "containerd.sock"), CertDir: filepath.Join(dir, "pki"),
		cgroupRoot: "/realnode-" + hex.EncodeToString(b)}
	owner := fmt.Sprintf("%d %s\n", os.Getpid(), n.cgroupRoot)
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(owner), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(n.LogTails(60))
		}
		n.stop(t)
	})
	n.network(t, cluster)
	if err := n.mountNamespace(); err != nil {
		t.Fatal(err)
	}
	if err := n.makeCgroupRoot(); err != nil {
		t.Fatal(err)
	}
	if err := n.startContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	pause := filepath.Join(dir, "pause.tar")
	if err := BuildPause(pause); err != nil {
		t.Fatal(err)
	}
	for _, img := range append([]string{pause}, spec.Images...) {
		if _, err := run("ctr", "--address", n.Socket, "-n", "k8s.io", "images", "import", img); err != nil {
			t.Fatalf("importing %s into containerd: %v", img, err)
		}
	}
	if n.Identity, err = cluster.NodeIdentity(spec.Name); err != nil {
		t.Fatal(err)
	}
	if len(spec.StaticPods) > 0 {
		if err := n.talosPaths(cluster.CAPEM()); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.startKubelet(cluster, n.Identity); err != nil {
		t.Fatal(err)
	}
	if spec.AgentBin != "" {
		if err := n.startAgent(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// network makes the node and control-plane namespaces, joins them with a
// veth pair, and relays the API server into both.
func (n *Node) network(t *testing.T, cluster *testcluster.Cluster) {
	n.NodeNS, n.CPNS = netnstest.New(t), netnstest.New(t)
	n.NodeNS.AddVeth("eth0", "cp0")
	n.NodeNS.IP("link", "set", "cp0", "netns", n.CPNS.Name)
	n.CPNS.SetLink("cp0", true)
	n.NodeNS.AddAddr("eth0", n.NodeIP+"/24")
	n.CPNS.AddAddr("cp0", CPIP+"/24")
	n.NodeNS.IP("route", "add", "default", "via", CPIP)
	target := strings.TrimPrefix(cluster.Host(), "https://")
	for _, l := range []struct {
		ns   *netnstest.NS
		addr string
	}{
		{n.CPNS, net.JoinHostPort(CPIP, strconv.Itoa(APIServerPort))},
		{n.NodeNS, KubePrismAddr},
	} {
		f, err := Forward(l.ns.Path, l.addr, target)
		if err != nil {
			t.Fatal(err)
		}
		n.forwarders = append(n.forwarders, f)
	}
}

// mountNamespace starts the process that holds the node's mount namespace.
// The kubelet insists on kernel settings (vm.overcommit_memory=1,
// kernel.panic=10, kernel.panic_on_oops=1, ...) that are host-wide; inside
// the node's mount namespace those /proc/sys files are bind mounts of
// ordinary files, so the kubelet's writes stay on the node.
func (n *Node) mountNamespace() error {
	n.holder = &daemon.Process{Name: "mount-namespace holder", LogPath: filepath.Join(n.Dir, "holder.log"),
		Argv: []string{"unshare", "--mount", "--propagation", "private", "--", "sleep", "infinity"}}
	if err := n.holder.Start(); err != nil {
		return err
	}
	// unshare execs sleep once the namespace exists.
	deadline := time.Now().Add(10 * time.Second)
	for {
		self, _ := os.Readlink("/proc/self/ns/mnt")
		its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", n.holder.Pid()))
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", n.holder.Pid()))
		if err == nil && its != self && strings.HasSuffix(exe, "/sleep") {
			break
		}
		if time.Now().After(deadline) || n.holder.Exited() {
			return fmt.Errorf("the mount namespace holder did not start: %s", n.holder.Report(10))
		}
		time.Sleep(20 * time.Millisecond)
	}
	sysctls := filepath.Join(n.Dir, "sysctl")
	for _, key := range []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
		"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"} {
		cur, err := os.ReadFile("/proc/sys/" + key)
		if err != nil {
			return err
		}
		file := filepath.Join(sysctls, key)
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(file, cur, 0o644); err != nil {
			return err
		}
		if _, err := run("nsenter", "--mount="+n.mountNS(), "--", "mount", "--bind", file, "/proc/sys/"+key); err != nil {
			return err
		}
	}
	// The kubelet puts its device-plugin socket in /var/lib/kubelet/device-plugins
	// whatever its --root-dir: a directory of the node's own there keeps two
	// nodes' sockets apart and off the host.
	own := filepath.Join(n.Dir, "var-lib-kubelet")
	if err := os.MkdirAll(own, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll("/var/lib/kubelet", 0o755); err != nil {
		return err
	}
	if _, err := run("nsenter", "--mount="+n.mountNS(), "--", "mount", "--bind", own, "/var/lib/kubelet"); err != nil {
		return err
	}
	return nil
}

func (n *Node) mountNS() string { return fmt.Sprintf("/proc/%d/ns/mnt", n.holder.Pid()) }

// inNode is argv run inside the node's network and mount namespaces.
func (n *Node) inNode(argv ...string) []string {
	return append([]string{"nsenter", "--net=" + n.NodeNS.Path, "--mount=" + n.mountNS(), "--"}, argv...)
}

// hierarchies are the cgroup mounts under /sys/fs/cgroup (v1 controllers
// and, on a hybrid host, the unified one).
func hierarchies() ([]string, error) {
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join("/sys/fs/cgroup", e.Name())
		if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// makeCgroupRoot creates the kubelet's --cgroup-root in every hierarchy: the
// kubelet refuses a root that does not exist, and a root of its own keeps
// its pods' cgroups apart from the host's.
func (n *Node) makeCgroupRoot() error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		if err := os.Mkdir(filepath.Join(h, n.cgroupRoot), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("creating the node's cgroup root: %w", err)
		}
	}
	return nil
}

// BuildPause writes the pod sandbox image (hack/realnode/pause) for this
// machine's architecture, tagged PauseImage, as a docker-archive.
func BuildPause(path string) error {
	root, err := testcluster.RepoRoot()
	if err != nil {
		return err
	}
	// An absolute directory: it builds from wherever inside the module the
	// caller runs.
	bin, err := ociimage.GoBuild(filepath.Join(root, "hack", "realnode", "pause"), goarch(), "local")
	if err != nil {
		return err
	}
	img, err := ociimage.Image([]ociimage.File{{Path: "pause", Mode: 0o755, Data: bin}}, goarch(),
		v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"})
	if err != nil {
		return err
	}
	return ociimage.WriteTarball(path, PauseImage, img)
}

func (n *Node) startContainerd(ctx context.Context) error {
	cfg := filepath.Join(n.Dir, "containerd.toml")
	if err := os.WriteFile(cfg, []byte(containerdConfig(n.Dir, n.Socket)), 0o644); err != nil {
		return err
	}
	n.containerd = &daemon.Process{Name: "containerd", LogPath: filepath.Join(n.Dir, "containerd.log"),
		Argv: n.inNode("containerd", "--config", cfg)}
	if err := n.containerd.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := run("ctr", "--address", n.Socket, "version")
		if err == nil {
			return nil
		}
		if n.containerd.Exited() || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("containerd did not answer on %s: %v\n%s", n.Socket, err, n.containerd.Report(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// containerdConfig is containerd 1.6's configuration (version 2) with
// everything under dir: overlayfs snapshots, runc with cgroupfs (cgroup v1),
// the locally built sandbox image, and no registry anyone would pull from.
func containerdConfig(dir, socket string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = %[3]q

[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  # This host refuses to lower oom_score_adj (even for root), which the
  # kubelet asks for its sandboxes (-998): clamp to containerd's own score.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[8]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[6]q
    conf_dir = %[7]q
`, filepath.Join(dir, "containerd"), filepath.Join(dir, "containerd-state"), socket, filepath.Join(dir, "opt"),
		PauseImage, filepath.Join(dir, "cni", "bin"), filepath.Join(dir, "cni", "net.d"), filepath.Join(dir, "runc"))
}

func (n *Node) startKubelet(cluster *testcluster.Cluster, id *testcluster.NodeIdentity) error {
	ca := filepath.Join(n.Dir, "ca.crt")
	if err := os.WriteFile(ca, cluster.CAPEM(), 0o644); err != nil {
		return err
	}
	kubeconfig := filepath.Join(n.Dir, "kubelet.kubeconfig")
	server := "https://" + net.JoinHostPort(CPIP, strconv.Itoa(APIServerPort))
	if err := os.WriteFile(kubeconfig, []byte(kubeletKubeconfig(server, fmt.Sprintf("certificate-authority: %q", ca), id.CertFile)), 0o600); err != nil {
		return err
	}
	cfg := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte(kubeletConfig(n.Dir, n.Socket, ca, n.cgroupRoot, n.NodeIP)), 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(n.Dir, "manifests"), 0o755); err != nil {
		return err
	}
	for i, pod := range n.StaticPods {
		if err := os.WriteFile(filepath.Join(n.Dir, "manifests", fmt.Sprintf("pod-%d.yaml", i)), pod, 0o644); err != nil {
			return err
		}
	}
	n.kubelet = &daemon.Process{Name: "kubelet", LogPath: filepath.Join(n.Dir, "kubelet.log"),
		Argv: n.inNode(n.KubeletBin,
			"--config="+cfg,
			"--kubeconfig="+kubeconfig,
			"--root-dir="+filepath.Join(n.Dir, "kubelet"),
			"--cert-dir="+n.CertDir,
			"--hostname-override="+n.Name,
			"--node-ip="+n.NodeIP,
			// What the extension's machine-config patches set on Talos.
			"--cloud-provider=external",
			"--rotate-server-certificates",
			"--v=2",
		)}
	return n.kubelet.Start()
}

// kubeletKubeconfig points the kubelet at the control-plane namespace's
// address; the API server's certificate names "kubernetes", not that address.
// kubeletKubeconfig is a kubelet's kubeconfig: caField is either
// `certificate-authority: <file>` or `certificate-authority-data: <base64>`;
// certFile holds both the client certificate and its key.
func kubeletKubeconfig(server, caField, certFile string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster: {server: %q, %s, tls-server-name: kubernetes}
users:
- name: kubelet
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: kubelet
  context: {cluster: cluster, user: kubelet}
current-context: kubelet
`, server, caField, certFile, certFile)
}

// kubeletConfig is the KubeletConfiguration: cgroup v1 allowed explicitly,
// cgroupfs, the node's own cgroup root, serving on the node address only,
// and no image garbage collection (nothing could be pulled back).
func kubeletConfig(dir, socket, ca, cgroupRoot, nodeIP string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[5]q
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
containerRuntimeEndpoint: %[2]q
address: %[6]q
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
staticPodPath: %[3]q
podLogsDir: %[4]q
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[1]q}
authorization:
  mode: Webhook
rotateCertificates: false
serverTLSBootstrap: true
failSwapOn: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "50Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
protectKernelDefaults: false
syncFrequency: 10s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 5s
`, ca, "unix://"+socket, filepath.Join(dir, "manifests"), filepath.Join(dir, "pod-logs"), cgroupRoot, nodeIP)
}

// LogTails is the end of every daemon's log.
func (n *Node) LogTails(lines int) string {
	var b strings.Builder
	for _, p := range []*daemon.Process{n.containerd, n.kubelet, n.agent} {
		if p != nil {
			b.WriteString(p.Report(lines))
		}
	}
	// And every container's log (the kubelet's podLogsDir).
	logs, _ := filepath.Glob(filepath.Join(n.Dir, "pod-logs", "*", "*", "*.log"))
	for _, l := range logs {
		b.WriteString((&daemon.Process{Name: "container", LogPath: l}).Report(lines))
	}
	return b.String()
}

// stop takes the node down so nothing outlives the test: the kubelet, then
// every process in the node's cgroup root (the containers) and in its mount
// namespace (containerd's shims, containerd, the holder), then the cgroups.
// The node's mounts vanish with its mount namespace.
func (n *Node) stop(t *testing.T) {
	n.agent.Stop(syscall.SIGTERM, 5*time.Second)
	if n.machined != nil {
		n.machined.Close()
		n.machinedLog.Close()
	}
	n.kubelet.Stop(syscall.SIGTERM, 10*time.Second)
	hs, _ := hierarchies()
	for range 20 {
		killed := 0
		for _, h := range hs {
			killed += killCgroupTree(filepath.Join(h, n.cgroupRoot))
		}
		if n.holder != nil && n.holder.Pid() != 0 {
			killed += killMountNamespace(n.mountNS())
		}
		if killed == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.containerd.Stop(syscall.SIGTERM, time.Second)
	n.holder.Stop(syscall.SIGTERM, time.Second)
	for _, h := range hs {
		removeCgroupTree(filepath.Join(h, n.cgroupRoot))
	}
	for _, f := range n.forwarders {
		f.Close()
	}
	if os.Getenv("REALNODE_KEEP_DIR") == "" {
		if err := os.RemoveAll(n.Dir); err != nil {
			t.Logf("removing %s: %v", n.Dir, err)
		}
	}
}

func killCgroupTree(dir string) int {
	killed := 0
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		data, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(data)) {
			if pid, _ := strconv.Atoi(f); pid > 0 && syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
		return nil
	})
	return killed
}

// killMountNamespace kills every process in the mount namespace at path
// except the holder (stopped last, so the namespace can still be read).
func killMountNamespace(path string) int {
	want, err := os.Readlink(path)
	if err != nil {
		return 0
	}
	holder := strings.Split(path, "/")[2]
	procs, _ := os.ReadDir("/proc")
	killed := 0
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || p.Name() == holder {
			continue
		}
		if ns, _ := os.Readlink("/proc/" + p.Name() + "/ns/mnt"); ns == want && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	return killed
}

// removeCgroupTree removes dir and its children, deepest first.
func removeCgroupTree(dir string) {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	// A memory cgroup can stay busy for a moment after its last process died.
	for range 50 {
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err == nil || errors.Is(err, os.ErrNotExist) {
				dirs = append(dirs[:i], dirs[i+1:]...)
			}
		}
		if len(dirs) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func goarch() string {
	if a := os.Getenv("GOARCH"); a != "" {
		return a
	}
	return runtime.GOARCH
}

// Failed reports a daemon of the node that exited, with its log.
func (n *Node) Failed() error {
	for _, p := range []*daemon.Process{n.containerd, n.kubelet, n.agent} {
		if p != nil && p.Exited() {
			return fmt.Errorf("%s exited:\n%s", p.Name, p.Report(40))
		}
	}
	return nil
}

// sweepStale removes what an earlier run killed outright (SIGKILL skips the
// cleanup) left behind: its daemons die with it, but containerd's shims and
// the containers under them do not. A run's directory names its owner PID
// and cgroup root; when the owner is gone, its containers (by cgroup), its
// shims and leftover daemons (by their command lines, which name the
// directory), its cgroups and the directory go too. Its network namespaces
// are not found this way: `ip netns list` shows them (nit-*).
func sweepStale(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "rn-*"))
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, "owner"))
		if err != nil {
			continue
		}
		var pid int
		var cgroupRoot string
		if _, err := fmt.Sscan(string(data), &pid, &cgroupRoot); err != nil || !strings.HasPrefix(cgroupRoot, "/realnode-") {
			continue
		}
		if syscall.Kill(pid, 0) == nil {
			continue // its run is still going
		}
		t.Logf("removing what a killed run (PID %d) left in %s and the cgroup %s", pid, dir, cgroupRoot)
		hs, _ := hierarchies()
		for range 20 {
			killed := killCommandsNaming(dir)
			for _, h := range hs {
				killed += killCgroupTree(filepath.Join(h, cgroupRoot))
			}
			if killed == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		for _, h := range hs {
			removeCgroupTree(filepath.Join(h, cgroupRoot))
		}
		_ = os.RemoveAll(dir)
	}
}

// killCommandsNaming kills every process whose command line mentions dir.
func killCommandsNaming(dir string) int {
	procs, _ := os.ReadDir("/proc")
	killed := 0
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if strings.Contains(string(cmdline), dir+"/") && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	return killed
}
