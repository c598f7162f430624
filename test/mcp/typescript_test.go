package mcp

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

// TestTypeScriptSDK runs test/mcp/node/kiln-mcp.test.mjs: the official TypeScript
// SDK against /mcp and against `kiln mcp`.
func TestTypeScriptSDK(t *testing.T) {
	dir := filepath.Join(kilntest.Root(), "test", "mcp", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("the TypeScript SDK is not installed: run make test-mcp-deps (%v)", err)
	}
	bin, err := kilntest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "node", "--test", "--test-reporter=spec", "kiln-mcp.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KILN_URL="+srv.URL, "KILN_API_KEY="+keyA, "KILN_BIN="+bin)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("the TypeScript SDK tests failed: %v", err)
	}
}
