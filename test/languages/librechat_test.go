package languages

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

// TestLibreChatCodeTool runs test/ptc/node/languages.test.mjs: LibreChat's own code
// execution tool (createCodeExecutionTool, from @librechat/agents, installed by
// `make test-ptc-deps`) running js and r against this package's kiln.
func TestLibreChatCodeTool(t *testing.T) {
	dir := filepath.Join(kilntest.Root(), "test", "ptc", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@librechat", "agents")); err != nil {
		t.Fatalf("LibreChat's agents package is not installed: run make test-ptc-deps (%v)", err)
	}
	cmd := exec.CommandContext(t.Context(), "node", "--test", "--test-reporter=spec", "languages.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KILN_URL="+srv.URL, "KILN_API_KEY="+key)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("the LibreChat code tool tests failed: %v", err)
	}
}
