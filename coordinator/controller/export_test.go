package controller

import "context"

// ProviderIDAlone exposes providerIDAlone to the API-server tests.
func ProviderIDAlone(c *Coordinator, ctx context.Context, node string, patch []byte) bool {
	return c.providerIDAlone(ctx, node, patch)
}
