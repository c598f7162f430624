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
