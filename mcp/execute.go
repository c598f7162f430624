package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/egress"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/session"
	"github.com/kilnsh/kiln/store"
)

// executeOut is execute's structuredContent: the fields of POST /exec's answer.
type executeOut struct {
	SessionID  string    `json:"session_id"`
	Status     string    `json:"status" jsonschema:"ok, error, timeout, oom, sandbox_died or cancelled"`
	ExitCode   int       `json:"exit_code"`
	Stdout     string    `json:"stdout"`
	Stderr     string    `json:"stderr"`
	Error      string    `json:"error,omitempty"`
	Result     string    `json:"result,omitempty"`
	Files      []fileOut `json:"files"`
	Truncated  bool      `json:"truncated"`
	HasState   bool      `json:"has_state"`
	StateSize  int64     `json:"state_size"`
	StateError string    `json:"state_error,omitempty"`
	// RuntimeStatus: new, reused (the session's live sandbox) or resumed (from its stored state).
	RuntimeStatus string    `json:"runtime_status,omitempty"`
	DeletedFiles  []string  `json:"deleted_files,omitempty"`
	Timing        timingOut `json:"timing"`
}

type timingOut struct {
	QueueMS float64 `json:"queue_ms"`
	ExecMS  float64 `json:"exec_ms"`
	TotalMS float64 `json:"total_ms"`
}

// network is the call's narrowing of the egress policy: none when the input names no
// list, and a list (empty: shut) otherwise.
func network(allow *[]string) *egress.Network {
	if allow == nil {
		return nil
	}
	return &egress.Network{Allow: append([]string{}, *allow...)}
}

func (h *Handler) execute(ctx context.Context, req *sdk.CallToolRequest, in executeIn) (*sdk.CallToolResult, executeOut, error) {
	start := time.Now()
	st, err := h.stateOf(req)
	if err != nil {
		return nil, executeOut{}, err
	}
	lng, ok := execution.LangName(in.Lang)
	if !ok {
		return toolError("unsupported lang %q", in.Lang), executeOut{}, nil
	}
	if in.OnError != "" && in.OnError != execution.OnErrorKeep && in.OnError != execution.OnErrorRollback {
		return toolError("on_error must be %q or %q, got %q", execution.OnErrorKeep, execution.OnErrorRollback, in.OnError), executeOut{}, nil
	}
	sid, err := h.target(ctx, st, in.SessionID, false)
	if err != nil {
		res, err := h.failure(err)
		return res, executeOut{}, err
	}
	// The run ends with the call (notifications/cancelled) or with the MCP session.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(st.ctx, cancel)()

	p := h.newProgress(ctx, req)
	defer p.stop()
	var forget func()
	var shown []*store.File // figures the run showed, stored as they came
	sreq := session.ExecRequest{
		Request:   execution.Request{Lang: lng, Code: in.Code, CaptureState: true, OnError: in.OnError, Timeout: timeout(in.TimeoutMS), ExecutionID: kiln.NewID(), PlainPython: in.IPython != nil && !*in.IPython},
		SessionID: sid,
		Network:   network(in.Network),
		Events: func(ev session.Event) {
			if ev.Type == session.EventStart {
				forget = st.started(ev.SessionID, ev.ExecutionID)
			}
			if ev.Type == session.EventDisplay {
				shown = append(shown, ev.File)
			}
			p.event(ev)
		},
	}
	res, err := h.sessions.Exec(ctx, st.caller, sreq)
	if forget != nil {
		forget()
	}
	p.stop()
	if err != nil {
		if ctx.Err() != nil {
			return toolError("cancelled before the run finished"), executeOut{SessionID: sid, Status: execution.StatusCancelled, Files: []fileOut{}}, nil
		}
		res, err := h.failure(err)
		return res, executeOut{}, err
	}
	defer res.Release()
	res.Files = withShown(res.Files, shown)
	if in.SessionID == "" {
		st.setDefault(res.Session.ID)
	}
	out := newExecuteOut(res)
	out.Timing.TotalMS = ms(time.Since(start))
	return h.executeResult(context.WithoutCancel(ctx), st.caller, res, out), out, nil
}

// withShown adds to a run's files the figures it showed that it did not also write.
func withShown(files, shown []*store.File) []*store.File {
	have := map[string]bool{}
	for _, f := range files {
		have[f.ID] = true
	}
	for _, f := range shown {
		if !have[f.ID] {
			have[f.ID] = true
			files = append(files, f)
		}
	}
	return files
}

func newExecuteOut(res *session.ExecResult) executeOut {
	out := executeOut{
		SessionID: res.Session.ID, Status: res.Status, ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr,
		Files: []fileOut{}, Truncated: res.Truncated, HasState: res.Session.HasState, StateSize: res.Session.StateSize,
		RuntimeStatus: res.RuntimeStatus, DeletedFiles: res.Deleted,
		Timing: timingOut{QueueMS: ms(res.QueueWait), ExecMS: ms(res.ExecTime)},
	}
	if res.Error != nil {
		out.Error = *res.Error
	}
	if res.Result.Result != nil {
		out.Result = *res.Result.Result
	}
	if res.StateError != nil {
		out.StateError = *res.StateError
	}
	for _, f := range res.Files {
		out.Files = append(out.Files, newFileOut(f))
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// executeResult is what a model reads of a run: one text block, an image block per
// PNG within the size cap, and a resource link per other file.
func (h *Handler) executeResult(ctx context.Context, c session.Caller, res *session.ExecResult, out executeOut) *sdk.CallToolResult {
	var b strings.Builder
	section := func(name, text string) {
		if text != "" {
			fmt.Fprintf(&b, "[%s]\n%s", name, text)
			if !strings.HasSuffix(text, "\n") {
				b.WriteByte('\n')
			}
		}
	}
	section("stdout", out.Stdout)
	section("stderr", out.Stderr)
	section("result", out.Result)
	if line := errorLine(out); line != "" {
		fmt.Fprintf(&b, "[error] %s\n", line)
	}
	var content []sdk.Content
	var names []string
	for _, f := range res.Files {
		names = append(names, fmt.Sprintf("/mnt/data/%s (%d bytes)", f.Name, f.Size))
		if img := h.image(ctx, c, f); img != nil {
			content = append(content, img)
			continue
		}
		size := f.Size
		content = append(content, &sdk.ResourceLink{
			URI: fileURI(f.SessionID, f.ID), Name: path.Base(f.Name), Title: f.Name, MIMEType: f.ContentType, Size: &size,
			Description: "A file the run wrote to /mnt/data; read it with resources/read.",
		})
	}
	if len(names) > 0 {
		fmt.Fprintf(&b, "[files] %s\n", strings.Join(names, ", "))
	}
	content = append(content, outputContent(res.Outputs)...)
	if out.Truncated {
		b.WriteString("[note] output was truncated\n")
	}
	fmt.Fprintf(&b, "[session %s, status %s]", out.SessionID, out.Status)
	return &sdk.CallToolResult{
		Content: append([]sdk.Content{&sdk.TextContent{Text: b.String()}}, content...),
		IsError: out.Status != execution.StatusOK,
	}
}

// errorLine is a run's failure in one line.
func errorLine(out executeOut) string {
	switch out.Status {
	case execution.StatusOK:
		return ""
	case execution.StatusTimeout:
		return "timed out: the run took longer than its timeout and was stopped"
	case execution.StatusOOM:
		return "out of memory: the sandbox ran out of memory and was stopped"
	case execution.StatusCancelled:
		return "cancelled: the run was interrupted"
	case execution.StatusSandboxDied:
		return "the sandbox died during the run"
	}
	if out.Error != "" {
		line, _, _ := strings.Cut(strings.TrimSpace(out.Error), "\n")
		return line
	}
	return fmt.Sprintf("exit code %d", out.ExitCode)
}

// image returns a PNG file's image block, or nil when the file is no PNG, is over
// the cap or cannot be read (it is then a resource link).
func (h *Handler) image(ctx context.Context, c session.Caller, f *store.File) *sdk.ImageContent {
	if !strings.EqualFold(path.Ext(f.Name), ".png") || f.Size > h.cfg.MaxImageBytes {
		return nil
	}
	_, data, err := h.sessions.File(ctx, c, f.SessionID, f.ID)
	if err != nil {
		return nil
	}
	return &sdk.ImageContent{Data: data, MIMEType: "image/png"}
}

// progress turns a run's events into progress notifications, when the client sent a
// progress token: the output as it comes, and a heartbeat at least every
// ProgressEvery, so that clients whose timeout resets on progress keep waiting.
type progress struct {
	ctx   context.Context
	ss    *sdk.ServerSession
	token any
	start time.Time

	mu      sync.Mutex
	n       float64
	last    time.Time
	done    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
}

func (h *Handler) newProgress(ctx context.Context, req *sdk.CallToolRequest) *progress {
	p := &progress{ctx: ctx, ss: req.Session, start: time.Now(), done: make(chan struct{})}
	if req.Params != nil {
		p.token = req.Params.GetProgressToken()
	}
	if p.token == nil || p.ss == nil {
		return p
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(h.cfg.ProgressEvery / 2)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-t.C:
				p.mu.Lock()
				quiet := time.Since(p.last) >= h.cfg.ProgressEvery/2
				p.mu.Unlock()
				if quiet {
					p.send(fmt.Sprintf("running for %.0f s", time.Since(p.start).Seconds()))
				}
			}
		}
	}()
	return p
}

func (p *progress) event(ev session.Event) {
	switch ev.Type {
	case session.EventStart:
		p.send("started in session " + ev.SessionID)
	case session.EventStdout, session.EventStderr:
		p.send(ev.Type + ": " + ev.Text)
	case session.EventDisplay:
		p.send("figure " + ev.File.Name + " at " + fileURI(ev.File.SessionID, ev.File.ID))
	}
}

func (p *progress) send(msg string) {
	if p.token == nil || p.ss == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	p.last = time.Now()
	// A notification that cannot be sent (the client went) must not stop the run.
	_ = p.ss.NotifyProgress(p.ctx, &sdk.ProgressNotificationParams{ProgressToken: p.token, Progress: p.n, Message: msg})
}

// stop ends the heartbeat and waits for it; it is idempotent.
func (p *progress) stop() {
	p.stopped.Do(func() { close(p.done) })
	p.wg.Wait()
}

// outputContent is what a model reads of a run's rich outputs, figures aside (they are
// images among the files): an image as image content, HTML, Markdown, LaTeX and JSON as
// text, and a displayed object with nothing richer as its text.
func outputContent(outputs []session.Output) []sdk.Content {
	var content []sdk.Content
	for _, o := range outputs {
		if o.Figure != "" {
			continue
		}
		if img := outputImage(o); img != nil {
			content = append(content, img)
			continue
		}
		for _, mime := range []string{"text/html", "text/markdown", "text/latex", "image/svg+xml", "application/json"} {
			if raw, ok := o.Data[mime]; ok {
				content = append(content, &sdk.TextContent{Text: fmt.Sprintf("[%s %s]\n%s", o.Type, mime, textOf(raw))})
				break
			}
		}
	}
	return content
}

// outputImage is an output's PNG or JPEG as image content; nil without one.
func outputImage(o session.Output) *sdk.ImageContent {
	for _, mime := range []string{"image/png", "image/jpeg"} {
		var b64 string
		if raw, ok := o.Data[mime]; ok && json.Unmarshal(raw, &b64) == nil {
			if data, err := base64.StdEncoding.DecodeString(b64); err == nil {
				return &sdk.ImageContent{Data: data, MIMEType: mime}
			}
		}
	}
	return nil
}

// textOf is a bundle's content as text: a JSON string's value, anything else as JSON.
func textOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}
