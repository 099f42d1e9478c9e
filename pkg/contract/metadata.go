package contract

import (
	"fmt"
	"strings"
)

// Metadata is the effective platform metadata the agent reports, after rule
// overrides. Field names follow Talos's PlatformMetadataSpec. It carries no
// timestamps: an unchanged node must produce an unchanged annotation.
type Metadata struct {
	Platform     string `json:"platform,omitempty"`
	Hostname     string `json:"hostname,omitempty"`
	Region       string `json:"region,omitempty"`
	Zone         string `json:"zone,omitempty"`
	InstanceType string `json:"instanceType,omitempty"`
	InstanceID   string `json:"instanceId,omitempty"`
	ProviderID   string `json:"providerId,omitempty"`
	// SetProviderID is the spec.providerID the agent's policy chose (the
	// platform's, or Talos CCM's talos://<platform>/<nodeIP> fallback; ""
	// for none). The coordinator sets it, while unset, in the patch that
	// initializes the Node, if CheckProviderID accepts it; if not, it
	// initializes the Node without one and says why (the rest of the
	// report stands: agents and coordinators of other versions may not
	// agree on the check).
	SetProviderID string `json:"setProviderId,omitempty"`
	Spot          bool   `json:"spot,omitempty"`
	InternalDNS   string `json:"internalDNS,omitempty"`
	ExternalDNS   string `json:"externalDNS,omitempty"`
	// AgentKey is the agent's own public key (EncodeAgentKey), enrolled by
	// the coordinator on the node's first join.
	AgentKey string `json:"agentKey,omitempty"`
	// AgentVersion is the version of the agent that wrote the annotation.
	AgentVersion string `json:"agentVersion,omitempty"`
}

type metadataWire struct {
	V int `json:"v"`
	Metadata
}

func (w metadataWire) version() int { return w.V }

// maxFieldBytes bounds each metadata string; real values are short.
const maxFieldBytes = 1024

// EncodeMetadata renders the nodeinit.io/metadata annotation.
func EncodeMetadata(m Metadata) (string, error) {
	return encode(metadataWire{V: PayloadVersion, Metadata: m})
}

// DecodeMetadata parses the nodeinit.io/metadata annotation.
func DecodeMetadata(value string) (Metadata, error) {
	w, err := decode[metadataWire](AnnotationMetadata, value)
	if err != nil {
		return Metadata{}, err
	}
	m := w.Metadata
	for name, v := range map[string]string{
		"platform": m.Platform, "hostname": m.Hostname, "region": m.Region, "zone": m.Zone,
		"instanceType": m.InstanceType, "instanceId": m.InstanceID, "providerId": m.ProviderID,
		"setProviderId": m.SetProviderID, "internalDNS": m.InternalDNS, "externalDNS": m.ExternalDNS, "agentVersion": m.AgentVersion, "agentKey": m.AgentKey,
	} {
		if len(v) > maxFieldBytes {
			return Metadata{}, fmt.Errorf("%s: field %s is %d bytes, limit %d", AnnotationMetadata, name, len(v), maxFieldBytes)
		}
	}
	return m, nil
}

// CheckProviderID accepts a providerID of the form <provider>://<id>, as
// Kubernetes' cloud providers parse it: a provider name of ASCII letters,
// digits, dots, dashes and underscores (Talos CCM's own example config
// has someproviderID), then printable ASCII without spaces.
func CheckProviderID(id string) error {
	name, rest, ok := strings.Cut(id, "://")
	if !ok || name == "" || rest == "" {
		return fmt.Errorf("%q is not <provider>://<id>", NodeText(id))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return fmt.Errorf("%q: provider name %q is not ASCII letters, digits, dots, dashes and underscores", NodeText(id), NodeText(name))
		}
	}
	for _, r := range rest {
		if r <= ' ' || r > '~' {
			return fmt.Errorf("%q: the id holds a space, a control or a non-ASCII character", NodeText(id))
		}
	}
	return nil
}
