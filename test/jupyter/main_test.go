// Package jupyter drives a real kiln's Jupyter Server API (/jupyter) with real Jupyter
// clients, against the real sandbox image: JupyterLab's client library,
// @jupyterlab/services, and Debian's classic Notebook server in gateway mode, its page
// in a headless Chromium, and nbclient through that server (test/jupyter/node and
// nbclient_gateway.py; `make test-jupyter-deps` installs them).
// One server is shared by the package.
package jupyter

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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
	dir := t.TempDir()
	writeNotebook(t, filepath.Join(dir, "kiln.ipynb"), notebookCells)
	url := notebookServer(t, dir)
	browser := os.Getenv("CHROMIUM")
	if browser == "" {
		var err error
		if browser, err = exec.LookPath("chromium"); err != nil {
			t.Fatalf("no Chromium on PATH: make chromium installs Debian's, or set CHROMIUM (%v)", err)
		}
	}
	env := []string{"NOTEBOOK_URL=" + url, "CHROMIUM=" + browser}
	kilntest.NodeTest(t, "test/jupyter/node", "kiln-notebook.test.mjs", "puppeteer-core", "test-jupyter-deps", env...)
}

// TestNbclientThroughTheGateway executes a notebook with Debian's nbclient, its kernel
// started through the Notebook server in gateway mode (jupyter_server's
// GatewayKernelManager, as papermill runs against a gateway): the kernel is kiln's. The
// executed notebook holds every cell's outputs, in order, and the names outlive an error.
func TestNbclientThroughTheGateway(t *testing.T) {
	dir := t.TempDir()
	cells := append(append([]string{}, notebookCells...),
		"from IPython.display import display, Markdown\ndisplay(Markdown('**total sales** %.2f' % df.sales.sum()))",
		"df.no_such_column",
		"len(df), df.columns.tolist()",
	)
	source, target := filepath.Join(dir, "in.ipynb"), filepath.Join(dir, "out.ipynb")
	writeNotebook(t, source, cells)
	url := notebookServer(t, dir)
	cmd := exec.Command("/usr/bin/python3", "nbclient_gateway.py", url, source, target)
	cmd.Env = append(os.Environ(), "HOME="+dir, "JUPYTER_CONFIG_DIR="+filepath.Join(dir, ".client"),
		"JUPYTER_RUNTIME_DIR="+filepath.Join(dir, ".client-runtime"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nbclient through the gateway: %v (make test-jupyter-deps installs nbclient and jupyter_server)\n%s", err, out)
	}
	b, err := os.ReadFile(target)
	if err != nil {
		t.Fatal(err)
	}
	var nb struct {
		Cells []struct {
			ExecutionCount *int `json:"execution_count"`
			Outputs        []struct {
				OutputType     string               `json:"output_type"`
				Name           string               `json:"name"`
				Text           multiline            `json:"text"`
				Data           map[string]multiline `json:"data"`
				ExecutionCount *int                 `json:"execution_count"`
				Ename          string               `json:"ename"`
				Evalue         string               `json:"evalue"`
				Traceback      []string             `json:"traceback"`
			} `json:"outputs"`
		} `json:"cells"`
	}
	if err := json.Unmarshal(b, &nb); err != nil {
		t.Fatal(err)
	}
	if len(nb.Cells) != len(cells) {
		t.Fatalf("%d cells executed, want %d", len(nb.Cells), len(cells))
	}
	kinds := func(i int) []string {
		var k []string
		for _, o := range nb.Cells[i].Outputs {
			k = append(k, o.OutputType)
		}
		return k
	}
	for i, c := range nb.Cells {
		if c.ExecutionCount == nil || *c.ExecutionCount != i+1 {
			t.Errorf("cell %d: execution_count %v, want %d", i, c.ExecutionCount, i+1)
		}
	}
	// The table: the printed count, then the describe() table as HTML.
	table := nb.Cells[0].Outputs
	if len(table) != 2 || table[0].OutputType != "stream" || string(table[0].Text) != "rows 300\n" ||
		table[1].OutputType != "execute_result" || !strings.Contains(string(table[1].Data["text/html"]), "<table") ||
		table[1].ExecutionCount == nil || *table[1].ExecutionCount != 1 {
		t.Errorf("cell 0: outputs %v, want the printed count and the table as text/html (execute_result 1)", kinds(0))
	}
	// The figure: a PNG.
	figure := nb.Cells[1].Outputs
	if len(figure) != 1 || figure[0].OutputType != "display_data" {
		t.Fatalf("cell 1: outputs %v, want one display_data", kinds(1))
	}
	png, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(string(figure[0].Data["image/png"]), "\n", ""))
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) || len(png) < 5000 {
		t.Errorf("cell 1: image/png is not a figure's PNG (%d bytes, %v)", len(png), err)
	}
	md := nb.Cells[2].Outputs
	if len(md) != 1 || md[0].OutputType != "display_data" || !strings.HasPrefix(string(md[0].Data["text/markdown"]), "**total sales** ") {
		t.Errorf("cell 2: outputs %v, want display_data text/markdown", kinds(2))
	}
	failed := nb.Cells[3].Outputs
	if len(failed) != 1 || failed[0].OutputType != "error" || failed[0].Ename != "AttributeError" ||
		!strings.Contains(failed[0].Evalue, "no_such_column") || len(failed[0].Traceback) == 0 {
		t.Errorf("cell 3: outputs %v, want the AttributeError with its traceback", kinds(3))
	}
	last := nb.Cells[4].Outputs
	if len(last) != 1 || last[0].OutputType != "execute_result" || string(last[0].Data["text/plain"]) != "(300, ['region', 'sales'])" {
		t.Errorf("cell 4: outputs %+v, want (300, [region, sales]): the names outlive the error", last)
	}
}

// TestOpenWebUIFlow runs two cells as Open WebUI's Jupyter engine does
// (openwebui_flow.py: a kernel per run, the token in every query, Open WebUI's
// execute_request, the messages read by their top-level msg_type until idle, the kernel
// deleted): stdout, the figure as a data: URL, and an error's traceback in stderr.
func TestOpenWebUIFlow(t *testing.T) {
	run := func(code string) (out struct {
		Stdout, Stderr string
		Result         []string
		Kernel         string
		KernelsAfter   []string `json:"kernels_after"`
	}) {
		t.Helper()
		cmd := exec.Command("/usr/bin/python3", "openwebui_flow.py", srv.URL+"/jupyter", keyA)
		cmd.Stdin = strings.NewReader(code)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("openwebui_flow.py: %v\n%s", err, stderr.String())
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		return out
	}
	got := run(notebookCells[0] + "\n" + "print(df.sales.max() > 0)\n" + notebookCells[1])
	if got.Stdout != "rows 300\nTrue\n" || got.Stderr != "" {
		t.Errorf("stdout %q, stderr %q", got.Stdout, got.Stderr)
	}
	if len(got.Result) != 1 || !strings.HasPrefix(got.Result[0], "data:image/png;base64,iVBORw0KGgo") || len(got.Result[0]) < 5000 {
		t.Errorf("result %.200q, want the figure as a PNG data: URL", got.Result)
	}
	if got.Kernel == "" || slices.Contains(got.KernelsAfter, got.Kernel) {
		t.Errorf("the run's kernel %q is still listed after its delete: %v", got.Kernel, got.KernelsAfter)
	}
	got = run("import pandas as pd\npd.DataFrame({'a': [1]}).loc[5]")
	if !strings.Contains(got.Stderr, "KeyError") || !strings.Contains(got.Stderr, "Traceback") || got.Stdout != "" {
		t.Errorf("an error: stdout %q, stderr %q", got.Stdout, got.Stderr)
	}
}

// multiline is a notebook's text: nbformat writes it as one string or as a list of lines.
type multiline string

func (m *multiline) UnmarshalJSON(b []byte) error {
	var lines []string
	if err := json.Unmarshal(b, &lines); err == nil {
		*m = multiline(strings.Join(lines, ""))
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err != nil {
		return err
	}
	*m = multiline(one)
	return nil
}

// writeNotebook writes an nbformat 4 notebook of code cells for the python3 kernel.
func writeNotebook(t *testing.T, path string, cells []string) {
	t.Helper()
	nb := map[string]any{
		"nbformat": 4, "nbformat_minor": 5,
		"metadata": map[string]any{"kernelspec": map[string]string{"name": "python3", "display_name": "Python 3 (kiln)", "language": "python"}},
		"cells":    []any{},
	}
	for i, src := range cells {
		nb["cells"] = append(nb["cells"].([]any), map[string]any{
			"cell_type": "code", "id": fmt.Sprintf("cell-%d", i), "metadata": map[string]any{},
			"execution_count": nil, "outputs": []any{}, "source": src,
		})
	}
	b, _ := json.Marshal(nb)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// notebookServer starts Debian's classic Notebook server on dir with kiln as its gateway,
// holding kiln's key; it asks nothing of its own clients (no token, no XSRF check: a
// gateway client such as jupyter_server's sends no credentials on its WebSocket). It
// stops with the test.
func notebookServer(t *testing.T, dir string) string {
	t.Helper()
	jupyter, err := exec.LookPath("jupyter-notebook")
	if err != nil {
		t.Fatalf("jupyter-notebook is not installed: make test-jupyter-deps installs Debian's (%v)", err)
	}
	port := freePort(t)
	cmd := exec.Command(jupyter, "--no-browser", "--allow-root", "--ip=127.0.0.1", fmt.Sprintf("--port=%d", port),
		"--NotebookApp.token=", "--NotebookApp.password=", "--NotebookApp.disable_check_xsrf=True", "--notebook-dir="+dir,
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
	return url
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
