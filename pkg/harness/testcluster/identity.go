package testcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// NodeIdentity is a kubelet's client identity: CN=system:node:<name>,
// O=system:nodes. Like Talos's kubelet, the certificate and key live in one
// PEM file that the kubeconfig references by path, so it can be rotated.
type NodeIdentity struct {
	Name string
	// Config authenticates with the certificate file; it is a fresh copy per call.
	config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for this identity.
	Kubeconfig string
	// CertFile holds the client certificate and key (kubelet-client-current.pem).
	CertFile string

	ca *authority
}

// NodeIdentity issues a node client certificate and writes its files under
// the cluster directory.
func (c *Cluster) NodeIdentity(name string) (*NodeIdentity, error) {
	dir := filepath.Join(c.dir, "nodes", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	id := &NodeIdentity{
		Name:       name,
		Kubeconfig: filepath.Join(dir, "kubeconfig-kubelet"),
		CertFile:   filepath.Join(dir, "kubelet-client-current.pem"),
		ca:         c.ca,
	}
	if err := id.Rotate(); err != nil {
		return nil, err
	}
	id.config = &rest.Config{
		Host:            c.host,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.ca.certPEM, CertFile: id.CertFile, KeyFile: id.CertFile},
		QPS:             50, Burst: 100,
	}
	if err := writeKubeconfig(id.Kubeconfig, c.host, c.ca.certPEM, "system:node:"+name, id.CertFile, id.CertFile, ""); err != nil {
		return nil, err
	}
	return id, nil
}

// Config returns a rest.Config for the node identity.
func (id *NodeIdentity) Config() *rest.Config { return rest.CopyConfig(id.config) }

// Rotate replaces the client certificate file with a freshly issued one, the
// way the kubelet's client-certificate rotation does: a new file renamed over
// the old, so readers never see half a file.
func (id *NodeIdentity) Rotate() error { return id.RotateValidFor(0) }

// RotateValidFor is Rotate with a certificate valid for d (a year when 0),
// for tests that need the old certificate to expire.
func (id *NodeIdentity) RotateValidFor(d time.Duration) error {
	certPEM, keyPEM, err := id.ca.issue(leaf{commonName: "system:node:" + id.Name, organization: []string{"system:nodes"}, validFor: d})
	if err != nil {
		return err
	}
	tmp := id.CertFile + ".tmp"
	if err := os.WriteFile(tmp, append(certPEM, keyPEM...), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, id.CertFile)
}

// ClientIdentity returns a rest.Config for an arbitrary user and groups,
// authenticated by a client certificate (useful for hostile or unprivileged
// callers).
func (c *Cluster) ClientIdentity(user string, groups ...string) (*rest.Config, error) {
	certPEM, keyPEM, err := c.ca.issue(leaf{commonName: user, organization: groups})
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            c.host,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.ca.certPEM, CertData: certPEM, KeyData: keyPEM},
	}, nil
}

// ServiceAccountIdentity makes sure the namespace and ServiceAccount exist
// and returns a rest.Config authenticated by a token from the TokenRequest
// API, exactly what a pod running as that ServiceAccount would use.
func (c *Cluster) ServiceAccountIdentity(ctx context.Context, namespace, name string) (*rest.Config, error) {
	cs, err := kubernetes.NewForConfig(c.admin)
	if err != nil {
		return nil, err
	}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	_, err = cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating serviceaccount %s/%s: %w", namespace, name, err)
	}
	expiry := int64((24 * time.Hour).Seconds())
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("requesting a token for %s/%s: %w", namespace, name, err)
	}
	return &rest.Config{
		Host:            c.host,
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.ca.certPEM},
		QPS:             1000, Burst: 2000,
	}, nil
}

// WriteKubeconfig writes a kubeconfig file for a token-authenticated config
// (such as a ServiceAccountIdentity) and returns its path.
func (c *Cluster) WriteKubeconfig(name string, cfg *rest.Config) (string, error) {
	path := filepath.Join(c.dir, name+".kubeconfig")
	return path, writeKubeconfig(path, c.host, c.ca.certPEM, name, cfg.CertFile, cfg.KeyFile, cfg.BearerToken)
}
