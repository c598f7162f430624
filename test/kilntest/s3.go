package kilntest

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// S3 is a versitygw server that a test started: an S3-compatible service over a folder.
// Restart kills it and starts it again on the same port and folder.
type S3 struct {
	Endpoint             string // http://127.0.0.1:<port>
	AccessKey, SecretKey string
	daemon
}

// versitygwVersion is the version deploy/ensure-versitygw.sh builds.
const versitygwVersion = "v1.8.0"

// StartS3 starts versitygw on a free loopback port, serving a fresh folder, and
// returns it; it is stopped when the test ends. A missing binary fails the test: CI
// must run these tests, not skip them.
func StartS3(t testing.TB) *S3 {
	t.Helper()
	bin := filepath.Join(Root(), ".cache", "versitygw", versitygwVersion, "versitygw")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("versitygw is not built (%v): run deploy/ensure-versitygw.sh (make s3)", err)
	}
	port := FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", port)
	s := &S3{Endpoint: "http://" + addr, AccessKey: "kilntestaccess", SecretKey: "kilntest-secret-" + randomSuffix()}
	s.daemon = daemon{name: "versitygw", log: filepath.Join(t.TempDir(), "versitygw.log"),
		args:  []string{bin, "--access", s.AccessKey, "--secret", s.SecretKey, "--port", addr, "posix", t.TempDir()},
		ready: func(exited <-chan struct{}) error { return listening(addr, exited, 20*time.Second) }}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}
