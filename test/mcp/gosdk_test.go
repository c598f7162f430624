package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kilnsh/kiln/test/kilntest"
)

type keyed string

func (k keyed) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(k))
	return http.DefaultTransport.RoundTrip(r)
}

func connect(t *testing.T, key string, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "kiln-go-test", Version: "1"}, opts)
	cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{
		Endpoint: srv.URL + "/mcp", HTTPClient: &http.Client{Transport: keyed(key)},
	}, nil)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func execute(t *testing.T, cs *sdk.ClientSession, args map[string]any) (*sdk.CallToolResult, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "execute", Arguments: args})
	if err != nil {
		t.Fatalf("execute: %v", err)
	}
	var out map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &out)
	return res, out
}

func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestGoSDKExecute(t *testing.T) {
	cs := connect(t, keyA, nil)
	res, out := execute(t, cs, map[string]any{"code": "x = 41\nx + 1"})
	if res.IsError || out["result"] != "42" {
		t.Fatalf("execute = %s, want the result 42", text(res))
	}
	res, out = execute(t, cs, map[string]any{"code": "print(x)"})
	if res.IsError || out["stdout"] != "41\n" || out["runtime_status"] != "reused" {
		t.Errorf("second call = %s (runtime %v), want x kept in the default session, live", text(res), out["runtime_status"])
	}
	// savefig, not show: see the note in node/kiln-mcp.test.mjs.
	res, _ = execute(t, cs, map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.savefig('/mnt/data/plot.png')"})
	var img *sdk.ImageContent
	for _, c := range res.Content {
		if c, ok := c.(*sdk.ImageContent); ok {
			img = c
		}
	}
	if img == nil || img.MIMEType != "image/png" || !strings.HasPrefix(string(img.Data), "\x89PNG") {
		t.Errorf("plot: no PNG image block in %s", text(res))
	}
	// Rich outputs: an image a library displays is an image block, HTML (a DataFrame's
	// table) a text block that says what it is.
	res, _ = execute(t, cs, map[string]any{"code": "import io, pandas as pd, matplotlib.pyplot as plt\nfrom IPython.display import display, Image\n" +
		"fig = plt.figure(); plt.bar(['a', 'b'], [3, 5]); buf = io.BytesIO(); fig.savefig(buf, format='png'); plt.close(fig)\n" +
		"display(Image(data=buf.getvalue()))\npd.DataFrame({'city': ['Oslo', 'Lima'], 'temp': [3.5, 19.25]})"})
	images, html := 0, ""
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.ImageContent:
			if c.MIMEType == "image/png" && strings.HasPrefix(string(c.Data), "\x89PNG") {
				images++
			}
		case *sdk.TextContent:
			if strings.HasPrefix(c.Text, "[execute_result text/html]") {
				html = c.Text
			}
		}
	}
	if images != 1 || !strings.Contains(html, "<table") || !strings.Contains(html, "19.25") {
		t.Errorf("rich outputs: %d PNG blocks, HTML %q; want one, and the table", images, html)
	}
	res, out = execute(t, cs, map[string]any{"code": "1/0"})
	if !res.IsError || out["status"] != "error" || !strings.Contains(text(res), "ZeroDivisionError") {
		t.Errorf("1/0 = %s, want an error result", text(res))
	}
}

// containerID is code that prints what names the sandbox it runs in (kilntest.WhoAmICode).
const containerID = kilntest.WhoAmICode + `print("container", sandbox_ref, flush=True)
`

func TestGoSDKCancelRemovesContainer(t *testing.T) {
	found := make(chan string, 1)
	cs := connect(t, keyA, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			if m := regexp.MustCompile(`container (` + kilntest.SandboxRefPattern + `)`).FindStringSubmatch(req.Params.Message); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		},
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	params := &sdk.CallToolParams{Name: "execute", Arguments: map[string]any{"code": containerID + "import time\ntime.sleep(600)"}}
	params.SetProgressToken("sleep")
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, params)
		done <- err
	}()
	var ref string
	select {
	case ref = <-found:
	case <-time.After(60 * time.Second):
		t.Fatal("no progress naming the container within 60 s")
	}
	id, err := kilntest.SandboxID(ref)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	kilntest.WaitFor(t, 3*time.Second, "the sandbox removed", func() bool {
		there, err := kilntest.SandboxExists(id)
		return err == nil && !there
	})
	<-done
}

func TestGoSDKWrongKey(t *testing.T) {
	c := sdk.NewClient(&sdk.Implementation{Name: "kiln-go-test", Version: "1"}, nil)
	_, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{
		Endpoint: srv.URL + "/mcp", HTTPClient: &http.Client{Transport: keyed("wrong")},
	}, nil)
	if err == nil {
		t.Fatal("Connect with a wrong key succeeded")
	}
}
