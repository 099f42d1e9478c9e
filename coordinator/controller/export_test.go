package controller

import "context"

// ProviderIDAlone exposes providerIDAlone to the API-server tests.
func ProviderIDAlone(c *Coordinator, ctx context.Context, node string, patch []byte) bool {
	return c.providerIDAlone(ctx, node, patch)
}

// HoldRequester holds node's serving-CSR decision lock, as a decision of
// one of its requests that takes long would, until the returned unlock.
func HoldRequester(c *Coordinator, node string) (unlock func()) {
	return c.requesterLocks.lockAll([]string{node})
}
