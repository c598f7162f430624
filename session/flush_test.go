package session

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/live"
)

// newDeferringEnv is a liveEnv whose live calls answer before their state is stored
// (StateSaveDelay): the runner stands for the REPL, and a flush's capture returns
// "S<n>", n counting the flushes.
func newDeferringEnv(t *testing.T, delay time.Duration) (*liveEnv, *atomic.Int32) {
	t.Helper()
	e := newLiveEnv(t)
	var flushes atomic.Int32
	e.edit = func(req executor.Request, res *executor.Result) {
		switch {
		case req.Flush:
			res.State, res.StateFromRun = []byte(fmt.Sprintf("S%d", flushes.Add(1))), true
		case !req.CaptureState:
			res.State, res.StateToken = nil, ""
		}
	}
	e.svc.stateDelay, e.svc.capture = delay, e.svc.run
	e.reg.SetFlush(e.svc.flushEnding)
	e.run.result.State = []byte("S0")
	return e, &flushes
}

// A call in the session's live sandbox answers with its state pending: the REPL
// captures nothing during the call. A capture of the namespace follows each answer, in
// the session's turn, before the session's next call runs; the captures reach the store
// within the delay of the first answer they hold, the newest of them once.
func TestALiveCallIsCapturedAfterItsAnswer(t *testing.T) {
	e, captures := newDeferringEnv(t, 300*time.Millisecond)
	first := e.exec(t, "", "x = 1")
	sid := first.Session.ID
	if first.StatePending || string(e.state(t, sid)) != "S0" {
		t.Fatalf("a session's first call: pending %v, stored %q; want stored before the answer", first.StatePending, e.state(t, sid))
	}
	answered := time.Now()
	for i := range 3 {
		res := e.exec(t, sid, fmt.Sprintf("x += %d", i))
		if !res.StatePending || res.RuntimeStatus != RuntimeReused {
			t.Fatalf("live call %d: pending %v, runtime %s; want pending in the live sandbox", i, res.StatePending, res.RuntimeStatus)
		}
	}
	waitUntil(t, "the third capture", func() bool { return captures.Load() == 3 })
	if got := string(e.state(t, sid)); got != "S0" && time.Since(answered) < 250*time.Millisecond {
		t.Fatalf("right after three quick calls: stored %q, want S0 until the delay", got)
	}
	reqs := e.run.calls()[1:]
	for i, req := range reqs {
		wantFlush := i%2 == 1 // every call, then its capture
		if req.Flush != wantFlush || req.CaptureState != wantFlush {
			t.Errorf("request %d after the first: flush %v, capture %v; want a call, then its capture, in turn", i, req.Flush, req.CaptureState)
		}
	}
	if flush := reqs[1]; flush.Code != "" || flush.Sandbox == nil || flush.Sandbox.ID() != "sandbox-1" || flush.StateBase != "token-1" {
		t.Errorf("the first capture: %+v; want an empty capture in sandbox-1 based on token-1", flush)
	}
	waitUntil(t, "the store", func() bool { return string(e.state(t, sid)) == "S3" })
	if took := time.Since(answered); took > 2*time.Second {
		t.Errorf("stored %v after the first pending answer, want within the delay", took)
	}
	if puts := e.st.puts(); puts != 2 {
		t.Errorf("%d state puts, want 2: the first call's, then the newest capture once", puts)
	}
	if got := e.reg.Stats().Counts.Flushes; got[live.FlushStored] != 3 || len(got) != 1 {
		t.Errorf("captures counted %v, want three stored", got)
	}
	next := e.exec(t, sid, "print(x)")
	if reqs := e.run.calls(); reqs[len(reqs)-1].StateBase == "token-1" {
		t.Errorf("the call after the captures is based on %q, want the last capture's own token", reqs[len(reqs)-1].StateBase)
	}
	if !next.StatePending {
		t.Error("the next live call is not pending")
	}
}

// What a call answered survives a later death of its sandbox: the call that kills it
// resumes nothing, and the one after it resumes from the capture of the answered call,
// which waited in memory for its store (the delay is an hour here).
func TestAnAnsweredCallSurvivesItsSandboxDying(t *testing.T) {
	e, captures := newDeferringEnv(t, time.Hour)
	sid := e.exec(t, "", "x = 1").Session.ID
	if res := e.exec(t, sid, "keep = 41"); !res.StatePending {
		t.Fatal("the live call is not pending")
	}
	waitUntil(t, "the capture", func() bool { return captures.Load() == 1 })
	e.edit = func(req executor.Request, res *executor.Result) {
		if req.Code == "import os; os._exit(3)" {
			res.Status, res.Reusable, res.StateFromRun = execution.StatusSandboxDied, false, false
			return
		}
		if req.Flush {
			res.State, res.StateFromRun = []byte(fmt.Sprintf("S%d", captures.Add(1))), true
		}
	}
	died := e.exec(t, sid, "import os; os._exit(3)")
	if died.Status != execution.StatusSandboxDied || died.StatePending || died.StateError == nil ||
		!strings.Contains(*died.StateError, "keeps its state from before this call") {
		t.Fatalf("the call that died: %s, pending %v, state_error %v", died.Status, died.StatePending, str(died.StateError))
	}
	if captures.Load() != 1 {
		t.Fatalf("%d captures before the death, want the one after keep = 41", captures.Load())
	}
	again := e.exec(t, sid, "keep + 1")
	reqs := e.run.calls()
	if last := reqs[len(reqs)-1]; again.RuntimeStatus != RuntimeResumed || string(last.State) != "S1" {
		t.Fatalf("the call after the death: %s with state %q, want resumed from S1, the answered call's capture", again.RuntimeStatus, last.State)
	}
	if again.StateError != nil {
		t.Errorf("the resumed call says %q: nothing answered was lost", *again.StateError)
	}
}

// A live namespace whose capture fails (its sandbox died between the answer and the
// capture) loses what the call bound, and the session's next call says so, once.
func TestALostCaptureIsToldToTheNextCall(t *testing.T) {
	e, _ := newDeferringEnv(t, time.Hour)
	sid := e.exec(t, "", "x = 1").Session.ID
	e.edit = func(req executor.Request, res *executor.Result) {
		switch {
		case req.Flush:
			res.Status, res.Reusable = execution.StatusSandboxDied, false
		case !req.CaptureState:
			res.State, res.StateToken = nil, ""
		}
	}
	e.exec(t, sid, "keep = 41")
	waitUntil(t, "the failed capture", func() bool { return e.reg.Stats().Counts.Flushes[live.FlushFailed] == 1 })
	next := e.exec(t, sid, "keep + 1")
	if next.RuntimeStatus != RuntimeResumed || next.StateError == nil || !strings.Contains(*next.StateError, "not kept") {
		t.Fatalf("the next call: %s, state_error %v; want resumed and told what was lost", next.RuntimeStatus, str(next.StateError))
	}
	if later := e.exec(t, sid, "print(1)"); later.StateError != nil && strings.Contains(*later.StateError, "not kept") {
		t.Errorf("the loss is told again: %q", *later.StateError)
	}
}

// A call that rolls back on an error reads the state before it: the capture waiting for
// its store is stored first. A namespace still ahead of its capture whose sandbox ends
// while it can answer (idle, capacity, shutdown) is captured and stored before it goes.
func TestAPendingNamespaceIsStoredBeforeItsSandboxEnds(t *testing.T) {
	e, captures := newDeferringEnv(t, time.Hour)
	sid := e.exec(t, "", "x = 1").Session.ID
	if res := e.exec(t, sid, "x = 2"); !res.StatePending {
		t.Fatal("the live call is not pending")
	}
	req := execReq()
	req.SessionID, req.Code, req.OnError = sid, "1/0", execution.OnErrorRollback
	e.run.result.State = []byte("R")
	if _, err := e.svc.Exec(t.Context(), alice, req); err != nil {
		t.Fatal(err)
	}
	reqs := e.run.calls()
	if flush, call := reqs[len(reqs)-2], reqs[len(reqs)-1]; !flush.Flush || !call.CaptureState || call.Flush {
		t.Errorf("a call that rolls back after a pending one: %v then %v, want a capture and then a capturing call", flush.Flush, call.CaptureState)
	}
	if puts := e.st.puts(); puts != 3 || string(e.state(t, sid)) != "R" {
		t.Errorf("%d state puts, stored %q; want the capture S1 stored before the call's own R", puts, e.state(t, sid))
	}
	if res := e.exec(t, sid, "x = 3"); !res.StatePending {
		t.Fatal("the live call is not pending")
	}
	waitUntil(t, "the capture after x = 3", func() bool { return captures.Load() == 2 })
	b := e.reg.Take(sid)
	b.Pending = true // as if a call had answered and its capture not run yet
	e.reg.End(b, live.EndIdle)
	waitUntil(t, "the namespace stored", func() bool { return string(e.state(t, sid)) == "S3" })
	if got := e.releasedIDs(); len(got) != 1 {
		t.Errorf("released %v, want the live sandbox", got)
	}
}

// A Python call that does not run in the live sandbox (capture_state false) reads the
// stored state: a pending namespace is stored first, so that it reads the newest.
func TestACallOutsideTheLiveSandboxReadsTheNewestState(t *testing.T) {
	e, flushes := newDeferringEnv(t, time.Hour)
	sid := e.exec(t, "", "x = 1").Session.ID
	e.exec(t, sid, "x = 2")
	req := execReq()
	req.SessionID, req.Code, req.CaptureState = sid, "print(x)", false
	if _, err := e.svc.Exec(t.Context(), alice, req); err != nil {
		t.Fatal(err)
	}
	reqs := e.run.calls()
	if flushes.Load() != 1 || string(reqs[len(reqs)-1].State) != "S1" {
		t.Errorf("%d flushes, the call got state %q; want the namespace flushed and S1 sent", flushes.Load(), reqs[len(reqs)-1].State)
	}
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var _ = context.Background

// Calls that keep coming never push the store back: a capture reaches the store within
// the delay of the first answer it holds.
func TestCallsThatKeepComingAreStoredWithinTheDelay(t *testing.T) {
	e, _ := newDeferringEnv(t, 100*time.Millisecond)
	sid := e.exec(t, "", "x = 1").Session.ID
	start := time.Now()
	for time.Since(start) < 1500*time.Millisecond {
		e.exec(t, sid, "x += 1")
		time.Sleep(5 * time.Millisecond)
	}
	if puts := e.st.puts(); puts < 8 || puts > 17 {
		t.Errorf("%d state puts during 1.5 s of calls with a 100 ms delay, want about one a delay", puts)
	}
}

// kiln holds the captures waiting for their store only up to PendingMaxBytes in all: a
// capture past it is stored at once.
func TestACapturePastTheBoundIsStoredAtOnce(t *testing.T) {
	e, captures := newDeferringEnv(t, time.Hour)
	e.svc.pending.max = 1
	sid := e.exec(t, "", "x = 1").Session.ID
	e.exec(t, sid, "x = 2")
	waitUntil(t, "the capture stored", func() bool { return string(e.state(t, sid)) == "S1" })
	if captures.Load() != 1 {
		t.Errorf("%d captures, want 1", captures.Load())
	}
}

// When kiln drains, the pending namespaces are stored at once and every later call
// stores before it answers: other replicas resume these sessions from the store.
func TestStoreAllStoresThePendingAndEndsTheDelay(t *testing.T) {
	e, flushes := newDeferringEnv(t, time.Hour)
	sid := e.exec(t, "", "x = 1").Session.ID
	if !e.exec(t, sid, "x = 2").StatePending {
		t.Fatal("the live call is not pending")
	}
	e.svc.StoreAll(t.Context())
	if flushes.Load() != 1 || string(e.state(t, sid)) != "S1" {
		t.Errorf("after StoreAll: %d flushes, stored %q; want the pending namespace stored", flushes.Load(), e.state(t, sid))
	}
	if res := e.exec(t, sid, "x = 3"); res.StatePending {
		t.Error("a call after StoreAll answered before storing its state")
	}
}

// A pending namespace whose session's stored state changed elsewhere meanwhile (another
// replica resumed and ran it) is not written back over the newer state: its sandbox ends
// as stale, and the flush is counted as stale.
func TestAStaleCaptureWritesNothingBack(t *testing.T) {
	e, captures := newDeferringEnv(t, 200*time.Millisecond)
	sid := e.exec(t, "", "x = 1").Session.ID
	if res := e.exec(t, sid, "x = 2"); !res.StatePending {
		t.Fatal("the live call is not pending")
	}
	waitUntil(t, "the capture", func() bool { return captures.Load() == 1 })
	e.putState(t, sid, "S9-from-elsewhere")
	waitUntil(t, "the stale store counted", func() bool { return e.reg.Stats().Counts.Flushes[live.FlushStale] == 1 })
	if got := string(e.state(t, sid)); got != "S9-from-elsewhere" {
		t.Errorf("stored %q, want the other replica's state", got)
	}
	next := e.exec(t, sid, "print(x)")
	reqs := e.run.calls()
	if last := reqs[len(reqs)-1]; next.RuntimeStatus != RuntimeResumed || string(last.State) != "S9-from-elsewhere" {
		t.Errorf("the next call: %s from %q, want resumed from the other replica's state", next.RuntimeStatus, last.State)
	}
	if n := e.reg.Stats().Counts.Ended[live.EndStale]; n != 1 {
		t.Errorf("ended stale: %d, want 1", n)
	}
}

// On a runtime that cannot resize a running sandbox, a live sandbox serves only the calls
// of its own size: a call that asks for another stores the pending namespace, ends the
// sandbox and resumes from that state in a sandbox of its size, which then serves the
// calls of that size; a call of the default size again goes back the same way.
func TestALiveSandboxServesOnlyItsOwnSizeWhereItCannotBeResized(t *testing.T) {
	e, flushes := newDeferringEnv(t, time.Hour)
	e.svc.limits.FixedSize, e.svc.limits.DefaultMilliCPU, e.svc.limits.DefaultMemoryMB = true, 1000, 512
	call := func(sid, code string, memoryMB int64) *ExecResult { return e.execSized(t, sid, code, memoryMB) }
	sid := call("", "x = 1", 0).Session.ID
	if res := call(sid, "x = 2", 512); res.RuntimeStatus != RuntimeReused || !res.StatePending {
		t.Fatalf("the default size named: %s, pending %v; want reused and pending", res.RuntimeStatus, res.StatePending)
	}
	big := call(sid, "x = 3", 1024)
	reqs := e.run.calls()
	last, flush := reqs[len(reqs)-1], reqs[len(reqs)-2]
	if big.RuntimeStatus != RuntimeResumed || last.Sandbox != nil || last.MemoryMB != 1024 || string(last.State) != "S1" ||
		!flush.Flush || flushes.Load() != 1 {
		t.Fatalf("1024 MB: %s in %v with %d MB from state %q after a flush %v; want resumed from the flushed state in a sandbox of its own",
			big.RuntimeStatus, last.Sandbox, last.MemoryMB, last.State, flush.Flush)
	}
	if n := e.reg.Stats().Counts.Ended[live.EndDiscard]; n != 1 {
		t.Errorf("%d live sandboxes discarded, want the default-sized one", n)
	}
	if res := call(sid, "x = 4", 1024); res.RuntimeStatus != RuntimeReused {
		t.Errorf("1024 MB again: %s, want reused", res.RuntimeStatus)
	}
	if res := call(sid, "x = 5", 0); res.RuntimeStatus != RuntimeResumed {
		t.Errorf("the default size again: %s, want resumed in a sandbox of that size", res.RuntimeStatus)
	}
	if n := e.reg.Stats().Counts.Ended[live.EndDiscard]; n != 2 {
		t.Errorf("%d live sandboxes discarded, want 2", n)
	}
	e.svc.limits.FixedSize = false // a runtime that resizes: the live sandbox serves every size
	if res := call(sid, "x = 6", 2048); res.RuntimeStatus != RuntimeReused {
		t.Errorf("resizable, 2048 MB: %s, want reused", res.RuntimeStatus)
	}
}

// A fork of a session whose last call's state waits for its store copies the newest
// state: the pending namespace is stored first.
func TestAForkCopiesThePendingState(t *testing.T) {
	e, flushes := newDeferringEnv(t, time.Hour)
	sid := e.exec(t, "", "x = 1").Session.ID
	if res := e.exec(t, sid, "x = 2"); !res.StatePending {
		t.Fatal("the live call is not pending")
	}
	dst, _, err := e.svc.Fork(t.Context(), alice, sid)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(e.state(t, dst.ID)); got != "S1" || flushes.Load() != 1 {
		t.Errorf("the fork holds %q after %d flushes, want S1, the pending namespace stored first", got, flushes.Load())
	}
}

// str shows an optional string.
func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// kiln's own read of a live namespace (a completion) binds nothing: it runs in the live
// sandbox with no capture asked of the REPL, no capture follows it, and the stored state
// and its store are not touched.
func TestAReadOnlyCallCapturesNothing(t *testing.T) {
	e, captures := newDeferringEnv(t, time.Hour)
	sid := e.exec(t, "", "x = 1").Session.ID
	puts := e.st.puts()
	req := execReq()
	req.SessionID, req.Code, req.ReadOnly = sid, "complete('x')", true
	res, err := e.svc.Exec(t.Context(), alice, req)
	if err != nil {
		t.Fatal(err)
	}
	e.quiet(t, sid)
	reqs := e.run.calls()
	last := reqs[len(reqs)-1]
	if res.RuntimeStatus != RuntimeReused || res.StatePending || last.CaptureState || !last.ReadOnly || last.Flush {
		t.Errorf("a read-only call: %s, pending %v, asked to capture %v, read-only %v; want reused, nothing captured",
			res.RuntimeStatus, res.StatePending, last.CaptureState, last.ReadOnly)
	}
	if captures.Load() != 0 || e.st.puts() != puts {
		t.Errorf("%d captures and %d state puts after a read-only call, want none", captures.Load(), e.st.puts()-puts)
	}
	if next := e.exec(t, sid, "x += 1"); next.RuntimeStatus != RuntimeReused || !next.StatePending {
		t.Errorf("the call after it: %s, pending %v; want the live sandbox as it was", next.RuntimeStatus, next.StatePending)
	}
}

// What a live sandbox alone held (names its last capture left out) is gone when a call
// of another size ends that sandbox where it cannot be resized: that call's answer says
// so, rather than the names vanishing without a word.
func TestACallOfAnotherSizeSaysWhatOnlyTheLiveSandboxHeld(t *testing.T) {
	e, flushes := newDeferringEnv(t, time.Hour)
	e.svc.limits.FixedSize, e.svc.limits.DefaultMilliCPU, e.svc.limits.DefaultMemoryMB = true, 1000, 512
	note := "big (ndarray) kept only while the session is live (past the state limit)"
	capturesLeaveOut(e, note)
	call := func(sid, code string, memoryMB int64) *ExecResult { return e.execSized(t, sid, code, memoryMB) }
	sid := call("", "x = 1", 0).Session.ID
	if res := call(sid, "big = make()", 0); !res.StatePending {
		t.Fatalf("the live call: pending %v, want pending", res.StatePending)
	}
	waitUntil(t, "the capture after the answer", func() bool { return flushes.Load() == 1 })
	other := call(sid, "big", 1024)
	if other.RuntimeStatus != RuntimeResumed || other.StateError == nil || !strings.Contains(*other.StateError, note) {
		t.Errorf("a call of another size: %s, state_error %v; want resumed, saying what its capture left out is gone",
			other.RuntimeStatus, str(other.StateError))
	}
}

// The same when the live sandbox ends idle: the session's next call, resumed, says what
// went with it.
func TestAResumedCallSaysWhatOnlyItsEndedSandboxHeld(t *testing.T) {
	e, flushes := newDeferringEnv(t, time.Hour)
	note := "big (ndarray) kept only while the session is live (past the state limit)"
	capturesLeaveOut(e, note)
	sid := e.exec(t, "", "x = 1").Session.ID
	if res := e.exec(t, sid, "big = make()"); !res.StatePending {
		t.Fatalf("the live call: pending %v, want pending", res.StatePending)
	}
	waitUntil(t, "the capture after the answer", func() bool { return flushes.Load() == 1 })
	e.reg.Drop(sid, live.EndIdle)
	next := e.exec(t, sid, "big")
	if next.RuntimeStatus != RuntimeResumed || next.StateError == nil || !strings.Contains(*next.StateError, note) ||
		!strings.Contains(*next.StateError, "idle") {
		t.Errorf("the call after an idle end: %s, state_error %v; want resumed, saying what went with the sandbox",
			next.RuntimeStatus, str(next.StateError))
	}
	if again := e.exec(t, sid, "x"); again.StateError != nil && strings.Contains(*again.StateError, note) {
		t.Errorf("the call after that: state_error %q; the loss is told once", *again.StateError)
	}
}

// execSized runs code in session sid (a new session when empty) with a sandbox of
// memoryMB (0: the pool's), failing the test on an error.
func (e *liveEnv) execSized(t *testing.T, sid, code string, memoryMB int64) *ExecResult {
	t.Helper()
	req := execReq()
	req.SessionID, req.Code, req.MemoryMB = sid, code, memoryMB
	res, err := e.svc.Exec(t.Context(), alice, req)
	if err != nil {
		t.Fatalf("Exec %q: %v", code, err)
	}
	return res
}

// capturesLeaveOut makes every capture after an answer leave names out, as note says.
func capturesLeaveOut(e *liveEnv, note string) {
	edit := e.edit
	e.edit = func(req executor.Request, res *executor.Result) {
		edit(req, res)
		if req.Flush {
			res.StateError = &note
		}
	}
}
