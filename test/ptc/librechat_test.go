package ptc

import (
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

// TestLibreChatClient runs test/ptc/node/ptc.test.mjs: LibreChat's own programmatic tool
// calling tools (Python and bash, from @librechat/agents) against /exec/programmatic.
func TestLibreChatClient(t *testing.T) {
	waitIdle(t)
	kilntest.NodeTest(t, "test/ptc/node", "ptc.test.mjs", "@librechat/agents", "test-ptc-deps",
		"KILN_URL="+srv.URL, "KILN_API_KEY="+keyA)
}
