package kilntest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// S3 is a versitygw server that a test started: an S3-compatible service over a folder.
type S3 struct {
	Endpoint             string // http://127.0.0.1:<port>
	AccessKey, SecretKey string

	t    testing.TB
	bin  string
	port string
	dir  string
	log  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
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
	s := &S3{t: t, bin: bin, port: FreePort(t), dir: t.TempDir(), AccessKey: "kilntestaccess", SecretKey: "kilntest-secret-" + randomSuffix()}
	s.log = filepath.Join(t.TempDir(), "versitygw.log")
	s.Endpoint = "http://127.0.0.1:" + s.port
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func (s *S3) start() error {
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(s.bin, "--access", s.AccessKey, "--secret", s.SecretKey,
		"--port", "127.0.0.1:"+s.port, "posix", s.dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start versitygw: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		_ = cmd.Wait()
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			out, _ := os.ReadFile(s.log)
			return fmt.Errorf("versitygw exited at start:\n%s", out)
		default:
		}
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+s.port, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	out, _ := os.ReadFile(s.log)
	return fmt.Errorf("versitygw did not listen on %s within 20 s:\n%s", s.port, out)
}

// Stop kills the server, if it runs, and waits for it to go. The folder stays.
func (s *S3) Stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Restart stops the server and starts it again on the same port and folder.
func (s *S3) Restart() error {
	s.Stop()
	return s.start()
}
