package fault

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// The Docker daemon restarts under load (case 23): no call hangs (each answers 200 or
// 503 within its bound), readiness goes 503 and comes back to 200 without help,
// executions work again, containers whose removal failed meanwhile are reaped while
// kiln runs, and nothing of the instance is left after Stop.
//
// It stops the daemon deploy/ensure-docker.sh started (by the pid in its pid file)
// and starts it again with that script, whatever happens in between. Every other
// user of the daemon sees the restart too: CI runs packages one at a time.
func TestDockerDaemonRestart(t *testing.T) {
	pid := daemonPID(t)
	const queueTimeout = 5 * time.Second
	// A short warm-up timeout lets the reaper take what the restart leaves behind
	// (see TestAbandonedContainerReaped) within the wait at the end. gVisor's warm-ups
	// take several times runc's: two at once on two busy cores can pass 15 s.
	warmup := 15 * time.Second
	if kilntest.Runtime() == "runsc" {
		warmup = 45 * time.Second
	}
	s := start(t, "POOL_SIZE=2", fmt.Sprintf("QUEUE_TIMEOUT_SECONDS=%d", int(queueTimeout.Seconds())), "MAX_QUEUE=8",
		fmt.Sprintf("REPL_WARMUP_TIMEOUT_SECONDS=%d", int(warmup.Seconds())))
	t.Cleanup(func() { ensureDocker(t) }) // runs before the kiln's own cleanup

	// bound: the queue timeout, the run's timeout and grace, and slack for a
	// machine busy restarting a daemon. A call over it is a hang.
	const runTimeout = 5 * time.Second
	bound := queueTimeout + runTimeout + time.Second + 15*time.Second
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := execWithin(s, bound, map[string]any{"code": "import time\ntime.sleep(0.2)\nprint(1)", "timeout": runTimeout.Milliseconds()})
				outcome := fmt.Sprint(r.status)
				switch {
				case r.err != nil:
					outcome = "error"
					t.Errorf("a call failed after %s: %v", r.took.Round(time.Millisecond), r.err)
				case r.status == http.StatusOK:
					outcome = "200 " + r.body.Status
				case r.status == http.StatusServiceUnavailable:
					if r.header.Get("Retry-After") == "" {
						t.Errorf("a 503 without Retry-After: %+v", r.envl)
					}
				default:
					t.Errorf("a call got %d %+v, want 200 or 503", r.status, r.envl)
				}
				mu.Lock()
				counts[outcome]++
				mu.Unlock()
				if r.status != http.StatusOK {
					time.Sleep(200 * time.Millisecond)
				}
			}
		}()
	}
	var stopOnce sync.Once
	stopLoad := func() {
		stopOnce.Do(func() {
			close(stop)
			wg.Wait()
			t.Logf("outcomes: %v", counts)
		})
	}
	defer stopLoad()
	time.Sleep(2 * time.Second) // load before the fault

	t.Logf("stopping dockerd (pid %d)", pid)
	stopped := time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM dockerd: %v", err)
	}
	kilntest.WaitFor(t, 90*time.Second, "dockerd to exit", func() bool { return !kilntest.Alive(pid) })
	t.Logf("dockerd exited after %s", time.Since(stopped).Round(time.Millisecond))
	kilntest.WaitFor(t, 15*time.Second, "/health/ready to answer 503", func() bool { return readyStatus(s) == http.StatusServiceUnavailable })
	time.Sleep(2 * time.Second) // calls meet a daemon that is away

	ensureDocker(t)
	restarted := time.Now()
	kilntest.WaitFor(t, 60*time.Second, "/health/ready to come back to 200 by itself", func() bool { return readyStatus(s) == http.StatusOK })
	t.Logf("ready %s after the daemon answered again", time.Since(restarted).Round(time.Millisecond))

	kilntest.WaitFor(t, warmup+15*time.Second, "an execution to succeed again", func() bool {
		r := execWithin(s, bound, map[string]any{"code": "print('back')"})
		return r.status == http.StatusOK && r.body.Stdout == "back\n"
	})
	stopLoad()

	// Removals that failed while the daemon was away left containers behind; kiln
	// finds and removes them while it runs, not only when it stops.
	t.Logf("pool after the restart: leaked %d", s.MustPool(t).Leaked)
	kilntest.WaitFor(t, 2*warmup+30*time.Second, "only the pool's own containers and the live sessions' to remain", func() bool {
		p := s.MustPool(t)
		all, err := kilntest.Containers(s.Instance)
		return err == nil && p.Ready == p.Target && p.InUse == 0 && p.Warming == 0 && len(all) == p.Target+p.Kept
	})
}

// daemonPID returns the pid of the running dockerd, from its pid file.
func daemonPID(t *testing.T) int {
	t.Helper()
	pid, err := kilntest.DockerdPID()
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// ensureDocker starts the daemon again with the project's script unless it answers.
func ensureDocker(t *testing.T) {
	t.Helper()
	if err := kilntest.EnsureDocker(); err != nil {
		t.Fatal(err)
	}
}

// Containers of the instance that the pool does not hold (what a removal failing
// while the daemon is away, or a warm-up whose clean-up failed, leaves behind) are
// removed while kiln runs, in any state, once no warm-up can still own them; the
// pool's own containers are left alone.
func TestAbandonedContainerReaped(t *testing.T) {
	s := start(t, "POOL_SIZE=1", "REPL_WARMUP_TIMEOUT_SECONDS=10")
	labels := []string{"--network", "none", "--label", "kiln.managed=true", "--label", "kiln.instance=" + s.Instance}
	const image = "kiln-python:latest"
	var ids []string
	for _, args := range [][]string{ // one exited, one running, one only created
		append(append([]string{"run", "-d", "--entrypoint", "true"}, labels...), image),
		append(append([]string{"run", "-d", "--entrypoint", "sleep"}, labels...), image, "600"),
		append(append([]string{"create", "--entrypoint", "true"}, labels...), image),
	} {
		out, err := kilntest.Docker(args...)
		if err != nil {
			t.Fatalf("docker %s: %v: %s", args[0], err, out)
		}
		id := strings.TrimSpace(out)
		ids = append(ids, id)
		t.Cleanup(func() { _, _ = kilntest.Docker("rm", "-f", id) })
	}
	before := s.MustPool(t)
	kilntest.WaitFor(t, 60*time.Second, "the abandoned containers to be removed", func() bool {
		for _, id := range ids {
			if out, _ := kilntest.Docker("ps", "-aq", "--no-trunc", "--filter", "id="+id); strings.TrimSpace(out) != "" {
				return false
			}
		}
		return true
	})
	after := s.MustPool(t)
	if after.Created != before.Created || after.Ready != after.Target {
		t.Errorf("the pool changed: created %d→%d, ready %d/%d", before.Created, after.Created, after.Ready, after.Target)
	}
	if n := strings.Count(s.Logs(), "removed an abandoned sandbox"); n != len(ids) {
		t.Errorf("got %d log lines about removals, want %d", n, len(ids))
	}
}
