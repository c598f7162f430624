package observability

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// maxFreeze bounds how long the daemon stays stopped, whatever happens to this test:
// other tests may share the daemon.
const maxFreeze = 12 * time.Second

// TestReadinessFollowsTheDaemon freezes the Docker daemon with SIGSTOP and checks that
// /health/ready turns 503 within seconds while /health/live stays 200, then resumes it
// and checks that readiness comes back by itself. It runs only where dockerd is a local
// process this user may signal (it was started by deploy/ensure-docker.sh).
func TestReadinessFollowsTheDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("freezes the shared Docker daemon; skipped with -short")
	}
	pid := dockerdPID(t)
	s := start(t, "POOL_SIZE=1", "QUEUE_TIMEOUT_SECONDS=60")

	// Whatever happens to this process (a panic, a timeout, a kill), a detached
	// watchdog resumes the daemon after maxFreeze.
	watchdog := exec.Command("setsid", "sh", "-c",
		fmt.Sprintf("sleep %d; kill -CONT %d", int(maxFreeze.Seconds()), pid))
	if err := watchdog.Start(); err != nil {
		t.Fatalf("starting the watchdog: %v", err)
	}
	var once sync.Once
	resume := func() {
		once.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("resuming dockerd %d: %v", pid, err)
			}
			_ = watchdog.Process.Kill()
			_ = watchdog.Wait()
		})
	}
	t.Cleanup(resume)
	defer resume()

	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("freezing dockerd %d: %v", pid, err)
	}
	frozen := time.Now()
	client := &http.Client{Timeout: 6 * time.Second}
	if !waitStatus(client, s.URL+"/health/ready", http.StatusServiceUnavailable, 8*time.Second) {
		t.Errorf("/health/ready did not turn 503 within 8s of the daemon freezing")
	} else {
		t.Logf("/health/ready answered 503 after %s", time.Since(frozen).Round(100*time.Millisecond))
	}
	if resp, err := client.Get(s.URL + "/health/live"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/health/live while the daemon is frozen: %v %v, want 200", err, resp)
	} else {
		resp.Body.Close()
	}
	resume()

	resumed := time.Now()
	if !waitStatus(client, s.URL+"/health/ready", http.StatusOK, 60*time.Second) {
		t.Fatalf("/health/ready did not return to 200 within 60s of the daemon resuming\n%s", s.Logs())
	}
	t.Logf("/health/ready answered 200 again %s after the daemon resumed", time.Since(resumed).Round(100*time.Millisecond))
	execOK(t, s, "print(1)", "ok")
}

// dockerdPID returns the daemon's pid from /var/run/docker.pid, or skips the test when
// there is no local dockerd this user may signal.
func dockerdPID(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/var/run/docker.pid")
	if err != nil {
		t.Skipf("no local dockerd pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Skipf("bad /var/run/docker.pid: %v", err)
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(comm)) != "dockerd" {
		t.Skipf("pid %d is not dockerd (%q, %v)", pid, comm, err)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Skipf("may not signal dockerd %d: %v", pid, err)
	}
	return pid
}

// waitStatus polls url until it answers want, up to timeout.
func waitStatus(c *http.Client, url string, want int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if resp, err := c.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return true
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	return false
}
