package kilntest

import (
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"strings"
)

// Containers lists the ids of the sandbox containers of an instance (every state),
// through the docker command line, independent of kiln's own code.
func Containers(instance string) ([]string, error) {
	out, err := exec.Command("docker", "ps", "-aq", "--no-trunc",
		"--filter", "label=kiln.managed=true", "--filter", "label=kiln.instance="+instance).Output()
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// Docker runs a docker command and returns its combined output.
func Docker(args ...string) (string, error) {
	out, err := exec.Command("docker", args...).CombinedOutput()
	return string(out), err
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
