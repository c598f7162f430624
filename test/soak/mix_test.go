package soak

import (
	"fmt"
	"math/rand"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// op is one kind of request in the mix, with its weight.
type op struct {
	name   string
	weight int
	run    func(*worker)
}

// mix is what the clients send, weighted. Every answer is checked against what its code
// must produce (docs/api.md); upload and files send two requests each (the second a
// download), cancel two (a stream and its cancel).
var mix = []op{
	{"print", 17, (*worker).print},
	{"error", 8, (*worker).raise},
	{"timeout", 6, (*worker).timeout},
	{"oom", 4, (*worker).oom},
	{"fork bomb", 4, (*worker).forkBomb},
	{"thread bomb", 4, (*worker).threadBomb},
	{"flood", 5, (*worker).flood},
	{"upload", 7, (*worker).upload},
	{"files", 7, (*worker).files},
	{"session", 25, (*worker).session},
	{"stream", 7, (*worker).stream},
	{"cancel", 6, (*worker).cancelRun},
}

// worker is one client of the soak: it sends requests of the mix one after the other.
type worker struct {
	s   *soak
	rng *rand.Rand
}

func (w *worker) loop(wg *sync.WaitGroup) {
	defer wg.Done()
	total := 0
	for _, o := range mix {
		total += o.weight
	}
	for w.s.next() {
		n := w.rng.Intn(total)
		for _, o := range mix {
			if n -= o.weight; n < 0 {
				o.run(w)
				break
			}
		}
	}
}

// noteExec records an /exec answer with the problems its checks found. After an
// answer that shows trouble, the client waits a little, as a client would.
func (w *worker) noteExec(kind string, r execResult, problems []string) {
	outcome, cl := classify(r)
	w.note(obs{Kind: kind, Start: r.start, End: r.end, Outcome: outcome, Class: cl, Problems: problems})
}

func (w *worker) note(o obs) {
	w.s.rec.add(o)
	if o.Class != classNone {
		time.Sleep(time.Duration(300+w.rng.Intn(700)) * time.Millisecond)
	}
}

// expect checks an answer's status fields; "" as errLine means a null error.
func expect(r execResult, status string, exit int, errLine string) []string {
	if !r.done {
		outcome, _ := classify(r)
		return []string{fmt.Sprintf("answer %s (%s), want 200 %s", outcome, clip(string(r.answer.body)+r.envl.Message, 200), status)}
	}
	got, want := kilntest.Str(r.body.Error), errLine
	if want == "" {
		want = "<nil>"
	}
	if r.body.Status != status || r.body.ExitCode != exit || got != want {
		return []string{fmt.Sprintf("outcome (%s, %d, %q), want (%s, %d, %q); stdout %q stderr %q",
			r.body.Status, r.body.ExitCode, got, status, exit, want, clip(r.body.Stdout, 200), clip(r.body.Stderr, 300))}
	}
	return nil
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// stateless is a body that touches no stored session.
func stateless(code string, timeoutMS int) map[string]any {
	return map[string]any{"code": code, "state": nil, "capture_state": false, "timeout": timeoutMS}
}

func (w *worker) print() {
	a, b := w.rng.Intn(10000), w.rng.Intn(10000)
	if w.rng.Intn(5) == 0 {
		body := stateless(`echo "sum $(( $1 + $2 ))"`, 10000)
		body["lang"], body["args"] = "bash", []string{strconv.Itoa(a), strconv.Itoa(b)}
		r := w.s.cl.exec(body)
		p := expect(r, "ok", 0, "")
		if p == nil && r.body.Stdout != fmt.Sprintf("sum %d\n", a+b) {
			p = append(p, fmt.Sprintf("bash stdout %q, want %q", r.body.Stdout, fmt.Sprintf("sum %d\n", a+b)))
		}
		w.noteExec("print", r, p)
		return
	}
	body := stateless(fmt.Sprintf("x = %d\ny = %d\nprint(f'sum {x + y}')\nx * y", a, b), 10000)
	newSession := w.rng.Intn(3) == 0 // a session is created and its state stored
	if newSession {
		body = map[string]any{"code": body["code"], "timeout": 10000}
	}
	r := w.s.cl.exec(body)
	p := expect(r, "ok", 0, "")
	if p == nil {
		if want := fmt.Sprintf("sum %d\n", a+b); r.body.Stdout != want {
			p = append(p, fmt.Sprintf("stdout %q, want %q", r.body.Stdout, want))
		}
		if want := strconv.Itoa(a * b); kilntest.Str(r.body.Result) != want {
			p = append(p, fmt.Sprintf("result %s, want %s", kilntest.Str(r.body.Result), want))
		}
		if newSession && (!r.body.HasState || r.body.StateError != nil || r.body.SessionID == "") {
			p = append(p, fmt.Sprintf("new session %q: has_state %v, state_error %s; want a state kept", r.body.SessionID, r.body.HasState, kilntest.Str(r.body.StateError)))
		}
	}
	w.noteExec("print", r, p)
}

func (w *worker) raise() {
	n := w.rng.Intn(1 << 30)
	r := w.s.cl.exec(stateless(fmt.Sprintf("def f(n):\n    raise ValueError(f'soak {n}')\nprint('before')\nf(%d)", n), 10000))
	line := fmt.Sprintf("ValueError: soak %d", n)
	p := expect(r, "error", 1, line)
	if p == nil && (r.body.Stdout != "before\n" || !strings.Contains(r.body.Stderr, line)) {
		p = append(p, fmt.Sprintf("stdout %q, stderr %q; want the output before the raise and the traceback", r.body.Stdout, clip(r.body.Stderr, 300)))
	}
	w.noteExec("error", r, p)
}

func (w *worker) timeout() {
	code := "import time\nprint('before', flush=True)\ntime.sleep(60)"
	if w.rng.Intn(2) == 0 {
		code = "print('before', flush=True)\nwhile True:\n    pass"
	}
	r := w.s.cl.exec(stateless(code, 1000))
	p := expect(r, "timeout", 124, "Time limit exceeded")
	if p == nil && r.body.Stdout != "before\n" {
		p = append(p, fmt.Sprintf("stdout %q, want the output before the deadline", r.body.Stdout))
	}
	w.noteExec("timeout", r, p)
}

func (w *worker) oom() {
	code := "chunks = []\nwhile True:\n    chunks.append(b'x' * (8 << 20))"
	if w.rng.Intn(3) == 0 {
		code = "x = bytearray(1 << 40)"
	}
	r := w.s.cl.exec(stateless(code, 20000))
	w.noteExec("oom", r, expect(r, "oom", 137, "Out of memory"))
}

// forkBombCode forks until the pids limit stops it; the children sleep, never
// returning into the REPL, which kills them after the run.
const forkBombCode = `
import json, os, time
pids, errno = [], None
try:
    for _ in range(1000):
        pid = os.fork()
        if pid == 0:
            try:
                time.sleep(60)
            finally:
                os._exit(0)
        pids.append(pid)
except OSError as e:
    errno = e.errno
print(json.dumps({"forked": len(pids), "errno": errno}))
`

func (w *worker) forkBomb() {
	if w.rng.Intn(3) == 0 {
		body := stateless("bomb() { bomb | bomb & }; bomb\nsleep 1\necho survived\n", 4000)
		body["lang"] = "bash"
		r := w.s.cl.exec(body)
		var p []string
		switch {
		case !r.done:
			p = expect(r, "ok", 0, "")
		case r.body.Status != "ok" && r.body.Status != "error" && r.body.Status != "timeout":
			p = append(p, fmt.Sprintf("bash fork bomb: status %q, want ok, error or timeout", r.body.Status))
		case !strings.Contains(r.body.Stderr, "Resource temporarily unavailable"):
			p = append(p, fmt.Sprintf("bash fork bomb: stderr does not show fork failing on the pids limit: %q", clip(r.body.Stderr, 300)))
		}
		w.noteExec("fork bomb", r, p)
		return
	}
	var got struct {
		Forked int  `json:"forked"`
		Errno  *int `json:"errno"`
	}
	r := w.s.cl.exec(stateless(forkBombCode, 20000))
	p := expect(r, "ok", 0, "")
	if p == nil {
		if err := lastJSON(r.body.Stdout, &got); err != nil {
			p = append(p, err.Error())
		} else if got.Errno == nil || *got.Errno != 11 || got.Forked < 1 || got.Forked >= pidsLimit {
			p = append(p, fmt.Sprintf("forked %d, errno %v; want 1 to %d children, then EAGAIN (11)", got.Forked, got.Errno, pidsLimit-1))
		}
	}
	w.noteExec("fork bomb", r, p)
}

const threadBombCode = `
import json, threading
ev = threading.Event()
n, err = 0, None
try:
    for _ in range(1000):
        t = threading.Thread(target=ev.wait, daemon=True)
        t.start()
        n += 1
except RuntimeError as e:
    err = str(e)
ev.set()
print(json.dumps({"threads": n, "error": err}))
`

func (w *worker) threadBomb() {
	var got struct {
		Threads int     `json:"threads"`
		Error   *string `json:"error"`
	}
	r := w.s.cl.exec(stateless(threadBombCode, 20000))
	p := expect(r, "ok", 0, "")
	if p == nil {
		if err := lastJSON(r.body.Stdout, &got); err != nil {
			p = append(p, err.Error())
		} else if got.Error == nil || !strings.Contains(*got.Error, "can't start new thread") || got.Threads < 1 || got.Threads >= pidsLimit {
			p = append(p, fmt.Sprintf("started %d threads, error %s; want 1 to %d, then \"can't start new thread\"", got.Threads, kilntest.Str(got.Error), pidsLimit-1))
		}
	}
	w.noteExec("thread bomb", r, p)
}

// truncMarker is the REPL's marker at the end of a cut stream.
var truncMarker = regexp.MustCompile(`\n\[kiln: output truncated, (\d+) bytes dropped\]\n$`)

func (w *worker) flood() {
	lines := (1 + w.rng.Intn(4)) * 4 * maxOutputKB // 4 to 16 times the cap, 1 KiB each
	stream := "stdout"
	if w.rng.Intn(3) == 0 {
		stream = "stderr"
	}
	code := fmt.Sprintf("import sys\nsys.%s.write(('x' * 1023 + '\\n') * %d)", stream, lines)
	r := w.s.cl.exec(stateless(code, 20000))
	p := expect(r, "ok", 0, "")
	if p == nil {
		text := r.body.Stdout
		if stream == "stderr" {
			text = r.body.Stderr
		}
		p = append(p, checkCut(text, lines*1024, r.body.Truncated)...)
	}
	w.noteExec("flood", r, p)
}

// checkCut checks a stream cut at MAX_OUTPUT_KB: the marker at the end, at most the cap
// kept, every byte written either kept or counted as dropped, and the kept bytes the
// start of what was written.
func checkCut(text string, written int, truncated bool) []string {
	m := truncMarker.FindStringSubmatch(text)
	if m == nil || !truncated {
		return []string{fmt.Sprintf("truncated %v, end %q; want the truncation marker", truncated, text[max(0, len(text)-100):])}
	}
	dropped, _ := strconv.Atoi(m[1])
	kept := text[:len(text)-len(m[0])]
	var p []string
	if len(kept) > maxOutputKB<<10 || len(kept)+dropped != written {
		p = append(p, fmt.Sprintf("kept %d + dropped %d, want %d written, at most %d kept", len(kept), dropped, written, maxOutputKB<<10))
	}
	want := strings.Repeat(strings.Repeat("x", 1023)+"\n", len(kept)/1024+1)
	if !strings.HasPrefix(want, kept) {
		p = append(p, "the kept output is not the start of what was written")
	}
	return p
}
