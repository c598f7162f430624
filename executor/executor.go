package executor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox"
)

// Pool lends sandboxes, each for one execution, from a pool whose sandboxes run the
// language asked for (kiln.ErrUnsupportedLanguage when none does).
type Pool interface {
	Checkout(ctx context.Context, lang string) (sandbox.Sandbox, error)
	// CheckoutSized starts a sandbox with the given limits, none being warm: for a
	// request's own cpus and memory_mb on a runtime that cannot resize a warm one.
	CheckoutSized(ctx context.Context, lang string, milliCPU, memoryMB int64) (sandbox.Sandbox, error)
	Release(sandbox.Sandbox)
	// Keep ends a checkout without removing the sandbox: the caller keeps it (a live
	// session) and gives it back with Release.
	Keep(sandbox.Sandbox)
	// Languages returns the languages the sandboxes run, as they said, and whether
	// every pool has said yet.
	Languages() (langs []string, complete bool)
}

// Limits bound an execution. They come from configuration.
type Limits struct {
	MaxCodeBytes   int
	MaxStateBytes  int64 // a state blob, compressed
	MaxStateRaw    int64 // a state blob, decompressed
	MaxOutputBytes int64 // stdout and stderr, each
	MaxFileBytes   int64 // one file, in or out
	MaxFiles       int   // files returned by one run
	DefaultTimeout time.Duration
	MinTimeout     time.Duration
	MaxTimeout     time.Duration
	// Grace is added to the timeout for the hard deadline, after which the sandbox is
	// killed: the REPL's own soft deadline should have answered by then.
	Grace time.Duration
	// InterruptGrace is how long a cancelled run's code has to stop once interrupted,
	// before the sandbox is killed.
	InterruptGrace time.Duration
	// Figures asks Python runs to save matplotlib figures as files.
	Figures bool
	// RetryAfter is what a caller is told to wait when no sandbox is free, in seconds.
	RetryAfter int
	// RollbackOnError is the default of requests that do not choose: a failed run hands
	// back the state it was given, so that a session goes on from before the failure. By
	// default a failed run keeps what it bound before the error, as a notebook does.
	RollbackOnError bool

	// Tools: how many a request may bring, the size of a call's JSON input and of a
	// result, the rounds of calls a run may make, and how long a run waits for the
	// results of a round before it ends as a timeout.
	MaxTools           int
	MaxToolCallBytes   int64
	MaxToolResultBytes int64
	MaxToolRounds      int
	ToolResultTimeout  time.Duration

	// Resources: a request may ask for its sandbox's CPU and memory (Request.MilliCPU,
	// MemoryMB) up to MaxMilliCPU and MaxMemoryMB; DefaultMilliCPU and DefaultMemoryMB are
	// the pools' sandboxes', and ExtraMemoryMB what kiln adds to the memory a request
	// names (the REPL's warm heap). Resizable is the runtime's word that it adjusts a
	// running sandbox (sandbox.Traits.Resizes, through sandbox.Resizer); without it a
	// request of its own size gets a sandbox started for it (Pool.CheckoutSized).
	DefaultMilliCPU, MaxMilliCPU int64
	DefaultMemoryMB, MaxMemoryMB int64
	ExtraMemoryMB                int64
	Resizable                    bool
}

// Request is one execution as the session layer hands it over: what its client asked
// (execution.Request), and where and how it runs.
type Request struct {
	execution.Request
	// Sandbox, when set, is where the run goes instead of a sandbox checked out: a live
	// session's, which stays its caller's whatever happens (Result.Release does nothing
	// with it). Live says the sandbox may serve the session again: what the state cannot
	// keep stays in its namespace. StateBase is the token of the capture the caller holds
	// stored (Result.StateToken), against which an unchanged state needs no blob sent.
	// DeleteFiles are removed from /mnt/data before the run.
	Sandbox   sandbox.Sandbox
	Live      bool
	StateBase string
	// Flush marks kiln's own run that only captures a live session's namespace to store
	// it (empty code, Sandbox set): it runs while the executor drains, since the sessions'
	// states are stored at shutdown too.
	Flush       bool
	DeleteFiles []string
	Files       []protocol.File
	// Owner is who may cancel the run.
	Owner string
	// OnStart, when set, is called once the run has its sandbox, before the code runs.
	OnStart func()
	// OnEvent, when set, asks the REPL for events and gets them, in order, while the
	// code runs. It must not block for long: the run's output waits for it.
	OnEvent func(protocol.Event)
	// Egress serves the connections the code opens out of the sandbox while it runs
	// (Sandbox.Egress); nil refuses them.
	Egress func(net.Conn)

	// validated is set by Validate, so that Run does not check the same request twice
	// (decompressing a large state costs milliseconds). What a caller adds afterwards
	// must already be trusted: the session layer adds state and files from its store,
	// which were checked on their way in.
	validated bool
}

// Result is what the user's code did.
type Result struct {
	Status     string
	ExitCode   int
	Stdout     string
	Stderr     string
	Error      *string
	Result     *string
	State      []byte
	StateError *string
	// StateFromRun is true when State is what the run left: nil then means the namespace
	// holds nothing to keep. It is false when State is the state the run was given (a
	// rollback, or a sandbox that ended before it could say).
	StateFromRun bool
	// StateUnchanged is true when the run left the state it was given, or the one of
	// Request.StateBase, which the REPL did not send back.
	StateUnchanged bool
	// StateToken names the state the run left, for the next run's Request.StateBase.
	StateToken string
	Files      []protocol.File
	FilesError *string
	// Outputs are the run's rich outputs, a JSON array (protocol.Response.Outputs).
	Outputs json.RawMessage
	// DeletedFiles are the files present when the run began that it removed.
	DeletedFiles []string
	// Reusable is true when the sandbox answered the run and can serve its session's
	// next one; MemoryBytes is then its REPL's resident memory (for a Live request).
	Reusable    bool
	MemoryBytes int64
	Truncated   bool
	Sandbox     string // id of the sandbox that ran it
	ExecutionID string
	QueueWait   time.Duration
	ExecTime    time.Duration
	// WireIn and WireOut count the bytes of the frames sent to the sandbox and
	// received from it.
	WireIn, WireOut int64

	release func()                 // hands the sandbox back; nil once called
	keep    func() sandbox.Sandbox // takes it over from the pool; nil once the sandbox is released or kept
}

// Release hands the sandbox that ran the execution back to the pool, which removes it
// and starts its replacement. Both cost the runtime a burst of CPU, so the code
// that answers the caller calls Release once the answer is out, not before. Until then
// the sandbox counts as in use. Release is safe to call more than once, and on a
// Result that holds no sandbox.
func (r *Result) Release() {
	if r != nil && r.release != nil {
		r.release()
	}
	if r != nil {
		r.release, r.keep = nil, nil
	}
}

// Keep takes the sandbox that ran the execution over from the pool, which starts its
// replacement: the caller keeps it for its session's next runs (Request.Sandbox) and
// gives it back with the pool's Release. Release does nothing after Keep. nil when the
// sandbox was released already, or came with the request (it was the caller's all along).
func (r *Result) Keep() sandbox.Sandbox {
	if r == nil || r.keep == nil {
		return nil
	}
	sb := r.keep()
	r.release, r.keep = nil, nil
	return sb
}

// SetRelease sets what Release does. The executor sets it on every Result it returns;
// a Runner that wraps or stands in for the executor may set its own.
func (r *Result) SetRelease(release func()) { r.release = release }

// SetKeep sets what Keep does, as SetRelease does for Release.
func (r *Result) SetKeep(keep func() sandbox.Sandbox) { r.keep = keep }

// Executor runs executions on sandboxes from a pool.
type Executor struct {
	pool   Pool
	limits Limits
	log    *slog.Logger
	runs   runs
	reg    registry
}

// New returns an Executor.
func New(p Pool, limits Limits, log *slog.Logger) *Executor {
	return &Executor{pool: p, limits: limits, log: log}
}

// errShuttingDown is the one answer to an execution asked for while kiln drains.
func (e *Executor) errShuttingDown() error {
	return &kiln.Error{Code: kiln.CodeUnavailable, Message: "kiln is shutting down", RetryAfter: e.limits.RetryAfter}
}

// Limits returns the limits the executor enforces.
func (e *Executor) Limits() Limits { return e.limits }

// Run executes req on a fresh sandbox. Errors are *kiln.Error for the caller's
// mistakes, for an exhausted pool and while draining, the context's error when the
// caller went away, and anything else when kiln failed. A Result holds its sandbox
// until the caller calls Result.Release; with an error, the sandbox is already
// released.
func (e *Executor) Run(ctx context.Context, req Request) (*Result, error) {
	if !e.runs.enter(req.Flush && req.Sandbox != nil) {
		return nil, e.errShuttingDown()
	}
	defer e.runs.leave()
	if !req.validated {
		if err := e.Validate(&req); err != nil {
			return nil, err
		}
	}
	if req.ExecutionID == "" {
		req.ExecutionID = kiln.NewID()
	}
	// The run is cancellable from the start, the wait for a sandbox included.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if err := e.reg.add(req.ExecutionID, req.Owner, cancel); err != nil {
		return nil, err
	}
	defer e.reg.done(req.ExecutionID)
	start := time.Now()
	sb := req.Sandbox
	if sb == nil {
		var err error
		cctx := kiln.WithCaller(ctx, req.Owner)
		if cpu, mb, own := e.ownSize(&req); own {
			sb, err = e.pool.CheckoutSized(cctx, req.Lang, cpu, mb)
		} else {
			sb, err = e.pool.Checkout(cctx, req.Lang)
		}
		if err != nil {
			if context.Cause(ctx) == errCancelRequested {
				return nil, kiln.Errorf(kiln.CodeConflict, "execution %s was cancelled before it started", req.ExecutionID)
			}
			return nil, e.checkoutError(err, req.Lang)
		}
	}
	// Until a valid response replaces it, the state is the one the run was given.
	res := &Result{Sandbox: sb.ID(), ExecutionID: req.ExecutionID, QueueWait: time.Since(start), State: req.State}
	if req.Sandbox == nil {
		res.release = func() { e.pool.Release(sb) }
		res.keep = func() sandbox.Sandbox { e.pool.Keep(sb); return sb }
	}
	if err := e.fit(ctx, sb, &req); err != nil {
		res.Release()
		return nil, err
	}
	res, err := e.run(ctx, sb, req, res)
	if err != nil {
		res.Release()
		return nil, err
	}
	return res, nil
}

// run does the exchange on the run's sandbox.
func (e *Executor) run(ctx context.Context, sb sandbox.Sandbox, req Request, res *Result) (*Result, error) {
	if !sb.Ready().Capabilities.Supports(req.Lang) {
		return res, kiln.Errorf(kiln.CodeLanguage, "this deployment's sandbox does not run %s", req.Lang)
	}
	id := req.ExecutionID
	lim := protocol.Limits{
		MaxOutputBytes: e.limits.MaxOutputBytes,
		MaxFileBytes:   e.limits.MaxFileBytes,
		MaxFiles:       e.limits.MaxFiles,
		MaxStateBytes:  e.limits.MaxStateBytes,
		// What the host would refuse on the way back in is not worth pickling.
		MaxStateRawBytes: e.limits.MaxStateRaw,
	}
	if len(req.Tools) > 0 {
		if !sb.Ready().Capabilities.Tools {
			return res, kiln.Errorf(kiln.CodeLanguage, "this deployment's sandbox image does not support tools")
		}
		lim.MaxToolCallBytes = e.limits.MaxToolCallBytes
	}
	frame, err := protocol.EncodeRequest(&protocol.Request{
		ID: id, Op: protocol.OpExec, Lang: req.Lang, Code: req.Code, Args: req.Args,
		State: req.State, CaptureState: req.CaptureState,
		TimeoutMS: req.Timeout.Milliseconds(), Files: req.Files, Limits: lim,
		Events: req.OnEvent != nil, Figures: e.limits.Figures && req.Lang == execution.LangPython,
		Tools: req.Tools, Live: req.Live, StateBase: req.StateBase, DeleteFiles: req.DeleteFiles,
		PlainPython: req.PlainPython, ReadOnly: req.ReadOnly,
	})
	if err != nil {
		return res, err
	}
	for _, b := range frame {
		res.WireIn += int64(len(b))
	}
	if req.OnStart != nil {
		req.OnStart()
	}

	// The code's connections are served for as long as it runs, and cut when it ends.
	sb.Egress(req.Egress)
	defer sb.Egress(nil)
	execStart := time.Now()
	// The hard deadline does not depend on the run's cancellation, which ctx carries:
	// a cancelled run is interrupted first, and killed only after the interrupt grace.
	// Its clock stops while the run waits on its client's tools.
	hctx, hard := newHardDeadline(context.WithoutCancel(ctx), req.Timeout+e.limits.Grace, len(req.Tools) > 0)
	defer hard.stop()
	x := &exchange{e: e, sb: sb, req: &req, res: res, lim: lim, hctx: hctx, hard: hard}
	resp, err := x.run(ctx, hctx, frame)
	res.ExecTime = time.Since(execStart)
	res, err = e.conclude(ctx, hctx, sb, &req, res, x, resp, err)
	if err == nil && !res.StateFromRun && req.CaptureState && req.Lang == execution.LangPython && res.StateError == nil &&
		res.Status != execution.StatusOK {
		note := "the sandbox ended before the state could be captured: the session keeps its state from before this call"
		res.StateError = &note
	}
	return res, err
}

// conclude turns how the exchange ended into the Result, or into kiln's error.
func (e *Executor) conclude(ctx, hctx context.Context, sb sandbox.Sandbox, req *Request, res *Result, x *exchange,
	resp *protocol.Response, err error) (*Result, error) {
	var end *toolEnd
	switch {
	case err == nil:
		e.accept(res, resp, req)
		return res, nil
	case errors.As(err, &end):
		e.log.Info("run with tools ended by the host: sandbox removed", "sandbox", sb.ID(), "reason", end.msg)
		res.Stdout, res.Stderr = x.stdout.String(), x.stderr.String()
		return fail(res, end.status, end.code, end.msg), nil
	case x.killedAfterInterrupt:
		e.log.Info("cancelled run did not stop: sandbox killed", "sandbox", sb.ID(), "grace_ms", e.limits.InterruptGrace.Milliseconds())
		res.Stdout, res.Stderr = x.stdout.String(), x.stderr.String()
		return fail(res, execution.StatusCancelled, 130, "Interrupted (the code did not stop; its sandbox was killed)"), nil
	case context.Cause(ctx) != errCancelRequested && ctx.Err() != nil:
		return res, ctx.Err() // the caller left; Run releases the sandbox
	case hctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		e.log.Info("hard deadline: sandbox killed", "sandbox", sb.ID(), "timeout_ms", req.Timeout.Milliseconds())
		return fail(res, execution.StatusTimeout, 124, "Time limit exceeded"), nil
	case errors.Is(err, kiln.ErrSandboxExited):
		return e.exited(sb, res), nil
	default:
		return e.broken(sb, res, err), nil
	}
}

// accept takes a valid response into res. A failed run keeps the state it captured,
// unless the request asks for a rollback: then it hands back the state it was given. So
// does a captured state that would be refused on the way back in (the REPL bounds its
// compressed size only). A state the REPL did not send back because it did not change is
// the one given, still trusted.
func (e *Executor) accept(res *Result, resp *protocol.Response, req *Request) {
	given := req.State
	fill(res, resp)
	res.StateFromRun, res.Reusable = true, true
	switch {
	case resp.StateUnchanged:
		res.State, res.StateUnchanged = given, true
	case res.Status != execution.StatusOK && e.rollback(req):
		note := "rolled back (on_error: rollback): the session keeps its state from before this call"
		res.State, res.StateFromRun, res.StateError = given, false, &note
	case res.State != nil:
		if err := CheckState(res.State, e.limits.MaxStateBytes, e.limits.MaxStateRaw); err != nil {
			note := "state not kept: " + err.(*kiln.Error).Message
			if res.StateError != nil {
				note = *res.StateError + "; " + note
			}
			res.State, res.StateError = given, &note
		}
	}
}

// rollback tells whether a failed run of req hands back the state it was given.
func (e *Executor) rollback(req *Request) bool {
	if req.OnError == "" {
		return e.limits.RollbackOnError
	}
	return req.OnError == execution.OnErrorRollback
}

// broken reports a sandbox that broke the protocol; kiln treats it as dead.
func (e *Executor) broken(sb sandbox.Sandbox, res *Result, err error) *Result {
	e.log.Warn("sandbox broke the protocol", "sandbox", sb.ID(), "err", err)
	return fail(res, execution.StatusSandboxDied, 1, "Sandbox sent a malformed response")
}

// exited maps a sandbox that died before answering to a status.
func (e *Executor) exited(sb sandbox.Sandbox, res *Result) *Result {
	// Room for the runtime's own wait for the out-of-memory flag (up to 5 s).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	code, oom, err := sb.Exit(ctx)
	if err != nil {
		e.log.Warn("sandbox exit status unknown", "sandbox", sb.ID(), "err", err)
	}
	e.log.Debug("sandbox exit explained", "sandbox", sb.ID(), "code", code, "oom", oom, "took", time.Since(start))
	if oom {
		return fail(res, execution.StatusOOM, 137, "Out of memory")
	}
	if code < 0 {
		return fail(res, execution.StatusSandboxDied, 1, "Sandbox exited (exit code unknown)")
	}
	return fail(res, execution.StatusSandboxDied, code, fmt.Sprintf("Sandbox exited with code %d", code))
}

// fail reports a run the sandbox did not answer. The state is the one the run was
// given: nothing newer exists.
func fail(res *Result, status string, code int, msg string) *Result {
	res.Status, res.ExitCode, res.Error = status, code, &msg
	return res
}

func fill(res *Result, r *protocol.Response) {
	res.Status, res.ExitCode = r.Status, r.ExitCode
	res.Stdout, res.Stderr = r.Stdout, r.Stderr
	res.Error, res.Result = r.Error, r.Result
	res.State, res.StateError = r.State, r.StateError
	res.Files, res.FilesError, res.DeletedFiles = r.Files, r.FilesError, r.DeletedFiles
	res.StateToken, res.MemoryBytes = r.StateToken, r.MemoryBytes
	res.Outputs = r.Outputs
	// Output files the sandbox could not return are a cut too (the REPL says which in
	// stderr).
	res.Truncated = r.Truncated || r.FilesError != nil
	// A MemoryError is the same event as the kernel's OOM kill, caught earlier.
	if r.Status == execution.StatusError && r.Error != nil && strings.HasPrefix(*r.Error, "MemoryError") {
		msg := "Out of memory"
		res.Status, res.ExitCode, res.Error = execution.StatusOOM, 137, &msg
	}
}

// Validate checks and normalises a request against the limits: the timeout is clamped,
// the code and state bounded. It uses no sandbox, and marks the request checked.
func (e *Executor) Validate(req *Request) (err error) {
	defer func() { req.validated = err == nil }()
	if langs, complete := e.pool.Languages(); req.Lang == "" || complete && !slices.Contains(langs, req.Lang) {
		return e.unsupported(req.Lang)
	}
	if strings.TrimSpace(req.Code) == "" && !req.Flush {
		return kiln.Errorf(kiln.CodeInvalid, "code is empty")
	}
	if err := e.validateTools(req); err != nil {
		return err
	}
	if len(req.Code) > e.limits.MaxCodeBytes {
		return kiln.Errorf(kiln.CodeTooLarge, "code is %d bytes; the limit is %d", len(req.Code), e.limits.MaxCodeBytes)
	}
	if req.State != nil {
		if err := CheckState(req.State, e.limits.MaxStateBytes, e.limits.MaxStateRaw); err != nil {
			return err
		}
	}
	for _, f := range req.Files {
		if int64(len(f.Content)) > e.limits.MaxFileBytes {
			return kiln.Errorf(kiln.CodeTooLarge, "file %q is %d bytes; the limit is %d", f.Path, len(f.Content), e.limits.MaxFileBytes)
		}
	}
	if req.Timeout <= 0 {
		req.Timeout = e.limits.DefaultTimeout
	}
	req.Timeout = min(max(req.Timeout, e.limits.MinTimeout), e.limits.MaxTimeout)
	return e.validateResources(req)
}

// validateResources checks the CPU and memory a request asks for against the operator's
// bounds.
func (e *Executor) validateResources(req *Request) error {
	if req.MilliCPU == 0 && req.MemoryMB == 0 {
		return nil
	}
	l := e.limits
	switch {
	case req.MilliCPU < 0 || req.MilliCPU > 0 && req.MilliCPU < 100:
		return kiln.Errorf(kiln.CodeInvalid, "cpus must be at least 0.1")
	case req.MilliCPU > max(l.MaxMilliCPU, l.DefaultMilliCPU):
		return kiln.Errorf(kiln.CodeInvalid, "cpus %s is over MAX_SANDBOX_CPUS (%s)", cpus(req.MilliCPU), cpus(max(l.MaxMilliCPU, l.DefaultMilliCPU)))
	case req.MemoryMB < 0 || req.MemoryMB > 0 && req.MemoryMB < 128:
		return kiln.Errorf(kiln.CodeInvalid, "memory_mb must be at least 128")
	case req.MemoryMB > max(l.MaxMemoryMB, l.DefaultMemoryMB):
		return kiln.Errorf(kiln.CodeInvalid, "memory_mb %d is over MAX_SANDBOX_MEMORY_MB (%d)", req.MemoryMB, max(l.MaxMemoryMB, l.DefaultMemoryMB))
	}
	return nil
}

// cpus writes thousandths of a core as cores.
func cpus(milli int64) string { return strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64) }

// ownSize says whether req needs a sandbox started for it (Pool.CheckoutSized): it asks
// for other limits than the pools' sandboxes have, on a runtime that cannot resize them;
// and the limits, as the runtime sets them (kiln's extra memory included).
func (e *Executor) ownSize(req *Request) (milliCPU, memoryMB int64, own bool) {
	l := e.limits
	milliCPU, memoryMB = cmp.Or(req.MilliCPU, l.DefaultMilliCPU), cmp.Or(req.MemoryMB, l.DefaultMemoryMB)
	own = !l.Resizable && (milliCPU != l.DefaultMilliCPU || memoryMB != l.DefaultMemoryMB)
	return milliCPU, memoryMB + l.ExtraMemoryMB, own
}

// fit gives sb the CPU and memory req asks for (the defaults when it names none), when
// they are not what it has: a sandbox of the pool, or a live one an earlier call resized.
func (e *Executor) fit(ctx context.Context, sb sandbox.Sandbox, req *Request) error {
	r, ok := sb.(sandbox.Resizer)
	if !ok || !e.limits.Resizable {
		return nil
	}
	wantCPU, wantMB := cmp.Or(req.MilliCPU, e.limits.DefaultMilliCPU), cmp.Or(req.MemoryMB, e.limits.DefaultMemoryMB)+e.limits.ExtraMemoryMB
	if cpu, mb := r.Limits(); cpu == wantCPU && mb == wantMB {
		return nil
	}
	if err := r.Resize(ctx, wantCPU, wantMB); err != nil {
		return &kiln.Error{Code: kiln.CodeUnavailable, RetryAfter: e.limits.RetryAfter, Message: fmt.Sprintf(
			"the sandbox could not be given %s CPUs and %d MB: %v", cpus(wantCPU), wantMB-e.limits.ExtraMemoryMB, err)}
	}
	return nil
}

// unsupported is the answer to a language no sandbox runs.
func (e *Executor) unsupported(lang string) error {
	langs, _ := e.pool.Languages()
	return kiln.Errorf(kiln.CodeLanguage, "unsupported language %q; this deployment runs %s", lang, strings.Join(langs, ", "))
}

func (e *Executor) checkoutError(err error, lang string) error {
	switch {
	case errors.Is(err, kiln.ErrUnsupportedLanguage):
		return e.unsupported(lang)
	case errors.Is(err, kiln.ErrQueueFull):
		return &kiln.Error{Code: kiln.CodeUnavailable, Message: "all sandboxes are busy and the queue is full; retry later", RetryAfter: e.limits.RetryAfter}
	case errors.Is(err, kiln.ErrSizedFull):
		return &kiln.Error{Code: kiln.CodeUnavailable, RetryAfter: e.limits.RetryAfter, Message: fmt.Sprintf(
			"every sandbox of a request's own size is in use (this runtime starts one for each request that asks for cpus or memory_mb other than %s CPUs and %d MB, at most as many as the pool keeps warm); retry later, or ask for the default size",
			cpus(e.limits.DefaultMilliCPU), e.limits.DefaultMemoryMB)}
	case errors.Is(err, kiln.ErrQueueTimeout):
		return &kiln.Error{Code: kiln.CodeUnavailable, Message: "no sandbox became free within the queue timeout; retry later", RetryAfter: e.limits.RetryAfter}
	case errors.Is(err, kiln.ErrShuttingDown):
		return e.errShuttingDown()
	}
	return err
}
