// Package harness holds the test harness, apart from the product: a real
// control plane (testcluster), a kubelet stand-in (kubeletsim), simulated
// Talos nodes (testnode), building the binaries under test (gobuild) and
// applying manifests (kubeapply). The agent and coordinator binaries import
// none of it; `make lint` checks that. Fakes of one package live next to it
// (pkg/talos/talostest, pkg/csrcheck/csrtest, pkg/netaddr/netnstest), as
// httptest does.
package harness
