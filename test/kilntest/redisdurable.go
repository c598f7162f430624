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

// DurableRedis is a redis-server that a test can restart without losing what it
// acknowledged: every write goes to its append-only file, synced before the answer.
type DurableRedis struct {
	URL string

	bin, port, dir string
	mu             sync.Mutex
	cmd            *exec.Cmd
	exited         chan struct{}
}

// StartDurableRedis starts a redis-server on a free loopback port with an append-only
// file synced on every write, in a folder of the test's; it is stopped when the test ends.
func StartDurableRedis(t testing.TB) *DurableRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not on PATH (%v): run deploy/ensure-redis.sh to install it", err)
	}
	r := &DurableRedis{bin: bin, port: FreePort(t), dir: t.TempDir()}
	r.URL = "redis://127.0.0.1:" + r.port + "/0"
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

func (r *DurableRedis) start() error {
	cmd := exec.Command(r.bin, "--port", r.port, "--bind", "127.0.0.1", "--dir", r.dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", "always", "--logfile", filepath.Join(r.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		_ = cmd.Wait()
	}()
	r.mu.Lock()
	r.cmd, r.exited = cmd, exited
	r.mu.Unlock()
	if err := WaitRedis(net.JoinHostPort("127.0.0.1", r.port), exited, 20*time.Second); err != nil {
		r.Stop()
		log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
		return fmt.Errorf("%w; log:\n%s", err, log)
	}
	return nil
}

// Stop kills the server, if it runs, and waits for it to go; its files stay.
func (r *DurableRedis) Stop() {
	r.mu.Lock()
	cmd, exited := r.cmd, r.exited
	r.cmd = nil
	r.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Restart kills the server and starts it again on the same port and files.
func (r *DurableRedis) Restart() error {
	r.Stop()
	return r.start()
}
