package controller

import "context"

// ProviderIDAlone exposes providerIDAlone to the API-server tests.
func ProviderIDAlone(c *Coordinator, ctx context.Context, node string, patch []byte) bool {
	return c.providerIDAlone(ctx, node, patch)
}

// RecordVersion is the resourceVersion of Node name's record as the
// coordinator reads it ("" when it has none).
func RecordVersion(c *Coordinator, name string) string {
	rec, err := c.records.Get(name)
	if err != nil || rec == nil {
		return ""
	}
	return rec.ResourceVersion
}

// Resync queues every Node's sync, as an event of each would: a test that
// moved the coordinator's clock ahead has it look again now.
func Resync(c *Coordinator) {
	for _, n := range c.listNodes() {
		c.nodeQueue.Add(n.Name)
	}
}
