package kilntest

import (
	"net"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// DurableRedis is a redis-server that a test can restart without losing what it
// acknowledged: every write goes to its append-only file, synced before the answer.
type DurableRedis struct {
	URL string
	daemon
}

// StartDurableRedis starts a redis-server on a free loopback port with an append-only
// file synced on every write, in a folder of the test's; it is stopped when the test ends.
func StartDurableRedis(t testing.TB) *DurableRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not on PATH (%v): run deploy/ensure-redis.sh to install it", err)
	}
	port, dir := FreePort(t), t.TempDir()
	addr := net.JoinHostPort("127.0.0.1", port)
	r := &DurableRedis{URL: "redis://" + addr + "/0", daemon: daemon{name: "redis-server", log: filepath.Join(dir, "redis.log"),
		args: []string{bin, "--port", port, "--bind", "127.0.0.1", "--dir", dir, "--save", "",
			"--appendonly", "yes", "--appendfsync", "always"},
		ready: func(exited <-chan struct{}) error { return WaitRedis(addr, exited, 20*time.Second) }}}
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}
