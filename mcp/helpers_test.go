package mcp_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/mcp"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/session"
	"github.com/kilnsh/kiln/store"
)

const testKey = "test-key"

// pngBytes is the start of a PNG, enough for a client to see an image block.
var pngBytes = []byte("\x89PNG\r\n\x1a\nfake")

// fakeRunner stands for the executor: its "code" is a small script of commands, one
// a line: "print TEXT", "state TEXT" (the new state), "file NAME TEXT", "png NAME",
// "wait" (until the run is cancelled), "fail TEXT".
type fakeRunner struct {
	mu      sync.Mutex
	cancels map[string]context.CancelFunc
	states  []string // the state each run was given
	onError []string // each run's on_error
	plain   []bool   // each run's PlainPython
	ended   chan string
}

func (f *fakeRunner) Run(ctx context.Context, req executor.Request) (*executor.Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f.mu.Lock()
	f.cancels[req.ExecutionID] = cancel
	f.states = append(f.states, string(req.State))
	f.onError = append(f.onError, req.OnError)
	f.plain = append(f.plain, req.PlainPython)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.cancels, req.ExecutionID)
		f.mu.Unlock()
		select {
		case f.ended <- req.ExecutionID:
		default:
		}
	}()
	if req.OnStart != nil {
		req.OnStart()
	}
	res := &executor.Result{Status: execution.StatusOK, State: req.State, ExecutionID: req.ExecutionID}
	for _, line := range strings.Split(req.Code, "\n") {
		cmd, arg, _ := strings.Cut(line, " ")
		switch cmd {
		case "print":
			res.Stdout += arg + "\n"
			if req.OnEvent != nil {
				req.OnEvent(protocol.Event{Type: protocol.EventOutput, Stream: "stdout", Text: arg + "\n"})
			}
		case "state":
			res.State = []byte(arg)
		case "file":
			name, text, _ := strings.Cut(arg, " ")
			res.Files = append(res.Files, protocol.File{Path: name, Content: []byte(text)})
		case "png":
			res.Files = append(res.Files, protocol.File{Path: arg, Content: pngBytes})
		case "wait":
			<-ctx.Done()
			res.Status = execution.StatusCancelled
			return res, nil
		case "fail":
			res.Status, res.Error = execution.StatusError, &arg
		}
	}
	return res, nil
}

// lastStates returns the states the last n runs were given.
func (f *fakeRunner) lastStates(n int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.states[len(f.states)-n:]...)
}

func (f *fakeRunner) cancel(id, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.cancels[id]
	if !ok {
		return kiln.Errorf(kiln.CodeNotFound, "execution %s not found", id)
	}
	c()
	return nil
}

// env is kiln's HTTP handler with /mcp, over a disk store and the fake runner.
type env struct {
	url    string
	runner *fakeRunner
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvLimit(t, 4)
}

// newEnvLimit is newEnv with concurrent executions per key limited to n.
func newEnvLimit(t *testing.T, n int) *env {
	t.Helper()
	st, err := store.OpenDisk(t.TempDir(), time.Hour)
	if err != nil {
		t.Fatalf("OpenDisk: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	run := &fakeRunner{cancels: map[string]context.CancelFunc{}, ended: make(chan string, 16)}
	log := slog.New(slog.DiscardHandler)
	sessions := session.New(session.Config{
		Store: st, Runner: run, Validate: func(*executor.Request) error { return nil },
		CheckState: func([]byte) error { return nil }, Cancel: run.cancel,
		Limits: session.Limits{MaxFileBytes: 1 << 20, MaxFilesPerSession: 10, MaxConcurrent: n}, Log: log,
	})
	h := mcp.New(mcp.Config{
		Sessions: sessions, Log: log, ProgressEvery: 200 * time.Millisecond,
		Caller: func(r *http.Request) session.Caller { return api.CallerFrom(r.Context()) },
	})
	srv := httptest.NewServer(api.New(api.Config{
		Keys: api.NewKeys([]string{testKey, "other-key"}), Sessions: sessions, Log: log, MCP: h,
		MaxBodyBytes: 1 << 20,
	}))
	t.Cleanup(func() {
		h.Close()
		srv.Close()
	})
	return &env{url: srv.URL, runner: run}
}

type keyed struct {
	key string
}

func (k keyed) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-API-Key", k.key)
	return http.DefaultTransport.RoundTrip(r)
}

// connect returns a client session to /mcp with key; opts may be nil.
func (e *env) connect(t *testing.T, key string, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts)
	cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{
		Endpoint: e.url + "/mcp", HTTPClient: &http.Client{Transport: keyed{key}},
	}, nil)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and returns its result and its structuredContent decoded.
func call[T any](t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (*sdk.CallToolResult, T) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool(%s): %v", name, err)
	}
	var out T
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: structuredContent %s: %v", name, b, err)
		}
	}
	return res, out
}

type execOut struct {
	SessionID string `json:"session_id"`
	Status    string `json:"status"`
	Stdout    string `json:"stdout"`
	Files     []struct {
		Name string `json:"name"`
		URI  string `json:"uri"`
	} `json:"files"`
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

// waitRunning starts an execute of "wait" in the background and returns once it runs.
func waitRunning(t *testing.T, e *env, cs *sdk.ClientSession) <-chan *sdk.CallToolResult {
	t.Helper()
	// The client's Close waits for its calls: this one ends before it, at the latest.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan *sdk.CallToolResult, 1)
	go func() {
		res, _ := cs.CallTool(ctx, &sdk.CallToolParams{Name: "execute", Arguments: map[string]any{"code": "wait"}})
		done <- res
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.runner.mu.Lock()
		n := len(e.runner.cancels)
		e.runner.mu.Unlock()
		if n > 0 {
			return done
		}
		if time.Now().After(deadline) {
			t.Fatal("the run did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
