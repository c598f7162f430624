package mcp

import (
	"os"
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

// TestTypeScriptSDK runs test/mcp/node/kiln-mcp.test.mjs: the official TypeScript
// SDK against /mcp and against `kiln mcp`, its sandboxes containers or Pods.
func TestTypeScriptSDK(t *testing.T) {
	bin, err := kilntest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"KILN_URL=" + srv.URL, "KILN_API_KEY=" + keyA, "KILN_BIN=" + bin}
	if kilntest.OnKubernetes() {
		// The test looks for its sandbox among the Pods rather than Docker's containers.
		kubectl := os.Getenv("KILN_K8S_KUBECTL")
		if kubectl == "" {
			kubectl = "kubectl"
		}
		env = append(env, "KILN_KUBECTL="+kubectl, "KILN_KUBE_NAMESPACE="+kilntest.KubeNamespace)
	}
	kilntest.NodeTest(t, "test/mcp/node", "kiln-mcp.test.mjs", "@modelcontextprotocol/sdk", "test-mcp-deps", env...)
}
