package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"strings"
	"time"
)

// The live rows measure a session's calls in the sandbox that served its last call
// (runtime_status "reused"): nothing is restored, no sandbox is taken from the pool, and
// the state crosses the attach only when it changed. Each is set against the same
// exchanges on one bare sandbox (floorlive.go).
const (
	livePrintRow = "live session: print(1), c=1"
	plainRow     = "live session: print(1) as plain Python (\"ipython\": false), c=1"
	cellsRow     = "live session: 50 small calls one after the other"
)

// ipythonTarget bounds a live print(1) read as IPython reads it (the default) against the
// same call as plain Python, in the same run (issue 43).
const ipythonTarget = 1.2

// cellsTarget is the bound on the small calls' wall time against one
// interpreter's; the other live rows have ratioTarget.
const cellsTarget = 1.5

// smallCell is one call of the small calls' row, and what its stdout or its final
// expression's value holds.
type smallCell struct{ code, want string }

// smallCells are what a notebook's user types between two longer runs: assignments,
// prints, a small pandas frame and its group-by, a function, a final expression. The
// row sends them over and over, cellsCalls in all.
var smallCells = []smallCell{
	{"a = 3\nb = 4\nc = (a ** 2 + b ** 2) ** 0.5", ""},
	{`print(f"c = {c}")`, "c = 5.0"},
	{"words = 'the quick brown fox jumps over the lazy dog'.split()\ncounts = {w: len(w) for w in words}\nlen(counts)", "8"},
	{"sales = pd.DataFrame({'region': ['north', 'south', 'east', 'west'] * 25, 'amount': np.arange(100) * 1.5})", ""},
	{"totals = sales.groupby('region')['amount'].sum()\nprint(totals.idxmax())", "west"},
	{"sales['double'] = sales['amount'] * 2\nsales.head(3)", "north"},
	{"def mean(xs):\n    return sum(xs) / len(xs)\n\nmean([1, 2, 3, 4])", "2.5"},
	{"import math\nprint(round(math.log(c), 4))", "1.6094"},
	{"arr = np.linspace(0, 1, 11)\narr.sum()", "5.5"},
	{"sales.describe().loc['mean', 'amount']", "74.25"},
}

// cellsCalls is how many small calls one round of the row sends.
const cellsCalls = 50

func smallCellAt(i int) smallCell { return smallCells[i%len(smallCells)] }

// cellsFirst is a session's first call, before its small calls: it takes the sandbox
// from the pool that then serves the session.
const cellsFirst = `print("ready")`

// livePhase measures a live session's calls: print(1) in a session whose sandbox served
// its first call, rounds of small calls one after the other (each round a new session),
// and the memory a live session holds.
func livePhase(ctx context.Context, k *client, c counts, res *Results) {
	sid, err := newSession(ctx, k, "print(1)", "1")
	if err != nil {
		res.Latency = append(res.Latency, summarize(livePrintRow, nil, 1, "setup failed: "+err.Error()))
	} else {
		s, cpuMS := liveRow(ctx, k, livePrintRow, sid, "print(1)", "1", c.liveCalls,
			"calls after the session's first, each in the sandbox that served the last (runtime_status reused), each "+quietApart+" once the pool is full and idle")
		res.Latency = append(res.Latency, s)
		res.Resources.CPUPerRequestMS["live print(1)"] = cpuMS
	}
	res.pairs = append(res.pairs, pair{row: livePrintRow, floor: livePrintFloor, target: ratioTarget,
		basis: "the same live print(1), " + quietApart + " on one bare sandbox that served its session's first call"})
	if sid, err := newSession(ctx, k, "print(1)", "1"); err != nil {
		res.Latency = append(res.Latency, summarize(plainRow, nil, 1, "setup failed: "+err.Error()))
	} else {
		s, _ := liveRowWith(ctx, k, plainRow, sid, map[string]any{"code": "print(1)", "ipython": false}, "1", c.liveCalls,
			"as the row above, with IPython's transformations and history off")
		res.Latency = append(res.Latency, s)
	}
	res.pairs = append(res.pairs, pair{row: livePrintRow, floor: plainRow, kiln: true, target: ipythonTarget,
		basis: "kiln's live print(1) as plain Python, the same run"})
	heldPhase(ctx, k, c.liveCalls, res)
	cellsPhase(ctx, k, c.cells, res)
	liveMemoryPhase(ctx, k, res)
}

// newSession runs code in a new session, once the pool is full and idle, and returns
// the session's id.
func newSession(ctx context.Context, k *client, code, want string) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, refillWait)
	err := k.waitQuiet(wctx)
	cancel()
	if err != nil {
		return "", err
	}
	r, err := k.exec(ctx, map[string]any{"code": code})
	if err == nil {
		err = ranOK(r, want)
	}
	if err != nil {
		return "", fmt.Errorf("first call: %w", err)
	}
	return r.SessionID, nil
}

// liveRow runs n calls of code in session sid, each in its live sandbox, paced as the
// other rows and as their floors (each quietGap after the last answer, once the pool is
// full and idle: as an agent's next call comes once its model has read the answer), and
// returns the row and kiln's CPU per call. A live call's capture follows its answer, so a
// call sent sooner waits for it: backToBackRow measures that.
func liveRow(ctx context.Context, k *client, name, sid, code, want string, n int, note string) (Summary, float64) {
	return liveRowWith(ctx, k, name, sid, map[string]any{"code": code}, want, n, note)
}

// liveRowWith is liveRow with the request's other fields in body (its code among them).
func liveRowWith(ctx context.Context, k *client, name, sid string, body map[string]any, want string, n int, note string) (Summary, float64) {
	quiet := func() (float64, error) {
		wctx, cancel := context.WithTimeout(ctx, refillWait)
		defer cancel()
		time.Sleep(quietGap)
		return 0, k.waitQuiet(wctx)
	}
	return sessionRowWith(ctx, k, name, sid, body, want, n, note, quiet, liveAnswer)
}

// backToBackRow runs n calls of code in session sid, each as soon as the last answered:
// each waits for the capture of the namespace the last one left.
func backToBackRow(ctx context.Context, k *client, name, sid, code, want string, n int, note string) (Summary, float64) {
	next := func() (float64, error) { return 0, nil }
	return sessionRow(ctx, k, name, sid, code, want, n, note, next, liveAnswer)
}

// sessionRow runs n calls of code in session sid, each after before (untimed; it
// returns kiln's CPU it took, which the row's CPU leaves out), and records their
// latency, kiln's exec_ms and the wire bytes per call; check tells an answer that is
// what the row measures. It also returns kiln's CPU per call.
func sessionRow(ctx context.Context, k *client, name, sid, code, want string, n int, note string,
	before func() (float64, error), check func(*execResult, string) error) (Summary, float64) {
	return sessionRowWith(ctx, k, name, sid, map[string]any{"code": code}, want, n, note, before, check)
}

// sessionRowWith is sessionRow with the request's other fields in body (its code among them).
func sessionRowWith(ctx context.Context, k *client, name, sid string, body map[string]any, want string, n int, note string,
	before func() (float64, error), check func(*execResult, string) error) (Summary, float64) {
	w := k.wireMeter(ctx)
	cpu := k.cpu()
	var took, execs []time.Duration
	var beforeMS float64
	fails := 0
	for range n {
		ms, err := before()
		beforeMS += ms
		if err != nil {
			note += "; stopped: " + err.Error()
			break
		}
		call := map[string]any{"session_id": sid}
		for key, v := range body {
			call[key] = v
		}
		r, err := k.exec(ctx, call)
		if err == nil {
			err = check(r, want)
		}
		if err != nil {
			log.Printf("%s: %v", name, err)
			fails++
			continue
		}
		took = append(took, r.Took)
		execs = append(execs, r.Exec())
	}
	s := summarize(name, took, fails, note)
	s.ExecP50 = median(execs)
	calls := len(took) + fails
	s.WireIn, s.WireOut = w.perCall(ctx, k, calls)
	if calls == 0 {
		return s, 0
	}
	return s, round(max(cpu.perRequest(1)-beforeMS, 0)/float64(calls), 2)
}

// ranOK checks that a call ran and that its stdout or its final expression's value
// holds want.
func ranOK(r *execResult, want string) error {
	if r.Code != http.StatusOK || r.Status != "ok" || !printed(r.Stdout, r.Result, want) {
		return fmt.Errorf("answered %d, status %s, stdout %.200q, result %.200q", r.Code, r.Status, r.Stdout, deref(r.Result))
	}
	return nil
}

// printed tells whether a run's stdout or the value of its final expression holds want.
func printed(stdout string, result *string, want string) bool {
	return strings.Contains(stdout, want) || strings.Contains(deref(result), want)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// liveAnswer checks a live row's call: it ran, kept its whole state, and ran in the
// session's live sandbox. A kiln without live sessions has no live rows.
func liveAnswer(r *execResult, want string) error {
	if err := ranOK(r, want); err != nil {
		return err
	}
	if r.StateError != nil {
		return fmt.Errorf("state_error: %s", *r.StateError)
	}
	if r.RuntimeStatus != "reused" {
		return fmt.Errorf("ran %q, not in the session's live sandbox", r.RuntimeStatus)
	}
	return nil
}

// cellsPhase sends rounds of cellsCalls small calls to a session, one after the other
// with no pacing, each round in a new session after its first call, and times each
// round's wall time. Around each round it reads the pool's and the live registry's
// counters: a live session's calls take no sandbox from the pool.
func cellsPhase(ctx context.Context, k *client, rounds int, res *Results) {
	var walls, execs []time.Duration
	fails, calls := 0, 0
	var created, removed, reused int64
	var stopped []string
	cpuMS := 0.0
	w := k.wireMeter(ctx)
	for range rounds {
		r, err := cellsRound(ctx, k)
		if err != nil {
			log.Printf("%s: %v", cellsRow, err)
			stopped = append(stopped, err.Error())
			fails++
			continue
		}
		walls, execs = append(walls, r.wall), append(execs, r.exec)
		calls += cellsCalls
		cpuMS += r.cpuMS
		created += r.created
		removed += r.removed
		reused += r.reused
	}
	note := fmt.Sprintf("wall time of %d calls sent one after the other to one session after its first call (%d rounds, a new session each); "+
		"over them the pool created %d and removed %d sandboxes, the live registry counted %d reused calls",
		cellsCalls, rounds, created, removed, reused)
	if len(stopped) > 0 {
		note += "; failed: " + strings.Join(stopped, "; ")
	}
	s := summarize(cellsRow, walls, fails, note)
	s.ExecP50 = median(execs) // a round's exec_ms added up
	s.WireIn, s.WireOut = w.perCall(ctx, k, calls)
	res.Latency = append(res.Latency, s)
	if calls > 0 {
		res.Resources.CPUPerRequestMS["live small call"] = round(cpuMS/float64(calls), 2)
	}
	res.pairs = append(res.pairs, pair{row: cellsRow, floor: cellsFloor, target: cellsTarget,
		basis: "the same calls on one interpreter in a bare sandbox, nothing captured",
		split: cellsLiveFloor, splitBasis: "the same calls in kiln's live requests on one bare sandbox"})
}

// cellsResult is one round of the small calls: its wall time, kiln's exec_ms added up,
// kiln's CPU, and how the pool's and the live registry's counters moved.
type cellsResult struct {
	wall, exec               time.Duration
	cpuMS                    float64
	created, removed, reused int64
}

// cellsRound runs one round of the small calls in a new session.
func cellsRound(ctx context.Context, k *client) (cellsResult, error) {
	var out cellsResult
	sid, err := newSession(ctx, k, cellsFirst, "ready")
	if err != nil {
		return out, err
	}
	// The first call's sandbox is being replaced: the counters below are to see the
	// small calls only.
	wctx, cancel := context.WithTimeout(ctx, refillWait)
	err = k.waitQuiet(wctx)
	cancel()
	if err != nil {
		return out, err
	}
	before, err := k.health(ctx)
	if err != nil {
		return out, err
	}
	cpu := k.cpu()
	start := time.Now()
	for i := range cellsCalls {
		c := smallCellAt(i)
		r, err := k.exec(ctx, map[string]any{"code": c.code, "session_id": sid})
		if err == nil {
			err = liveAnswer(r, c.want)
		}
		if err != nil {
			return out, fmt.Errorf("call %d: %w", i+1, err)
		}
		out.exec += r.Exec()
	}
	out.wall = time.Since(start)
	out.cpuMS = cpu.perRequest(1)
	after, err := k.health(ctx)
	if err != nil {
		return out, err
	}
	if !after.Live.Enabled {
		return out, errors.New("live sessions are off")
	}
	out.created, out.removed = after.Pool.Created-before.Pool.Created, after.Pool.Removed-before.Pool.Removed
	out.reused = after.Live.Calls["reused"] - before.Live.Calls["reused"]
	return out, nil
}
