package executor

import (
	"context"
	"slices"
	"testing"

	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox"
	"github.com/kilnsh/kiln/sandbox/sandboxtest"
)

// A checked-out sandbox kept after its run is the pool's no more: the pool is told, and
// Release does nothing after.
func TestKeepTakesTheSandboxOver(t *testing.T) {
	sb := newSandbox(t, reply(nil))
	p := &fakePool{sb: sb}
	e := newTestExecutor(p, testLimits())
	res, err := e.Run(context.Background(), Request{Request: execution.Request{Lang: execution.LangPython, Code: "x", CaptureState: true}, Live: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Reusable {
		t.Errorf("got Reusable false for a sandbox that answered, want true")
	}
	if got := res.Keep(); got != sandbox.Sandbox(sb) {
		t.Fatalf("Keep returned %v, want the sandbox", got)
	}
	res.Release()
	if res.Keep() != nil {
		t.Errorf("a second Keep returned a sandbox, want nil")
	}
	if len(p.kept) != 1 || len(p.released) != 0 {
		t.Errorf("got %d kept and %d released, want 1 and 0", len(p.kept), len(p.released))
	}
}

// A run on a sandbox the request brings checks nothing out, sends what a live run sends,
// and leaves the sandbox its caller's.
func TestRunOnTheSessionsSandbox(t *testing.T) {
	sb := newSandbox(t, reply(func(r *protocol.Response) {
		r.State, r.StateUnchanged, r.StateToken = nil, true, "7-2"
		r.DeletedFiles, r.MemoryBytes = []string{"old.csv"}, 250<<20
	}))
	p := &fakePool{sb: newSandbox(t, reply(nil))}
	e := newTestExecutor(p, testLimits())
	res, err := e.Run(context.Background(), Request{Request: execution.Request{Lang: execution.LangPython, Code: "x", CaptureState: true}, Sandbox: sb, Live: true, StateBase: "7-1", DeleteFiles: []string{"gone.txt"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.checkouts != 0 {
		t.Errorf("got %d checkouts, want none", p.checkouts)
	}
	got := sb.Requests()[0]
	if !got.Live || got.StateBase != "7-1" || !slices.Equal(got.DeleteFiles, []string{"gone.txt"}) || got.State != nil {
		t.Errorf("sent live %v, state_base %q, delete_files %q, state %d bytes; want true, 7-1, [gone.txt], none",
			got.Live, got.StateBase, got.DeleteFiles, len(got.State))
	}
	if !res.StateUnchanged || !res.StateFromRun || res.State != nil || res.StateToken != "7-2" ||
		!slices.Equal(res.DeletedFiles, []string{"old.csv"}) || res.MemoryBytes != 250<<20 || !res.Reusable {
		t.Errorf("got unchanged %v from run %v state %d bytes token %q deleted %q memory %d reusable %v",
			res.StateUnchanged, res.StateFromRun, len(res.State), res.StateToken, res.DeletedFiles, res.MemoryBytes, res.Reusable)
	}
	if res.Keep() != nil {
		t.Errorf("Keep of a sandbox the request brought returned it, want nil: it was never the pool's")
	}
	res.Release()
	if len(p.released)+len(p.kept) != 0 {
		t.Errorf("the pool was given back %d sandboxes, want none", len(p.released)+len(p.kept))
	}
}

// A sandbox that died under its run cannot serve again.
func TestDeadSandboxIsNotReusable(t *testing.T) {
	sb := newSandbox(t, exit(sandboxtest.ExitStatus{Code: 137, OOMKilled: true}))
	e := newTestExecutor(&fakePool{}, testLimits())
	res, err := e.Run(context.Background(), Request{Request: execution.Request{Lang: execution.LangPython, Code: "x", CaptureState: true}, Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != execution.StatusOOM || res.Reusable {
		t.Errorf("got %s, reusable %v; want oom and not reusable", res.Status, res.Reusable)
	}
}
