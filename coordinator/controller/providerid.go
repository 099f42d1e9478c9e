package controller

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/nodestate"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// refusedIDs remembers, per Node object, the providerID the API server
// refused in the coordinator's initializing patch (an admin's admission
// policy, or validation): the next patch leaves it out, so that the
// refusal costs that value and not the whole join.
type refusedIDs struct {
	mu sync.Mutex
	m  map[string]refusedID
}

type refusedID struct {
	uid types.UID
	nodestate.RefusedProviderID
}

// refusedByAPIServer says whether err is the API server refusing what a
// patch asked for (admission, validation), which a retry of the same patch
// only meets again.
func refusedByAPIServer(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
}

func (r *refusedIDs) set(node *corev1.Node, id string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]refusedID{}
	}
	r.m[node.Name] = refusedID{uid: node.UID, RefusedProviderID: nodestate.RefusedProviderID{ID: id, Reason: contract.NodeText(err.Error())}}
}

// of is the refusal recorded for this Node object, if any.
func (r *refusedIDs) of(node *corev1.Node) nodestate.RefusedProviderID {
	r.mu.Lock()
	defer r.mu.Unlock()
	if x, ok := r.m[node.Name]; ok && x.uid == node.UID {
		return x.RefusedProviderID
	}
	return nodestate.RefusedProviderID{}
}

func (r *refusedIDs) forget(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, name)
}
