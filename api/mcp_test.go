package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
	"github.com/kilnsh/kiln/session"
)

// fakeMCP stands for the MCP handler mounted at /mcp: it records who each message came
// from.
type fakeMCP struct {
	mu      sync.Mutex
	callers []session.Caller
}

func (m *fakeMCP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.callers = append(m.callers, api.CallerFrom(r.Context()))
	m.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// Callers returns who the messages came from, in order.
func (m *fakeMCP) Callers() []session.Caller {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]session.Caller(nil), m.callers...)
}

// mcpServer is a Server with handler at /mcp, keys k1 and k2 and fakeTokens' tokens.
func mcpServer(t *testing.T, handler http.Handler, rl api.RateLimit) *api.Server {
	t.Helper()
	return api.New(api.Config{
		Keys: api.NewKeys([]string{"k1", "k2"}), Tokens: fakeTokens{}, Log: slog.New(slog.DiscardHandler),
		MaxBodyBytes: api.TestMaxBody, RateLimit: rl, MCP: handler,
	})
}

// TestMCPCaller: the MCP handler is told who sent each message, as requireKey found
// them; a message without a valid credential never reaches it.
func TestMCPCaller(t *testing.T) {
	m := &fakeMCP{}
	s := mcpServer(t, m, api.RateLimit{})
	bearer := func(v string) http.Header { return http.Header{"Authorization": {"Bearer " + v}} }
	for _, hdr := range []http.Header{withKey("k1"), withKey("k2"), withKey("k1"), bearer(token("user-a")), bearer(token("user-b")), bearer(token("user-c"))} {
		if rec := serve(t, s, "POST", "/mcp", jsonCT, `{}`, hdr); rec.Code != http.StatusOK {
			t.Fatalf("got %d for %v, want 200", rec.Code, hdr)
		}
	}
	for _, hdr := range []http.Header{nil, withKey("k3"), bearer(token("stale"))} {
		checkError(t, serve(t, s, "POST", "/mcp", jsonCT, `{}`, hdr), http.StatusUnauthorized, kiln.CodeUnauthorized)
	}
	got := m.Callers()
	if len(got) != 6 {
		t.Fatalf("the handler heard %d messages, want the 6 authenticated ones: %+v", len(got), got)
	}
	k1, k2, k1again, a, b, c := got[0], got[1], got[2], got[3], got[4], got[5]
	if k1.Key == "" || k1 != k1again || k1.Key == k2.Key || k1.User != "" || k1.Proven {
		t.Errorf("got callers %+v, %+v, %+v for keys k1, k2, k1; want each key its own owner, no user, unproven", k1, k2, k1again)
	}
	if a.User != "user-a" || !a.Proven || b.User != "user-b" || !b.Proven || a.Key != b.Key || a.Key == c.Key || a.Key == k1.Key {
		t.Errorf("got callers %+v, %+v, %+v for tokens; want each its proven user, one owner per tenant", a, b, c)
	}
}

// TestMCPOutsideARequest: a context that is no request's has no caller.
func TestMCPOutsideARequest(t *testing.T) {
	if got := api.CallerFrom(context.Background()); got != (session.Caller{}) {
		t.Errorf("CallerFrom = %+v, want the zero caller", got)
	}
}

// TestMCPRateLimited: every MCP message counts against the caller's rate limit.
func TestMCPRateLimited(t *testing.T) {
	m := &fakeMCP{}
	s := mcpServer(t, m, api.RateLimit{PerMinute: 2})
	for i, want := range []int{200, 200, 429} {
		if rec := serve(t, s, "POST", "/mcp", jsonCT, `{}`, withKey("k1")); rec.Code != want {
			t.Errorf("message %d: got %d, want %d", i+1, rec.Code, want)
		}
	}
	if rec := serve(t, s, "POST", "/mcp", jsonCT, `{}`, withKey("k2")); rec.Code != http.StatusOK {
		t.Errorf("another key's message: got %d, want 200", rec.Code)
	}
	if n := len(m.Callers()); n != 3 {
		t.Errorf("the handler heard %d messages, want the 3 within the limit", n)
	}
}

// TestHandlerPanics: a handler's panic is a 500 with the envelope and nothing of the
// panic in it; http.ErrAbortHandler goes on up, for net/http to abort the response.
func TestHandlerPanics(t *testing.T) {
	var value any
	s := mcpServer(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(value) }), api.RateLimit{})
	value = "secret detail"
	env := checkError(t, serve(t, s, "POST", "/mcp", jsonCT, `{}`, withKey("k1")), http.StatusInternalServerError, kiln.CodeInternal)
	if env.Message != "internal error; see the server log with this request id" {
		t.Errorf("got message %q, want the generic one", env.Message)
	}

	value = http.ErrAbortHandler
	defer func() {
		if p := recover(); p != http.ErrAbortHandler {
			t.Errorf("got panic %v, want http.ErrAbortHandler to go on up", p)
		}
	}()
	serve(t, s, "POST", "/mcp", jsonCT, `{}`, withKey("k1"))
	t.Error("ServeHTTP returned, want it to panic with http.ErrAbortHandler")
}
