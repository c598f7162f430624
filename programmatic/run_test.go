package programmatic

import (
	"errors"
	"testing"

	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/session"
)

// result returns a result whose release is counted in released.
func result(t *testing.T, released *int) *session.ExecResult {
	t.Helper()
	res := &session.ExecResult{Result: &executor.Result{Status: execution.StatusOK}}
	res.SetRelease(func() { *released++ })
	return res
}

func TestRunIdentity(t *testing.T) {
	run := NewRun("exec-1", "alice")
	if run.ID() != "exec-1" || run.Principal() != "alice" {
		t.Errorf("NewRun(exec-1, alice) = %q of %q", run.ID(), run.Principal())
	}
	select {
	case <-run.Done():
		t.Error("a new run is done")
	default:
	}
}

// A pause waits for the request that reports it; one that comes while the last is
// still unreported is dropped, without blocking the executor.
func TestRunPause(t *testing.T) {
	run := NewRun("exec-1", "alice")
	run.Pause(execution.ToolCalls{Round: 1, Token: "t1"})
	run.Pause(execution.ToolCalls{Round: 2, Token: "t2"}) // must not block
	select {
	case tc := <-run.Pauses():
		if tc.Round != 1 || tc.Token != "t1" {
			t.Errorf("got pause %+v, want round 1", tc)
		}
	default:
		t.Fatal("no pause delivered")
	}
	select {
	case tc := <-run.Pauses():
		t.Errorf("a second pause was kept: %+v", tc)
	default:
	}
	run.Pause(execution.ToolCalls{Round: 3, Token: "t3"})
	if tc := <-run.Pauses(); tc.Round != 3 {
		t.Errorf("got pause %+v after the first was reported, want round 3", tc)
	}
}

// An ended run's result goes to exactly one request, or is released by the last one to
// leave, or at once when nobody waits: it is released exactly once either way.
func TestRunResult(t *testing.T) {
	failed := errors.New("sandbox exited")
	tests := []struct {
		name string
		// steps: "attach", "detach", "finish", "take"
		steps        []string
		wantTaken    int // takes that got the result
		wantReleased int // releases done by the run itself (a taker releases its own)
	}{
		{"nobody waits", []string{"finish", "take"}, 0, 1},
		{"a waiter takes it", []string{"attach", "finish", "take", "detach", "take"}, 1, 0},
		{"a waiter leaves without it", []string{"attach", "finish", "detach", "take"}, 0, 1},
		{"the last of two waiters releases it", []string{"attach", "attach", "finish", "detach", "detach"}, 0, 1},
		{"a waiter leaves before the end", []string{"attach", "detach", "finish"}, 0, 1},
		{"taken between two waiters", []string{"attach", "attach", "finish", "take", "detach", "detach", "take"}, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			released := 0
			res := result(t, &released)
			run := NewRun("exec-1", "alice")
			taken := 0
			for _, step := range tt.steps {
				switch step {
				case "attach":
					run.Attach()
				case "detach":
					run.Detach()
				case "finish":
					run.Finish(res, failed)
					select {
					case <-run.Done():
					default:
						t.Fatal("Done is open after Finish")
					}
				case "take":
					got, ok, err := run.Take()
					if ok {
						taken++
						if got != res || !errors.Is(err, failed) {
							t.Errorf("Take = %p, %v, want the run's result and error", got, err)
						}
					} else if got != nil || err != nil {
						t.Errorf("Take not ok, yet %p, %v", got, err)
					}
				}
			}
			if taken != tt.wantTaken || released != tt.wantReleased {
				t.Errorf("taken %d times, released %d times by the run; want %d, %d", taken, released, tt.wantTaken, tt.wantReleased)
			}
		})
	}
}

// A run that ended without a result (the service failed) has nothing to release.
func TestRunFinishWithoutResult(t *testing.T) {
	run := NewRun("exec-1", "alice")
	run.Finish(nil, errors.New("store down"))
	if _, ok, _ := run.Take(); ok {
		t.Error("a result nobody waited for was still there to take")
	}
}
