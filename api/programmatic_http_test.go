package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/protocol"
)

// ptcAnswer is an answer of POST /exec/programmatic: a pause, or the run's end.
type ptcAnswer struct {
	Status    string `json:"status"`
	ToolCalls []struct {
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"tool_calls"`
	ContinuationToken string `json:"continuation_token"`
	ExecutionID       string `json:"execution_id"`
	RunStatus         string `json:"run_status"`
	SessionID         string `json:"session_id"`
	Stdout            string `json:"stdout"`
}

// ptcStart is a start of a run with one tool, get-weather.
const ptcStart = `{"code":"print(get_weather())","lang":"py","tools":[{"name":"get-weather","description":"the weather","parameters":{"type":"object"}}]}`

// ptcContinue is the body that answers call with result, for the pause of token.
func ptcContinue(t *testing.T, token, call, result string) string {
	t.Helper()
	return mustJSON(t, map[string]any{"continuation_token": token,
		"tool_results": []protocol.ToolResult{{CallID: call, Result: json.RawMessage(result)}}})
}

// ptcPost sends body to POST /exec/programmatic.
func ptcPost(t *testing.T, h http.Handler, body string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	return serve(t, h, "POST", "/exec/programmatic", jsonCT, body, header)
}

// checkPause checks that rec is a pause on call of get-weather, and returns it.
func checkPause(t *testing.T, rec *httptest.ResponseRecorder, call string) ptcAnswer {
	t.Helper()
	got := decode[ptcAnswer](t, rec, http.StatusOK)
	if got.Status != "tool_call_required" || len(got.ToolCalls) != 1 || got.ToolCalls[0].ID != call || got.ToolCalls[0].Name != "get-weather" {
		t.Fatalf("got %s, want tool_call_required on %s of get-weather", rec.Body, call)
	}
	if !kiln.ValidID(got.ExecutionID) {
		t.Errorf("got execution_id %q, want a kiln id", got.ExecutionID)
	}
	return got
}

// waitReleased waits until every result the runner handed out was released.
func waitReleased(t *testing.T, h *api.Harness, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		results, released := h.Released()
		if results == want && released == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %d of %d results released, want %d of %d", released, results, want, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// checkBusy checks a 429 for a caller whose execution slots are all taken: retry in a
// second.
func checkBusy(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	var body struct {
		Error      kiln.Code `json:"error"`
		RetryAfter int       `json:"retry_after_seconds"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusTooManyRequests {
		t.Fatalf("got %d %s, want 429 and an envelope", rec.Code, rec.Body)
	}
	if body.Error != kiln.CodeRateLimited || body.RetryAfter != 1 || rec.Header().Get("Retry-After") != "1" {
		t.Errorf("got %s with Retry-After %q, want rate_limited, retry in 1 second", rec.Body, rec.Header().Get("Retry-After"))
	}
}

// TestProgrammaticRoundTrip drives a run through two pauses to its end: each pause
// names the call and a token for this instance and run, each token works once, and the
// end is POST /exec's answer with the results the code got.
func TestProgrammaticRoundTrip(t *testing.T) {
	prog := &api.ToolRun{Rounds: 2}
	h := api.NewToolHarness(t, api.HarnessConfig{InstanceID: "kiln-a"}, prog)

	first := checkPause(t, ptcPost(t, h, ptcStart, nil), "call1")
	if want := "kiln-a." + first.ExecutionID + ".secret1"; first.ContinuationToken != want {
		t.Errorf("got continuation_token %q, want %q", first.ContinuationToken, want)
	}
	if string(first.ToolCalls[0].Input) != `{"round":1}` {
		t.Errorf("got input %s, want the call's own", first.ToolCalls[0].Input)
	}
	reqs := h.Requests()
	if len(reqs) != 1 {
		t.Fatalf("got %d runs, want 1", len(reqs))
	}
	wantTools := []protocol.Tool{{Name: "get-weather", Function: "get_weather"}}
	if got := reqs[0].Tools; !slices.Equal(got, wantTools) || reqs[0].Lang != execution.LangPython || reqs[0].ExecutionID != first.ExecutionID {
		t.Errorf("the run got tools %+v, lang %s, id %s; want %+v, python, %s", got, reqs[0].Lang, reqs[0].ExecutionID, wantTools, first.ExecutionID)
	}

	second := checkPause(t, ptcPost(t, h, ptcContinue(t, first.ContinuationToken, "call1", `"sunny"`), nil), "call2")
	if second.ExecutionID != first.ExecutionID || second.ContinuationToken != "kiln-a."+first.ExecutionID+".secret2" {
		t.Errorf("got second pause %+v, want run %s with the token of its second pause", second, first.ExecutionID)
	}
	// The first pause's token is spent.
	checkError(t, ptcPost(t, h, ptcContinue(t, first.ContinuationToken, "call1", `"rain"`), nil), http.StatusConflict, kiln.CodeConflict)

	rec := ptcPost(t, h, ptcContinue(t, second.ContinuationToken, "call2", `{"temp":21}`), nil)
	end := decode[ptcAnswer](t, rec, http.StatusOK)
	if end.Status != "completed" || end.RunStatus != "ok" || end.ExecutionID != first.ExecutionID || !kiln.ValidID(end.SessionID) {
		t.Errorf("got end %s, want completed, run_status ok, in a session, of run %s", rec.Body, first.ExecutionID)
	}
	if want := "call1=\"sunny\"\ncall2={\"temp\":21}\n"; end.Stdout != want {
		t.Errorf("got stdout %q, want the results the code got, %q", end.Stdout, want)
	}
	if got := rec.Header().Get("X-Execution-Id"); got != first.ExecutionID {
		t.Errorf("got X-Execution-Id %q, want %s", got, first.ExecutionID)
	}
	// The run is over: its last token is refused, as the executor refuses it.
	checkError(t, ptcPost(t, h, ptcContinue(t, second.ContinuationToken, "call2", `1`), nil), http.StatusConflict, kiln.CodeConflict)
	waitReleased(t, h, 1)
}

// TestProgrammaticEnds checks the answer to a run's end: completed only for a run that
// ended ok, and the error envelope for a run that could not run.
func TestProgrammaticEnds(t *testing.T) {
	tests := []struct {
		name      string
		prog      *api.ToolRun
		status    string // the answer's status; "" for an error envelope
		runStatus string
		code      kiln.Code
		httpCode  int
	}{
		{"ok without pausing", &api.ToolRun{}, "completed", "ok", "", http.StatusOK},
		{"error", &api.ToolRun{Status: execution.StatusError}, "error", "error", "", http.StatusOK},
		{"timeout", &api.ToolRun{Status: execution.StatusTimeout}, "error", "timeout", "", http.StatusOK},
		{"no sandbox", &api.ToolRun{Err: &kiln.Error{Code: kiln.CodeUnavailable, Message: "no sandbox became free", RetryAfter: 2}}, "", "", kiln.CodeUnavailable, http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := api.NewToolHarness(t, api.HarnessConfig{}, tt.prog)
			rec := ptcPost(t, h, ptcStart, nil)
			if tt.code != "" {
				checkError(t, rec, tt.httpCode, tt.code)
				return
			}
			got := decode[ptcAnswer](t, rec, tt.httpCode)
			if got.Status != tt.status || got.RunStatus != tt.runStatus || !kiln.ValidID(got.ExecutionID) {
				t.Errorf("got %s, want status %s, run_status %s and the execution id", rec.Body, tt.status, tt.runStatus)
			}
			waitReleased(t, h, 1)
		})
	}
}

// TestProgrammaticRefused checks the requests refused before any code runs.
func TestProgrammaticRefused(t *testing.T) {
	const other = "k2Xv0n4lY8pQ1rT7uW3zA"
	tool := func(name string) string { return `{"name":"` + name + `"}` }
	start := func(tools ...string) string {
		return `{"code":"x()","lang":"py","tools":[` + strings.Join(tools, ",") + `]}`
	}
	tests := []struct {
		name   string
		body   string
		header http.Header
		status int
		code   kiln.Code
	}{
		{"no tools", `{"code":"print(1)","lang":"py"}`, nil, 400, kiln.CodeInvalid},
		{"empty tools", start(), nil, 400, kiln.CodeInvalid},
		{"no code", `{"lang":"py","tools":[` + tool("a") + `]}`, nil, 400, kiln.CodeInvalid},
		{"unsupported language", `{"code":"x","lang":"c++","tools":[` + tool("a") + `]}`, nil, 400, kiln.CodeLanguage},
		{"file not a kiln id", `{"code":"x","lang":"py","tools":[` + tool("a") + `],"files":[{"id":"../x"}]}`, nil, 400, kiln.CodeInvalid},
		{"malformed request id", start(tool("a")), http.Header{"X-Librechat-Code-Request-Id": {"a b"}}, 400, kiln.CodeInvalid},
		{"request id too long", start(tool("a")), http.Header{"X-Librechat-Code-Request-Id": {strings.Repeat("r", 129)}}, 400, kiln.CodeInvalid},
		{"malformed JSON", `{"code":`, nil, 400, kiln.CodeInvalid},
		{"malformed continuation token", `{"continuation_token":"nodots"}`, nil, 400, kiln.CodeInvalid},
		{"token of another instance", `{"continuation_token":"kiln-b.` + other + `.s"}`, nil, 409, kiln.CodeConflict},
		{"token of no run", `{"continuation_token":"kiln-a.` + other + `.s"}`, nil, 404, kiln.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := api.NewToolHarness(t, api.HarnessConfig{InstanceID: "kiln-a"}, &api.ToolRun{Rounds: 1})
			checkError(t, ptcPost(t, h, tt.body, tt.header), tt.status, tt.code)
			if n := len(h.Requests()); n != 0 {
				t.Errorf("got %d runs, want none", n)
			}
		})
	}
}

// TestProgrammaticToolsChecked: the tools are checked, with the names code calls them
// by, before the run has a sandbox; each refusal answers as such, never as a run.
func TestProgrammaticToolsChecked(t *testing.T) {
	tests := []struct {
		name  string
		tools []string
		lang  string
	}{
		{"too many tools", []string{"a", "b", "c", "d"}, "py"},
		{"a name with no identifier in it", []string{"!!!"}, "py"},
		{"two names code calls alike", []string{"get-weather", "get weather"}, "py"},
		{"dots vanish in python", []string{"files.read", "filesread"}, "py"},
		{"dots are underscores in bash", []string{"files.read", "files_read"}, "bash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := api.NewToolHarness(t, api.HarnessConfig{}, &api.ToolRun{Rounds: 1})
			var tools []map[string]string
			for _, name := range tt.tools {
				tools = append(tools, map[string]string{"name": name})
			}
			body := mustJSON(t, map[string]any{"code": "x", "lang": tt.lang, "tools": tools})
			checkError(t, ptcPost(t, h, body, nil), http.StatusBadRequest, kiln.CodeInvalid)
			if n := len(h.Requests()); n != 0 {
				t.Errorf("got %d runs, want none", n)
			}
		})
	}
}

// TestProgrammaticOtherCaller: a run's continuations are its caller's alone; another
// key's are refused as if the run did not exist, and the run goes on.
func TestProgrammaticOtherCaller(t *testing.T) {
	h := api.NewToolHarness(t, api.HarnessConfig{Keys: []string{"k1", "k2"}}, &api.ToolRun{Rounds: 1})
	pause := checkPause(t, ptcPost(t, h, ptcStart, withKey("k1")), "call1")
	body := ptcContinue(t, pause.ContinuationToken, "call1", `1`)
	checkError(t, ptcPost(t, h, body, withKey("k2")), http.StatusNotFound, kiln.CodeNotFound)
	checkError(t, ptcPost(t, h, body, nil), http.StatusUnauthorized, kiln.CodeUnauthorized)
	end := decode[ptcAnswer](t, ptcPost(t, h, body, withKey("k1")), http.StatusOK)
	if end.Status != "completed" || end.Stdout != "call1=1\n" {
		t.Errorf("got %+v, want the run completed with its caller's result", end)
	}
	waitReleased(t, h, 1)
}

// TestProgrammaticWrongCall: results for a call the run does not wait on are refused,
// and the pause's token still works.
func TestProgrammaticWrongCall(t *testing.T) {
	h := api.NewToolHarness(t, api.HarnessConfig{}, &api.ToolRun{Rounds: 1})
	pause := checkPause(t, ptcPost(t, h, ptcStart, nil), "call1")
	checkError(t, ptcPost(t, h, ptcContinue(t, pause.ContinuationToken, "call9", `1`), nil), http.StatusBadRequest, kiln.CodeInvalid)
	end := decode[ptcAnswer](t, ptcPost(t, h, ptcContinue(t, pause.ContinuationToken, "call1", `2`), nil), http.StatusOK)
	if end.Status != "completed" || end.Stdout != "call1=2\n" {
		t.Errorf("got %+v, want the run completed with the right call's result", end)
	}
	waitReleased(t, h, 1)
}

// TestProgrammaticRequestID: a request id names one run under way at a time.
func TestProgrammaticRequestID(t *testing.T) {
	h := api.NewToolHarness(t, api.HarnessConfig{}, &api.ToolRun{Rounds: 1})
	named := http.Header{"X-Librechat-Code-Request-Id": {"req-1"}}
	pause := checkPause(t, ptcPost(t, h, ptcStart, named), "call1")
	checkError(t, ptcPost(t, h, ptcStart, named), http.StatusConflict, kiln.CodeConflict)
	if n := len(h.Requests()); n != 1 {
		t.Errorf("got %d runs, want only the first", n)
	}
	decode[ptcAnswer](t, ptcPost(t, h, ptcContinue(t, pause.ContinuationToken, "call1", `1`), named), http.StatusOK)
	// Once the run is over its id is free again.
	second := checkPause(t, ptcPost(t, h, ptcStart, named), "call1")
	if second.ExecutionID == pause.ExecutionID {
		t.Errorf("got execution %s again, want a new run", second.ExecutionID)
	}
	decode[ptcAnswer](t, ptcPost(t, h, ptcContinue(t, second.ContinuationToken, "call1", `1`), nil), http.StatusOK)
	waitReleased(t, h, 2)
}

// TestProgrammaticHoldsItsSlot: a paused run holds one of its caller's concurrent
// execution slots until it ends, across the requests that drive it.
func TestProgrammaticHoldsItsSlot(t *testing.T) {
	h := api.NewToolHarness(t, api.HarnessConfig{Keys: []string{"k1", "k2"}, MaxConcurrent: 1}, &api.ToolRun{Rounds: 1})
	pause := checkPause(t, ptcPost(t, h, ptcStart, withKey("k1")), "call1")
	checkBusy(t, ptcPost(t, h, ptcStart, withKey("k1")))
	checkBusy(t, serve(t, h, "POST", "/exec", jsonCT, `{"code":"1"}`, withKey("k1")))
	// Another key has slots of its own.
	other := checkPause(t, ptcPost(t, h, ptcStart, withKey("k2")), "call1")
	decode[ptcAnswer](t, ptcPost(t, h, ptcContinue(t, other.ContinuationToken, "call1", `1`), withKey("k2")), http.StatusOK)

	decode[ptcAnswer](t, ptcPost(t, h, ptcContinue(t, pause.ContinuationToken, "call1", `1`), withKey("k1")), http.StatusOK)
	// The slot is free once the run's end is answered.
	next := checkPause(t, ptcPost(t, h, ptcStart, withKey("k1")), "call1")
	decode[ptcAnswer](t, ptcPost(t, h, ptcContinue(t, next.ContinuationToken, "call1", `1`), withKey("k1")), http.StatusOK)
	waitReleased(t, h, 3)
}

// TestProgrammaticClientGone: a client that goes away while the run goes cancels the
// run, which ends and hands its sandbox back though nobody takes its answer.
func TestProgrammaticClientGone(t *testing.T) {
	prog := &api.ToolRun{Rounds: 1, Hang: true}
	obs := &api.ObserverLog{}
	h := api.NewToolHarness(t, api.HarnessConfig{Observer: obs}, prog)
	pause := checkPause(t, ptcPost(t, h, ptcStart, nil), "call1")

	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequestWithContext(ctx, "POST", "/exec/programmatic", strings.NewReader(ptcContinue(t, pause.ContinuationToken, "call1", `1`)))
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(rec, req)
	}()
	// The run has its results, and hangs: the client gives up.
	deadline := time.Now().Add(5 * time.Second)
	for prog.Paused(pause.ExecutionID) {
		if time.Now().After(deadline) {
			t.Fatal("the continuation never reached the run")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if rec.Body.Len() != 0 {
		t.Errorf("got body %q, want none for a client that is gone", rec.Body)
	}
	waitReleased(t, h, 1)
	if err := prog.Cancel(pause.ExecutionID, ""); kiln.ErrorCode(err) != kiln.CodeConflict {
		t.Errorf("cancel after the client left: %v, want conflict: the run was cancelled and is over", err)
	}
	seen := obs.Seen()
	if len(seen) != 2 || seen[1].Status != 499 {
		t.Errorf("got observed %+v, want the pause's 200 and then 499", seen)
	}
}
