package controller

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/talos-nodeinit/talos-nodeinit/coordinator/nodestate"
	"github.com/talos-nodeinit/talos-nodeinit/pkg/contract"
)

// refusedIDs holds per Node object the providerID the API server refused in the initializing patch
// (admission, validation): the next patch leaves it out, so the join goes on without it.
type refusedIDs struct {
	mu sync.Mutex
	m  map[string]refusedID
}

type refusedID struct {
	uid types.UID
	at  time.Time
	nodestate.RefusedProviderID
}

// refusalRecheck is how long a refused providerID is left out before it is tried again.
const refusalRecheck = 10 * time.Minute

// providerIDAlone says whether the API server, in two dry runs, takes patch without spec.providerID
// but refuses it with it: only then is the refusal the providerID's; any other is retried as it is.
func (c *Coordinator) providerIDAlone(ctx context.Context, name string, patch []byte) bool {
	var p map[string]any
	if err := json.Unmarshal(patch, &p); err != nil {
		return false
	}
	spec, ok := p["spec"].(map[string]any)
	if !ok {
		return false
	}
	delete(spec, "providerID")
	without, err := json.Marshal(p)
	if err != nil {
		return false
	}
	dryRun := func(p []byte) error {
		_, err := c.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, p, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: FieldManager})
		return err
	}
	if err := dryRun(without); err != nil {
		c.log.Debug("the initializing patch without its providerID is refused too (dry run): the refusal is not the providerID's alone", "node", name, "err", err)
		return false
	}
	if err := dryRun(patch); !refusedByAPIServer(err) {
		c.log.Debug("the initializing patch is taken now (dry run): the refusal no longer holds", "node", name, "err", err)
		return false
	}
	return true
}

// refusedByAPIServer says whether err is a refusal (admission, validation) a retry meets again.
func refusedByAPIServer(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
}

func (r *refusedIDs) set(node *corev1.Node, id string, err error, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]refusedID{}
	}
	r.m[node.Name] = refusedID{uid: node.UID, at: now, RefusedProviderID: nodestate.RefusedProviderID{ID: id, Reason: contract.NodeText(err.Error())}}
}

// of is the refusal recorded for this Node object within refusalRecheck of now, if any.
func (r *refusedIDs) of(node *corev1.Node, now time.Time) nodestate.RefusedProviderID {
	r.mu.Lock()
	defer r.mu.Unlock()
	x, ok := r.m[node.Name]
	switch {
	case !ok:
	case x.uid != node.UID || now.Sub(x.at) >= refusalRecheck:
		delete(r.m, node.Name)
	default:
		return x.RefusedProviderID
	}
	return nodestate.RefusedProviderID{}
}

func (r *refusedIDs) forget(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, name)
}
