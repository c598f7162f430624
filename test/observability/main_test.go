package observability

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

func TestMain(m *testing.M) {
	if out, err := kilntest.Docker("info", "--format", "{{.ServerVersion}}"); err != nil {
		fmt.Fprintf(os.Stderr, "observability tests skipped: no Docker daemon answers (%v: %s)\n", err, strings.TrimSpace(out))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// start runs a kiln with an API key and stops it when the test ends.
func start(t *testing.T, env ...string) *kilntest.Server {
	t.Helper()
	const key = "observability-test-key"
	s, err := kilntest.Start(kilntest.Options{Env: append([]string{"API_KEYS=" + key}, env...), Key: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(60e9); err != nil {
			t.Errorf("stopping kiln: %v", err)
		}
	})
	return s
}

// get fetches path with the server's key and fails the test unless it answers want.
func get(t *testing.T, s *kilntest.Server, path string, want int) []byte {
	t.Helper()
	resp, body, err := s.Request(http.MethodGet, path, nil, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != want {
		t.Fatalf("GET %s = %d, want %d: %s", path, resp.StatusCode, want, body)
	}
	return body
}

// execOK runs code and fails the test unless the run reports status want.
func execOK(t *testing.T, s *kilntest.Server, code, want string) {
	t.Helper()
	var out kilntest.ExecResponse
	resp, err := s.PostJSON("/exec", map[string]any{"code": code, "lang": "py"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || out.Status != want {
		t.Fatalf("exec %q = %d %q, want 200 %q (%s)", code, resp.StatusCode, out.Status, want, out.Message)
	}
}

// execInSession runs Python code in session sid ("" for a new one) and fails the test
// unless it ends ok where want says it ran (runtime_status: new, reused or resumed). It
// returns the session's id.
func execInSession(t *testing.T, s *kilntest.Server, sid, code, want string) string {
	t.Helper()
	var out struct {
		SessionID     string `json:"session_id"`
		Status        string `json:"status"`
		RuntimeStatus string `json:"runtime_status"`
		Message       string `json:"message"`
	}
	req := map[string]any{"code": code, "lang": "py"}
	if sid != "" {
		req["session_id"] = sid
	}
	resp, err := s.PostJSON("/exec", req, &out)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || out.Status != "ok" || out.RuntimeStatus != want {
		t.Fatalf("exec %q in session %q = %d %q runtime_status %q, want 200 ok %q (%s)",
			code, sid, resp.StatusCode, out.Status, out.RuntimeStatus, want, out.Message)
	}
	return out.SessionID
}
