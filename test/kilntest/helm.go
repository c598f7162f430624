package kilntest

import (
	"os"
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
