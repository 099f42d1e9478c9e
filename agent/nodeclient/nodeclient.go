// Package nodeclient is every Kubernetes call the agent makes, and no more:
// watch its own Node, merge-patch it and its status, and get a CSR to
// attest. It speaks through plain REST clients with a scheme of just those
// two types, instead of client-go's generated clientset, whose scheme of
// every API group would double the agent's size and memory.
package nodeclient

import (
	"context"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/apiclient"
)

var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

func init() {
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, certificatesv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err) // static registration of two built-in types
		}
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
}

// Client talks to the API server as the node.
type Client struct {
	core, certs *rest.RESTClient
}

// New builds the clients from the node's credentials.
func New(cfg *rest.Config) (*Client, error) {
	restFor := func(apiPath string, gv schema.GroupVersion) (*rest.RESTClient, error) {
		c := apiclient.Builtin(cfg)
		c.APIPath, c.GroupVersion = apiPath, &gv
		c.NegotiatedSerializer = codecs.WithoutConversion()
		return rest.RESTClientFor(c)
	}
	core, err := restFor("/api", corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	certs, err := restFor("/apis", certificatesv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &Client{core: core, certs: certs}, nil
}

// WatchNode lists and watches the one Node by name.
func (c *Client) WatchNode(name string) cache.ListerWatcher {
	return cache.NewListWatchFromClient(c.core, "nodes", "", fields.OneTermEqualSelector("metadata.name", name))
}

// GetNode reads the node's own Node.
func (c *Client) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	node := &corev1.Node{}
	return node, c.core.Get().Resource("nodes").Name(name).Do(ctx).Into(node)
}

// PatchNode sends a JSON merge patch to nodes/<name>, or to a subresource
// ("status"). The response is the Node after the patch.
func (c *Client) PatchNode(ctx context.Context, name string, patch []byte, subresource string) (*corev1.Node, error) {
	req := c.core.Patch(types.MergePatchType).Resource("nodes").Name(name).
		VersionedParams(&metav1.PatchOptions{FieldManager: "nodeinit-agent"}, metav1.ParameterCodec).Body(patch)
	if subresource != "" {
		req = req.SubResource(subresource)
	}
	node := &corev1.Node{}
	return node, req.Do(ctx).Into(node)
}

// GetCSR reads a CertificateSigningRequest.
func (c *Client) GetCSR(ctx context.Context, name string) (*certificatesv1.CertificateSigningRequest, error) {
	csr := &certificatesv1.CertificateSigningRequest{}
	return csr, c.certs.Get().Resource("certificatesigningrequests").Name(name).Do(ctx).Into(csr)
}
