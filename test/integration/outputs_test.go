package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

// outputsCode displays what a notebook would: a DataFrame of real size (its HTML table
// is pandas' truncated one), HTML and Markdown, a figure, and ends on a value.
const outputsCode = `import numpy as np, pandas as pd
from IPython.display import display, HTML, Markdown
rng = np.random.default_rng(7)
df = pd.DataFrame({"region": rng.choice(["north", "south", "east", "west"], 5000),
                   "sales": rng.gamma(2.0, 150.0, 5000).round(2), "units": rng.integers(1, 40, 5000)})
print("rows", len(df))
display(df.groupby("region").agg(total=("sales", "sum"), units=("units", "mean")).round(1))
display(HTML("<b>quarterly</b>"), Markdown("**done**"))
plt.hist(df.sales, bins=40)
plt.show()
df.describe()
`

// A run's rich outputs come back in order on REST: tables as HTML, HTML and Markdown as
// themselves, the figure as image/png (the very bytes of its file), the last value as
// the execute_result; while streaming, each comes as an output event where it was shown.
func TestRichOutputs(t *testing.T) {
	res := run(t, map[string]any{"code": outputsCode})
	if res.Status != "ok" || len(res.Outputs) != 5 {
		t.Fatalf("status %s, %d outputs (stderr %q)", res.Status, len(res.Outputs), res.Stderr)
	}
	table, html, md, figure, last := res.Outputs[0], res.Outputs[1], res.Outputs[2], res.Outputs[3], res.Outputs[4]
	if table.Type != "display_data" || !strings.Contains(table.Text("text/html"), "<table") || !strings.Contains(table.Text("text/plain"), "north") {
		t.Errorf("the grouped table: %+v", table)
	}
	if html.Text("text/html") != "<b>quarterly</b>" || md.Text("text/markdown") != "**done**" {
		t.Errorf("HTML %q, Markdown %q", html.Text("text/html"), md.Text("text/markdown"))
	}
	if last.Type != "execute_result" || !strings.Contains(last.Text("text/html"), "<table") || last.Text("text/plain") != kilntest.Str(res.Result) {
		t.Errorf("the last value: %+v, result %q", last, kilntest.Str(res.Result))
	}
	png, err := base64.StdEncoding.DecodeString(figure.Text("image/png"))
	if err != nil || len(res.Files) != 1 {
		t.Fatalf("figure output %v, files %+v", err, res.Files)
	}
	resp, b, err := srv.Request(http.MethodGet, "/download/"+res.SessionID+"/"+res.Files[0].ID, nil, nil)
	if err != nil || resp.StatusCode != http.StatusOK || string(b) != string(png) {
		t.Errorf("the figure's image/png is not its file's bytes (%d vs %d bytes)", len(png), len(b))
	}

	s := stream(t, context.Background(), map[string]any{"code": outputsCode}, nil)
	var order []string
	for _, e := range s.events {
		switch e.Name {
		case "stdout":
			order = append(order, "stdout")
		case "output":
			var o kilntest.Output
			if err := json.Unmarshal([]byte(e.Data), &o); err != nil {
				t.Fatalf("output event %q: %v", e.Data, err)
			}
			kind := o.Type
			if _, ok := o.Data["image/png"]; ok {
				kind += " png"
			}
			order = append(order, kind)
		}
	}
	want := "stdout display_data display_data display_data display_data png execute_result"
	if got := strings.Join(order, " "); got != want {
		t.Errorf("streamed: %s\nwant:     %s", got, want)
	}
	if done := s.done(t); len(done.Outputs) != 5 {
		t.Errorf("done carries %d outputs", len(done.Outputs))
	}

	if none := run(t, map[string]any{"code": "x = 1"}); none.Outputs == nil || len(none.Outputs) != 0 {
		t.Errorf("a run that shows nothing: outputs %v, want []", none.Outputs)
	}
}
