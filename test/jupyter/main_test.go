// Package jupyter drives a real kiln's Jupyter Server API (/jupyter) with real Jupyter
// clients, against the real sandbox image: JupyterLab's client library,
// @jupyterlab/services, and Debian's classic Notebook server in gateway mode, its page
// in a headless Chromium (test/jupyter/node; `make test-jupyter-deps` installs them).
// One server is shared by the package.
package jupyter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

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

// notebookCells is what the gateway test's notebook holds: a DataFrame of real size
// summarized as a table, and a figure.
var notebookCells = []string{
	"import numpy as np, pandas as pd\nrng = np.random.default_rng(5)\n" +
		"df = pd.DataFrame({'region': rng.choice(['north', 'south'], 300), 'sales': rng.gamma(2.0, 100.0, 300).round(2)})\n" +
		"print('rows', len(df))\ndf.groupby('region').sales.describe()",
	"import matplotlib.pyplot as plt\nplt.hist(df.sales, bins=30)\nplt.title('sales')\nplt.show()",
}

// TestNotebookInGatewayMode starts Debian's classic Notebook server with kiln as its
// gateway (--gateway-url): its kernels are kiln's sessions. A real headless Chromium
// opens a notebook there and runs it (test/jupyter/node/kiln-notebook.test.mjs).
func TestNotebookInGatewayMode(t *testing.T) {
	jupyter, err := exec.LookPath("jupyter-notebook")
	if err != nil {
		t.Fatalf("jupyter-notebook is not installed: make test-jupyter-deps installs Debian's (%v)", err)
	}
	dir := t.TempDir()
	nb := map[string]any{
		"nbformat": 4, "nbformat_minor": 5,
		"metadata": map[string]any{"kernelspec": map[string]string{"name": "python3", "display_name": "Python 3 (kiln)", "language": "python"}},
		"cells":    []any{},
	}
	for i, src := range notebookCells {
		nb["cells"] = append(nb["cells"].([]any), map[string]any{
			"cell_type": "code", "id": fmt.Sprintf("cell-%d", i), "metadata": map[string]any{},
			"execution_count": nil, "outputs": []any{}, "source": src,
		})
	}
	b, _ := json.Marshal(nb)
	if err := os.WriteFile(filepath.Join(dir, "kiln.ipynb"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	cmd := exec.Command(jupyter, "--no-browser", "--allow-root", "--ip=127.0.0.1", fmt.Sprintf("--port=%d", port),
		"--NotebookApp.token=", "--NotebookApp.password=", "--notebook-dir="+dir,
		"--gateway-url="+srv.URL+"/jupyter", "--GatewayClient.auth_token="+keyA)
	cmd.Env = append(os.Environ(), "JUPYTER_CONFIG_DIR="+filepath.Join(dir, ".config"), "JUPYTER_DATA_DIR="+filepath.Join(dir, ".data"),
		"JUPYTER_RUNTIME_DIR="+filepath.Join(dir, ".runtime"), "HOME="+dir)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("notebook server:\n%s", logs.String())
		}
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	kilntest.WaitFor(t, time.Minute, "the notebook server", func() bool {
		resp, err := http.Get(url + "/api")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	browser := os.Getenv("CHROMIUM")
	if browser == "" {
		if browser, err = exec.LookPath("chromium"); err != nil {
			t.Fatalf("no Chromium on PATH: make chromium installs Debian's, or set CHROMIUM (%v)", err)
		}
	}
	env := []string{"NOTEBOOK_URL=" + url, "CHROMIUM=" + browser}
	kilntest.NodeTest(t, "test/jupyter/node", "kiln-notebook.test.mjs", "puppeteer-core", "test-jupyter-deps", env...)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
