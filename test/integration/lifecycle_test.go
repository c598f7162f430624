package integration

import (
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// A kiln killed with SIGKILL leaves its containers behind; the next kiln of the same
// instance removes them at start-up.
func TestOrphansRemovedAtNextStart(t *testing.T) {
	instance := "orphan-" + time.Now().Format("150405.000")
	first, err := kilntest.Start(kilntest.Options{Env: []string{"INSTANCE_ID=" + instance, "POOL_SIZE=1"}})
	if err != nil {
		t.Fatal(err)
	}
	beforeKill, _ := kilntest.Containers(instance)
	t.Logf("before kill: %v", beforeKill)
	first.Kill()
	left, err := kilntest.Containers(instance)
	if err != nil || len(left) == 0 {
		t.Fatalf("expected containers left by the killed kiln, got %v (err %v)", left, err)
	}
	second, err := kilntest.Start(kilntest.Options{Env: []string{"INSTANCE_ID=" + instance, "POOL_SIZE=1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := second.Stop(60 * time.Second); err != nil {
			t.Errorf("stop: %v", err)
		}
		if after, _ := kilntest.Containers(instance); len(after) != 0 {
			t.Errorf("containers left after a clean stop: %v", after)
		}
	}()
	now, err := kilntest.Containers(instance)
	if err != nil {
		t.Fatal(err)
	}
	for _, old := range left {
		for _, id := range now {
			if id == old {
				t.Errorf("orphan %s still there after the restart", old[:12])
			}
		}
	}
}

// A live call's pending state is stored when kiln stops: the next kiln resumes the
// session with the names the call bound, though no flush came before the shutdown.
func TestAPendingStateIsStoredAtShutdown(t *testing.T) {
	data := t.TempDir()
	env := []string{"POOL_SIZE=1", "DATA_DIR=" + data, "API_KEYS=" + keyA, "STATE_SAVE_DELAY_MS=600000"}
	first, err := kilntest.Start(kilntest.Options{Key: keyA, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	var out kilntest.ExecResponse
	if _, err := first.PostJSON("/exec", map[string]any{"lang": "py", "code": "import pandas as pd\nx = 1"}, &out); err != nil || out.Status != "ok" {
		t.Fatalf("first call: %v %+v", err, out)
	}
	sid := out.SessionID
	if _, err := first.PostJSON("/exec", map[string]any{"lang": "py", "session_id": sid,
		"code": "x = 2\nframe = pd.DataFrame({'v': range(100_000)})"}, &out); err != nil || !out.StatePending {
		t.Fatalf("second call: %v, pending %v; want a pending answer", err, out.StatePending)
	}
	if err := first.Stop(60 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	second, err := kilntest.Start(kilntest.Options{Key: keyA, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := second.Stop(60 * time.Second); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	if _, err := second.PostJSON("/exec", map[string]any{"lang": "py", "session_id": sid, "code": "x, len(frame)"}, &out); err != nil ||
		out.RuntimeStatus != "resumed" || kilntest.Str(out.Result) != "(2, 100000)" {
		t.Errorf("after the restart: %v, runtime %s, result %s (%s); want resumed with (2, 100000)",
			err, out.RuntimeStatus, kilntest.Str(out.Result), kilntest.Str(out.Error))
	}
}
