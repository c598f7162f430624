package integration

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

// Cells as notebooks and models write them, through POST /exec: IPython's magics, shell
// escapes and help run in the session's namespace, and a session that used them resumes
// from its state with the same names after its sandbox dies.
func TestIPythonCellsOverREST(t *testing.T) {
	marker := "/tmp/kiln-test-" + kilntest.NewMarker()
	first := run(t, map[string]any{"code": "%matplotlib inline\nimport pandas as pd\nsales = pd.DataFrame({'n': range(5)})\n" +
		"open('" + marker + "', 'w').close()"})
	if first.Status != "ok" {
		t.Fatalf("%%matplotlib inline: %s (%s)", first.Status, kilntest.Str(first.Error))
	}
	sid := first.SessionID
	for _, tt := range []struct {
		code, stdout, result string
	}{
		{"%time total = sales.n.sum()", "Wall time", ""},
		{"%timeit -n 5 -r 1 sales.n.sum()", "per loop", ""},
		{"%%time\nsquares = [i * i for i in range(10)]", "Wall time", ""},
		{"!echo from bash", "from bash", ""},
		{"%%writefile helper.py\ndef twice(x):\n    return 2 * x\n", "Writing helper.py", ""},
		{"%run helper.py\ntwice(total)", "", "20"},
		{"listing = !ls /mnt/data\nlisting", "", "helper.py"},
		{"len?", "Return the number of items", ""},
		{"%who", "sales", ""},
		{"%env STAGE=test", "", ""},
		{"import os\nos.environ['STAGE'], _exit_code", "", "('test', 0)"},
	} {
		res := run(t, map[string]any{"session_id": sid, "code": tt.code})
		if res.Status != "ok" || !strings.Contains(res.Stdout, tt.stdout) || !strings.Contains(kilntest.Str(res.Result), tt.result) {
			t.Errorf("%q: %s (%s), stdout %q, result %s", tt.code, res.Status, kilntest.Str(res.Error), res.Stdout, kilntest.Str(res.Result))
		}
	}
	if res := run(t, map[string]any{"session_id": sid, "code": "%debug"}); res.Status != "error" || !strings.HasPrefix(kilntest.Str(res.Error), "UsageError:") {
		t.Errorf("%%debug: %s, %s; want a UsageError", res.Status, kilntest.Str(res.Error))
	}
	plain := run(t, map[string]any{"session_id": sid, "code": "%time x = 1", "ipython": false})
	if plain.Status != "error" || !strings.HasPrefix(kilntest.Str(plain.Error), "SyntaxError") {
		t.Errorf(`"ipython": false: %s, %s; want Python's SyntaxError`, plain.Status, kilntest.Str(plain.Error))
	}
	// The names the magics bound are the session's: they come back in a fresh sandbox.
	killLiveSandbox(t, marker)
	resumed := run(t, map[string]any{"session_id": sid, "code": "int(total), squares[3], listing == [l for l in listing], twice(4), os.environ['STAGE']"})
	if resumed.RuntimeStatus != "resumed" || kilntest.Str(resumed.Result) != "(10, 9, True, 8, 'test')" {
		t.Errorf("resumed: %s, result %s (%s), state_error %s", resumed.RuntimeStatus, kilntest.Str(resumed.Result),
			kilntest.Str(resumed.Error), kilntest.Str(resumed.StateError))
	}
	// %%writefile wrote a file of the session's, as any file the code writes.
	resp, body, err := srv.Request(http.MethodGet, "/files/"+sid, nil, nil)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "helper.py") {
		t.Errorf("the session's files: %v %v %s; want helper.py among them", err, resp, body)
	}
}
