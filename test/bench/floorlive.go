package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/kilnsh/kiln/docker"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox"
)

// The floor rows of the live rows (live.go).
const (
	livePrintFloor = "floor: bare attach, live print(1), REPL that served its session"
	cellsFloor     = "floor: one interpreter, 50 small calls, no state capture"
	// cellsLiveFloor is the same calls in the request kiln sends for them: it parts the
	// REPL's capture from kiln's own in the small calls' row.
	cellsLiveFloor = "floor: one interpreter, 50 small calls, kiln's live requests"
)

// liveStateFloor names the floor of a live row in a session holding what.
func liveStateFloor(what string) string {
	return "floor: bare attach, live print(1), " + what + " held"
}

// liveRequest is the request kiln sends for a session's first Python call in a sandbox:
// live (the namespace stays for the session's next calls), the state captured before the
// answer, open figures saved (AUTO_FIGURES).
func liveRequest(code string) *protocol.Request {
	return &protocol.Request{ID: "floor-live", Op: protocol.OpExec, Lang: "python", Code: code, TimeoutMS: 30000,
		CaptureState: true, Live: true, Figures: true, Limits: kilnLimits}
}

// pendingRequest is the request kiln sends for a call in the session's live sandbox
// while STATE_SAVE_DELAY_MS is on (the default): nothing captured in the call; the
// namespace is captured right after the answer, outside the answer's time.
func pendingRequest(code string) *protocol.Request {
	return &protocol.Request{ID: "floor-live", Op: protocol.OpExec, Lang: "python", Code: code, TimeoutMS: 30000,
		Live: true, Figures: true, Limits: kilnLimits}
}

// plainRequest runs code in the interpreter with nothing of a session: no state in or
// out, no figures saved; what one interpreter on its own costs.
func plainRequest(code string) *protocol.Request {
	return &protocol.Request{ID: "floor-plain", Op: protocol.OpExec, Lang: "python", Code: code, TimeoutMS: 30000, Limits: kilnLimits}
}

// liveFloors measures the floor of every live row, each on sandboxes of its own started
// as kiln's pool starts them: live print(1), the 10 MB state's and each real state's
// live print(1) (those of runs whose state is measured live), and the small calls. A
// part that fails is noted and the rest goes on.
func (b *bench) liveFloors(ctx context.Context, runs []realRun) ([]Summary, error) {
	dc, err := openDocker(ctx, sandbox.FrameLimits{Header: 8 << 20, Binary: 64 << 20})
	if err != nil {
		return nil, err
	}
	defer dc.Close()
	var out []Summary
	var errs []error
	add := func(s Summary, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name, err))
			if s.N == 0 {
				s.Fails, s.Note = max(s.Fails, 1), "failed: "+err.Error()
			}
		}
		out = append(out, s)
	}
	note := "one warm sandbox (kiln's spec); after the calls of kiln's session before the row (untimed), the same live request " + quietApart + ", " +
		"capturing nothing (the states wait for the flush, as kiln's do)"
	add(bareLive(ctx, dc, b.image, livePrintFloor, b.counts.liveCalls, note+"; before: print(1), the session's first call",
		firstCalls(liveRequest("print(1)"))))
	// kiln's session made its state, then resumed from it in a fresh sandbox, which then
	// served live: here the state is made, then put back over itself from its blob.
	mk := fmt.Sprintf("import os\nblob = os.urandom(%d)\nprint(len(blob))", readOnlySize)
	add(bareLive(ctx, dc, b.image, liveStateFloor(human(readOnlySize)+" state"), b.counts.state,
		note+"; before: the state made (os.urandom), then print(1) carrying its blob, as a resumed call", madeThenRestored(mk)))
	for _, run := range runs {
		if !run.state.live {
			continue
		}
		first := liveRequest("print(1)")
		first.State = run.blob
		add(bareLive(ctx, dc, b.image, liveStateFloor(run.state.what), b.counts.state,
			note+fmt.Sprintf("; before: print(1) carrying the %d B state blob kiln's session held, as a resumed call", len(run.blob)), firstCalls(first)))
	}
	cells, cellsErrs := bareCells(ctx, dc, b.image, b.counts.cells)
	for i := range cells {
		add(cells[i], cellsErrs[i])
	}
	return out, errors.Join(errs...)
}

// setupCalls brings a bare sandbox to where kiln's session's sandbox was before a
// live row, and returns the state token of its last capture.
type setupCalls func(ctx context.Context, s repl) (base string, err error)

// firstCalls sends reqs one after another; each must run and capture a state.
func firstCalls(reqs ...*protocol.Request) setupCalls {
	return func(ctx context.Context, s repl) (string, error) {
		base := ""
		for _, req := range reqs {
			_, resp, err := exchange(ctx, s, req)
			if err == nil && (resp.Status != "ok" || resp.StateToken == "" || resp.StateError != nil) {
				err = fmt.Errorf("answered status %s, state_token %q, state_error %v", resp.Status, resp.StateToken, resp.StateError)
			}
			if err != nil {
				return "", err
			}
			base = resp.StateToken
		}
		return base, nil
	}
}

// madeThenRestored runs mk, which makes a state, then print(1) carrying the blob of
// that state, as a resumed call does.
func madeThenRestored(mk string) setupCalls {
	return func(ctx context.Context, s repl) (string, error) {
		_, resp, err := exchange(ctx, s, liveRequest(mk))
		if err == nil && (resp.Status != "ok" || len(resp.State) == 0) {
			err = fmt.Errorf("making the state: answered status %s with %d state bytes", resp.Status, len(resp.State))
		}
		if err != nil {
			return "", err
		}
		resumed := liveRequest("print(1)")
		resumed.State = resp.State
		return firstCalls(resumed)(ctx, s)
	}
}

// bareLive starts one sandbox and measures livePrints on it.
func bareLive(ctx context.Context, dc *docker.Runtime, image, name string, n int, note string, setup setupCalls) (row Summary, err error) {
	row.Name = name
	s, err := startOne(ctx, dc, image)
	if err != nil {
		return row, err
	}
	defer func() { err = errors.Join(err, removeAll([]*docker.Sandbox{s})) }()
	return livePrints(ctx, s, name, n, note, setup)
}

// livePrints brings a bare sandbox where kiln's session's sandbox was (setup, untimed),
// then times n live print(1) requests, quietGap apart, as kiln's live session sends them
// while their states wait for the flush (pendingRequest): nothing is captured.
func livePrints(ctx context.Context, s repl, name string, n int, note string, setup setupCalls) (row Summary, err error) {
	row.Name = name
	if _, err := setup(ctx, s); err != nil {
		return row, fmt.Errorf("before the row: %w", err)
	}
	var took []time.Duration
	fails := 0
	for range n {
		time.Sleep(quietGap) // kiln's live rows are paced quiet too
		d, r, err := exchange(ctx, s, pendingRequest("print(1)"))
		if err == nil && (r.Status != "ok" || r.Stdout != "1\n" || len(r.State) > 0) {
			err = fmt.Errorf("answered status %s, stdout %q, %d state bytes back", r.Status, r.Stdout, len(r.State))
		}
		if err != nil {
			log.Printf("%s: %v", name, err)
			fails++
			continue
		}
		took = append(took, d)
	}
	return summarize(name, took, fails, note), nil
}

// bareCells times rounds of the small calls' row on bare sandboxes, two per round:
// after the same first call, cellsCalls small calls one after another, their wall
// time; on one with no state captured (one interpreter on its own: rows[0]), on the
// other in the requests kiln sends for a live session's calls (rows[1]).
func bareCells(ctx context.Context, dc *docker.Runtime, image string, rounds int) (rows [2]Summary, errs [2]error) {
	var walls [2][]time.Duration
	var fails [2]int
	for range rounds {
		for i, shaped := range []bool{false, true} {
			wall, err := bareCellsRound(ctx, dc, image, shaped)
			if err != nil {
				errs[i] = errors.Join(errs[i], err)
				fails[i]++
				continue
			}
			walls[i] = append(walls[i], wall)
		}
	}
	note := fmt.Sprintf("wall time of the %d calls of kiln's row after the same first call, on one bare sandbox's REPL per round (%d rounds)", cellsCalls, rounds)
	rows[0] = summarize(cellsFloor, walls[0], fails[0], note+": capture_state false, live false, no figures")
	rows[1] = summarize(cellsLiveFloor, walls[1], fails[1], note+": live, figures, the first capturing its state and the others not (their states wait for the flush), as kiln sends them")
	return rows, errs
}

// bareCellsRound runs the small calls on a sandbox of its own: plain requests, or
// kiln's live ones (shaped), each based on the last answer's state token.
func bareCellsRound(ctx context.Context, dc *docker.Runtime, image string, shaped bool) (wall time.Duration, err error) {
	s, err := startOne(ctx, dc, image)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, removeAll([]*docker.Sandbox{s})) }()
	first := true
	call := func(c smallCell) error {
		req := plainRequest(c.code)
		switch {
		case shaped && first:
			req = liveRequest(c.code) // a session's first call stores its state before it answers
		case shaped:
			req = pendingRequest(c.code)
		}
		first = false
		_, r, err := exchange(ctx, s, req)
		if err != nil {
			return err
		}
		if r.Status != "ok" || !printed(r.Stdout, r.Result, c.want) || r.StateError != nil {
			return fmt.Errorf("answered status %s, stdout %.200q, result %.200q, state_error %v", r.Status, r.Stdout, deref(r.Result), r.StateError)
		}
		return nil
	}
	if err := call(smallCell{cellsFirst, "ready"}); err != nil {
		return 0, fmt.Errorf("first call: %w", err)
	}
	start := time.Now()
	for i := range cellsCalls {
		if err := call(smallCellAt(i)); err != nil {
			return 0, fmt.Errorf("call %d: %w", i+1, err)
		}
	}
	return time.Since(start), nil
}

// startOne starts one sandbox as kiln's pool does and lets its warm-up's garbage
// settle, as bareAttach does.
func startOne(ctx context.Context, dc *docker.Runtime, image string) (*docker.Sandbox, error) {
	boxes, err := startSandboxes(ctx, dc, bareSpec(image), 1, 1)
	if err != nil {
		return nil, errors.Join(err, removeAll(boxes))
	}
	time.Sleep(2 * time.Second)
	return boxes[0], nil
}
