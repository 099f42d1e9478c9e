package realnode

import (
	"fmt"
	"os/exec"
	"strings"
)

// run runs a short command and returns its combined output, failing with it.
func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
