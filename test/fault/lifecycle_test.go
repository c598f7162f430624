package fault

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// SIGTERM while a run is under way (case 25): the run finishes with its answer, new
// executions get 503 while kiln drains, readiness says 503, then the pool's
// containers are removed and kiln exits 0.
func TestSigtermDrainsInFlight(t *testing.T) {
	s := start(t, "POOL_SIZE=2", "SHUTDOWN_GRACE_SECONDS=20")
	inflight := make(chan result, 1)
	go func() {
		inflight <- execWithin(s, time.Minute, map[string]any{"code": "import time\ntime.sleep(3)\nprint('done')"})
	}()
	kilntest.WaitFor(t, 20*time.Second, "the run to start", func() bool { return s.MustPool(t).InUse == 1 })
	time.Sleep(300 * time.Millisecond) // the run is inside its sandbox now

	if err := syscall.Kill(s.PID(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	late := execWithin(s, 10*time.Second, map[string]any{"code": "print(1)"})
	if late.err != nil || late.status != http.StatusServiceUnavailable || late.envl.Error != "unavailable" {
		t.Errorf("an /exec during the drain got %d %q (err %v), want 503 unavailable", late.status, late.envl.Error, late.err)
	}
	if late.header.Get("Retry-After") == "" {
		t.Errorf("the 503 during the drain has no Retry-After")
	}
	if got := readyStatus(s); got != http.StatusServiceUnavailable {
		t.Errorf("/health/ready during the drain: %d, want 503", got)
	}

	got := <-inflight
	if got.err != nil || got.status != http.StatusOK || got.body.Status != "ok" || got.body.Stdout != "done\n" {
		t.Errorf("the in-flight run got %d %+v (err %v), want 200 ok with its output", got.status, got.body, got.err)
	}
	select {
	case <-s.Exited():
	case <-time.After(40 * time.Second):
		t.Fatal("kiln did not exit after the drain")
	}
	if err := s.Stop(time.Second); err != nil { // already exited: reports the exit status
		t.Errorf("exit: %v, want status 0", err)
	}
	if !strings.Contains(s.Logs(), `"kiln stopped"`) {
		t.Errorf("no \"kiln stopped\" in the log")
	}
}

// A second SIGTERM during the drain cuts it short: kiln stops waiting for the run under
// way (whose code would sleep for a minute), removes every sandbox of its instance, the
// run's included, and exits within seconds, far inside its grace.
func TestASecondSignalCutsTheDrainShort(t *testing.T) {
	s := start(t, "POOL_SIZE=1", "SHUTDOWN_GRACE_SECONDS=120")
	inflight := make(chan result, 1)
	go func() {
		inflight <- execWithin(s, 3*time.Minute, map[string]any{"code": "import time\nprint('started', flush=True)\ntime.sleep(60)\nprint('done')", "timeout": 90000})
	}()
	kilntest.WaitFor(t, 60*time.Second, "the run to start and the pool to refill", func() bool {
		p := s.MustPool(t)
		return p.InUse == 1 && p.Ready == 1 && p.Warming == 0
	})
	if n := len(running(t, s.Instance)); n != 2 {
		t.Fatalf("%d running sandboxes, want 2: the run's and the ready one", n)
	}
	if err := syscall.Kill(s.PID(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	kilntest.WaitFor(t, 10*time.Second, "the drain to begin", func() bool {
		return strings.Contains(s.Logs(), "waiting for in-flight executions")
	})
	second := time.Now()
	if err := syscall.Kill(s.PID(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Exited():
	case <-time.After(40 * time.Second):
		t.Fatal("kiln did not exit within 40s of the second SIGTERM (its grace is 120s)")
	}
	t.Logf("kiln exited %s after the second SIGTERM", time.Since(second).Round(10*time.Millisecond))
	if !strings.Contains(s.Logs(), "the drain is cut short") {
		t.Errorf("the log does not say that the drain was cut short")
	}
	out, err := kilntest.Docker("ps", "-aq", "--filter", "label=kiln.instance="+s.Instance)
	if err != nil {
		t.Fatalf("docker ps: %v: %s", err, out)
	}
	if left := strings.Fields(out); len(left) != 0 {
		t.Errorf("sandboxes left after kiln exited: %v", left)
	}
	if got := <-inflight; got.status == http.StatusOK && got.body.Stdout == "started\ndone\n" {
		t.Errorf("the run under way finished (%+v): the drain was not cut short", got.body)
	}
}

// A sandbox killed from outside in the middle of a run (`docker kill`): the call
// comes back at once as sandbox_died with exit code 137, and the pool replaces it.
func TestSandboxKilledMidRun(t *testing.T) {
	s := start(t, "POOL_SIZE=1")
	call := make(chan result, 1)
	go func() {
		call <- execWithin(s, time.Minute, map[string]any{"code": "import time\nprint('started', flush=True)\ntime.sleep(30)", "timeout": 40000})
	}()
	// Once the refill is done, the instance runs two containers: the ready one the
	// pool lists, and the one serving the run.
	kilntest.WaitFor(t, 60*time.Second, "the run to start and the pool to refill", func() bool {
		p := s.MustPool(t)
		return p.InUse == 1 && p.Ready == 1 && p.Warming == 0
	})
	ready := s.MustPool(t).Containers[0].ID
	var serving string
	for _, id := range running(t, s.Instance) {
		if !strings.HasPrefix(id, ready) {
			serving = id
		}
	}
	if serving == "" {
		t.Fatalf("no serving container found beside the ready %s", ready)
	}
	time.Sleep(300 * time.Millisecond)
	killed := time.Now()
	if out, err := kilntest.Docker("kill", serving); err != nil {
		t.Fatalf("docker kill: %v: %s", err, out)
	}
	var got result
	select {
	case got = <-call:
	case <-time.After(15 * time.Second):
		t.Fatal("the call did not return within 15s of the kill")
	}
	if took := time.Since(killed); took > 5*time.Second {
		t.Errorf("the call returned %s after the kill, want promptly", took)
	}
	if got.err != nil || got.status != http.StatusOK {
		t.Fatalf("got %d (err %v) %+v, want 200", got.status, got.err, got.envl)
	}
	if st := got.body.Status; (st != "sandbox_died" && st != "oom") || got.body.ExitCode != 137 {
		t.Errorf("status %q exit %d error %s, want sandbox_died (or oom) with 137", st, got.body.ExitCode, kilntest.Str(got.body.Error))
	}
	kilntest.WaitFor(t, 60*time.Second, "the killed sandbox to be removed and the pool full again", func() bool {
		p := s.MustPool(t)
		out, _ := kilntest.Docker("ps", "-aq", "--no-trunc", "--filter", "id="+serving)
		return p.Ready == p.Target && p.InUse == 0 && strings.TrimSpace(out) == ""
	})
	if r := execWithin(s, time.Minute, map[string]any{"code": "print(2)"}); r.status != http.StatusOK || r.body.Stdout != "2\n" {
		t.Errorf("after the kill: %d %+v, want 200 with output", r.status, r.body)
	}
}
