package explain

import (
	"errors"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
)

// PlatformOf reads a file of one node's platform metadata.
func PlatformOf(data []byte) (facts.Platform, error) {
	nodes, err := ReadNodes(data)
	if err != nil {
		return facts.Platform{}, err
	}
	return nodes[0].Metadata, nil
}

// SystemOf reads a file of one node's system information.
func SystemOf(data []byte) (facts.System, error) {
	systems, err := ReadSystemInformationNodes(data)
	if err == nil && len(systems) != 1 {
		err = errors.New("not one node's system information")
	}
	for _, s := range systems {
		return s, err
	}
	return facts.System{}, err
}
