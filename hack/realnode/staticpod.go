package realnode

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
)

// talosPaths gives the node's mount namespace the files a Talos node has
// where the agent's static pod (extension/patches/static-pod.yaml) mounts
// them, without touching the host's: /etc/kubernetes/kubeconfig-kubelet
// (an overlay on /etc), /var/lib/kubelet/pki/kubelet-client-current.pem (in
// the node's own /var/lib/kubelet), /var/lib/nodeinit, and a kernel command
// line naming the platform and hostname (talos.platform, talos.hostname).
func (n *Node) talosPaths(ca []byte) error {
	upper := filepath.Join(n.Dir, "etc-upper")
	for _, d := range []string{filepath.Join(upper, "kubernetes"), filepath.Join(n.Dir, "etc-work"),
		filepath.Join(n.Dir, "var-lib-kubelet", "pki"), filepath.Join(n.Dir, "var-lib-nodeinit")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	cert, err := os.ReadFile(n.Identity.CertFile)
	if err != nil {
		return err
	}
	const pem = "/var/lib/kubelet/pki/kubelet-client-current.pem"
	if err := os.WriteFile(filepath.Join(n.Dir, "var-lib-kubelet", "pki", filepath.Base(pem)), cert, 0o600); err != nil {
		return err
	}
	kubeconfig := kubeletKubeconfig(fmt.Sprintf("https://%s:%d", CPIP, APIServerPort),
		"certificate-authority-data: "+base64.StdEncoding.EncodeToString(ca), pem)
	if err := os.WriteFile(filepath.Join(upper, "kubernetes", "kubeconfig-kubelet"), []byte(kubeconfig), 0o600); err != nil {
		return err
	}
	cmdline := filepath.Join(n.Dir, "cmdline")
	if err := os.WriteFile(cmdline, []byte("talos.platform=metal talos.hostname="+n.Name+"\n"), 0o444); err != nil {
		return err
	}
	// /var/lib/nodeinit is a mount point: it must exist (empty) on the host.
	if err := os.MkdirAll("/var/lib/nodeinit", 0o700); err != nil {
		return err
	}
	ns := n.mountNS()
	for _, argv := range [][]string{
		{"mount", "-t", "overlay", "overlay", "-o", "lowerdir=/etc,upperdir=" + upper + ",workdir=" + filepath.Join(n.Dir, "etc-work"), "/etc"},
		{"mount", "--bind", filepath.Join(n.Dir, "var-lib-nodeinit"), "/var/lib/nodeinit"},
		{"mount", "--bind", cmdline, "/proc/cmdline"},
	} {
		if _, err := run("nsenter", append([]string{"--mount=" + ns, "--"}, argv...)...); err != nil {
			return err
		}
	}
	return nil
}
