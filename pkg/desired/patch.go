package desired

import (
	"encoding/json"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// Patches are the JSON merge patches to send; nil means nothing to send.
type Patches struct {
	// Status patches nodes/<self>/status: the labels, the annotations (the
	// report) and status.addresses, in one write. The status subresource
	// keeps the Node's spec but takes its metadata, and NodeRestriction
	// checks the labels there as on the Node. A node may not GET its
	// status, so it never reads-modifies-writes it.
	Status []byte
	// Spec patches spec.providerID of nodes/<self>, only on a Node that
	// waits for no initialization: while the uninitialized taint is there,
	// the coordinator sets the providerID the report asks for
	// (setProviderId) in the patch that removes the taint, as Talos CCM's
	// cloud-node controller does.
	Spec []byte
	// ProviderIDConflict is set when the Node already has a different
	// providerID, which can never change; the agent reports it and moves on.
	ProviderIDConflict string
}

// Diff compares the observed Node with the desired state. Only differences
// are patched; labels and rule annotations the agent set earlier
// (owned-labels, owned-annotations) and no longer wants are removed; ones it
// never set are never touched.
func Diff(observed *corev1.Node, want State) (Patches, error) {
	var p Patches
	labels := map[string]any{}
	for k, v := range want.Labels {
		if cur, ok := observed.Labels[k]; !ok || cur != v {
			labels[k] = v
		}
	}
	for _, k := range noLongerWanted(observed, contract.AnnotationOwnedLabels, observed.Labels, want.Labels) {
		if contract.NodeMaySetLabel(k) {
			labels[k] = nil
		}
	}
	annotations := map[string]any{}
	for k, v := range want.Annotations {
		if cur, ok := observed.Annotations[k]; !ok || cur != v {
			annotations[k] = v
		}
	}
	// Rules never write the contract's keys (refused at load), so a listed
	// one is not the rules' to remove.
	for _, k := range noLongerWanted(observed, contract.AnnotationOwnedAnnotations, observed.Annotations, want.Annotations) {
		if !contract.InDomain(k) {
			annotations[k] = nil
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
	if !slices.Equal(observed.Status.Addresses, want.Addresses) {
		patch["status"] = map[string]any{"addresses": want.Addresses}
	}
	var err error
	if len(patch) > 0 {
		if p.Status, err = json.Marshal(patch); err != nil {
			return Patches{}, err
		}
	}
	switch {
	case want.ProviderID == "" || observed.Spec.ProviderID == want.ProviderID:
	case observed.Spec.ProviderID != "":
		p.ProviderIDConflict = observed.Spec.ProviderID
	case !contract.Uninitialized(observed): // else the coordinator sets it as it removes the taint
		if p.Spec, err = json.Marshal(map[string]any{"spec": map[string]any{"providerID": want.ProviderID}}); err != nil {
			return Patches{}, err
		}
	}
	return p, nil
}

// noLongerWanted lists the keys the owned annotation (owned-labels or
// owned-annotations) says the agent set, that are still on the Node and no
// longer wanted. A missing or unreadable list removes nothing: better a stale
// key than deleting one the agent did not set.
func noLongerWanted(observed *corev1.Node, ownedKey string, have, want map[string]string) []string {
	prev, ok := observed.Annotations[ownedKey]
	if !ok {
		return nil
	}
	keys, err := contract.DecodeKeys(ownedKey, prev)
	if err != nil {
		return nil
	}
	var gone []string
	for _, k := range keys {
		_, still := want[k]
		_, present := have[k]
		if present && !still {
			gone = append(gone, k)
		}
	}
	return gone
}
