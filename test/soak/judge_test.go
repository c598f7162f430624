package soak

import (
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// class is the kind of trouble in an answer that a fault may excuse. Every other wrong
// answer (a wrong stdout, a 500 outside a store outage, a hang) is a failure whenever
// it happens.
type class string

const (
	classNone        class = ""
	classDied        class = "sandbox died" // 200 sandbox_died (a daemon stopping it: 143), or oom with 137 (killed)
	classUnavailable class = "unavailable"  // 503 unavailable with Retry-After, or such an error event
	classConn        class = "connection"   // no answer: refused, reset, or a stream cut short
	classInternal    class = "internal"     // 500 internal, or such an error event
)

// tolerated lists, per fault, the troubles a request that overlaps it may meet. A
// sandbox killed from outside dies; a kiln killed answers nothing until it is back,
// then may have no warm sandbox yet; a daemon that restarts kills the running
// sandboxes and can warm none while it is away (503); a store outage is a 500, as
// docs/api.md says of an outage.
var tolerated = map[string][]class{
	faultSandboxKill:   {classDied},
	faultKilnKill:      {classConn, classUnavailable},
	faultDaemonRestart: {classDied, classUnavailable},
	faultRedisRestart:  {classInternal, classUnavailable},
}

// afterFault is how long after a fault's recovery a request still counts as meeting
// it: the pool may still be refilling.
const afterFault = 5 * time.Second

// obs is one request of the mix: what came back and what was wrong with it.
type obs struct {
	Kind     string
	Start    time.Time
	End      time.Time
	Outcome  string
	Class    class
	Problems []string
}

// recorder keeps every request's observation; it is shared by the clients.
type recorder struct {
	mu  sync.Mutex
	all []obs
	n   atomic.Int64
}

func (r *recorder) add(o obs) {
	r.mu.Lock()
	r.all = append(r.all, o)
	r.mu.Unlock()
	r.n.Add(1)
}

func (r *recorder) list() []obs {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]obs(nil), r.all...)
}

// classify names an /exec answer's outcome and the trouble it shows, if any.
func classify(r execResult) (string, class) {
	switch {
	case r.hang:
		return "no answer within the bound (hang)", classNone
	case r.err != nil:
		return "no answer", classConn
	case r.status == http.StatusOK && r.done:
		cl := classNone
		if r.body.Status == "sandbox_died" || (r.body.Status == "oom" && r.body.ExitCode == 137) {
			cl = classDied
		}
		return "200 " + r.body.Status, cl
	case r.status == http.StatusOK && r.stopped:
		return "stream error " + r.envl.Error, eventClass(r.envl.Error)
	case r.status == http.StatusOK:
		return "200 without a readable body", classNone
	}
	return describe(r.answer, r.envl)
}

// describe names a non-200 answer (or a transport error) and the trouble it shows.
func describe(a answer, envl kilntest.ErrorBody) (string, class) {
	switch {
	case a.hang:
		return "no answer within the bound (hang)", classNone
	case a.err != nil:
		return "no answer", classConn
	case a.status == http.StatusServiceUnavailable && envl.Error == "unavailable" && a.header.Get("Retry-After") != "":
		return "503 unavailable", classUnavailable
	case a.status == http.StatusInternalServerError && envl.Error == "internal":
		return "500 internal", classInternal
	}
	return fmt.Sprintf("%d %s", a.status, envl.Error), classNone
}

func eventClass(code string) class {
	switch code {
	case "unavailable":
		return classUnavailable
	case "internal":
		return classInternal
	}
	return classNone
}

// window is the time a fault was under way, to its recovery and a little after.
type window struct {
	kind     string
	from, to time.Time
}

func windows(faults []*faultRecord) []window {
	var ws []window
	for _, f := range faults {
		end := f.Ready
		if end.IsZero() { // never recovered: it lasts to the end
			end = time.Now().Add(time.Hour)
		}
		ws = append(ws, window{kind: f.Kind, from: f.Start, to: end.Add(afterFault)})
	}
	return ws
}

// verdict is the judgement of every request.
type verdict struct {
	Failed    []obs
	Tolerated map[string]int // fault → requests it excused
}

// judge fails every observation with problems, except those whose trouble a fault
// they overlap may cause.
func judge(all []obs, faults []*faultRecord) verdict {
	v := verdict{Tolerated: map[string]int{}}
	ws := windows(faults)
	for _, o := range all {
		if len(o.Problems) == 0 {
			continue
		}
		if w, ok := excused(o, ws); ok {
			v.Tolerated[w]++
			continue
		}
		v.Failed = append(v.Failed, o)
	}
	sort.Slice(v.Failed, func(i, j int) bool { return v.Failed[i].Start.Before(v.Failed[j].Start) })
	return v
}

func excused(o obs, ws []window) (string, bool) {
	if o.Class == classNone {
		return "", false
	}
	for _, w := range ws {
		if o.End.Before(w.from) || o.Start.After(w.to) {
			continue
		}
		for _, c := range tolerated[w.kind] {
			if c == o.Class {
				return w.kind, true
			}
		}
	}
	return "", false
}
