// Package talosnode runs Talos's own machined (hack/talos: v1.14.1, built
// from Talos's module) as PID 1 of a node in container mode, as
// `talosctl cluster create --provisioner docker` runs a Talos container,
// without Docker: its own PID, mount, UTS, IPC and cgroup namespaces
// (unshare), a network namespace with one veth, the rootfs layout and
// placeholders of Talos's Dockerfile, the mounts of Talos's docker
// provisioner (pkg/provision/providers/docker/node.go), and
// PLATFORM=container with the machine config in USERDATA.
//
// hack/talos/CONTAINER-MODE.md lists what each piece stands for; the
// README's "Real machined" section lists what differs from a Talos node.
package talosnode

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/harness/syncbuf"
)

// Parts are the binaries a node is made of.
type Parts struct {
	Machined   string // hack/talos/build.sh
	Containerd string // the directory hack/containerd/build.sh prints
	Runc       string // runc from its module (hack/containerd), copied with its libraries
	TalosSrc   string // Talos's module source, for its containerd configs
	Version    string // the Talos release machined is (os-release)
}

// Build builds (or reuses from the cache) what a node of Talos v1.14.1
// needs. root is the repository's root.
func Build(t testing.TB, root string) Parts { return BuildTalos(t, root, "") }

// BuildTalos is Build for the Talos module in hack/talos/<module> ("":
// hack/talos itself, v1.14.1; "v1.13": v1.13.9).
func BuildTalos(t testing.TB, root, module string) Parts {
	t.Helper()
	run := func(script string, args ...string) string {
		cmd := exec.Command(filepath.Join(root, script), args...)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %s: %v", script, strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	var args []string
	if module != "" {
		args = []string{module}
	}
	p := Parts{Machined: run("hack/talos/build.sh", args...), Containerd: run("hack/containerd/build.sh")}
	p.Runc = filepath.Join(p.Containerd, "runc")
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/siderolabs/talos")
	cmd.Dir = filepath.Join(root, "hack/talos", module)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("locating Talos's module: %v", err)
	}
	var mod struct{ Dir, Version string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("locating Talos's module: %v (%s)", err, out)
	}
	p.TalosSrc, p.Version = mod.Dir, mod.Version
	return p
}

// Extension is a system extension as Talos's installer lays it out: its
// service spec at /usr/local/etc/containers/<name>.yaml and its rootfs at
// /usr/local/lib/containers/<name>/.
type Extension struct {
	Name string
	Spec []byte
	// Files are the extension rootfs's files: path (relative) → source file.
	Files map[string]string
}

// Config describes one node.
type Config struct {
	Name string
	// Address is the node's eth0 address (a /24); the host end of its veth
	// gets .1 of that network.
	Address    string
	MachineCfg []byte // the v1alpha1 machine config (USERDATA)
	Extensions []Extension
	// Installed are more files of the rootfs, by path: the system
	// extensions an installer image carries, their rootfs/ laid out at the
	// root as Talos's imager does (mode 0755).
	Installed map[string][]byte
	// ExtensionConfigFiles makes machined render ExtensionServiceConfig
	// files as on a Talos machine (container mode renders none; see
	// hack/talos/patches/extension-config-files.go.patch), so that a
	// service declaring `configuration: true` starts with its files.
	ExtensionConfigFiles bool
	// Sandboxd lets machined run the CRI (and what it starts) in sandboxd's
	// PID and mount namespace when the machine config's
	// SecurityProfileConfig sets workloadIsolation, as on a Talos machine
	// (container mode never does; hack/talos/patches/sandboxd-container.go.patch).
	Sandboxd bool
}

// Node is a running node.
type Node struct {
	cfg     Config
	version string // the Talos release machined is
	dir     string
	netns   string
	cmd     *exec.Cmd
	Console *syncbuf.Buffer // machined's console (its log)
	done    chan struct{}
}

// Start lays out the rootfs and boots machined. The node stops when the
// test ends.
func Start(t *testing.T, p Parts, cfg Config) *Node {
	t.Helper()
	n := Prepare(t, p, cfg)
	n.Boot(t)
	return n
}

// StateDir is the node's own directory: state/var is its /var.
func (n *Node) StateDir() string { return filepath.Join(n.dir, "state") }

// overlays are the directories Talos 1.13's docker provisioner gives a
// node as volumes (its constants.Overlays but /opt, which Boot always
// mounts); Talos 1.14's machined mounts them itself.
func (n *Node) overlays() []string {
	if !strings.HasPrefix(n.version, "v1.13.") {
		return nil
	}
	return []string{"etc/cni", "etc/kubernetes", "usr/libexec/kubernetes"}
}

// KubernetesDir is where the node's /etc/kubernetes is on the host before
// it boots, when the provisioner gives it ("" when machined mounts its own
// tmpfs there: then WriteInNode once it has).
func (n *Node) KubernetesDir() string {
	if n.overlays() == nil {
		return ""
	}
	return filepath.Join(n.dir, "state/overlay/etc/kubernetes")
}

// NetNS is the name of the node's network namespace (ip netns).
func (n *Node) NetNS() string { return n.netns }

// WriteInNode writes a file at path as the node's processes see it (through
// machined's root: /etc/kubernetes, for one, is machined's own tmpfs).
func (n *Node) WriteInNode(path string, b []byte) error {
	pid := n.machinedPID()
	if pid == 0 {
		return errors.New("machined is not running")
	}
	dst := filepath.Join(fmt.Sprintf("/proc/%d/root", pid), path)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}

// Prepare lays out the node (rootfs, state, network) without booting it.
func Prepare(t *testing.T, p Parts, cfg Config) *Node {
	t.Helper()
	n := &Node{cfg: cfg, version: p.Version, dir: t.TempDir(), netns: "tn-" + strconv.Itoa(os.Getpid()) + "-" + cfg.Name, Console: &syncbuf.Buffer{}, done: make(chan struct{})}
	root := filepath.Join(n.dir, "rootfs")
	if err := layout(root, p, cfg); err != nil {
		t.Fatal(err)
	}
	dirs := []string{"state/var", "state/state", "state/opt"}
	for _, d := range n.overlays() {
		dirs = append(dirs, "state/overlay/"+d, "rootfs/"+d)
	}
	// A volume starts with the image's contents.
	if n.overlays() != nil {
		dirs = append(dirs, "state/overlay/etc/kubernetes/manifests", "state/overlay/etc/cni/net.d")
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.network(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.netns).Run() })
	return n
}

// Boot starts machined as the node's PID 1.
func (n *Node) Boot(t *testing.T) {
	t.Helper()
	cfg, root := n.cfg, filepath.Join(n.dir, "rootfs")

	// The docker provisioner's container, by hand: namespaces, then the
	// mounts Docker and the provisioner make, then machined as PID 1.
	script := strings.Join([]string{
		"set -e",
		"R=" + root + "; D=" + n.dir,
		"mount --make-rprivate /",
		"mount --bind $R $R",
		"mount -t proc proc $R/proc",
		"mount --rbind /dev $R/dev",
		"mount -t sysfs sysfs $R/sys",
		"mount -t tmpfs tmpfs $R/sys/fs/cgroup",
		"for c in cpu cpuacct memory pids devices freezer blkio cpuset hugetlb net_cls net_prio perf_event; do mkdir -p $R/sys/fs/cgroup/$c; mount -t cgroup -o $c cgroup $R/sys/fs/cgroup/$c 2>/dev/null || rmdir $R/sys/fs/cgroup/$c; done",
		"mount -t tmpfs tmpfs $R/run; mount -t tmpfs tmpfs $R/system; mount -t tmpfs tmpfs $R/tmp",
		"mkdir -p $R/system/state",
		"mount --bind $D/state/var $R/var; mount --bind $D/state/state $R/system/state; mount --bind $D/state/opt $R/opt",
		"for d in " + strings.Join(n.overlays(), " ") + "; do mount --bind $D/state/overlay/$d $R/$d; done",
		"hostname " + cfg.Name,
		"cd $R; mkdir -p .oldroot; pivot_root . .oldroot; cd /",
		// The old root is the host's: nothing of it stays visible (umount
		// runs from it, through its own loader).
		"/.oldroot/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path /.oldroot/usr/lib/x86_64-linux-gnu /.oldroot/usr/bin/umount -l /.oldroot",
		`for v in $(compgen -e); do case $v in USERDATA|TALOSNODE_EXTENSION_CONFIG_FILES|TALOSNODE_SANDBOXD) ;; *) unset "$v" ;; esac; done`,
		"export PLATFORM=container",
		"exec /sbin/init",
	}, "\n")
	// Its own cgroup in every hierarchy: the cgroup namespace's root, under
	// which machined makes /init, /system, /podruntime, /taloscontainers,
	// all removed with the node.
	cgroups, err := n.cgroups()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroups(cgroups) })
	enter := ""
	for _, c := range cgroups {
		enter += "echo $$ > " + c + "/cgroup.procs; "
	}
	n.cmd = exec.Command("sh", "-c", enter+`exec "$@"`, "sh", "nsenter", "--net=/var/run/netns/"+n.netns, "unshare", "--pid", "--mount", "--uts", "--ipc", "--cgroup", "--fork", "--propagation", "private", "--kill-child", "--", "bash", "-c", script)
	n.cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "USERDATA=" + base64.StdEncoding.EncodeToString(cfg.MachineCfg)}
	if cfg.ExtensionConfigFiles {
		n.cmd.Env = append(n.cmd.Env, "TALOSNODE_EXTENSION_CONFIG_FILES=1")
	}
	if cfg.Sandboxd {
		n.cmd.Env = append(n.cmd.Env, "TALOSNODE_SANDBOXD=1")
	}
	var out io.Writer = n.Console
	if f := os.Getenv("TALOSNODE_CONSOLE"); f != "" { // a copy to follow while it runs: tail -f
		if w, err := os.Create(f + "." + cfg.Name); err == nil {
			t.Cleanup(func() { w.Close() })
			out = io.MultiWriter(n.Console, w)
		}
	}
	n.cmd.Stdout, n.cmd.Stderr = out, out
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	t.Cleanup(func() {
		n.Stop()
		if t.Failed() {
			t.Logf("machined's console (%s):\n%s", cfg.Name, tail(n.Console.String(), 120))
		}
	})
}

// cgroups makes the node's cgroup in every mounted hierarchy.
func (n *Node) cgroups() ([]string, error) {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || (f[2] != "cgroup" && f[2] != "cgroup2") || !strings.HasPrefix(f[1], "/sys/fs/cgroup") {
			continue
		}
		self, err := ownCgroup(f[1], f[2] == "cgroup2", f[3])
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(f[1], self, n.netns)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		out = append(out, dir)
	}
	return out, nil
}

// ownCgroup is this process's cgroup in the hierarchy mounted at mnt.
func ownCgroup(mnt string, v2 bool, opts string) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if v2 && parts[0] == "0" && parts[1] == "" {
			return parts[2], nil
		}
		for _, c := range strings.Split(parts[1], ",") {
			if !v2 && c != "" && slices.Contains(strings.Split(opts, ","), c) {
				return parts[2], nil
			}
		}
	}
	return "/", nil
}

// removeCgroups removes the node's cgroups, deepest first. Processes of
// the node still in them (shims reaped after their PID namespace ended)
// are killed, and removal is retried until they are gone (10 s at most).
func removeCgroups(dirs []string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := 0
		for _, d := range dirs {
			var all []string
			_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
				if err == nil && e.IsDir() {
					all = append(all, p)
				}
				return nil
			})
			for _, p := range slices.Backward(all) {
				if b, err := os.ReadFile(filepath.Join(p, "cgroup.procs")); err == nil {
					for _, f := range strings.Fields(string(b)) {
						if pid, err := strconv.Atoi(f); err == nil {
							_ = syscall.Kill(pid, syscall.SIGKILL)
						}
					}
				}
				if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
					left++
				}
			}
		}
		if left == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// network makes the node's network namespace and its veth.
func (n *Node) network() error {
	addr := n.cfg.Address
	host := addr[:strings.LastIndex(addr, ".")] + ".1"
	hostLink := "tnh" + strconv.Itoa(os.Getpid()%100000)
	for _, args := range [][]string{
		{"netns", "add", n.netns},
		{"link", "add", hostLink, "type", "veth", "peer", "name", "eth0", "netns", n.netns},
		{"addr", "add", host + "/24", "dev", hostLink},
		{"link", "set", hostLink, "up"},
		{"-n", n.netns, "addr", "add", addr + "/24", "dev", "eth0"},
		{"-n", n.netns, "link", "set", "eth0", "up"},
		{"-n", n.netns, "link", "set", "lo", "up"},
		{"-n", n.netns, "route", "add", "default", "via", host},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// Stop ends the node: SIGTERM to machined (its shutdown sequence), then,
// after a grace period, SIGKILL to the PID namespace's init, which ends
// every process in it; unshare --kill-child covers the rest.
func (n *Node) Stop() {
	select {
	case <-n.done:
		return
	default:
	}
	if pid := n.machinedPID(); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-n.done:
			return
		case <-time.After(5 * time.Second):
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	<-n.done
}

// machinedPID is machined's PID in the host's namespace: unshare's child.
func (n *Node) machinedPID() int {
	pids, err := descendants(n.cmd.Process.Pid)
	if err != nil {
		return 0
	}
	for _, pid := range pids {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); strings.HasSuffix(exe, "/usr/bin/init") {
			return pid
		}
	}
	return 0
}

func descendants(pid int) ([]int, error) {
	var out []int
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil {
		return nil, err
	}
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			c, _ := strconv.Atoi(s)
			out = append(out, c)
			more, _ := descendants(c)
			out = append(out, more...)
		}
	}
	return out, nil
}

// Service is a service as machined's own API reports it (`talosctl services`).
type Service struct {
	ID      string   `json:"id"`
	State   string   `json:"state"`
	Healthy bool     `json:"healthy"`
	Events  []string `json:"events"`
}

// Services asks machined's own API for the node's services
// (MachineService.ServiceList), through probe (hack/talosnode/probe, built)
// run inside the running nodeinit-agent extension's container: copied to
// the node's /var/lib/nodeinit, which the container mounts, and started in
// the container's mount and PID namespaces, where machined admits it as
// the ext-nodeinit-agent service (its rule admits processes in the
// service's mount namespace). machined's socket admits nothing else here:
// apid, the usual way in, needs a trustd certificate.
func (n *Node) Services(ctx context.Context, probe string) (map[string]Service, error) {
	agent := 0
	pids, err := descendants(n.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	for _, pid := range pids {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "nodeinit-agent" {
			agent = pid
		}
	}
	if agent == 0 {
		return nil, errors.New("no nodeinit-agent runs in the node")
	}
	b, err := os.ReadFile(probe)
	if err != nil {
		return nil, err
	}
	dst := filepath.Join(n.StateDir(), "var/lib/nodeinit/talosnode-probe")
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(agent), "-m", "-p", "--", "/var/lib/nodeinit/talosnode-probe")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("the probe in the agent's container: %v: %s", err, stderr.String())
	}
	var list []Service
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("the probe's output: %w", err)
	}
	services := map[string]Service{}
	for _, s := range list {
		services[s.ID] = s
	}
	return services, nil
}

// WaitConsole waits until machined's console holds a line containing
// every one of want, and returns it.
func (n *Node) WaitConsole(ctx context.Context, want ...string) (string, error) {
	for {
		for _, line := range strings.Split(n.Console.String(), "\n") {
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(line, w)
			}
			if ok {
				return line, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no console line with %q: %w", want, ctx.Err())
		case <-n.done:
			return "", fmt.Errorf("machined exited before a console line with %q", want)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func tail(s string, lines int) string {
	all := strings.Split(s, "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// layout writes the rootfs of Talos's container image (Dockerfile, stages
// rootfs-base and talos) that a node needs here.
func layout(root string, p Parts, cfg Config) error {
	for _, d := range []string{
		"usr/bin", "usr/etc", "etc/containerd", "etc/cri/conf.d/hosts", "etc/kubernetes/manifests", "etc/cni/net.d", "etc/ssl/certs",
		"proc", "sys", "dev", "run", "system", "tmp", "var", "opt", "mnt", "boot", ".extra",
		"usr/local/etc/containers", "usr/local/lib/containers", "usr/local/share", "usr/lib/firmware", "usr/lib/modules", "usr/share/zoneinfo/Etc",
		"etc/selinux/targeted/contexts/files", "opt/containerd/bin", "opt/containerd/lib", "usr/local/lib/kubelet/credentialproviders",
	} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	copies := map[string]string{
		"usr/bin/init":                    p.Machined,
		"usr/bin/containerd":              filepath.Join(p.Containerd, "containerd"),
		"usr/bin/containerd-shim-runc-v2": filepath.Join(p.Containerd, "containerd-shim-runc-v2"),
		"usr/bin/runc":                    p.Runc,
		"etc/containerd/config.toml":      filepath.Join(p.TalosSrc, "hack/containerd.toml"),
		"etc/cri/containerd.toml":         filepath.Join(p.TalosSrc, "hack/cri-containerd.toml"),
		"etc/cri/conf.d/00-base.part":     filepath.Join(p.TalosSrc, "hack/cri-plugin.part"),
		"etc/nfsmount.conf":               filepath.Join(p.TalosSrc, "hack/nfsmount.conf"),
		"etc/lvm/lvm.conf":                filepath.Join(p.TalosSrc, "hack/lvm.conf"),
		"etc/ssl/certs/ca-certificates":   "/etc/ssl/certs/ca-certificates.crt",
	}
	for _, e := range cfg.Extensions {
		dir := "usr/local/lib/containers/" + e.Name
		for rel, src := range e.Files {
			copies[filepath.Join(dir, rel)] = src
		}
	}
	for dst, src := range copies {
		if err := copyFile(src, filepath.Join(root, dst)); err != nil {
			return err
		}
	}
	// runc links the C library (its nsexec is C): the libraries come along.
	out, err := exec.Command("ldd", p.Runc).Output()
	if err != nil {
		return fmt.Errorf("ldd %s: %w", p.Runc, err)
	}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "/") {
			if err := copyFile(f, filepath.Join(root, f)); err != nil {
				return err
			}
		}
	}
	files := map[string]string{
		"usr/etc/in-container":                              "true\n", // the container marker
		"etc/extensions.yaml":                               "",
		"etc/selinux/targeted/contexts/files/file_contexts": "",
		// Real files, not bind mounts: machined's /etc overlay hides mounts under /etc.
		"etc/hostname": cfg.Name + "\n",
		// Talos's host DNS forwards to it: nothing listens there, so no
		// lookup leaves the node (127.0.0.53 would be the host DNS itself: a loop).
		"etc/resolv.conf": "nameserver 127.0.0.1\n",
		"etc/hosts":       "127.0.0.1 localhost\n",
		"etc/os-release":  "NAME=\"Talos\"\nID=talos\nVERSION_ID=" + p.Version + "\nPRETTY_NAME=\"Talos (" + p.Version + ")\"\n",
	}
	for _, e := range cfg.Extensions {
		files["usr/local/etc/containers/"+e.Name+".yaml"] = string(e.Spec)
	}
	if strings.HasPrefix(p.Version, "v1.13.") {
		// Talos 1.13 bind-mounts the files it writes under /etc over
		// placeholders its Dockerfile touches (1.14 needs none).
		for _, f := range []string{"machine-id", "cri/conf.d/cri.toml", "cri/conf.d/01-registries.part", "cri/conf.d/20-customization.part",
			"cri/conf.d/base-spec.json", "ssl/certs/ca-certificates.crt", "iscsi/initiatorname.iscsi", "nvme/hostid", "nvme/hostnqn"} {
			files["etc/"+f] = ""
		}
	}
	for rel, content := range files {
		if err := writeFile(filepath.Join(root, rel), []byte(content), 0o644); err != nil {
			return err
		}
	}
	for rel, b := range cfg.Installed {
		if err := writeFile(filepath.Join(root, rel), b, 0o755); err != nil {
			return err
		}
	}
	for link, target := range map[string]string{"sbin": "usr/bin", "bin": "usr/bin", "usr/bin/poweroff": "init", "usr/bin/shutdown": "init",
		"usr/bin/reboot": "init", "usr/bin/dashboard": "init", "usr/bin/sandboxd": "init"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			return err
		}
	}
	return nil
}

// writeFile writes b at path, making its directories.
func writeFile(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, mode)
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, st.Mode().Perm()|0o200)
}
