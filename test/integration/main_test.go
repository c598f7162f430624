// Package integration drives a real kiln process, with the real sandbox image on the
// real Docker daemon, through its HTTP API. One server is shared by the package.
package integration

import (
	"os"
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

var srv *kilntest.Server

// The shared server accepts two keys; helpers send keyA unless told otherwise.
const (
	keyA = "integration-key-a"
	keyB = "integration-key-b"
)

func TestMain(m *testing.M) {
	os.Exit(kilntest.Main(m, kilntest.Options{Key: keyA, Env: []string{
		"POOL_SIZE=2", "TIMEOUT_GRACE_MS=1000", "SANDBOX_MEMORY_MB=256", "SANDBOX_DATA_MB=64",
		"QUEUE_TIMEOUT_SECONDS=90", "MAX_QUEUE=16", "API_KEYS=" + keyA + "," + keyB, "MAX_SANDBOX_MEMORY_MB=1024",
	}}, &srv))
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

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}
