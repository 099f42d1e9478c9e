// Command demo starts a real control plane on 127.0.0.1, registers simulated
// Talos nodes with their own kubelet identities, and prints what the cluster
// sees. What exists so far: nodes join tainted uninitialized and their
// serving CSRs wait, because nothing initializes them yet. The agent and
// coordinator will join this demo as they land.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/go-logr/logr"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/kubeletsim"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/testcluster"
)

func main() {
	nodes := flag.Int("nodes", 4, "number of simulated nodes")
	keep := flag.Bool("keep", os.Getenv("KEEP") == "1", "keep the cluster running until interrupted (also KEEP=1)")
	flag.Parse()
	if err := run(*nodes, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(n int, keep bool) error {
	// client-go's certificate manager logs every attempt through klog; the tables say it better.
	klog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Println("==> starting etcd, kube-apiserver and kube-controller-manager (csrsigning) on 127.0.0.1")
	cluster, err := testcluster.Start(ctx, testcluster.Options{ControllerManager: true})
	if err != nil {
		return err
	}
	defer cluster.Close()

	fmt.Printf("==> registering %d nodes, each with its own system:node identity\n", n)
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("talos-%d", i)
		id, err := cluster.NodeIdentity(name)
		if err != nil {
			return err
		}
		k, err := kubeletsim.Register(ctx, kubeletsim.Config{
			NodeName: name, NodeIPs: []netip.Addr{netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)})},
			Identity: id.Config(), CertDir: filepath.Join(cluster.Dir(), "nodes", name, "pki"),
		})
		if err != nil {
			return err
		}
		defer k.Stop()
		if err := k.StartServing(ctx); err != nil {
			return err
		}
	}
	time.Sleep(2 * time.Second) // let the certificate managers submit their CSRs

	admin := kubernetes.NewForConfigOrDie(cluster.Admin())
	if err := printTables(ctx, admin); err != nil {
		return err
	}
	if keep {
		fmt.Printf("\nThe cluster keeps running. Try:\n  kubectl --kubeconfig %s get nodes,csr\nPress Ctrl-C to stop.\n", cluster.AdminKubeconfig())
		<-ctx.Done()
	}
	return nil
}

func printTables(ctx context.Context, cs kubernetes.Interface) error {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\nNODE\tPROVIDER-ID\tADDRESSES\tPOD-CIDRS\tTAINTS")
	for _, n := range nodes.Items {
		var addrs, taints []string
		for _, a := range n.Status.Addresses {
			addrs = append(addrs, string(a.Type)+"="+a.Address)
		}
		for _, t := range n.Spec.Taints {
			taints = append(taints, t.Key+":"+string(t.Effect))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", n.Name, dash(n.Spec.ProviderID), strings.Join(addrs, ","), dash(strings.Join(n.Spec.PodCIDRs, ",")), strings.Join(taints, ","))
	}
	csrs, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "\nCSR\tREQUESTOR\tSIGNER\tCONDITION")
	for _, c := range csrs.Items {
		cond := "Pending"
		for _, cd := range c.Status.Conditions {
			if cd.Status == corev1.ConditionTrue {
				cond = string(cd.Type) + " (" + cd.Reason + ")"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", c.Name, c.Spec.Username, c.Spec.SignerName, cond)
	}
	return w.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
