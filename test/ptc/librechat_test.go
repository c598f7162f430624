package ptc

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

// TestLibreChatClient runs test/ptc/node/ptc.test.mjs: LibreChat's own programmatic tool
// calling tools (Python and bash, from @librechat/agents) against /exec/programmatic.
func TestLibreChatClient(t *testing.T) {
	dir := filepath.Join(kilntest.Root(), "test", "ptc", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@librechat", "agents")); err != nil {
		t.Fatalf("LibreChat's agents package is not installed: run make test-ptc-deps (%v)", err)
	}
	waitIdle(t)
	cmd := exec.CommandContext(t.Context(), "node", "--test", "--test-reporter=spec", "ptc.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KILN_URL="+srv.URL, "KILN_API_KEY="+keyA)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("the LibreChat client tests failed: %v", err)
	}
}
