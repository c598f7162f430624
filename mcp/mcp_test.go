package mcp_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kilnsh/kiln"
)

func TestListTools(t *testing.T) {
	cs := newEnv(t).connect(t, testKey, nil)
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" {
			t.Errorf("tool %s has no description", tool.Name)
		}
	}
	want := "close_session execute fork_session interrupt list_files list_sessions new_session upload_file"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("tools = %s, want %s", got, want)
	}
}

func TestExecuteDefaultSessionKeepsState(t *testing.T) {
	e := newEnv(t)
	cs := e.connect(t, testKey, nil)
	res, first := call[execOut](t, cs, "execute", map[string]any{"code": "print hello\nstate x=1"})
	if res.IsError || first.Status != "ok" || first.Stdout != "hello\n" || !strings.Contains(text(res), "[stdout]\nhello") {
		t.Fatalf("first = %+v (%s), want ok with hello", first, text(res))
	}
	_, second := call[execOut](t, cs, "execute", map[string]any{"code": "print again"})
	if second.SessionID != first.SessionID {
		t.Errorf("second run in session %s, want the default %s", second.SessionID, first.SessionID)
	}
	if got := e.runner.lastStates(1)[0]; got != "x=1" {
		t.Errorf("second run got state %q, want x=1", got)
	}
	// Another MCP session of the same key has a default session of its own.
	_, other := call[execOut](t, e.connect(t, testKey, nil), "execute", map[string]any{"code": "print hi"})
	if other.SessionID == first.SessionID {
		t.Errorf("a second MCP session shares the default session %s", first.SessionID)
	}
}

// ipython false runs the cell as plain Python; absent or true, as IPython reads it.
func TestExecuteIPython(t *testing.T) {
	e := newEnv(t)
	cs := e.connect(t, testKey, nil)
	for _, args := range []map[string]any{{"code": "print a"}, {"code": "print b", "ipython": true}, {"code": "print c", "ipython": false}} {
		if res, out := call[execOut](t, cs, "execute", args); out.Status != "ok" {
			t.Fatalf("%v: got %+v (%s)", args, out, text(res))
		}
	}
	e.runner.mu.Lock()
	defer e.runner.mu.Unlock()
	if !slices.Equal(e.runner.plain, []bool{false, false, true}) {
		t.Errorf("the runs' PlainPython: %v, want only the third", e.runner.plain)
	}
}

// on_error reaches the run as sent; a value that is neither keep nor rollback is the
// tool's error, with no run.
func TestExecuteOnError(t *testing.T) {
	e := newEnv(t)
	cs := e.connect(t, testKey, nil)
	for _, v := range []string{"", "keep", "rollback"} {
		if res, out := call[execOut](t, cs, "execute", map[string]any{"code": "fail boom", "on_error": v}); out.Status != "error" {
			t.Fatalf("on_error %q: got %+v (%s), want a run that ends in error", v, out, text(res))
		}
	}
	res, _ := call[execOut](t, cs, "execute", map[string]any{"code": "print x", "on_error": "undo"})
	if !res.IsError || !strings.Contains(text(res), "on_error must be") {
		t.Errorf("on_error undo: got %s, want the tool's error", text(res))
	}
	e.runner.mu.Lock()
	defer e.runner.mu.Unlock()
	if !slices.Equal(e.runner.onError, []string{"", "keep", "rollback"}) {
		t.Errorf("the runs got on_error %q, want the three sent and no fourth run", e.runner.onError)
	}
}

func TestExecuteContent(t *testing.T) {
	e := newEnv(t)
	cs := e.connect(t, testKey, nil)
	res, out := call[execOut](t, cs, "execute", map[string]any{"code": "png plot.png\nfile data.csv a,b\nfail ValueError: bad\nnext line"})
	if !res.IsError || out.Status != "error" {
		t.Errorf("isError = %v, status %s; want an error", res.IsError, out.Status)
	}
	if !strings.Contains(text(res), "[error] ValueError: bad") {
		t.Errorf("text = %q, want the one-line error", text(res))
	}
	var img *sdk.ImageContent
	var link *sdk.ResourceLink
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.ImageContent:
			img = c
		case *sdk.ResourceLink:
			link = c
		}
	}
	if img == nil || img.MIMEType != "image/png" || string(img.Data) != string(pngBytes) {
		t.Fatalf("image block = %+v, want the PNG", img)
	}
	if link == nil || !strings.HasPrefix(link.URI, "kiln://sessions/"+out.SessionID+"/files/") {
		t.Fatalf("resource link = %+v, want one to data.csv", link)
	}
	rr, err := cs.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: link.URI})
	if err != nil {
		t.Fatalf("ReadResource: %v", err)
	}
	if len(rr.Contents) != 1 || rr.Contents[0].Text != "a,b" {
		t.Errorf("resource = %+v, want the text a,b", rr.Contents)
	}
	// Another key's MCP session cannot read it.
	if _, err := e.connect(t, "other-key", nil).ReadResource(t.Context(), &sdk.ReadResourceParams{URI: link.URI}); err == nil {
		t.Error("another key read the file")
	}
}

func TestForkDiverges(t *testing.T) {
	e := newEnv(t)
	cs := e.connect(t, testKey, nil)
	_, a := call[execOut](t, cs, "execute", map[string]any{"code": "state v=1"})
	_, fork := call[struct {
		SessionID string `json:"session_id"`
	}](t, cs, "fork_session", map[string]any{"session_id": a.SessionID})
	if fork.SessionID == "" || fork.SessionID == a.SessionID {
		t.Fatalf("fork = %q, want a new session", fork.SessionID)
	}
	call[execOut](t, cs, "execute", map[string]any{"code": "state v=2", "session_id": fork.SessionID})
	call[execOut](t, cs, "execute", map[string]any{"code": "print", "session_id": a.SessionID})
	call[execOut](t, cs, "execute", map[string]any{"code": "print", "session_id": fork.SessionID})
	if got := e.runner.lastStates(2); got[0] != "v=1" || got[1] != "v=2" {
		t.Errorf("states = %v, want [v=1 v=2]", got)
	}
	res, _ := call[execOut](t, cs, "execute", map[string]any{"code": "print", "session_id": kiln.NewID()})
	if !res.IsError || !strings.Contains(text(res), "not found") {
		t.Errorf("unknown session: %s, want a not found error", text(res))
	}
}

func TestProgressAndCancel(t *testing.T) {
	e := newEnv(t)
	got := make(chan string, 64)
	cs := e.connect(t, testKey, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			got <- req.Params.Message
		},
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	params := &sdk.CallToolParams{Name: "execute", Arguments: map[string]any{"code": "print working\nwait"}}
	params.SetProgressToken("tok")
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, params)
		done <- err
	}()
	var msgs []string
	deadline := time.After(5 * time.Second)
	for len(msgs) < 3 { // start, the output, a heartbeat
		select {
		case m := <-got:
			msgs = append(msgs, m)
		case <-deadline:
			t.Fatalf("progress = %q, want start, output and a heartbeat", msgs)
		}
	}
	if !strings.Contains(strings.Join(msgs, "|"), "stdout: working") {
		t.Errorf("progress = %q, want the output", msgs)
	}
	cancel()
	select {
	case <-e.runner.ended:
	case <-time.After(3 * time.Second):
		t.Fatal("the run did not end within 3 s of notifications/cancelled")
	}
	<-done
}

func TestInterrupt(t *testing.T) {
	e := newEnv(t)
	cs := e.connect(t, testKey, nil)
	_, s := call[struct {
		SessionID string `json:"session_id"`
	}](t, cs, "new_session", nil)
	done := make(chan *sdk.CallToolResult, 1)
	go func() {
		res, _ := call[execOut](t, cs, "execute", map[string]any{"code": "wait", "session_id": s.SessionID})
		done <- res
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, _ := call[struct{}](t, cs, "interrupt", map[string]any{"session_id": s.SessionID})
		if !res.IsError {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("interrupt: %s", text(res))
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case res := <-done:
		if !res.IsError || !strings.Contains(text(res), "cancelled") {
			t.Errorf("execute = %s, want cancelled", text(res))
		}
	case <-time.After(3 * time.Second):
		t.Fatal("execute did not end after interrupt")
	}
}

func TestSessionTools(t *testing.T) {
	cs := newEnv(t).connect(t, testKey, nil)
	res, f := call[struct {
		URI string `json:"uri"`
	}](t, cs, "upload_file", map[string]any{"name": "in.txt", "text": "data"})
	if res.IsError || f.URI == "" {
		t.Fatalf("upload_file: %s", text(res))
	}
	_, files := call[struct {
		SessionID string `json:"session_id"`
		Files     []struct {
			Name string `json:"name"`
		} `json:"files"`
	}](t, cs, "list_files", nil)
	if len(files.Files) != 1 || files.Files[0].Name != "in.txt" {
		t.Errorf("list_files = %+v, want in.txt", files)
	}
	_, list := call[struct {
		Sessions []struct {
			SessionID string `json:"session_id"`
			Default   bool   `json:"default"`
		} `json:"sessions"`
	}](t, cs, "list_sessions", nil)
	if len(list.Sessions) != 1 || !list.Sessions[0].Default || list.Sessions[0].SessionID != files.SessionID {
		t.Errorf("list_sessions = %+v, want the default session", list)
	}
	res, _ = call[struct{}](t, cs, "close_session", map[string]any{"session_id": files.SessionID})
	if res.IsError {
		t.Errorf("close_session: %s", text(res))
	}
	if _, err := cs.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: f.URI}); err == nil {
		t.Error("ReadResource of a closed session's file succeeded")
	}
}

func TestKeys(t *testing.T) {
	e := newEnv(t)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	post := func(key, sid string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", e.url+"/mcp", strings.NewReader(body))
		req.Host = "kiln.example.com" // as behind a reverse proxy, on a loopback address
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST /mcp: %v", err)
		}
		resp.Body.Close()
		return resp
	}
	for _, key := range []string{"", "wrong"} {
		if resp := post(key, ""); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("key %q: status %d, want 401", key, resp.StatusCode)
		}
	}
	resp := post(testKey, "")
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: status %d, session %q", resp.StatusCode, sid)
	}
	if resp := post("other-key", sid); resp.StatusCode != http.StatusNotFound {
		t.Errorf("another key on the session: status %d, want 404", resp.StatusCode)
	}
}

func TestSessionEndInterrupts(t *testing.T) {
	e := newEnv(t)
	cs := e.connect(t, testKey, nil)
	waitRunning(t, e, cs)
	// The client ends the MCP session (its Close would first wait for the call).
	req, _ := http.NewRequest("DELETE", e.url+"/mcp", nil)
	req.Header.Set("X-API-Key", testKey)
	req.Header.Set("Mcp-Session-Id", cs.ID())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("DELETE /mcp: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /mcp: status %d, want 204", resp.StatusCode)
	}
	select {
	case <-e.runner.ended:
	case <-time.After(3 * time.Second):
		t.Fatal("the run did not end within 3 s of the end of its MCP session")
	}
}

func TestConcurrencyLimit(t *testing.T) {
	e := newEnvLimit(t, 1)
	cs := e.connect(t, testKey, nil)
	waitRunning(t, e, cs)
	res, _ := call[execOut](t, e.connect(t, testKey, nil), "execute", map[string]any{"code": "print x"})
	if !res.IsError || !strings.Contains(text(res), "MAX_CONCURRENT_PER_KEY") {
		t.Errorf("a second run over the limit = %s, want refused", text(res))
	}
	// Another key has its own slots.
	res, _ = call[execOut](t, e.connect(t, "other-key", nil), "execute", map[string]any{"code": "print x"})
	if res.IsError {
		t.Errorf("another key: %s", text(res))
	}
}
