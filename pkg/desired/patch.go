package desired

import (
	"encoding/json"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// Patches are the JSON merge patches to send; nil means nothing to send.
type Patches struct {
	// Meta patches labels, annotations and spec.providerID of nodes/<self>.
	Meta []byte
	// Status patches status.addresses of nodes/<self>/status directly: a node
	// may not GET its status, so it never reads-modifies-writes it.
	Status []byte
	// ProviderIDConflict is set when the Node already has a different
	// providerID, which can never change; the agent reports it and moves on.
	ProviderIDConflict string
}

// Diff compares the observed Node with the desired state. Only differences
// are patched; labels the agent set earlier (owned-labels) and no longer
// wants are removed; labels it never set are never touched.
func Diff(observed *corev1.Node, want State) (Patches, error) {
	var p Patches
	labels := map[string]any{}
	for k, v := range want.Labels {
		if cur, ok := observed.Labels[k]; !ok || cur != v {
			labels[k] = v
		}
	}
	if prev, ok := observed.Annotations[contract.AnnotationOwnedLabels]; ok {
		// An unreadable owned-labels annotation removes nothing: better a
		// stale label than deleting one the agent did not set.
		if keys, err := contract.DecodeKeys(contract.AnnotationOwnedLabels, prev); err == nil {
			for _, k := range keys {
				if _, still := want.Labels[k]; !still && contract.NodeMaySetLabel(k) {
					if _, present := observed.Labels[k]; present {
						labels[k] = nil
					}
				}
			}
		}
	}
	annotations := map[string]any{}
	for k, v := range want.Annotations {
		if cur, ok := observed.Annotations[k]; !ok || cur != v {
			annotations[k] = v
		}
	}
	metadata := map[string]any{}
	if len(labels) > 0 {
		metadata["labels"] = labels
	}
	if len(annotations) > 0 {
		metadata["annotations"] = annotations
	}
	patch := map[string]any{}
	if len(metadata) > 0 {
		patch["metadata"] = metadata
	}
	switch {
	case want.ProviderID == "" || observed.Spec.ProviderID == want.ProviderID:
	case observed.Spec.ProviderID == "":
		patch["spec"] = map[string]any{"providerID": want.ProviderID}
	default:
		p.ProviderIDConflict = observed.Spec.ProviderID
	}
	var err error
	if len(patch) > 0 {
		if p.Meta, err = json.Marshal(patch); err != nil {
			return Patches{}, err
		}
	}
	if !slices.Equal(observed.Status.Addresses, want.Addresses) {
		if p.Status, err = json.Marshal(map[string]any{"status": map[string]any{"addresses": want.Addresses}}); err != nil {
			return Patches{}, err
		}
	}
	return p, nil
}
