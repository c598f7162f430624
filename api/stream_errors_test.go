package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
	"github.com/kilnsh/kiln/executor"
)

// TestExecStreamErrorsAfterTheStart: once the stream has begun, a failure is an error
// event in the envelope's shape, the stream's last; internal detail stays in the log.
func TestExecStreamErrorsAfterTheStart(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		code    kiln.Code
		message string
	}{
		{"kiln error", kiln.Errorf(kiln.CodeUnavailable, "the sandbox died"), kiln.CodeUnavailable, "the sandbox died"},
		{"internal error", errors.New("docker: /var/run/docker.sock: broken pipe"), kiln.CodeInternal, "internal error; see the server log with this request id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := api.NewHarness(t, api.HarnessConfig{Run: func(_ context.Context, req executor.Request) (*executor.Result, error) {
				req.OnStart()
				return nil, tt.err
			}})
			rec := serve(t, h, "POST", "/exec", jsonCT, `{"code":"1"}`, http.Header{"Accept": {"text/event-stream"}})
			if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/event-stream" {
				t.Fatalf("got %d %q, want 200 text/event-stream", rec.Code, rec.Header().Get("Content-Type"))
			}
			events := parseSSE(t, rec.Body.String())
			if len(events) != 2 || events[0].Name != "start" || events[1].Name != "error" {
				t.Fatalf("got events %+v, want start then error", events)
			}
			var env errorEnvelope
			if err := json.Unmarshal([]byte(events[1].Data), &env); err != nil {
				t.Fatalf("error event %q: %v", events[1].Data, err)
			}
			if env.Error != string(tt.code) || env.Message != tt.message || env.RequestID != rec.Header().Get("X-Request-Id") {
				t.Errorf("got error event %+v, want %s %q with the request id %s", env, tt.code, tt.message, rec.Header().Get("X-Request-Id"))
			}
		})
	}
}

// TestExecStreamClientGone: a client that hangs up after the stream began is sent
// nothing more.
func TestExecStreamClientGone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := api.NewHarness(t, api.HarnessConfig{Run: func(ctx context.Context, req executor.Request) (*executor.Result, error) {
		req.OnStart()
		cancel() // the client hangs up
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	req := httptest.NewRequestWithContext(ctx, "POST", "/exec", strings.NewReader(`{"code":"1"}`))
	req.Header.Set("Accept", "text/event-stream")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	events := parseSSE(t, rec.Body.String())
	if len(events) != 1 || events[0].Name != "start" {
		t.Errorf("got events %+v, want the start alone", events)
	}
}
