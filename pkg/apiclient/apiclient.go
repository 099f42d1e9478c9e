// Package apiclient holds how talos-nodeinit's processes talk to the API
// server for Kubernetes' built-in types.
package apiclient

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

// Builtin returns a copy of cfg for clients of built-in types only (Nodes,
// CSRs, Events, Leases), as Kubernetes' own components talk:
//
//   - protobuf, as kube-controller-manager and the kubelet do (their
//     --kube-api-content-type default): the API server encodes each watch
//     event once per encoding for all its watchers, and protobuf is cheaper
//     to encode and decode than JSON on both sides;
//   - no gzip: client-go asks for it by default, and kube-apiserver then
//     compresses every flush of a watch, one small event at a time, for a
//     client that is in the cluster or on a node's link.
//
// A CustomResource (NodeRecords) has no protobuf encoding: its clients
// take Custom.
func Builtin(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	c.DisableCompression = true
	return c
}

// Custom returns a copy of cfg for clients of CustomResources: JSON, which
// is all they are served in, and no gzip, as Builtin.
func Custom(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.DisableCompression = true
	return c
}
