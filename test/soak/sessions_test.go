package soak

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/kilnsh/kiln/test/kilntest"
)

// absent, as a candidate for a file, means the session may not hold it.
const absent = ""

// model is what one session must hold, as far as its client can know. After a call
// whose answer never came (or was a 500), the call may or may not have applied: the
// model then holds both outcomes as candidates, and the session's next report says
// which one happened.
type model struct {
	id    string
	vars  []map[string]int64  // candidate sets of the v_* variables; one when certain
	files map[string][]string // name → candidate sha256 of its bytes
	steps int
}

func newModel(id string) *model {
	return &model{id: id, vars: []map[string]int64{{}}, files: map[string][]string{}}
}

// holding is what stepCode prints first: the session's variables and files before the
// step changes them.
type holding struct {
	Vars  map[string]int64  `json:"vars"`
	Files map[string]string `json:"files"`
}

// check compares a report with the model, then pins the model to it: whatever was
// uncertain is now known.
func (m *model) check(r holding) []string {
	var p []string
	if !slices.ContainsFunc(m.vars, func(c map[string]int64) bool { return maps.Equal(c, r.Vars) }) {
		p = append(p, fmt.Sprintf("session %s holds variables %v, want one of %v", m.id, r.Vars, m.vars))
	}
	names := map[string]bool{}
	for n := range m.files {
		names[n] = true
	}
	for n := range r.Files {
		names[n] = true
	}
	for n := range names {
		got, ok := r.Files[n]
		if !ok {
			got = absent
		}
		cands := m.files[n]
		if cands == nil {
			cands = []string{absent}
		}
		if !slices.Contains(cands, got) {
			p = append(p, fmt.Sprintf("session %s file %s is %s, want one of %s", m.id, n, short(got), shorts(cands)))
		}
	}
	m.vars = []map[string]int64{maps.Clone(r.Vars)}
	m.files = map[string][]string{}
	for n, sum := range r.Files {
		m.files[n] = []string{sum}
	}
	return p
}

func short(sum string) string {
	if sum == absent {
		return "absent"
	}
	return sum[:min(12, len(sum))]
}

func shorts(sums []string) string {
	out := make([]string, len(sums))
	for i, s := range sums {
		out[i] = short(s)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// how a step's call came out, as far as the session is concerned.
type applied int

const (
	// appliedAll: ok, or the error the step raises on purpose after binding its variable
	// and writing its file: both are kept (docs/api.md, What a session keeps).
	appliedAll   applied = iota
	appliedNone          // refused before the run, or the sandbox killed: nothing
	appliedMaybe         // no answer, or an unexpected status: the variable and the file, or not
)

// change is what one step does to its session when it succeeds.
type change struct {
	name string // the variable
	val  int64
	file string
	sum  string
	fail bool // the step raises after binding and writing: both are kept all the same
}

func (m *model) apply(c change, how applied) {
	setVar := func(v map[string]int64) map[string]int64 {
		v = maps.Clone(v)
		v[c.name] = c.val
		return v
	}
	switch how {
	case appliedAll:
		m.vars = []map[string]int64{setVar(m.vars[0])}
		m.files[c.file] = []string{c.sum}
	case appliedMaybe:
		for _, v := range m.vars {
			m.vars = append(m.vars, setVar(v))
		}
		cands := m.files[c.file]
		if cands == nil {
			cands = []string{absent}
		}
		if !slices.Contains(cands, c.sum) {
			m.files[c.file] = append(cands, c.sum)
		}
	}
}

// reportCode prints the session's variables and the hashes of its files, and leaves
// nothing behind in the namespace.
const reportCode = `def _soak_report():
    import hashlib, json, os
    files = {}
    for name in sorted(os.listdir('/mnt/data')):
        path = os.path.join('/mnt/data', name)
        if os.path.isfile(path):
            with open(path, 'rb') as f:
                files[name] = hashlib.sha256(f.read()).hexdigest()
    names = {k: v for k, v in globals().items() if k.startswith('v_')}
    print(json.dumps({"vars": names, "files": files}, sort_keys=True), flush=True)
_soak_report()
del _soak_report
`

// stepCode reports the session, then makes the change.
func stepCode(c change) string {
	text, _ := json.Marshal(c.text())
	code := reportCode + fmt.Sprintf("%s = %d\nwith open('/mnt/data/%s', 'w') as _soak_f:\n    _soak_f.write(%s)\ndel _soak_f\n", c.name, c.val, c.file, text)
	if c.fail {
		code += "raise RuntimeError('soak step failed on purpose')\n"
	}
	return code
}

// text is the file's content, derived from its hash's seed so that only the sum is kept.
func (c change) text() string { return fileText(c.val) }

func fileText(seed int64) string {
	rng := rand.New(rand.NewSource(seed))
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789 \n"
	b := make([]byte, 50+rng.Intn(4000))
	for i := range b {
		b[i] = letters[rng.Intn(len(letters))]
	}
	return string(b)
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// session runs one step in a session of the pool, or in a new one.
func (w *worker) session() {
	g := w.s.sessions
	var m *model
	if g.active() >= g.max || w.rng.Intn(2) == 0 {
		m = g.take(w.rng)
	}
	if m == nil {
		m = newModel("")
	}
	fresh := m.id == ""
	w.step(m)
	switch {
	case fresh && m.id != "":
		g.add(m)
	case !fresh:
		g.put(m)
	}
}

// step runs one call in m's session: it checks the report of what the session held,
// and updates the model with what the call did.
func (w *worker) step(m *model) {
	c := change{name: fmt.Sprintf("v_%d", m.steps), val: w.rng.Int63n(1e15), file: fmt.Sprintf("f%d.txt", m.steps%3)}
	c.sum = sum([]byte(c.text()))
	c.fail = m.steps > 0 && w.rng.Intn(5) == 0
	m.steps++
	body := map[string]any{"code": stepCode(c), "timeout": 20000}
	if m.id != "" {
		body["session_id"] = m.id
	}
	var r execResult
	if w.rng.Intn(4) == 0 {
		r = w.s.cl.stream(body, nil)
	} else {
		r = w.s.cl.exec(body)
	}
	// A step that fails raises after it bound its variable and wrote its file: the
	// session keeps both, as a notebook does (on_error keep, the default).
	status, errLine, good := "ok", "", appliedAll
	if c.fail {
		status, errLine = "error", "RuntimeError: soak step failed on purpose"
	}
	p := expect(r, status, map[string]int{"ok": 0, "error": 1}[status], errLine)
	_, cl := classify(r)
	switch {
	case r.done && m.id != "" && r.body.SessionID != m.id:
		p = append(p, fmt.Sprintf("session %s lost: the answer names %s", m.id, r.body.SessionID))
		m.id = "" // the model no longer names a session: drop it
		w.noteExec("session", r, p)
		return
	case r.done:
		m.id = r.body.SessionID
		var rep holding
		first, _, _ := strings.Cut(r.body.Stdout, "\n")
		if err := json.Unmarshal([]byte(first), &rep); err != nil {
			p = append(p, fmt.Sprintf("session %s: no report in stdout %q (stderr %q)", m.id, clip(r.body.Stdout, 200), clip(r.body.Stderr, 300)))
		} else {
			p = append(p, m.check(rep)...)
		}
		switch {
		case r.body.Status == status:
			m.apply(c, good)
			if r.body.StateError != nil || (status == "ok" && !r.body.HasState) {
				p = append(p, fmt.Sprintf("session %s: has_state %v, state_error %s", m.id, r.body.HasState, kilntest.Str(r.body.StateError)))
			}
		case cl == classDied: // killed: no state, no files reported
		default:
			m.apply(c, appliedMaybe)
		}
	case r.refused(), r.err == nil && r.status >= 400 && r.status != http.StatusInternalServerError:
		// refused before the run (a 503 waited for a sandbox in vain)
	default:
		m.apply(c, appliedMaybe)
	}
	w.noteExec("session", r, p)
}

// registry holds the sessions the clients work on. A session is lent to one client at a
// time; after enough steps it retires, to be verified at the end.
type registry struct {
	mu      sync.Mutex
	idle    []*model
	busy    int
	retired []*model
	max     int // sessions in use at once (idle and lent)
	steps   int // steps before a session retires
}

func (g *registry) active() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.idle) + g.busy
}

// take lends a random idle session, or returns nil.
func (g *registry) take(rng *rand.Rand) *model {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.idle) == 0 {
		return nil
	}
	i := rng.Intn(len(g.idle))
	m := g.idle[i]
	g.idle = slices.Delete(g.idle, i, i+1)
	g.busy++
	return m
}

// put returns a lent session.
func (g *registry) put(m *model) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.busy--
	g.keep(m)
}

// add takes in a new session.
func (g *registry) add(m *model) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.keep(m)
}

func (g *registry) keep(m *model) {
	switch {
	case m.id == "":
	case m.steps >= g.steps || len(g.idle)+g.busy >= g.max:
		g.retired = append(g.retired, m)
	default:
		g.idle = append(g.idle, m)
	}
}

// all returns every session still modelled; no client may hold one.
func (g *registry) all() []*model {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append(append([]*model(nil), g.idle...), g.retired...)
}

// lastJSON decodes the last line of stdout into v.
func lastJSON(stdout string, v any) error {
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), v); err != nil {
		return fmt.Errorf("the last line of stdout is not the JSON expected: %v: %q", err, clip(stdout, 300))
	}
	return nil
}
