package kilntest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartRedis starts a private redis-server on a free loopback port, without
// persistence, and returns its URL. It is killed when the test ends. A missing
// redis-server fails the test: CI must run these tests, not skip them.
func StartRedis(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not on PATH (%v): run deploy/ensure-redis.sh to install it", err)
	}
	var lastErr error
	for range 3 { // the free port may be taken before redis-server binds it
		port := FreePort(t)
		logFile := filepath.Join(t.TempDir(), "redis.log")
		cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--logfile", logFile)
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		exited := make(chan struct{})
		go func() {
			defer close(exited)
			cmd.Wait()
		}()
		addr := net.JoinHostPort("127.0.0.1", port)
		if lastErr = WaitRedis(addr, exited, 10*time.Second); lastErr == nil {
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-exited
			})
			return "redis://" + addr + "/0"
		}
		cmd.Process.Kill()
		<-exited
		log, _ := os.ReadFile(logFile)
		lastErr = fmt.Errorf("%w; log:\n%s", lastErr, log)
	}
	t.Fatalf("redis-server did not answer: %v", lastErr)
	return ""
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// WaitRedis waits until the server at addr answers PING with PONG (not LOADING, as
// while it replays its log after a restart), until its process exits (exited is
// closed), or for at most within.
func WaitRedis(addr string, exited <-chan struct{}, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited")
		default:
		}
		if ping(addr) == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("no PONG from %s", addr)
}

func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
