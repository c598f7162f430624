package soak

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/kilnsh/kiln/test/kilntest"
)

// stream runs code that prints as it goes, with Server-Sent Events: the output must
// come as stdout events, in order, adding up to the done event's stdout.
func (w *worker) stream() {
	tag, n := w.rng.Intn(1<<30), 3+w.rng.Intn(3)
	code := fmt.Sprintf("import time\nfor i in range(%d):\n    print(f'tick {i} %d', flush=True)\n    time.sleep(0.15)", n, tag)
	r := w.s.cl.stream(stateless(code, 20000), nil)
	p := expect(r, "ok", 0, "")
	if p == nil {
		var want strings.Builder
		for i := range n {
			fmt.Fprintf(&want, "tick %d %d\n", i, tag)
		}
		p = checkEvents(r, want.String())
	}
	w.noteExec("stream", r, p)
}

// checkEvents checks a finished stream: start first, done last, the stdout events
// adding up to the final stdout, which must be want.
func checkEvents(r execResult, want string) []string {
	var p []string
	if r.body.Stdout != want {
		p = append(p, fmt.Sprintf("stdout %q, want %q", clip(r.body.Stdout, 200), clip(want, 200)))
	}
	if len(r.events) < 2 || r.events[0].Name != "start" || r.events[len(r.events)-1].Name != "done" {
		names := make([]string, len(r.events))
		for i, e := range r.events {
			names[i] = e.Name
		}
		return append(p, fmt.Sprintf("events %v, want start first and done last", names))
	}
	if sid, eid := r.events[0].Start(); sid == "" || eid == "" {
		p = append(p, fmt.Sprintf("start event %s names no session or execution", r.events[0].Data))
	}
	var streamed strings.Builder
	outs := 0
	for _, e := range r.events {
		if e.Name == "stdout" {
			outs++
			streamed.WriteString(e.Text())
		}
	}
	if outs == 0 || streamed.String() != r.body.Stdout {
		p = append(p, fmt.Sprintf("%d stdout events carried %q, want the final stdout %q", outs, clip(streamed.String(), 200), clip(r.body.Stdout, 200)))
	}
	return p
}

// cancelRun starts a long run on a stream and cancels it once it has printed: the run
// must end cancelled with the output so far, and the cancel must be accepted.
func (w *worker) cancelRun() {
	code := "import time\nprint('started', flush=True)\ntime.sleep(30)\nprint('not cancelled')"
	var (
		once    sync.Once
		sent    bool
		execID  string
		answers = make(chan answer, 1)
	)
	r := w.s.cl.stream(stateless(code, 40000), func(e kilntest.Event) {
		switch e.Name {
		case "start":
			_, execID = e.Start()
		case "stdout":
			if strings.Contains(e.Text(), "started") {
				once.Do(func() {
					sent = true
					go func() { answers <- w.s.cl.cancel(execID) }()
				})
			}
		}
	})
	p := expect(r, "cancelled", 130, "Interrupted")
	if p == nil && r.body.Stdout != "started\n" {
		p = append(p, fmt.Sprintf("stdout %q, want the output before the cancel", r.body.Stdout))
	}
	w.noteExec("stream (cancelled)", r, p)
	if !sent { // the run never printed: the stream's own answer says why
		return
	}
	a := <-answers
	if a.err == nil && a.status == http.StatusAccepted {
		w.note(obs{Kind: "cancel", Start: a.start, End: a.end, Outcome: "202"})
		return
	}
	var envl kilntest.ErrorBody
	_ = json.Unmarshal(a.body, &envl)
	outcome, cl := describe(a, envl)
	if cl == classNone && (a.status == http.StatusConflict || a.status == http.StatusNotFound) {
		_, cl = classify(r) // the run had ended already: excused only if a fault ended it
	}
	w.note(obs{Kind: "cancel", Start: a.start, End: a.end, Outcome: outcome, Class: cl,
		Problems: []string{fmt.Sprintf("cancel answered %s (%s), want 202", outcome, clip(string(a.body), 200))}})
}
