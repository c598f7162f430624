package kilntest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// helmVersion is the version deploy/ensure-helm.sh builds.
const helmVersion = "v3.22.0"

// Helm returns the path of the helm binary deploy/ensure-helm.sh builds, failing the
// test when it is missing: CI must run the chart's tests, not skip them.
func Helm(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(Root(), ".cache", "helm", helmVersion, "helm")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("helm is not built (%v): run deploy/ensure-helm.sh (make helm)", err)
	}
	return bin
}

// RunHelm runs helm with args, with its cache, configuration and data in the test's
// temporary folders (nothing of the machine's), and returns its combined output.
func RunHelm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(Helm(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	return string(out), err
}
