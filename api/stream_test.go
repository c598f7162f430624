package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/protocol"
)

// sseEvent is one Server-Sent Event; a comment line is an event named ":".
type sseEvent struct {
	Name string
	Data string
}

// parseSSE splits a text/event-stream body into its events and comments.
func parseSSE(t *testing.T, body string) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Name != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"):
			out = append(out, sseEvent{Name: ":"})
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data += strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected line %q in the stream", line)
		}
	}
	return out
}

var png = []byte("\x89PNG\r\n\x1a\nfigure")

// talkingRun starts, prints, shows a figure and prints again, then ends ok.
// Like the executor, it tells only a caller that listens.
func talkingRun(_ context.Context, req executor.Request) (*executor.Result, error) {
	if req.OnStart != nil {
		req.OnStart()
		req.OnEvent(protocol.Event{Type: protocol.EventOutput, Stream: "stdout", Text: "a\n"})
		req.OnEvent(protocol.Event{Type: protocol.EventDisplay, Name: "figure-1.png", MIME: "image/png", Data: png})
		req.OnEvent(protocol.Event{Type: protocol.EventOutput, Stream: "stderr", Text: "warn\n"})
	}
	return &executor.Result{Status: execution.StatusOK, Stdout: "a\n", Stderr: "warn\n", ExecutionID: req.ExecutionID,
		Files: []protocol.File{{Path: "figure-1.png", Content: png}}}, nil
}

func TestExecStream(t *testing.T) {
	h := api.NewHarness(t, api.HarnessConfig{Run: talkingRun})
	rec := serve(t, h, "POST", "/exec", jsonCT, `{"code":"plot"}`, http.Header{"Accept": {"text/event-stream"}})
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("got %d %q, want 200 text/event-stream (body %s)", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	events := parseSSE(t, rec.Body.String())
	var names []string
	for _, ev := range events {
		names = append(names, ev.Name)
	}
	if got, want := strings.Join(names, ","), "start,stdout,display,stderr,done"; got != want {
		t.Fatalf("got events %s, want %s", got, want)
	}
	var start struct{ SessionID, ExecutionID string }
	_ = json.Unmarshal([]byte(strings.NewReplacer(`"session_id"`, `"SessionID"`, `"execution_id"`, `"ExecutionID"`).Replace(events[0].Data)), &start)
	if !kiln.ValidID(start.SessionID) || start.ExecutionID != rec.Header().Get("X-Execution-Id") || !kiln.ValidID(start.ExecutionID) {
		t.Errorf("start = %s, header X-Execution-Id %q; want two ids, the execution's in the header too", events[0].Data, rec.Header().Get("X-Execution-Id"))
	}
	if events[1].Data != `{"text":"a\n"}` || events[3].Data != `{"text":"warn\n"}` {
		t.Errorf("output events %s and %s, want the texts", events[1].Data, events[3].Data)
	}
	var shown execFile
	if err := json.Unmarshal([]byte(events[2].Data), &shown); err != nil || shown.Name != "figure-1.png" || shown.Size != int64(len(png)) ||
		shown.SessionID != start.SessionID || shown.ContentType != "image/png" {
		t.Errorf("display = %s (%v), want figure-1.png in the run's session", events[2].Data, err)
	}
	var done execBody
	if err := json.Unmarshal([]byte(events[4].Data), &done); err != nil {
		t.Fatalf("done data %q: %v", events[4].Data, err)
	}
	if done.SessionID != start.SessionID || done.Status != "ok" || done.Stdout != "a\n" || len(done.Files) != 1 || done.Files[0].ID != shown.ID {
		t.Errorf("done = %+v, want the run's answer listing the shown figure once", done)
	}
	dl := serve(t, h, "GET", "/download/"+shown.SessionID+"/"+shown.ID, "", "", nil)
	if dl.Code != http.StatusOK || dl.Body.String() != string(png) {
		t.Errorf("download of the figure: %d %q, want the PNG", dl.Code, dl.Body)
	}

	// The same request, not streamed: the same body (but for timings), and the id.
	plain := serve(t, h, "POST", "/exec", jsonCT, `{"code":"plot"}`, nil)
	body := decode[execBody](t, plain, http.StatusOK)
	if body.Status != done.Status || body.Stdout != done.Stdout || body.Stderr != "warn\n" || len(body.Files) != 1 {
		t.Errorf("plain answer %+v, want what done said", body)
	}
	if id := plain.Header().Get("X-Execution-Id"); !kiln.ValidID(id) || id == start.ExecutionID {
		t.Errorf("plain answer's X-Execution-Id %q, want a new execution id", id)
	}
}

// TestExecStreamErrorsBeforeTheRun checks that what fails before the run starts is a
// plain HTTP error, not a stream.
func TestExecStreamErrorsBeforeTheRun(t *testing.T) {
	busy := &kiln.Error{Code: kiln.CodeUnavailable, Message: "no sandbox became free", RetryAfter: 2}
	h := api.NewHarness(t, api.HarnessConfig{Run: func(context.Context, executor.Request) (*executor.Result, error) { return nil, busy }})
	accept := http.Header{"Accept": {"text/event-stream"}}
	checkError(t, serve(t, h, "POST", "/exec", jsonCT, `{"code":""}`, accept), http.StatusBadRequest, kiln.CodeInvalid)
	rec := serve(t, h, "POST", "/exec", jsonCT, `{"code":"1"}`, accept)
	checkError(t, rec, http.StatusServiceUnavailable, kiln.CodeUnavailable)
	if rec.Header().Get("Retry-After") != "2" {
		t.Errorf("got Retry-After %q, want 2", rec.Header().Get("Retry-After"))
	}
}

// TestExecStreamKeepAlive checks the comment lines of a quiet stream.
func TestExecStreamKeepAlive(t *testing.T) {
	h := api.NewHarness(t, api.HarnessConfig{Run: func(ctx context.Context, req executor.Request) (*executor.Result, error) {
		req.OnStart()
		time.Sleep(120 * time.Millisecond)
		return &executor.Result{Status: execution.StatusOK, ExecutionID: req.ExecutionID}, nil
	}})
	h.SetKeepAlive(20 * time.Millisecond)
	rec := serve(t, h, "POST", "/exec", jsonCT, `{"code":"1"}`, http.Header{"Accept": {"text/event-stream"}})
	events := parseSSE(t, rec.Body.String())
	comments := 0
	for _, ev := range events {
		if ev.Name == ":" {
			comments++
		}
	}
	if comments < 2 || events[0].Name != "start" || events[len(events)-1].Name != "done" {
		t.Errorf("got %d keep-alive comments in %v, want several between start and done", comments, events)
	}
}

func TestCancelRoute(t *testing.T) {
	var asked []string
	h := api.NewHarness(t, api.HarnessConfig{Keys: []string{"k1", "k2"}, Cancel: func(id, owner string) error {
		asked = append(asked, id+"/"+owner)
		switch id {
		case "runningxxxxxxxxxxxxxx":
			return nil
		case "finishedxxxxxxxxxxxxx":
			return kiln.Errorf(kiln.CodeConflict, "execution %s has already finished", id)
		}
		return kiln.Errorf(kiln.CodeNotFound, "execution %s not found", id)
	}})
	rec := serve(t, h, "POST", "/executions/runningxxxxxxxxxxxxxx/cancel", "", "", withKey("k1"))
	if got := decode[map[string]string](t, rec, http.StatusAccepted); got["status"] != "cancelling" || got["execution_id"] != "runningxxxxxxxxxxxxxx" {
		t.Errorf("got %v, want cancelling", got)
	}
	checkError(t, serve(t, h, "POST", "/v1/executions/finishedxxxxxxxxxxxxx/cancel", "", "", withKey("k1")), http.StatusConflict, kiln.CodeConflict)
	checkError(t, serve(t, h, "POST", "/executions/unknownxxxxxxxxxxxxxx/cancel", "", "", withKey("k2")), http.StatusNotFound, kiln.CodeNotFound)
	checkError(t, serve(t, h, "POST", "/executions/bad..id/cancel", "", "", withKey("k1")), http.StatusNotFound, kiln.CodeNotFound)
	checkError(t, serve(t, h, "POST", "/executions/runningxxxxxxxxxxxxxx/cancel", "", "", nil), http.StatusUnauthorized, kiln.CodeUnauthorized)
	if len(asked) != 3 || asked[0] == asked[2] || !strings.HasPrefix(asked[0], "runningxxxxxxxxxxxxxx/") {
		t.Errorf("cancels asked %v, want three, each with its caller's key", asked)
	}
	if strings.Split(asked[0], "/")[1] == strings.Split(asked[2], "/")[1] {
		t.Errorf("keys k1 and k2 were passed as the same owner: %v", asked)
	}
}
