// Package integration drives a real kiln process, with the real sandbox image on the
// real Docker daemon, through its HTTP API. One server is shared by the package.
package integration

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

var srv *kilntest.Server

// The shared server accepts two keys; helpers send keyA unless told otherwise.
const (
	keyA = "integration-key-a"
	keyB = "integration-key-b"
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	dataDir, err := os.MkdirTemp("", "kiln-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dataDir)
	srv, err = kilntest.Start(kilntest.Options{Key: keyA, Env: []string{
		"POOL_SIZE=2", "TIMEOUT_GRACE_MS=1000", "SANDBOX_MEMORY_MB=256", "SANDBOX_DATA_MB=64",
		"QUEUE_TIMEOUT_SECONDS=90", "MAX_QUEUE=16", "DATA_DIR=" + dataDir, "API_KEYS=" + keyA + "," + keyB,
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting kiln:", err)
		return 1
	}
	code := m.Run()
	if err := srv.Stop(60 * time.Second); err != nil {
		fmt.Fprintf(os.Stderr, "kiln did not stop cleanly: %v\n", err)
		code = 1
	}
	left, err := kilntest.Containers(srv.Instance)
	if err != nil || len(left) > 0 {
		fmt.Fprintf(os.Stderr, "containers left after shutdown: %v (err %v)\n", left, err)
		code = 1
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "--- kiln log ---\n%s", tail(srv.Logs(), 8000))
	}
	return code
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// run posts body to /exec on the shared server and fails the test unless the answer
// is a 200.
func run(t *testing.T, body map[string]any) kilntest.ExecResponse {
	t.Helper()
	return runOn(t, srv, body)
}

func runOn(t *testing.T, s *kilntest.Server, body map[string]any) kilntest.ExecResponse {
	t.Helper()
	var out kilntest.ExecResponse
	resp, err := s.PostJSON("/exec", body, &out)
	if err != nil {
		t.Fatalf("POST /exec: %v", err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("POST /exec: status %d: %s", resp.StatusCode, out.Message)
	}
	return out
}
