package ptc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// Plain HTTP against /exec/programmatic (LibreChat's client uses /v1/..., so these use
// the unprefixed routes), for what LibreChat's client never does.

type toolCall struct {
	ID    string         `json:"id"`
	Name  string         `json:"name"`
	Input map[string]any `json:"input"`
}

// answer is a body of /exec/programmatic: a 200 of any status, or the error envelope
// (whose "error" is a code and "message" the reason).
type answer struct {
	Status            string          `json:"status"`
	ToolCalls         []toolCall      `json:"tool_calls"`
	ContinuationToken string          `json:"continuation_token"`
	ExecutionID       string          `json:"execution_id"`
	SessionID         string          `json:"session_id"`
	Stdout            string          `json:"stdout"`
	Stderr            string          `json:"stderr"`
	ExitCode          int             `json:"exit_code"`
	RunStatus         string          `json:"run_status"`
	Files             []kilntest.File `json:"files"`
	Error             string          `json:"error"`
	Message           string          `json:"message"`

	raw []byte
}

func (a answer) String() string { return string(a.raw) }

type toolResult struct {
	CallID       string `json:"call_id"`
	Result       any    `json:"result"`
	IsError      bool   `json:"is_error"`
	ErrorMessage string `json:"error_message,omitempty"`
}

// toolDef is a tool definition as LibreChat sends it.
func toolDef(name string) map[string]any {
	return map[string]any{
		"name": name, "description": "the test's tool " + name,
		"parameters": map[string]any{"type": "object", "properties": map[string]any{}},
	}
}

// send posts body to path with key (and header) and decodes the JSON answer.
func send(key, path string, body any, header http.Header) (int, answer, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, answer{}, err
	}
	h := http.Header{"Content-Type": {"application/json"}, "X-Api-Key": {key}}
	for k, v := range header {
		h[k] = v
	}
	resp, raw, err := srv.Request(http.MethodPost, path, bytes.NewReader(b), h)
	if err != nil {
		return 0, answer{}, fmt.Errorf("POST %s: %v", path, err)
	}
	a := answer{raw: raw}
	if err := json.Unmarshal(raw, &a); err != nil {
		return resp.StatusCode, a, fmt.Errorf("POST %s: status %d, undecodable answer %q: %v", path, resp.StatusCode, raw, err)
	}
	return resp.StatusCode, a, nil
}

func post(t *testing.T, key string, body map[string]any) (int, answer) {
	t.Helper()
	code, a, err := send(key, "/exec/programmatic", body, nil)
	if err != nil {
		t.Fatal(err)
	}
	return code, a
}

// start posts a program and fails the test unless kiln asks for tool results.
func start(t *testing.T, body map[string]any) answer {
	t.Helper()
	code, a := post(t, keyA, body)
	if code != http.StatusOK || a.Status != "tool_call_required" {
		t.Fatalf("start: status %d, want 200 with tool_call_required: %s", code, a)
	}
	if a.ContinuationToken == "" || a.ExecutionID == "" || len(a.ToolCalls) == 0 {
		t.Fatalf("start: no continuation token, execution id or tool calls: %s", a)
	}
	for _, c := range a.ToolCalls {
		if c.ID == "" {
			t.Fatalf("start: a tool call without an id: %s", a)
		}
	}
	return a
}

// resume continues a run with results.
func resume(t *testing.T, key, token string, results ...toolResult) (int, answer) {
	t.Helper()
	return post(t, key, map[string]any{"continuation_token": token, "tool_results": results})
}

// completed fails the test unless a is a 200 whose program completed with stdout.
func completed(t *testing.T, what string, code int, a answer, stdout string) {
	t.Helper()
	if code != http.StatusOK || a.Status != "completed" || a.RunStatus != "ok" || a.ExitCode != 0 || a.Stdout != stdout {
		t.Fatalf("%s: status %d, want 200, completed, run_status ok, exit 0 and stdout %q: %s", what, code, stdout, a)
	}
}

// refused fails the test unless a is kiln's error envelope with status and code.
func refused(t *testing.T, what string, code int, a answer, status int, errCode string) {
	t.Helper()
	if code != status || a.Error != errCode || a.Message == "" {
		t.Fatalf("%s: status %d, want %d with error %q and a message: %s", what, code, status, errCode, a)
	}
}

func result(c toolCall, v any) toolResult { return toolResult{CallID: c.ID, Result: v} }

func execute(t *testing.T, body map[string]any) kilntest.ExecResponse {
	t.Helper()
	var out kilntest.ExecResponse
	resp, err := srv.PostJSON("/exec", body, &out)
	if err != nil {
		t.Fatalf("POST /exec: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /exec: status %d: %s", resp.StatusCode, out.Message)
	}
	return out
}

// waitIdle waits until no sandbox is in use: a run a test left waiting for tool
// results ends at the latest after TOOL_RESULT_TIMEOUT_SECONDS.
func waitIdle(t *testing.T) {
	t.Helper()
	kilntest.WaitFor(t, toolResultTimeout+10*time.Second, "no sandbox in use", func() bool {
		p, err := srv.Pool()
		return err == nil && p.InUse == 0
	})
}

// settled waits until the pool is full and quiet: no run, nothing warming.
func settled(t *testing.T) kilntest.Pool {
	t.Helper()
	var p kilntest.Pool
	kilntest.WaitFor(t, 90*time.Second, "a full, quiet pool", func() bool {
		var err error
		p, err = srv.Pool()
		return err == nil && p.InUse == 0 && p.Warming == 0 && p.Ready == p.Target
	})
	return p
}

// containerIDCode sets cid to the id of the container the program runs in (runc).
const containerIDCode = `import re
ids = re.findall(r"/containers/([0-9a-f]{64})/", open("/proc/self/mountinfo").read())
cid = ids[0] if ids else "unknown"
`

func containerExists(t *testing.T, id string) bool {
	t.Helper()
	out, err := kilntest.Docker("ps", "-aq", "--no-trunc", "--filter", "id="+id)
	if err != nil {
		t.Fatalf("docker ps: %v: %s", err, out)
	}
	return strings.TrimSpace(out) != ""
}

// A client that never sends the results: the sandbox stays held while the program
// waits, is removed once TOOL_RESULT_TIMEOUT_SECONDS have passed, and the token is
// then refused.
func TestAbandonedRunEndsAfterToolResultTimeout(t *testing.T) {
	waitIdle(t)
	a := start(t, map[string]any{
		"code":  containerIDCode + "r = await report(container=cid)\nprint(r)",
		"tools": []any{toolDef("report")},
	})
	asked := time.Now()
	id, _ := a.ToolCalls[0].Input["container"].(string)
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(id) {
		t.Fatalf("the program did not name its container in the tool call's input: %s", a)
	}
	if p := srv.MustPool(t); p.InUse != 1 {
		t.Errorf("in_use %d while the program waits for its tool result, want 1", p.InUse)
	}
	time.Sleep(time.Until(asked.Add(toolResultTimeout / 2)))
	if !containerExists(t, id) {
		t.Fatalf("container %s removed %s after the tool call, well before TOOL_RESULT_TIMEOUT_SECONDS (%s)", id, time.Since(asked), toolResultTimeout)
	}
	kilntest.WaitFor(t, time.Until(asked.Add(toolResultTimeout+5*time.Second)), "the waiting program's container removed and no sandbox in use", func() bool {
		p, err := srv.Pool()
		return err == nil && p.InUse == 0 && !containerExists(t, id)
	})
	t.Logf("sandbox gone %s after the tool call", time.Since(asked).Round(10*time.Millisecond))

	code, late := resume(t, keyA, a.ContinuationToken, result(a.ToolCalls[0], "too late"))
	if (code != http.StatusNotFound && code != http.StatusConflict) || late.Message == "" {
		t.Fatalf("continuing after the tool result timeout: status %d, want 404 or 409 with a message: %s", code, late)
	}
}

// A continuation token works once: a replay is a 409 and runs nothing.
func TestReplayedTokenIsRefused(t *testing.T) {
	a := start(t, map[string]any{"code": "r = await fetch()\nprint('got', r)", "tools": []any{toolDef("fetch")}})
	code, done := resume(t, keyA, a.ContinuationToken, result(a.ToolCalls[0], "one"))
	completed(t, "first continuation", code, done, "got one\n")

	before := settled(t)
	code, again := resume(t, keyA, a.ContinuationToken, result(a.ToolCalls[0], "two"))
	refused(t, "replayed token", code, again, http.StatusConflict, "conflict")
	for _, wait := range []time.Duration{0, time.Second} {
		time.Sleep(wait)
		p := srv.MustPool(t)
		if p.InUse != 0 || p.Ready != before.Ready || p.Warming != 0 || p.Created != before.Created || p.Removed != before.Removed {
			t.Fatalf("the pool moved after the replay (%+v, before %+v): it ran something", p, before)
		}
	}
}

// A token is the key's that started the run: another key gets a 404, and the run is
// still there for its own key.
func TestTokenOfAnotherKeyIsNotFound(t *testing.T) {
	a := start(t, map[string]any{"code": "r = await whoami()\nprint(r)", "tools": []any{toolDef("whoami")}})
	code, other := resume(t, keyB, a.ContinuationToken, result(a.ToolCalls[0], "intruder"))
	refused(t, "token with another key", code, other, http.StatusNotFound, "not_found")
	code, done := resume(t, keyA, a.ContinuationToken, result(a.ToolCalls[0], "owner"))
	completed(t, "continuation with the right key after another key tried", code, done, "owner\n")
}

// splitToken splits "<instance>.<execution id>.<secret>" into the instance and the rest.
func splitToken(tok string) (instance, rest string, ok bool) {
	i := strings.LastIndex(tok, ".")
	if i <= 0 || i == len(tok)-1 {
		return "", "", false
	}
	j := strings.LastIndex(tok[:i], ".")
	if j <= 0 || j == i-1 {
		return "", "", false
	}
	return tok[:j], tok[j+1:], true
}

// A token naming another kiln instance is a 409 that says so, and the real one still works.
func TestTokenOfAnotherInstanceConflicts(t *testing.T) {
	a := start(t, map[string]any{"code": "r = await ping()\nprint(r)", "tools": []any{toolDef("ping")}})
	instance, rest, ok := splitToken(a.ContinuationToken)
	if !ok {
		t.Fatalf("continuation token %q is not <instance>.<execution id>.<secret>", a.ContinuationToken)
	}
	other := "elsewhere-" + strings.ReplaceAll(instance, ".", "-")
	code, forged := resume(t, keyA, other+"."+rest, result(a.ToolCalls[0], "forged"))
	refused(t, "token of another instance", code, forged, http.StatusConflict, "conflict")
	if !strings.Contains(forged.Message, other) && !strings.Contains(strings.ToLower(forged.Message), "instance") {
		t.Errorf("message %q names neither the instance %q nor that the token is another instance's", forged.Message, other)
	}
	code, done := resume(t, keyA, a.ContinuationToken, result(a.ToolCalls[0], "pong"))
	completed(t, "the real token after a forged one", code, done, "pong\n")
}

// MAX_TOOLS tools are accepted, one more is a 400.
func TestToolCountLimit(t *testing.T) {
	var tools []any
	for i := range maxTools + 1 {
		tools = append(tools, toolDef(fmt.Sprintf("tool_%d", i)))
	}
	code, a := post(t, keyA, map[string]any{"code": "print('too many')", "tools": tools})
	refused(t, fmt.Sprintf("%d tools", maxTools+1), code, a, http.StatusBadRequest, "invalid_request")
	code, a = post(t, keyA, map[string]any{"code": "print('ok')", "tools": tools[:maxTools]})
	completed(t, fmt.Sprintf("%d tools", maxTools), code, a, "ok\n")
}

// A tool result up to MAX_TOOL_RESULT_BYTES reaches the program; a bigger one is a 413.
func TestToolResultSizeLimit(t *testing.T) {
	body := map[string]any{"code": "r = await big()\nprint(len(r))", "tools": []any{toolDef("big")}}
	const fits = maxToolResultBytes - 4096
	a := start(t, body)
	code, done := resume(t, keyA, a.ContinuationToken, result(a.ToolCalls[0], strings.Repeat("a", fits)))
	completed(t, fmt.Sprintf("a %d-byte result", fits), code, done, fmt.Sprintf("%d\n", fits))

	a = start(t, body)
	code, over := resume(t, keyA, a.ContinuationToken, result(a.ToolCalls[0], strings.Repeat("a", maxToolResultBytes+4096)))
	refused(t, "a result over MAX_TOOL_RESULT_BYTES", code, over, http.StatusRequestEntityTooLarge, "too_large")
	// Whether the refused result spent the token is not said; either way the run must end.
	code, after := resume(t, keyA, a.ContinuationToken, result(a.ToolCalls[0], "ok"))
	switch code {
	case http.StatusOK:
		completed(t, "a small result after the refused one", code, after, "2\n")
	case http.StatusNotFound, http.StatusConflict:
	default:
		t.Errorf("a small result after the refused one: status %d: %s", code, after)
	}
	waitIdle(t)
}

// Results are matched to calls by call_id, not by their order.
func TestResultsMatchedByCallID(t *testing.T) {
	a := start(t, map[string]any{
		"code":  "import asyncio\nx, y = await asyncio.gather(word(n=1), word(n=2))\nprint(x, y)",
		"tools": []any{toolDef("word")},
	})
	if len(a.ToolCalls) != 2 {
		t.Fatalf("%d tool calls in the first answer, want both gathered calls: %s", len(a.ToolCalls), a)
	}
	words := map[float64]string{1: "one", 2: "two"}
	var results []toolResult
	for i := len(a.ToolCalls) - 1; i >= 0; i-- { // the reverse of the order kiln gave
		c := a.ToolCalls[i]
		n, _ := c.Input["n"].(float64)
		if c.Name != "word" || words[n] == "" {
			t.Fatalf("tool call %+v, want word with n 1 or 2: %s", c, a)
		}
		results = append(results, result(c, words[n]))
	}
	code, done := resume(t, keyA, a.ContinuationToken, results...)
	completed(t, "results in reverse order", code, done, "one two\n")
}

// A program that completes leaves its variables in the session, as /exec does.
func TestSessionKeepsCompletedProgramState(t *testing.T) {
	a := start(t, map[string]any{"code": "r = await half()\nnew_var = r * 2", "tools": []any{toolDef("half")}})
	code, done := resume(t, keyA, a.ContinuationToken, result(a.ToolCalls[0], 21))
	completed(t, "the program", code, done, "")
	if done.SessionID == "" {
		t.Fatalf("no session_id in the completed answer: %s", done)
	}
	out := execute(t, map[string]any{"code": "print(new_var)", "session_id": done.SessionID})
	if out.Status != "ok" || out.Stdout != "42\n" || out.SessionID != done.SessionID {
		t.Fatalf("a later /exec in session %s: status %q stdout %q session %q stderr %q, want 42 from the program",
			done.SessionID, out.Status, out.Stdout, out.SessionID, out.Stderr)
	}
}

// A program that fails keeps what it bound before the error, as /exec does (a
// notebook's rule); with on_error rollback it leaves the session as it was before it.
func TestSessionKeepsFailedProgramState(t *testing.T) {
	for _, tt := range []struct {
		onError, want string
	}{{"", "1 True\n"}, {"rollback", "1 False\n"}} {
		t.Run("on_error="+tt.onError, func(t *testing.T) {
			base := execute(t, map[string]any{"code": "keep = 1"})
			body := map[string]any{
				"code":       "r = await value()\nlost = r\nraise RuntimeError('boom after ' + r)",
				"tools":      []any{toolDef("value")},
				"session_id": base.SessionID,
			}
			if tt.onError != "" {
				body["on_error"] = tt.onError
			}
			a := start(t, body)
			code, failed := resume(t, keyA, a.ContinuationToken, result(a.ToolCalls[0], "assigning"))
			if code != http.StatusOK || failed.Status != "error" || failed.RunStatus != "error" || failed.ExitCode == 0 ||
				failed.SessionID != base.SessionID || !strings.Contains(failed.Stderr, "RuntimeError: boom after assigning") || failed.Error == "" {
				t.Fatalf("a program that raises: status %d, want 200 with status error, run_status error, an exit code, an error, "+
					"the traceback and session %s: %s", code, base.SessionID, failed)
			}
			out := execute(t, map[string]any{"code": "print(keep, 'lost' in globals())", "session_id": base.SessionID})
			if out.Status != "ok" || out.Stdout != tt.want {
				t.Fatalf("after the failed program: status %q stdout %q stderr %q, want %q", out.Status, out.Stdout, out.Stderr, tt.want)
			}
		})
	}
}

// POST /exec/programmatic/cancel with the request id a request was sent with, as
// LibreChat's client sends it, ends its run as cancelled and frees its sandbox (202
// cancellation_requested); another key's cancel is a 403 and changes nothing; once the
// run is over the answer is 200 already_completed.
func TestCancelByRequestID(t *testing.T) {
	waitIdle(t)
	rid := fmt.Sprintf("ptc-cancel-%d", time.Now().UnixNano())
	type reply struct {
		code int
		a    answer
		err  error
	}
	done := make(chan reply, 1)
	go func() {
		code, a, err := send(keyA, "/exec/programmatic", map[string]any{
			"code": "import time\ntime.sleep(30)\nawait never()", "tools": []any{toolDef("never")},
		}, http.Header{"X-Librechat-Code-Request-Id": {rid}})
		done <- reply{code, a, err}
	}()
	kilntest.WaitFor(t, 60*time.Second, "the program to start", func() bool { return srv.MustPool(t).InUse == 1 })
	time.Sleep(300 * time.Millisecond)

	code, other, err := send(keyB, "/exec/programmatic/cancel", map[string]any{"request_id": rid}, nil)
	if err != nil {
		t.Fatal(err)
	}
	refused(t, "cancel with another key", code, other, http.StatusForbidden, "forbidden")
	if p := srv.MustPool(t); p.InUse != 1 {
		t.Fatalf("another key's cancel touched the run: %d sandboxes in use, want 1", p.InUse)
	}

	code, c, err := send(keyA, "/exec/programmatic/cancel", map[string]any{"request_id": rid}, nil)
	cancelled := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusAccepted || c.Status != "cancellation_requested" {
		t.Fatalf("cancel: status %d, want 202 with status cancellation_requested: %s", code, c)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.code != http.StatusOK || r.a.Status != "error" || r.a.RunStatus != "cancelled" {
			t.Errorf("the cancelled request: status %d, want 200 with status error and run_status cancelled: %s", r.code, r.a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled request did not answer within 10 s")
	}
	kilntest.WaitFor(t, time.Until(cancelled.Add(3*time.Second)), "no sandbox in use within 3 s of the cancel", func() bool {
		p, err := srv.Pool()
		return err == nil && p.InUse == 0
	})

	code, again, err := send(keyA, "/exec/programmatic/cancel", map[string]any{"request_id": rid}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusOK || again.Status != "already_completed" {
		t.Errorf("cancel after the end: status %d, want 200 with status already_completed: %s", code, again)
	}
	code, other, err = send(keyB, "/exec/programmatic/cancel", map[string]any{"request_id": rid}, nil)
	if err != nil {
		t.Fatal(err)
	}
	refused(t, "cancel of another key's ended request", code, other, http.StatusForbidden, "forbidden")
}

// A cancel that reaches kiln before its request (LibreChat cancels when the user stops,
// whatever the request's progress) is remembered: the request that comes with that id
// does not start, and says so.
func TestCancelBeforeStart(t *testing.T) {
	waitIdle(t)
	rid := fmt.Sprintf("ptc-early-%d", time.Now().UnixNano())
	code, c, err := send(keyA, "/exec/programmatic/cancel", map[string]any{"request_id": rid}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusAccepted || c.Status != "cancellation_requested" {
		t.Fatalf("early cancel: status %d, want 202 with status cancellation_requested: %s", code, c)
	}
	code, a, err := send(keyA, "/exec/programmatic", map[string]any{
		"code": "print('must not run')", "tools": []any{toolDef("never")},
	}, http.Header{"X-Librechat-Code-Request-Id": {rid}})
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusOK || a.Status != "error" || strings.Contains(a.Stdout, "must not run") {
		t.Fatalf("the request cancelled before it came: status %d, want 200 with status error and nothing run: %s", code, a)
	}
	if !strings.Contains(strings.ToLower(a.Error+a.Message+a.Stderr), "cancel") {
		t.Errorf("the refused start does not say it was cancelled: %s", a)
	}
}
