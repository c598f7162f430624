package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
)

// TestFunctionName holds the names to LibreChat's client (normalizeToPythonIdentifier,
// normalizeToBashIdentifier in @librechat/agents): the code must call tools by the
// names the client's prompt promises.
func TestFunctionName(t *testing.T) {
	for _, c := range []struct{ tool, lang, want string }{
		{"get-weather", "python", "get_weather"},
		{"web search", "python", "web_search"},
		{"files.read", "python", "filesread"},
		{"files.read", "bash", "files_read"},
		{"3d-render", "python", "_3d_render"},
		{"class", "python", "class_tool"},
		{"import", "python", "import_tool"},
		{"local", "bash", "local_tool"},
		{"class", "bash", "class"},
		{"mcp__srv__tool!", "python", "mcp__srv__tool"},
		{"émoji✓", "python", "moji"},
	} {
		if got := functionName(c.tool, c.lang); got != c.want {
			t.Errorf("functionName(%q, %s) = %q, want %q", c.tool, c.lang, got, c.want)
		}
	}
}

func TestParseToken(t *testing.T) {
	const id = "k2Xv0n4lY8pQ1rT7uW3zA"
	for _, c := range []struct {
		token, instance, id, secret string
		ok                          bool
	}{
		{"kiln-1." + id + ".s3cret", "kiln-1", id, "s3cret", true},
		{"host.example.com." + id + ".s", "host.example.com", id, "s", true},
		{"." + id + ".s", "", id, "s", true},
		{"kiln-1." + id + ".", "", "", "", false},
		{"kiln-1.not-an-id.s", "", "", "", false},
		{id, "", "", "", false},
		{"", "", "", "", false},
	} {
		instance, gotID, secret, ok := parseToken(c.token)
		if instance != c.instance || gotID != c.id || secret != c.secret || ok != c.ok {
			t.Errorf("parseToken(%q) = %q, %q, %q, %v", c.token, instance, gotID, secret, ok)
		}
	}
}

// The cancel of a programmatic request, whichever comes first: a cancel before its run
// stops the run's start; one during the run cancels it; one after is answered
// already_completed; another caller's cancel of a run, under way or ended, is refused, and
// its early cancel of an id stops only its own run.
func TestCancelProgrammatic(t *testing.T) {
	const keyA, keyB = "key-of-caller-a", "key-of-caller-b"
	started := make(chan string, 1)
	finish := make(chan struct{})
	cancelled := make(chan string, 1)
	h := NewHarness(t, HarnessConfig{Keys: []string{keyA, keyB},
		Run: func(ctx context.Context, req executor.Request) (*executor.Result, error) {
			started <- req.ExecutionID
			select {
			case <-finish:
			case <-ctx.Done():
			}
			return &executor.Result{Status: execution.StatusOK, Stdout: "done\n", State: req.State}, nil
		},
		Cancel: func(id, _ string) error {
			cancelled <- id
			close(finish)
			return nil
		},
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	as := func(key, requestID string) http.Header {
		return http.Header{"X-Api-Key": {key}, requestIDHeader: {requestID}}
	}
	cancel := func(key, requestID string) (*http.Response, map[string]any) {
		t.Helper()
		return postJSON(t, srv.URL+"/exec/programmatic/cancel", `{"request_id":"`+requestID+`"}`, http.Header{"X-Api-Key": {key}})
	}
	const start = `{"code":"t()","lang":"py","tools":[{"name":"t"}]}`

	// Before the run. Another caller's early cancel of the same id is its own: it stands
	// in nobody's way.
	if resp, out := cancel(keyB, "req-1"); resp.StatusCode != http.StatusAccepted {
		t.Errorf("another caller's early cancel: %d %v, want 202", resp.StatusCode, out)
	}
	if resp, out := cancel(keyA, "req-1"); resp.StatusCode != http.StatusAccepted || out["status"] != "cancellation_requested" || out["execution_id"] != nil {
		t.Fatalf("early cancel: %d %v, want 202 cancellation_requested, no execution", resp.StatusCode, out)
	}
	if resp, out := postJSON(t, srv.URL+"/exec/programmatic", start, as(keyA, "req-1")); resp.StatusCode != http.StatusOK || out["status"] != "error" {
		t.Fatalf("start after its cancel: %d %v, want 200 error", resp.StatusCode, out)
	}
	if n := len(h.Requests()); n != 0 {
		t.Fatalf("a run cancelled before it started ran (%d executions)", n)
	}

	// During the run.
	type answer struct {
		status int
		body   map[string]any
	}
	done := make(chan answer, 1)
	go func() {
		resp, out := postJSON(t, srv.URL+"/exec/programmatic", start, as(keyA, "req-2"))
		done <- answer{resp.StatusCode, out}
	}()
	var id string
	select {
	case id = <-started:
	case a := <-done:
		t.Fatalf("start: %d %v, want the run under way", a.status, a.body)
	}
	if resp, out := postJSON(t, srv.URL+"/exec/programmatic", start, as(keyA, "req-2")); resp.StatusCode != http.StatusConflict {
		t.Errorf("a second start with the id of a run under way: %d %v, want 409", resp.StatusCode, out)
	}
	if resp, out := cancel(keyB, "req-2"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("another caller's cancel of a run: %d %v, want 403", resp.StatusCode, out)
	}
	if resp, out := cancel(keyA, "req-2"); resp.StatusCode != http.StatusAccepted || out["execution_id"] != id {
		t.Fatalf("cancel during the run: %d %v, want 202 naming execution %s", resp.StatusCode, out, id)
	}
	if got := <-cancelled; got != id {
		t.Errorf("cancelled execution %s, want %s", got, id)
	}
	if a := <-done; a.status != http.StatusOK || a.body["execution_id"] != id {
		t.Fatalf("the run's answer: %d %v", a.status, a.body)
	}

	// After the run.
	if resp, out := cancel(keyA, "req-2"); resp.StatusCode != http.StatusOK || out["status"] != "already_completed" {
		t.Errorf("cancel after the run: %d %v, want 200 already_completed", resp.StatusCode, out)
	}
	if resp, out := cancel(keyB, "req-2"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("another caller's cancel of an ended run: %d %v, want 403", resp.StatusCode, out)
	}
	if resp, out := cancel(keyA, "not an id"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("cancel of a malformed id: %d %v, want 400", resp.StatusCode, out)
	}

	// Another caller's early cancel of an id changes nothing of the run that comes with it.
	if resp, out := cancel(keyB, "req-3"); resp.StatusCode != http.StatusAccepted {
		t.Errorf("another caller's early cancel: %d %v, want 202", resp.StatusCode, out)
	}
	before := len(h.Requests())
	if resp, out := postJSON(t, srv.URL+"/exec/programmatic", start, as(keyA, "req-3")); resp.StatusCode != http.StatusOK || out["status"] == "error" {
		t.Errorf("a run another caller cancelled first: %d %v, want it run", resp.StatusCode, out)
	}
	if n := len(h.Requests()); n != before+1 {
		t.Errorf("a run another caller cancelled first: %d executions, want 1", n-before)
	}
}
