// Package jupyter drives a real kiln's Jupyter Server API (/jupyter) with real Jupyter
// clients, against the real sandbox image: JupyterLab's client library,
// @jupyterlab/services (test/jupyter/node, installed by `make test-jupyter-deps`).
// One server is shared by the package.
package jupyter

import (
	"os"
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

var srv *kilntest.Server

const (
	keyA = "jupyter-key-a"
	keyB = "jupyter-key-b"
)

func TestMain(m *testing.M) {
	os.Exit(kilntest.Main(m, kilntest.Options{Key: keyA, Env: []string{
		"POOL_SIZE=2", "TIMEOUT_GRACE_MS=1000", "INTERRUPT_GRACE_MS=500",
		"QUEUE_TIMEOUT_SECONDS=90", "MAX_QUEUE=16", "API_KEYS=" + keyA + "," + keyB,
		"MAX_TIMEOUT_MS=600000",
	}}, &srv))
}

// TestJupyterLabServices runs test/jupyter/node/kiln-jupyter.test.mjs: JupyterLab's
// client library against /jupyter, as JupyterLab itself talks to a Jupyter Server.
func TestJupyterLabServices(t *testing.T) {
	kilntest.NodeTest(t, "test/jupyter/node", "kiln-jupyter.test.mjs", "@jupyterlab/services", "test-jupyter-deps",
		"KILN_URL="+srv.URL, "KILN_API_KEY="+keyA, "KILN_OTHER_KEY="+keyB)
}
