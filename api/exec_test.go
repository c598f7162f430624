package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
	"github.com/kilnsh/kiln/executor"
)

// fakeRunner records the requests it gets and answers with res or err.
type fakeRunner struct {
	res *executor.Result
	err error

	mu  sync.Mutex
	got []executor.Request
}

func (f *fakeRunner) Run(ctx context.Context, req executor.Request) (*executor.Result, error) {
	f.mu.Lock()
	f.got = append(f.got, req)
	f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	if f.res != nil {
		return f.res, nil
	}
	return &executor.Result{Status: executor.StatusOK, Stdout: "hi\n", QueueWait: time.Millisecond, ExecTime: 2 * time.Millisecond}, nil
}

func (f *fakeRunner) requests() []executor.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]executor.Request(nil), f.got...)
}

// fakeHealth is ready unless err is set.
type fakeHealth struct{ err error }

func (h fakeHealth) Ready(context.Context) error { return h.err }
func (h fakeHealth) Detailed(context.Context) any {
	return map[string]string{"status": "ok"}
}

const testMaxBody = 4096

func newServer(t *testing.T, keys []string, run api.Runner, health api.Health) http.Handler {
	t.Helper()
	if health == nil {
		health = fakeHealth{}
	}
	return api.New(api.Config{
		Keys:         api.NewKeys(keys),
		Runner:       run,
		Health:       health,
		Log:          slog.New(slog.DiscardHandler),
		MaxBodyBytes: testMaxBody,
	})
}

// serve sends one request to h and returns the recorded response.
func serve(t *testing.T, h http.Handler, method, path, contentType, body string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

type errorEnvelope struct {
	Error     string `json:"error"`
	Message   string `json:"message"`
	RequestID string `json:"request_id"`
}

// checkRequestID checks that the response carries a well-formed X-Request-Id.
func checkRequestID(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if id := rec.Header().Get("X-Request-Id"); !kiln.ValidID(id) {
		t.Errorf("got X-Request-Id %q, want a kiln id", id)
	}
}

// checkError checks an error response: its status, its envelope with exactly the
// fields error, message and request_id, and the request id matching the header.
func checkError(t *testing.T, rec *httptest.ResponseRecorder, status int, code kiln.Code) errorEnvelope {
	t.Helper()
	checkRequestID(t, rec)
	if rec.Code != status {
		t.Errorf("got status %d, want %d (body %s)", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("got Content-Type %q, want application/json", ct)
	}
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatalf("got body %q, want a JSON error envelope: %v", rec.Body, err)
	}
	for _, k := range []string{"error", "message", "request_id"} {
		if _, ok := raw[k].(string); !ok {
			t.Errorf("got envelope %v, want string field %q", raw, k)
		}
	}
	var env errorEnvelope
	_ = json.Unmarshal(rec.Body.Bytes(), &env)
	if env.Error != string(code) {
		t.Errorf("got error code %q (%s), want %q", env.Error, env.Message, code)
	}
	if env.Message == "" {
		t.Errorf("got an empty message, want a sentence")
	}
	if env.RequestID != rec.Header().Get("X-Request-Id") {
		t.Errorf("got request_id %q, want the X-Request-Id header %q", env.RequestID, rec.Header().Get("X-Request-Id"))
	}
	return env
}

func TestExecBadRequests(t *testing.T) {
	const jsonCT = "application/json"
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
		{"missing code", jsonCT, `{"lang":"py"}`, 400, kiln.CodeInvalid},
		{"null code", jsonCT, `{"code":null}`, 400, kiln.CodeInvalid},
		{"entity_id too long", jsonCT, `{"code":"1","entity_id":"` + strings.Repeat("a", 41) + `"}`, 400, kiln.CodeInvalid},
		{"entity_id with a dot", jsonCT, `{"code":"1","entity_id":"agent.1"}`, 400, kiln.CodeInvalid},
		{"entity_id with a slash", jsonCT, `{"code":"1","entity_id":"../x"}`, 400, kiln.CodeInvalid},
		{"state not base64", jsonCT, `{"code":"1","state":"not base64!"}`, 400, kiln.CodeInvalid},
		{"state not a string", jsonCT, `{"code":"1","state":123}`, 400, kiln.CodeInvalid},
		{"state and session_id", jsonCT, `{"code":"1","state":"BCJNGA==","session_id":"abcdefghijklmnopqrstu"}`, 400, kiln.CodeInvalid},
		{"args of the wrong type", jsonCT, `{"code":"1","args":42}`, 400, kiln.CodeInvalid},
		{"args list of numbers", jsonCT, `{"code":"1","args":[1,2]}`, 400, kiln.CodeInvalid},
		{"unsupported language", jsonCT, `{"code":"1","lang":"ruby"}`, 400, kiln.CodeLanguage},
		{"language of the wrong type", jsonCT, `{"code":"1","lang":3}`, 400, kiln.CodeInvalid},
		{"body over the limit", jsonCT, `{"code":"` + strings.Repeat("x", testMaxBody) + `"}`, 413, kiln.CodeTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := &fakeRunner{}
			h := newServer(t, nil, run, nil)
			rec := serve(t, h, "POST", "/exec", tt.contentType, tt.body, nil)
			checkError(t, rec, tt.status, tt.code)
			if n := len(run.requests()); n != 0 {
				t.Errorf("got %d runs for a bad request, want 0", n)
			}
		})
	}
}

func TestExecAccepted(t *testing.T) {
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
		{"unknown fields ignored", "application/json", `{"code":"1","future_field":{"a":[1]}}`, nil},
		{"body exactly at the limit", "application/json", `{"code":"` + strings.Repeat("x", testMaxBody-len(`{"code":""}`)) + `"}`, nil},
		{"defaults", "application/json", `{"code":"1"}`, func(t *testing.T, req executor.Request) {
			if req.Lang != executor.LangPython || !req.CaptureState || req.Timeout != 0 || req.State != nil || req.Args != nil {
				t.Errorf("got %+v, want python, capture_state true, no timeout, state or args", req)
			}
		}},
		{"capture_state false", "application/json", `{"code":"1","capture_state":false}`, func(t *testing.T, req executor.Request) {
			if req.CaptureState {
				t.Errorf("got capture_state true, want false")
			}
		}},
		{"timeout in milliseconds", "application/json", `{"code":"1","timeout":1500}`, func(t *testing.T, req executor.Request) {
			if req.Timeout != 1500*time.Millisecond {
				t.Errorf("got timeout %v, want 1.5s", req.Timeout)
			}
		}},
		{"negative timeout clamped up", "application/json", `{"code":"1","timeout":-5}`, func(t *testing.T, req executor.Request) {
			if req.Timeout != time.Millisecond {
				t.Errorf("got timeout %v, want 1ms for the executor to clamp to its minimum", req.Timeout)
			}
		}},
		{"state decoded", "application/json", `{"code":"1","state":"` + base64.StdEncoding.EncodeToString([]byte("blob")) + `"}`, func(t *testing.T, req executor.Request) {
			if string(req.State) != "blob" {
				t.Errorf("got state %q, want blob", req.State)
			}
		}},
		{"null state", "application/json", `{"code":"1","state":null}`, func(t *testing.T, req executor.Request) {
			if req.State != nil {
				t.Errorf("got state %q, want nil", req.State)
			}
		}},
		{"entity_id of 40 characters", "application/json", `{"code":"1","entity_id":"` + strings.Repeat("A_-9", 10) + `"}`, nil},
		{"args as a list", "application/json", `{"code":"1","args":["a b","c"]}`, func(t *testing.T, req executor.Request) {
			if strings.Join(req.Args, "|") != "a b|c" {
				t.Errorf("got args %q, want [a b, c]", req.Args)
			}
		}},
		{"args as a string", "application/json", `{"code":"1","args":" a  b\tc "}`, func(t *testing.T, req executor.Request) {
			if strings.Join(req.Args, "|") != "a|b|c" {
				t.Errorf("got args %q, want [a b c]", req.Args)
			}
		}},
		{"args null", "application/json", `{"code":"1","args":null}`, func(t *testing.T, req executor.Request) {
			if req.Args != nil {
				t.Errorf("got args %q, want none", req.Args)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := &fakeRunner{}
			h := newServer(t, nil, run, nil)
			rec := serve(t, h, "POST", "/exec", tt.contentType, tt.body, nil)
			checkRequestID(t, rec)
			if rec.Code != http.StatusOK {
				t.Fatalf("got status %d, want 200 (body %s)", rec.Code, rec.Body)
			}
			reqs := run.requests()
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
		{"", executor.LangPython},
		{"py", executor.LangPython},
		{"python", executor.LangPython},
		{"python3", executor.LangPython},
		{"PY", executor.LangPython},
		{"Python3", executor.LangPython},
		{"bash", executor.LangBash},
		{"sh", executor.LangBash},
		{"ruby", ""},
		{"python2", ""},
		{"js", ""},
	}
	for _, tt := range tests {
		t.Run(tt.lang, func(t *testing.T) {
			run := &fakeRunner{}
			h := newServer(t, nil, run, nil)
			body, _ := json.Marshal(map[string]string{"code": "1", "lang": tt.lang})
			rec := serve(t, h, "POST", "/v1/exec", "application/json", string(body), nil)
			if tt.want == "" {
				checkError(t, rec, 400, kiln.CodeLanguage)
				return
			}
			if rec.Code != 200 {
				t.Fatalf("got status %d, want 200 (body %s)", rec.Code, rec.Body)
			}
			if reqs := run.requests(); len(reqs) != 1 || reqs[0].Lang != tt.want {
				t.Errorf("got requests %+v, want one with lang %s", reqs, tt.want)
			}
		})
	}
}

// TestExecResponse checks the body of a successful stateless run.
func TestExecResponse(t *testing.T) {
	errLine := "ZeroDivisionError: division by zero"
	run := &fakeRunner{res: &executor.Result{
		Status: executor.StatusError, ExitCode: 1, Stdout: "a\n", Stderr: "Traceback\n",
		Error: &errLine, State: []byte("new-state"), Truncated: true,
		QueueWait: 3 * time.Millisecond, ExecTime: 5 * time.Millisecond,
	}}
	h := newServer(t, nil, run, nil)
	rec := serve(t, h, "POST", "/exec", "application/json", `{"code":"1/0","state":null}`, nil)
	checkRequestID(t, rec)
	if rec.Code != 200 {
		t.Fatalf("got status %d, want 200 (body %s)", rec.Code, rec.Body)
	}
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("got body %q: %v", rec.Body, err)
	}
	want := map[string]any{
		"status": "error", "exit_code": float64(1), "stdout": "a\n", "stderr": "Traceback\n",
		"error": errLine, "result": nil, "truncated": true, "has_state": true,
		"state":      base64.StdEncoding.EncodeToString([]byte("new-state")),
		"state_size": float64(len("new-state")),
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
}

// TestExecRunnerErrors checks the mapping of the runner's errors to statuses.
func TestExecRunnerErrors(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		status     int
		code       kiln.Code
		retryAfter string
	}{
		{"unavailable", &kiln.Error{Code: kiln.CodeUnavailable, Message: "busy", RetryAfter: 7}, 503, kiln.CodeUnavailable, "7"},
		{"too large", kiln.Errorf(kiln.CodeTooLarge, "state too big"), 413, kiln.CodeTooLarge, ""},
		{"invalid", kiln.Errorf(kiln.CodeInvalid, "code is empty"), 400, kiln.CodeInvalid, ""},
		{"unsupported language", kiln.Errorf(kiln.CodeLanguage, "no bash here"), 400, kiln.CodeLanguage, ""},
		{"internal", errors.New("docker: secret /var/run/docker.sock detail"), 500, kiln.CodeInternal, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newServer(t, nil, &fakeRunner{err: tt.err}, nil)
			rec := serve(t, h, "POST", "/exec", "application/json", `{"code":"1"}`, nil)
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
	h := newServer(t, nil, &fakeRunner{}, nil)
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
		health     fakeHealth
		path       string
		status     int
		retryAfter bool
	}{
		{"health", fakeHealth{}, "/health", 200, false},
		{"live", fakeHealth{}, "/health/live", 200, false},
		{"live under v1", fakeHealth{}, "/v1/health/live", 200, false},
		{"ready", fakeHealth{}, "/health/ready", 200, false},
		{"live while not ready", fakeHealth{err: errors.New("no docker")}, "/health", 200, false},
		{"not ready", fakeHealth{err: errors.New("no docker")}, "/health/ready", 503, true},
		{"not ready under v1", fakeHealth{err: errors.New("pool empty")}, "/v1/health/ready", 503, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newServer(t, []string{"secret"}, &fakeRunner{}, tt.health)
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
	h := newServer(t, nil, &fakeRunner{}, nil)
	a := serve(t, h, "GET", "/health", "", "", nil).Header().Get("X-Request-Id")
	b := serve(t, h, "GET", "/health", "", "", nil).Header().Get("X-Request-Id")
	if a == "" || a == b {
		t.Errorf("got request ids %q and %q, want two different ones", a, b)
	}
}

// drain reads and closes a client response body.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// afterRunner postpones work with kiln.After that waits for the client to have read
// the whole answer: it can only finish if the answer went out before the work ran.
type afterRunner struct {
	clientHasAnswer chan struct{}
	ran             chan bool // whether the client had the answer when the work ran
}

func (f *afterRunner) Run(ctx context.Context, req executor.Request) (*executor.Result, error) {
	kiln.After(ctx, func() {
		select {
		case <-f.clientHasAnswer:
			f.ran <- true
		case <-time.After(5 * time.Second):
			f.ran <- false
		}
	})
	return &executor.Result{Status: executor.StatusOK, Stdout: "hi\n"}, nil
}

func TestPostponedWorkRunsAfterTheAnswerIsOut(t *testing.T) {
	run := &afterRunner{clientHasAnswer: make(chan struct{}), ran: make(chan bool, 1)}
	srv := httptest.NewServer(newServer(t, nil, run, nil))
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/exec", "application/json", strings.NewReader(`{"code":"print(1)"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body) // would block until the work gave up, were it run first
	resp.Body.Close()
	close(run.clientHasAnswer)
	if err != nil || resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(body)) {
		t.Fatalf("got %d, %d of %d bytes, err %v", resp.StatusCode, len(body), resp.ContentLength, err)
	}
	if !<-run.ran {
		t.Errorf("the postponed work ran before the client had the answer")
	}
}
