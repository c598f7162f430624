package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/session"
)

// kernel is one kernel: a session of its owner's, the cells that run in it one at a
// time, and the WebSocket connections that hear it.
type kernel struct {
	id    string // the kernel's id: its session's, written as a UUID (kernelID)
	sid   string // the session's id
	owner string // the session's owner (store.Session.Owner): who may reach the kernel
	name  string // the kernel spec's
	// caller is who registered the kernel here; its cells run as that caller.
	caller session.Caller
	h      *Handler

	// run is held by the cell that runs: cells, restarts and shutdowns go one at a time,
	// in the order they came.
	run sync.Mutex

	mu        sync.Mutex
	count     int // the execution count of the last cell that counted
	state     string
	last      time.Time
	running   string // the execution id of the cell that runs, "" when idle
	conns     map[*conn]bool
	opening   int // connections admitted and not yet open
	shutdown  bool
	cancelled bool // the running cell was interrupted
}

// model is a kernel as the REST API shows it.
type model struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	LastActivity   string `json:"last_activity"`
	ExecutionState string `json:"execution_state"`
	Connections    int    `json:"connections"`
}

func (k *kernel) model() model {
	k.mu.Lock()
	defer k.mu.Unlock()
	return model{ID: k.id, Name: k.name, LastActivity: k.last.UTC().Format(timeFormat),
		ExecutionState: k.state, Connections: len(k.conns)}
}

// forgettable reports whether the kernel has had no connection, no cell and no activity
// for forgetAfter.
func (k *kernel) forgettable(now time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.conns) == 0 && k.running == "" && now.Sub(k.last) > forgetAfter
}

// touch sets the kernel's state and its last activity.
func (k *kernel) touch(state string) {
	k.mu.Lock()
	k.state, k.last = state, time.Now()
	k.mu.Unlock()
}

// broadcast sends an IOPub message to every connection of the kernel.
func (k *kernel) broadcast(m *message) {
	k.mu.Lock()
	conns := make([]*conn, 0, len(k.conns))
	for c := range k.conns {
		conns = append(conns, c)
	}
	k.mu.Unlock()
	for _, c := range conns {
		c.send(m)
	}
}

// status tells every connection the kernel's state, answering parent.
func (k *kernel) status(parent *message, session, state string) {
	k.touch(state)
	k.broadcast(reply(parent, session, "iopub", "status", map[string]string{"execution_state": state}))
}

// interrupt cuts the running cell short; the names it bound stay (notebook semantics).
func (k *kernel) interrupt(ctx context.Context) error {
	k.mu.Lock()
	id := k.running
	if id != "" {
		k.cancelled = true
	}
	k.mu.Unlock()
	if id == "" {
		return nil
	}
	return k.h.sessions.Cancel(ctx, k.caller, id)
}

// restart empties the namespace: the session's state goes, and its live sandbox.
func (k *kernel) restart(ctx context.Context) error {
	if err := k.interrupt(ctx); err != nil {
		k.h.log.Debug("interrupt before restart", "kernel", k.id, "err", err)
	}
	k.run.Lock()
	defer k.run.Unlock()
	if err := k.h.sessions.DeleteState(ctx, k.caller, k.sid); err != nil {
		return err
	}
	k.mu.Lock()
	k.count = 0
	k.mu.Unlock()
	return nil
}

// result is a cell's end as the reply and the error message tell it.
type result struct {
	ok        bool
	count     int
	ename     string
	evalue    string
	traceback []string
}

// stopped reports whether the kernel was shut down.
func (k *kernel) stopped() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.shutdown
}

// aborted answers a cell that will never run: its kernel was shut down.
func aborted(c *conn, req *message) {
	c.send(reply(req, c.session, "shell", "execute_reply", map[string]any{"status": "aborted", "execution_count": nil}))
}

// overQuota answers a cell that would take its caller past MAX_CONCURRENT_PER_KEY, as
// POST /exec answers 429: it does not run, and the notebook shows why.
func overQuota(c *conn, req *message, err error) {
	why := err.Error()
	var e *kiln.Error
	if errors.As(err, &e) {
		why = e.Message
	}
	content := map[string]any{"ename": "QuotaExceeded", "evalue": why, "traceback": []string{"QuotaExceeded: " + why}}
	c.send(reply(req, c.session, "iopub", "error", content))
	content["status"], content["execution_count"] = "error", nil
	c.send(reply(req, c.session, "shell", "execute_reply", content))
}

// execute runs a cell for conn's execute_request and tells every connection what it
// shows; the reply goes to conn. A cell of a kernel shut down meanwhile does not run.
func (k *kernel) execute(ctx context.Context, c *conn, req *message) {
	var in executeRequest
	_ = json.Unmarshal(req.Content, &in)
	k.run.Lock()
	defer k.run.Unlock()
	if k.stopped() {
		aborted(c, req)
		return
	}
	k.status(req, c.session, "busy")
	defer k.status(req, c.session, "idle")
	// The cell takes its caller's execution slot before it counts: one refused for the
	// concurrency quota does not run, and takes no execution count.
	release, err := k.h.sessions.Admit(k.caller)
	if err != nil {
		overQuota(c, req, err)
		return
	}

	k.mu.Lock()
	counts := !in.Silent && (in.StoreHistory == nil || *in.StoreHistory)
	if counts {
		k.count++
	}
	count := k.count
	k.mu.Unlock()
	if !in.Silent {
		k.broadcast(reply(req, c.session, "iopub", "execute_input", map[string]any{"code": in.Code, "execution_count": count}))
	}
	res := k.runCell(ctx, c, req, in, count)
	// The slot is free before the reply goes: a client that runs its next cell on
	// another kernel once this one answers finds it free.
	release()
	if !res.ok {
		k.broadcast(reply(req, c.session, "iopub", "error", map[string]any{
			"ename": res.ename, "evalue": res.evalue, "traceback": res.traceback}))
		c.send(reply(req, c.session, "shell", "execute_reply", map[string]any{
			"status": "error", "execution_count": count, "ename": res.ename, "evalue": res.evalue, "traceback": res.traceback}))
		return
	}
	c.send(reply(req, c.session, "shell", "execute_reply", map[string]any{
		"status": "ok", "execution_count": count, "user_expressions": map[string]any{}, "payload": []any{}}))
}

// runCell runs the cell as a call of the kernel's session, its output and rich outputs
// told as they come. stderr is held a chunk behind: a failing cell's traceback, which
// the REPL writes last, goes in the error message, not a second time as output.
func (k *kernel) runCell(ctx context.Context, c *conn, req *message, in executeRequest, count int) result {
	id := kiln.NewID()
	k.mu.Lock()
	k.running, k.cancelled = id, false
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.running = ""
		k.mu.Unlock()
	}()
	var heldErr string
	flushErr := func() {
		if heldErr != "" && !in.Silent {
			k.broadcast(reply(req, c.session, "iopub", "stream", map[string]string{"name": "stderr", "text": heldErr}))
		}
		heldErr = ""
	}
	events := func(ev session.Event) {
		if in.Silent {
			return
		}
		switch ev.Type {
		case session.EventStdout:
			flushErr()
			k.broadcast(reply(req, c.session, "iopub", "stream", map[string]string{"name": "stdout", "text": ev.Text}))
		case session.EventStderr:
			flushErr()
			heldErr = ev.Text
		case session.EventOutput:
			flushErr()
			content := map[string]any{"data": ev.Output.Data, "metadata": ev.Output.Metadata}
			kind := ev.Output.Type
			if kind == "execute_result" {
				content["execution_count"] = count
			} else {
				kind, content["transient"] = "display_data", map[string]any{}
			}
			k.broadcast(reply(req, c.session, "iopub", kind, content))
		}
	}
	res, err := k.h.sessions.Exec(ctx, k.caller, session.ExecRequest{
		Request:   execution.Request{Lang: "python", Code: in.Code, CaptureState: true, ExecutionID: id, Timeout: k.h.cfg.CellTimeout},
		SessionID: k.sid,
		Existing:  true,
		Admitted:  true, // execute took the slot
		Events:    events,
	})
	if err != nil {
		flushErr()
		return result{ename: "KilnError", evalue: err.Error(), traceback: []string{"kiln: " + err.Error()}, count: count}
	}
	defer res.Release()
	k.mu.Lock()
	cancelled := k.cancelled
	k.mu.Unlock()
	if res.Status == execution.StatusOK {
		flushErr()
		return result{ok: true, count: count}
	}
	out := failure(res.Status, res.Error, cancelled)
	if tb, before, ok := cutTraceback(heldErr); ok {
		heldErr = before
		out.traceback = tb
	}
	flushErr()
	out.count = count
	return out
}

// failure names a cell's failure as Jupyter does: ename, evalue, and a traceback that
// is at least the error's line.
func failure(status string, errLine *string, cancelled bool) result {
	if cancelled || status == execution.StatusCancelled {
		return result{ename: "KeyboardInterrupt", evalue: "", traceback: []string{"KeyboardInterrupt: the cell was interrupted"}}
	}
	line := status
	if errLine != nil {
		line = *errLine
	}
	ename, evalue, found := strings.Cut(line, ": ")
	if !found {
		ename, evalue = line, ""
	}
	switch status {
	case execution.StatusTimeout:
		ename, evalue = "TimeoutError", line
	case execution.StatusOOM:
		ename, evalue = "MemoryError", line
	case execution.StatusSandboxDied:
		ename, evalue = "DeadKernelError", line
	}
	return result{ename: ename, evalue: evalue, traceback: []string{line}}
}

// cutTraceback splits stderr's text at the traceback the REPL wrote last: the lines of
// the traceback, and what came before it.
func cutTraceback(text string) ([]string, string, bool) {
	i := strings.LastIndex(text, "Traceback (most recent call last):\n")
	if i < 0 {
		// A syntax error has no "Traceback" line: it starts with its file's line, the cell's.
		i = max(strings.LastIndex(text, "  File \"<string>\""), strings.LastIndex(text, "  File \"<cell "))
	}
	if i < 0 {
		return nil, text, false
	}
	tb := strings.Split(strings.TrimRight(text[i:], "\n"), "\n")
	return tb, text[:i], true
}

// introspect answers a complete, inspect or is_complete request: the REPL reads the
// session's namespace with IPython's completer and inspector (kiln_repl/introspect.py) in
// a read-only call of the kernel's session, between cells, and prints the reply's content.
func (k *kernel) introspect(ctx context.Context, m *message) map[string]any {
	var in codeRequest
	_ = json.Unmarshal(m.Content, &in)
	kind := strings.TrimSuffix(m.Header.MsgType, "_request")
	quoted, _ := json.Marshal(in.Code) // a JSON string is a Python string literal
	code := fmt.Sprintf("__import__('kiln_repl.introspect', fromlist=['answer']).answer(globals(), %q, %s, %d, %d)",
		kind, quoted, in.CursorPos, in.DetailLevel)
	fallback := map[string]any{"status": "error", "ename": "KilnError", "evalue": "", "traceback": []string{}}
	k.run.Lock()
	if k.stopped() {
		k.run.Unlock()
		fallback["evalue"] = "the kernel was shut down"
		return fallback
	}
	res, err := k.h.sessions.Exec(ctx, k.caller, session.ExecRequest{
		Request:   execution.Request{Lang: "python", Code: code, CaptureState: true, ExecutionID: kiln.NewID(), ReadOnly: true},
		SessionID: k.sid,
		Existing:  true,
	})
	k.run.Unlock()
	if err != nil {
		fallback["evalue"] = err.Error()
		return fallback
	}
	defer res.Release()
	var out map[string]any
	if res.Status != execution.StatusOK || json.Unmarshal([]byte(strings.TrimSpace(res.Stdout)), &out) != nil {
		fallback["evalue"] = strings.TrimSpace(res.Stderr)
		return fallback
	}
	return out
}
