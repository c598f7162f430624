package soak

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// redisServer is a private redis-server on a loopback port whose data survives a
// restart: every write is appended to its log and synced before Redis answers
// (appendonly yes, appendfsync always), so even SIGKILL loses nothing it acknowledged.
// kilntest.StartRedis runs without persistence, which a restart would empty.
type redisServer struct {
	bin, dir, port string
	cmd            *exec.Cmd
	exited         chan struct{}
}

// startRedis starts the server for t; it is killed when t ends.
func startRedis(t *testing.T) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not on PATH (%v): run deploy/ensure-redis.sh to install it", err)
	}
	r := &redisServer{bin: bin, dir: t.TempDir(), port: kilntest.FreePort(t)}
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.kill)
	return r
}

func (r *redisServer) url() string { return "redis://" + r.addr() + "/0" }

func (r *redisServer) addr() string { return net.JoinHostPort("127.0.0.1", r.port) }

// start runs redis-server on the server's port and directory and waits for its PONG.
func (r *redisServer) start() error {
	r.cmd = exec.Command(r.bin, "--port", r.port, "--bind", "127.0.0.1", "--dir", r.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--logfile", filepath.Join(r.dir, "redis.log"))
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	r.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(r.cmd, r.exited)
	if err := kilntest.WaitRedis(r.addr(), r.exited, 30*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
		return fmt.Errorf("%w; log:\n%s", err, log)
	}
	return nil
}

// kill stops the server with SIGKILL and waits for it to go.
func (r *redisServer) kill() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.exited
}
