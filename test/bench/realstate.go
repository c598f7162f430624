package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"strings"
)

// realState is a session state of the objects users keep, where the bytes rows keep
// random bytes: what its setup builds, and the two calls measured in it. Restoring and
// capturing such a state costs the REPL far more than moving its bytes, so each call is
// set against the same exchange over a bare attach, not against the bytes floor.
type realState struct {
	what  string // names the state in the rows
	about string // what the setup builds, for the rows' notes
	setup string
	// setupWant is what the setup prints when it built what the rows say; empty when
	// the figure depends on the libraries' versions.
	setupWant string
	calls     [2]realCall
	// live: its first call is also measured in the session's live sandbox.
	live bool
}

// realCall is one measured call in a realState's session.
type realCall struct {
	label string // the call in the rows' names
	code  string
	want  string
	// echo: the call prints what the setup printed, a figure that depends on the
	// libraries' versions, in place of want.
	echo bool
	// changed calls rebind a name, so that the whole state is captured and sent back;
	// the others leave it byte for byte as it was, and it stays in the sandbox.
	changed bool
}

// dataFrameSetup builds 1,000,000 rows of mixed columns from a seeded generator. The
// strings are distinct objects, as read_csv makes them, so that pickle cannot share them.
const dataFrameSetup = `import numpy as np
import pandas as pd

rng = np.random.default_rng(0)
rows = 1_000_000
cities = [f"city_{i:02d}" for i in range(20)]
df = pd.DataFrame({
    "id": np.arange(rows, dtype=np.int64),
    "amount": rng.normal(100.0, 25.0, rows),
    "city": pd.Categorical.from_codes(rng.integers(0, len(cities), rows), categories=cities),
    "at": pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 365 * 86400, rows), unit="s"),
    "paid": rng.random(rows) < 0.8,
    "sku": pd.Series([f"{x:06x}" for x in rng.integers(0, 16**6, rows)], dtype=object),
})
del rng, rows, cities
n = 0
print(len(df), df.dtypes.astype(str).tolist())`

// forestSetup fits the forest on the data the session keeps beside it.
const forestSetup = `from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier

X, y = make_classification(n_samples=5000, n_features=20, random_state=0)
model = RandomForestClassifier(n_estimators=100, random_state=0).fit(X, y)
print(model.score(X, y))`

// realStates are the real states measured, on the default kiln: the DataFrame's state
// (about 28 MB compressed, 35 MB raw) fits its caps (64 MB each), and its restore and
// capture peaked near 400 MB of the sandbox's 544 (512 and the warm heap's 32).
var realStates = []realState{
	{what: "1M-row DataFrame", about: "pandas DataFrame of 1,000,000 rows: int64, float64, category (20), datetime64[ns], bool, object (6-char str)",
		setup: dataFrameSetup, setupWant: "1000000 ['int64', 'float64', 'category', 'datetime64[ns]', 'bool', 'object']",
		calls: [2]realCall{{label: "print(1)", code: "print(1)", want: "1"}, {label: "n += 1", code: "n += 1", changed: true}}, live: true},
	{what: "random forest", about: "RandomForestClassifier(n_estimators=100) fitted on make_classification 5000 x 20, with X and y",
		setup: forestSetup,
		calls: [2]realCall{{label: "print(1)", code: "print(1)", want: "1"}, {label: "score(X, y)", code: "print(model.score(X, y))", echo: true}}},
}

func (s realState) rowName(i int) string {
	return fmt.Sprintf("session with a %s, resumed, %s", s.what, s.calls[i].label)
}

func (s realState) liveRowName() string {
	return fmt.Sprintf("session with a %s, live, %s", s.what, s.calls[0].label)
}

func (s realState) floorName(i int) string {
	way := "unchanged"
	if s.calls[i].changed {
		way = "changed"
	}
	return fmt.Sprintf("floor: bare attach, first %s, %s, %s", s.calls[i].label, s.what, way)
}

// realRun is a real state as kiln's session held it, for the floor of the same run:
// its blob, and what each call must print.
type realRun struct {
	state realState
	blob  []byte
	want  [2]string
}

// realStatePhase builds each real state once in a session, then measures its two calls
// in it: each call restores the state and captures it again, and only a changed state
// comes back. Each call resumes from the store in a fresh sandbox (see beforeResume).
// A live state's first call is then measured in the session's live sandbox, which
// keeps the namespace and restores nothing. The blob each session held goes to the
// floor.
func realStatePhase(ctx context.Context, k *client, n int, res *Results) {
	for _, s := range realStates {
		sid, run, err := s.build(ctx, k)
		if err != nil {
			log.Printf("%s: %v", s.rowName(0), err)
			res.Latency = append(res.Latency, summarize(s.rowName(0), nil, 1, "setup failed: "+err.Error()))
			continue
		}
		res.realRuns = append(res.realRuns, run)
		for i, c := range s.calls {
			note := fmt.Sprintf("state_size %d B, %s; each call resumed from the store in a fresh sandbox; ", len(run.blob), s.about)
			if c.changed {
				note += "the call rebinds a name: the whole state is captured and sent back"
			} else {
				note += "the state is unchanged, so it need not come back"
			}
			row, cpuMS := resumedRow(ctx, k, s.rowName(i), sid, run.blob, c.code, run.want[i], n, note)
			res.Latency = append(res.Latency, row)
			res.Resources.CPUPerRequestMS["state "+s.what+", resumed, "+c.label] = cpuMS
			res.transfers = append(res.transfers, transfer{name: s.rowName(i), bytes: len(run.blob), in: true, out: c.changed, bare: s.floorName(i)})
		}
		if !s.live {
			continue
		}
		c := s.calls[0]
		row, cpuMS := liveRow(ctx, k, s.liveRowName(), sid, c.code, run.want[0], n,
			fmt.Sprintf("state_size %d B, %s; in the sandbox that served the session's last call (runtime_status reused): no state sent, "+
				"captured and compared with the last capture, unchanged, so nothing comes back", len(run.blob), s.about))
		res.Latency = append(res.Latency, row)
		res.Resources.CPUPerRequestMS["state "+s.what+", live, "+c.label] = cpuMS
		res.pairs = append(res.pairs, pair{row: s.liveRowName(), floor: liveStateFloor(s.what), target: ratioTarget,
			basis: "the same live " + c.label + ", " + quietApart + " on one bare sandbox holding the session's state blob"})
	}
}

// build runs the setup in a new session and settles its state, then fetches the blob
// the session holds.
func (s realState) build(ctx context.Context, k *client) (sid string, run realRun, err error) {
	run.state = s
	wctx, cancel := context.WithTimeout(ctx, refillWait)
	err = k.waitQuiet(wctx)
	cancel()
	if err != nil {
		return "", run, err
	}
	r, err := k.exec(ctx, map[string]any{"code": s.setup})
	if err == nil {
		err = sessionAnswer(r, s.setupWant)
	}
	if err != nil {
		return "", run, fmt.Errorf("setup: %w", err)
	}
	sid, printed := r.SessionID, strings.TrimSpace(r.Stdout)
	// The first restore of the setup's state makes distinct objects of some that its
	// pickle shared (the numpy dtype of an object column), so that its capture is a few
	// bytes apart and comes back whole; the capture of that restore is stable. The rows
	// and the floor carry the stable one, whose unchanged calls send nothing back.
	first, err := k.state(ctx, sid)
	if err == nil {
		err = beforeResume(ctx, k, sid, first)
	}
	if err == nil {
		r, err = k.exec(ctx, map[string]any{"code": "print(1)", "session_id": sid})
	}
	if err == nil {
		err = resumedAnswer(r, "1")
	}
	if err != nil {
		return "", run, fmt.Errorf("settling: %w", err)
	}
	if run.blob, err = k.state(ctx, sid); err == nil && len(run.blob) != r.StateSize {
		err = fmt.Errorf("GET /state gave %d bytes, the answer said state_size %d", len(run.blob), r.StateSize)
	}
	if err != nil {
		return "", run, err
	}
	for i, c := range s.calls {
		run.want[i] = c.want
		if c.echo {
			run.want[i] = printed
		}
	}
	return sid, run, nil
}

// resumedRow runs n calls of code in session sid, each resumed from blob in a fresh
// sandbox, paced as the other rows, and records their latency, kiln's exec_ms and the
// wire bytes per call. It also returns kiln's CPU per call, less what putting the state
// back before each call took.
func resumedRow(ctx context.Context, k *client, name, sid string, blob []byte, code, want string, n int, note string) (Summary, float64) {
	before := func() (float64, error) {
		put := k.cpu()
		err := k.putState(ctx, sid, blob)
		ms := put.perRequest(1)
		if err == nil {
			err = beforeResume(ctx, k, sid, nil)
		}
		return ms, err
	}
	return sessionRow(ctx, k, name, sid, code, want, n, note, before, resumedAnswer)
}

// beforeResume makes the session's next call resume from the store: putting its state
// back (blob, when given) ends the sandbox a live session keeps between its calls, as an
// idle session's end does. It then waits until the pool is full and idle. The ended
// sandbox is removed in the background while the replacement of the last call's
// sandbox warms up, which the wait covers.
func beforeResume(ctx context.Context, k *client, sid string, blob []byte) error {
	if blob != nil {
		if err := k.putState(ctx, sid, blob); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, refillWait)
	defer cancel()
	return k.waitQuiet(wctx)
}

// sessionAnswer checks that a session call ran, printed want and kept the whole state:
// a name that did not fit the caps would be dropped with a state_error, and the rows
// would measure a smaller state than they say.
func sessionAnswer(r *execResult, want string) error {
	switch {
	case r.Code != http.StatusOK || r.Status != "ok" || !strings.Contains(r.Stdout, want):
		return fmt.Errorf("answered %d, status %s, stdout %.200q", r.Code, r.Status, r.Stdout)
	case r.StateError != nil:
		return fmt.Errorf("state_error: %s", *r.StateError)
	case !r.HasState:
		return errors.New("no state kept")
	}
	return nil
}

// resumedAnswer is sessionAnswer for a call that must have resumed from the store; a
// kiln without live sessions does not say where a call ran.
func resumedAnswer(r *execResult, want string) error {
	if err := sessionAnswer(r, want); err != nil {
		return err
	}
	if r.RuntimeStatus != "" && r.RuntimeStatus != "resumed" {
		return fmt.Errorf("ran %s, not resumed from the store", r.RuntimeStatus)
	}
	return nil
}
