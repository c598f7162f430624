package languages

import (
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

// TestLibreChatCodeTool runs test/ptc/node/languages.test.mjs: LibreChat's own code
// execution tool (createCodeExecutionTool, from @librechat/agents, installed by
// `make test-ptc-deps`) running js and r against this package's kiln.
func TestLibreChatCodeTool(t *testing.T) {
	kilntest.NodeTest(t, "test/ptc/node", "languages.test.mjs", "@librechat/agents", "test-ptc-deps",
		"KILN_URL="+srv.URL, "KILN_API_KEY="+key)
}
