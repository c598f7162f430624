// Package fault drives real kiln processes through the failures security.md lists
// (cases 23 and 25): the Docker daemon restarting under load, SIGTERM during a run,
// and a sandbox killed from outside, plus the per-key limits and the server's
// defences against slow clients. Every test starts its own kiln on the real daemon
// with the real image, and checks that no container of it is left.
//
// Case 21 (a client that hangs up) is test/abuse's TestCase21ClientDisconnect; case
// 24 (SIGKILL, then orphans removed at the next start) is test/integration's
// TestOrphansRemovedAtNextStart.
package fault

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

const key = "fault-key"

// start runs a kiln for one test, with env added to the defaults here, and stops it
// when the test ends (unless the test stopped it), checking that it leaves nothing.
func start(t *testing.T, env ...string) *kilntest.Server {
	t.Helper()
	base := []string{"API_KEYS=" + key, "DATA_DIR=" + t.TempDir(), "TIMEOUT_GRACE_MS=1000",
		"SANDBOX_MEMORY_MB=256", "SANDBOX_DATA_MB=64"}
	s, err := kilntest.Start(kilntest.Options{Key: key, Env: append(base, env...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-s.Exited():
		default:
			if err := s.Stop(60 * time.Second); err != nil {
				t.Errorf("kiln did not stop cleanly: %v", err)
			}
		}
		if left, err := kilntest.Containers(s.Instance); err != nil || len(left) > 0 {
			t.Errorf("containers of %s left after stop: %v (err %v)", s.Instance, left, err)
		}
		if t.Failed() {
			t.Logf("--- kiln log (tail) ---\n%s", tail(s.Logs(), 12000))
		}
	})
	return s
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// result is what one /exec call came to: an HTTP status and body, or a transport error.
type result struct {
	status int
	header http.Header
	body   kilntest.ExecResponse
	envl   kilntest.ErrorBody
	err    error
	took   time.Duration
}

// execWithin posts body to /exec with a client deadline of bound: a call that takes
// longer comes back with an error, which is what a hang looks like.
func execWithin(s *kilntest.Server, bound time.Duration, body map[string]any) result {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	return execCtx(ctx, s, body)
}

func execCtx(ctx context.Context, s *kilntest.Server, body map[string]any) result {
	start := time.Now()
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/exec", bytes.NewReader(b))
	if err != nil {
		return result{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	r := result{status: resp.StatusCode, header: resp.Header, err: err, took: time.Since(start)}
	if resp.StatusCode == http.StatusOK {
		_ = json.Unmarshal(raw, &r.body)
	} else {
		_ = json.Unmarshal(raw, &r.envl)
	}
	return r
}

// readyStatus returns the status of GET /health/ready, or 0 when it does not answer
// within a second.
func readyStatus(s *kilntest.Server) int {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(s.URL + "/health/ready")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// running lists the instance's running containers by full id.
func running(t *testing.T, instance string) []string {
	t.Helper()
	out, err := kilntest.Docker("ps", "-q", "--no-trunc", "--filter", "status=running",
		"--filter", "label=kiln.instance="+instance)
	if err != nil {
		t.Fatalf("docker ps: %v: %s", err, out)
	}
	return strings.Fields(out)
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
