package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
)

func TestExecBadRequests(t *testing.T) {
	notLZ4 := base64.StdEncoding.EncodeToString([]byte("blob"))
	tooRaw := base64.StdEncoding.EncodeToString(api.LZ4Frame(t, make([]byte, api.TestLimits.MaxStateRaw+1)))
	const fileA, sessB = "aaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbb"
	ref := `{"id":"` + fileA + `","session_id":"` + sessB + `"}`
	tests := []struct {
		name        string
		contentType string
		body        string
		status      int
		code        kiln.Code
	}{
		{"text/plain", "text/plain", `{"code":"1"}`, 415, kiln.CodeMediaType},
		{"form", "application/x-www-form-urlencoded", `code=1`, 415, kiln.CodeMediaType},
		{"unparseable content type", "application/json; charset", `{"code":"1"}`, 415, kiln.CodeMediaType},
		{"malformed JSON", jsonCT, `{"code":`, 400, kiln.CodeInvalid},
		{"empty body", jsonCT, ``, 400, kiln.CodeInvalid},
		{"not an object", jsonCT, `["print(1)"]`, 400, kiln.CodeInvalid},
		{"two values", jsonCT, `{"code":"1"} {"code":"2"}`, 400, kiln.CodeInvalid},
		{"code of the wrong type", jsonCT, `{"code":1}`, 400, kiln.CodeInvalid},
		{"capture_state of the wrong type", jsonCT, `{"code":"1","capture_state":"yes"}`, 400, kiln.CodeInvalid},
		{"timeout of the wrong type", jsonCT, `{"code":"1","timeout":"30s"}`, 400, kiln.CodeInvalid},
		{"on_error not keep or rollback", jsonCT, `{"code":"1","on_error":"undo"}`, 400, kiln.CodeInvalid},
		{"missing code", jsonCT, `{"lang":"py"}`, 400, kiln.CodeInvalid},
		{"null code", jsonCT, `{"code":null}`, 400, kiln.CodeInvalid},
		{"blank code", jsonCT, `{"code":" \n"}`, 400, kiln.CodeInvalid},
		{"code over the limit", jsonCT, `{"code":"` + strings.Repeat("x", api.TestLimits.MaxCodeBytes+1) + `"}`, 413, kiln.CodeTooLarge},
		{"entity_id too long", jsonCT, `{"code":"1","entity_id":"` + strings.Repeat("a", 41) + `"}`, 400, kiln.CodeInvalid},
		{"entity_id with a dot", jsonCT, `{"code":"1","entity_id":"agent.1"}`, 400, kiln.CodeInvalid},
		{"entity_id with a slash", jsonCT, `{"code":"1","entity_id":"../x"}`, 400, kiln.CodeInvalid},
		{"state not base64", jsonCT, `{"code":"1","state":"not base64!"}`, 400, kiln.CodeInvalid},
		{"state not a string", jsonCT, `{"code":"1","state":123}`, 400, kiln.CodeInvalid},
		{"empty state", jsonCT, `{"code":"1","state":""}`, 400, kiln.CodeInvalid},
		{"state not an LZ4 frame", jsonCT, `{"code":"1","state":"` + notLZ4 + `"}`, 400, kiln.CodeInvalid},
		{"state decompressing past the limit", jsonCT, `{"code":"1","state":"` + tooRaw + `"}`, 413, kiln.CodeTooLarge},
		{"state and session_id", jsonCT, `{"code":"1","state":"BCJNGA==","session_id":"abcdefghijklmnopqrstu"}`, 400, kiln.CodeInvalid},
		{"state null and session_id", jsonCT, `{"code":"1","state":null,"session_id":"abcdefghijklmnopqrstu"}`, 400, kiln.CodeInvalid},
		{"args of the wrong type", jsonCT, `{"code":"1","args":42}`, 400, kiln.CodeInvalid},
		{"args list of numbers", jsonCT, `{"code":"1","args":[1,2]}`, 400, kiln.CodeInvalid},
		{"unsupported language", jsonCT, `{"code":"1","lang":"ruby"}`, 400, kiln.CodeLanguage},
		{"language of the wrong type", jsonCT, `{"code":"1","lang":3}`, 400, kiln.CodeInvalid},
		{"file id not a kiln id", jsonCT, `{"code":"1","files":[{"id":"../x","session_id":"` + sessB + `"}]}`, 400, kiln.CodeInvalid},
		{"file session_id not a kiln id", jsonCT, `{"code":"1","files":[{"id":"` + fileA + `","session_id":"x"}]}`, 400, kiln.CodeInvalid},
		{"unknown file", jsonCT, `{"code":"1","files":[` + ref + `]}`, 403, kiln.CodeForbidden},
		{"more files than a session holds", jsonCT, `{"code":"1","files":[` + strings.Repeat(ref+",", api.TestMaxFiles) + ref + `]}`, 413, kiln.CodeTooLarge},
		{"body over the limit", jsonCT, `{"code":"` + strings.Repeat("x", api.TestMaxBody) + `"}`, 413, kiln.CodeTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newServer(t)
			rec := serve(t, h, "POST", "/exec", tt.contentType, tt.body, nil)
			checkError(t, rec, tt.status, tt.code)
			if n := len(h.Requests()); n != 0 {
				t.Errorf("got %d runs for a bad request, want 0", n)
			}
		})
	}
}

func TestExecAccepted(t *testing.T) {
	state := api.LZ4Frame(t, []byte("blob"))
	tests := []struct {
		name        string
		contentType string
		body        string
		check       func(t *testing.T, req executor.Request)
	}{
		{"no content type", "", `{"code":"print(1)"}`, func(t *testing.T, req executor.Request) {
			if req.Code != "print(1)" {
				t.Errorf("got code %q, want print(1)", req.Code)
			}
		}},
		{"JSON with charset", "application/json; charset=utf-8", `{"code":"1"}`, nil},
		{"vendor JSON type", "application/vnd.kiln+json", `{"code":"1"}`, nil},
		{"unknown fields ignored", jsonCT, `{"code":"1","future_field":{"a":[1]}}`, nil},
		{"body exactly at the limit", jsonCT, `{"code":"1"` + strings.Repeat(" ", api.TestMaxBody-len(`{"code":"1"}`)) + `}`, nil},
		{"defaults", jsonCT, `{"code":"1"}`, func(t *testing.T, req executor.Request) {
			if req.Lang != execution.LangPython || !req.CaptureState || req.Timeout != api.TestLimits.DefaultTimeout || req.State != nil || req.Args != nil {
				t.Errorf("got %+v, want python, capture_state true, the default timeout, no state or args", req)
			}
		}},
		{"IPython's language by default", jsonCT, `{"code":"%time 1"}`, func(t *testing.T, req executor.Request) {
			if req.PlainPython {
				t.Error("got plain Python, want IPython's language")
			}
		}},
		{"ipython false", jsonCT, `{"code":"1","ipython":false}`, func(t *testing.T, req executor.Request) {
			if !req.PlainPython {
				t.Error("got IPython's language, want plain Python")
			}
		}},
		{"capture_state false", jsonCT, `{"code":"1","capture_state":false}`, func(t *testing.T, req executor.Request) {
			if req.CaptureState {
				t.Errorf("got capture_state true, want false")
			}
		}},
		{"timeout in milliseconds", jsonCT, `{"code":"1","timeout":1500}`, func(t *testing.T, req executor.Request) {
			if req.Timeout != 1500*time.Millisecond {
				t.Errorf("got timeout %v, want 1.5s", req.Timeout)
			}
		}},
		{"negative timeout clamped to the minimum", jsonCT, `{"code":"1","timeout":-5}`, func(t *testing.T, req executor.Request) {
			if req.Timeout != api.TestLimits.MinTimeout {
				t.Errorf("got timeout %v, want the minimum %v", req.Timeout, api.TestLimits.MinTimeout)
			}
		}},
		{"long timeout clamped to the maximum", jsonCT, `{"code":"1","timeout":3600000}`, func(t *testing.T, req executor.Request) {
			if req.Timeout != api.TestLimits.MaxTimeout {
				t.Errorf("got timeout %v, want the maximum %v", req.Timeout, api.TestLimits.MaxTimeout)
			}
		}},
		{"state decoded", jsonCT, `{"code":"1","state":"` + base64.StdEncoding.EncodeToString(state) + `"}`, func(t *testing.T, req executor.Request) {
			if !bytes.Equal(req.State, state) {
				t.Errorf("got state %q, want %q", req.State, state)
			}
		}},
		{"null state", jsonCT, `{"code":"1","state":null}`, func(t *testing.T, req executor.Request) {
			if req.State != nil {
				t.Errorf("got state %q, want nil", req.State)
			}
		}},
		{"entity_id of 40 characters", jsonCT, `{"code":"1","entity_id":"` + strings.Repeat("A_-9", 10) + `"}`, nil},
		{"malformed session_id is a new session", jsonCT, `{"code":"1","session_id":"../../etc"}`, nil},
		{"args as a list", jsonCT, `{"code":"1","args":["a b","c"]}`, func(t *testing.T, req executor.Request) {
			if strings.Join(req.Args, "|") != "a b|c" {
				t.Errorf("got args %q, want [a b, c]", req.Args)
			}
		}},
		{"args as a string", jsonCT, `{"code":"1","args":" a  b\tc "}`, func(t *testing.T, req executor.Request) {
			if strings.Join(req.Args, "|") != "a|b|c" {
				t.Errorf("got args %q, want [a b c]", req.Args)
			}
		}},
		{"args null", jsonCT, `{"code":"1","args":null}`, func(t *testing.T, req executor.Request) {
			if req.Args != nil {
				t.Errorf("got args %q, want none", req.Args)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newServer(t)
			rec := serve(t, h, "POST", "/exec", tt.contentType, tt.body, nil)
			checkRequestID(t, rec)
			if rec.Code != http.StatusOK {
				t.Fatalf("got status %d, want 200 (body %s)", rec.Code, rec.Body)
			}
			reqs := h.Requests()
			if len(reqs) != 1 {
				t.Fatalf("got %d runs, want 1", len(reqs))
			}
			if tt.check != nil {
				tt.check(t, reqs[0])
			}
		})
	}
}

func TestExecLanguages(t *testing.T) {
	tests := []struct {
		lang string
		want string
	}{
		{"", execution.LangPython},
		{"py", execution.LangPython},
		{"python", execution.LangPython},
		{"python3", execution.LangPython},
		{"PY", execution.LangPython},
		{"Python3", execution.LangPython},
		{"bash", execution.LangBash},
		{"sh", execution.LangBash},
		{"ruby", ""},
		{"python2", ""},
		{"js", ""},
	}
	for _, tt := range tests {
		t.Run(tt.lang, func(t *testing.T) {
			h := newServer(t)
			rec := serve(t, h, "POST", "/v1/exec", jsonCT, mustJSON(t, map[string]string{"code": "1", "lang": tt.lang}), nil)
			if tt.want == "" {
				checkError(t, rec, 400, kiln.CodeLanguage)
				return
			}
			if rec.Code != 200 {
				t.Fatalf("got status %d, want 200 (body %s)", rec.Code, rec.Body)
			}
			if reqs := h.Requests(); len(reqs) != 1 || reqs[0].Lang != tt.want {
				t.Errorf("got requests %+v, want one with lang %s", reqs, tt.want)
			}
		})
	}
}

// TestExecResponse checks the body of a stateless run, field by field.
func TestExecResponse(t *testing.T) {
	errLine := "ZeroDivisionError: division by zero"
	var logs bytes.Buffer
	h := api.NewHarness(t, api.HarnessConfig{Log: &logs, Run: func(context.Context, executor.Request) (*executor.Result, error) {
		return &executor.Result{
			Status: execution.StatusError, ExitCode: 1, Stdout: "a\n", Stderr: "Traceback\n",
			Error: &errLine, State: []byte("new-state"), Truncated: true,
			QueueWait: 3 * time.Millisecond, ExecTime: 5 * time.Millisecond,
		}, nil
	}})
	rec := serve(t, h, "POST", "/exec", jsonCT, `{"code":"1/0","state":null}`, nil)
	checkRequestID(t, rec)
	body := decode[map[string]any](t, rec, http.StatusOK)
	want := map[string]any{
		"status": "error", "exit_code": float64(1), "stdout": "a\n", "stderr": "Traceback\n",
		"error": errLine, "result": nil, "truncated": true, "has_state": true,
		"state":      base64.StdEncoding.EncodeToString([]byte("new-state")),
		"state_size": float64(len("new-state")), "state_error": nil,
	}
	for k, v := range want {
		if body[k] != v {
			t.Errorf("field %s: got %v, want %v", k, body[k], v)
		}
	}
	if id, _ := body["session_id"].(string); !kiln.ValidID(id) {
		t.Errorf("got session_id %v, want a kiln id", body["session_id"])
	}
	if files, ok := body["files"].([]any); !ok || len(files) != 0 {
		t.Errorf("got files %v, want []", body["files"])
	}
	timing, _ := body["timing"].(map[string]any)
	if timing["queue_ms"] != 3.0 || timing["exec_ms"] != 5.0 {
		t.Errorf("got timing %v, want queue_ms 3 and exec_ms 5", timing)
	}
	if total, _ := timing["total_ms"].(float64); total < 0 {
		t.Errorf("got total_ms %v, want it non-negative", total)
	}
	// The request's log line tells how the run ended.
	type logLine struct {
		Msg, Route string
		Status     int
		PoolWaitMS float64 `json:"pool_wait_ms"`
		RunStatus  string  `json:"run_status"`
		ID         string  `json:"request_id"`
	}
	var line logLine
	for l := range strings.Lines(logs.String()) {
		var got logLine
		if json.Unmarshal([]byte(l), &got) == nil && got.Msg == "request" {
			line = got
			break
		}
	}
	if line.Msg != "request" || line.Route != "/exec" || line.Status != http.StatusOK || line.RunStatus != "error" ||
		line.PoolWaitMS != 3 || line.ID != rec.Header().Get("X-Request-Id") {
		t.Errorf("request log line %+v, want /exec 200 with run_status error, pool_wait_ms 3 and the request id; logs:\n%s", line, logs.String())
	}
}

// TestExecRunnerErrors checks the mapping of the runner's errors, and of a panic, to
// statuses.
func TestExecRunnerErrors(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		panics     bool
		status     int
		code       kiln.Code
		retryAfter string
	}{
		{"unavailable", &kiln.Error{Code: kiln.CodeUnavailable, Message: "busy", RetryAfter: 7}, false, 503, kiln.CodeUnavailable, "7"},
		{"too large", kiln.Errorf(kiln.CodeTooLarge, "state too big"), false, 413, kiln.CodeTooLarge, ""},
		{"invalid", kiln.Errorf(kiln.CodeInvalid, "code is empty"), false, 400, kiln.CodeInvalid, ""},
		{"unsupported language", kiln.Errorf(kiln.CodeLanguage, "no bash here"), false, 400, kiln.CodeLanguage, ""},
		{"internal", errors.New("docker: secret /var/run/docker.sock detail"), false, 500, kiln.CodeInternal, ""},
		{"panic", errors.New("docker: secret /var/run/docker.sock detail"), true, 500, kiln.CodeInternal, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := api.NewHarness(t, api.HarnessConfig{Run: func(context.Context, executor.Request) (*executor.Result, error) {
				if tt.panics {
					panic(tt.err)
				}
				return nil, tt.err
			}})
			rec := serve(t, h, "POST", "/exec", jsonCT, `{"code":"1"}`, nil)
			env := checkError(t, rec, tt.status, tt.code)
			if got := rec.Header().Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("got Retry-After %q, want %q", got, tt.retryAfter)
			}
			if tt.code == kiln.CodeInternal && strings.Contains(env.Message, "docker") {
				t.Errorf("got message %q, want no internal detail", env.Message)
			}
		})
	}
}

func TestNotFound(t *testing.T) {
	h := newServer(t)
	for _, tt := range []struct{ method, path string }{
		{"GET", "/nope"},
		{"GET", "/v1/nope"},
		{"GET", "/v2/exec"},
		{"GET", "/exec"},
		{"PUT", "/v1/exec"},
		{"POST", "/health"},
	} {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			rec := serve(t, h, tt.method, tt.path, "", "", nil)
			checkError(t, rec, 404, kiln.CodeNotFound)
		})
	}
}

func TestHealthRoutes(t *testing.T) {
	tests := []struct {
		name       string
		health     api.FakeHealth
		path       string
		status     int
		retryAfter bool
	}{
		{"health", api.FakeHealth{}, "/health", 200, false},
		{"live", api.FakeHealth{}, "/health/live", 200, false},
		{"live under v1", api.FakeHealth{}, "/v1/health/live", 200, false},
		{"ready", api.FakeHealth{}, "/health/ready", 200, false},
		{"live while not ready", api.FakeHealth{Err: errors.New("no docker")}, "/health", 200, false},
		{"not ready", api.FakeHealth{Err: errors.New("no docker")}, "/health/ready", 503, true},
		{"not ready under v1", api.FakeHealth{Err: errors.New("pool empty")}, "/v1/health/ready", 503, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := api.NewHarness(t, api.HarnessConfig{Keys: []string{"secret"}, Health: tt.health})
			rec := serve(t, h, "GET", tt.path, "", "", nil)
			checkRequestID(t, rec)
			if rec.Code != tt.status {
				t.Errorf("got status %d, want %d (body %s)", rec.Code, tt.status, rec.Body)
			}
			if got := rec.Header().Get("Retry-After") != ""; got != tt.retryAfter {
				t.Errorf("got Retry-After %q, want one: %v", rec.Header().Get("Retry-After"), tt.retryAfter)
			}
			var body map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Errorf("got body %q, want JSON: %v", rec.Body, err)
			}
		})
	}
}

// TestRequestIDsDiffer checks that two requests get two ids.
func TestRequestIDsDiffer(t *testing.T) {
	h := newServer(t)
	a := serve(t, h, "GET", "/health", "", "", nil).Header().Get("X-Request-Id")
	b := serve(t, h, "GET", "/health", "", "", nil).Header().Get("X-Request-Id")
	if a == "" || a == b {
		t.Errorf("got request ids %q and %q, want two different ones", a, b)
	}
}

// TestSandboxReleasedAfterTheAnswerIsOut: the handler hands the sandbox back only once
// the client has the whole answer. The result's release waits for the client to have
// read the body; were it called before the answer was written and flushed, the client
// could not read it, and the release would give up waiting.
func TestSandboxReleasedAfterTheAnswerIsOut(t *testing.T) {
	clientHasAnswer := make(chan struct{})
	ran := make(chan bool, 1) // whether the client had the answer when the release ran
	h := api.NewHarness(t, api.HarnessConfig{Release: func() {
		select {
		case <-clientHasAnswer:
			ran <- true
		case <-time.After(5 * time.Second):
			ran <- false
		}
	}})
	srv := httptest.NewServer(h)
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/exec", jsonCT, strings.NewReader(`{"code":"print(1)"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body) // would block until the release gave up, were it called first
	resp.Body.Close()
	close(clientHasAnswer)
	if err != nil || resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(body)) {
		t.Fatalf("got %d, %d of %d bytes, err %v", resp.StatusCode, len(body), resp.ContentLength, err)
	}
	if !<-ran {
		t.Errorf("the sandbox was released before the client had the answer")
	}
}
