package mcp

import (
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

// TestTypeScriptSDK runs test/mcp/node/kiln-mcp.test.mjs: the official TypeScript
// SDK against /mcp and against `kiln mcp`.
func TestTypeScriptSDK(t *testing.T) {
	bin, err := kilntest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	kilntest.NodeTest(t, "test/mcp/node", "kiln-mcp.test.mjs", "@modelcontextprotocol/sdk", "test-mcp-deps",
		"KILN_URL="+srv.URL, "KILN_API_KEY="+keyA, "KILN_BIN="+bin)
}
