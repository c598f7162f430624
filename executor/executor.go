package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/docker"
	"github.com/kilnsh/kiln/pool"
	"github.com/kilnsh/kiln/protocol"
)

// Statuses of a Result, as the API reports them.
const (
	StatusOK          = "ok"
	StatusError       = "error"
	StatusTimeout     = "timeout"
	StatusOOM         = "oom"
	StatusSandboxDied = "sandbox_died"
)

// Languages an execution can ask for.
const (
	LangPython = "python"
	LangBash   = "bash"
)

// Sandbox is what an execution needs of a checked-out sandbox.
type Sandbox interface {
	ID() string
	Ready() protocol.Ready
	// Exchange sends one request payload and returns the response payload; ctx's
	// deadline is the hard deadline.
	Exchange(ctx context.Context, payload []byte) ([]byte, error)
	// Exit reports how a sandbox whose stream ended exited.
	Exit(ctx context.Context) (code int, oomKilled bool, err error)
}

// Pool lends sandboxes, each for one execution.
type Pool interface {
	Checkout(ctx context.Context) (Sandbox, error)
	Release(Sandbox)
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
	// RetryAfter is what a caller is told to wait when no sandbox is free, in seconds.
	RetryAfter int
	// CaptureOnError keeps the state a failed run left behind. By default a failed run
	// hands back the state it was given, so a session goes on from before the failure.
	CaptureOnError bool
}

// Request is one execution as the API hands it over.
type Request struct {
	Lang         string // LangPython or LangBash
	Code         string
	Args         []string
	State        []byte // the state blob to restore, or nil
	CaptureState bool
	Timeout      time.Duration // zero means the default; clamped to the limits
	Files        []protocol.File

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
	Files      []protocol.File
	FilesError *string
	Truncated  bool
	Sandbox    string // id of the container that ran it
	QueueWait  time.Duration
	ExecTime   time.Duration
}

// Executor runs executions on sandboxes from a pool.
type Executor struct {
	pool   Pool
	limits Limits
	log    *slog.Logger
}

// New returns an Executor.
func New(p Pool, limits Limits, log *slog.Logger) *Executor {
	return &Executor{pool: p, limits: limits, log: log}
}

// Limits returns the limits the executor enforces.
func (e *Executor) Limits() Limits { return e.limits }

// Run executes req on a fresh sandbox. Errors are *kiln.Error for the caller's
// mistakes and for an exhausted pool, the context's error when the caller went away,
// and anything else when kiln failed.
func (e *Executor) Run(ctx context.Context, req Request) (*Result, error) {
	if !req.validated {
		if err := e.Validate(&req); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	sb, err := e.pool.Checkout(ctx)
	if err != nil {
		return nil, e.checkoutError(err)
	}
	// The sandbox's removal and the refill it starts wait until the answer is out.
	defer kiln.After(ctx, func() { e.pool.Release(sb) })
	// Until a valid response replaces it, the state is the one the run was given.
	res := &Result{Sandbox: sb.ID(), QueueWait: time.Since(start), State: req.State}

	if !sb.Ready().Capabilities.Supports(req.Lang) {
		return nil, kiln.Errorf(kiln.CodeLanguage, "this deployment's sandbox does not run %s", req.Lang)
	}
	id := kiln.NewID()
	lim := protocol.Limits{
		MaxOutputBytes: e.limits.MaxOutputBytes,
		MaxFileBytes:   e.limits.MaxFileBytes,
		MaxFiles:       e.limits.MaxFiles,
		MaxStateBytes:  e.limits.MaxStateBytes,
	}
	payload, err := json.Marshal(protocol.Request{
		ID: id, Op: protocol.OpExec, Lang: req.Lang, Code: req.Code, Args: req.Args,
		State: req.State, CaptureState: req.CaptureState,
		TimeoutMS: req.Timeout.Milliseconds(), Files: req.Files, Limits: lim,
	})
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}

	execStart := time.Now()
	hctx, cancel := context.WithTimeout(ctx, req.Timeout+e.limits.Grace)
	raw, err := sb.Exchange(hctx, payload)
	// The write deadline can fire a moment before the context's timer: either way the
	// hard deadline passed.
	deadlinePassed := hctx.Err() != nil
	cancel()
	res.ExecTime = time.Since(execStart)
	if err == nil {
		resp, err := protocol.DecodeResponse(raw, id, lim)
		if err != nil {
			return e.broken(sb, res, err), nil
		}
		e.accept(res, resp, req.State)
		return res, nil
	}
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err() // the caller left; the deferred release removes the sandbox
	case deadlinePassed || errors.Is(err, context.DeadlineExceeded):
		e.log.Info("hard deadline: sandbox killed", "container", kiln.ShortID(sb.ID()), "timeout_ms", req.Timeout.Milliseconds())
		return fail(res, StatusTimeout, 124, "Time limit exceeded"), nil
	case errors.Is(err, docker.ErrExited):
		return e.exited(sb, res), nil
	default:
		return e.broken(sb, res, err), nil
	}
}

// accept takes a valid response into res. A failed run hands back the state it was
// given (unless CaptureOnError), and so does a captured state that would be refused
// on the way back in: the REPL bounds its compressed size only.
func (e *Executor) accept(res *Result, resp *protocol.Response, given []byte) {
	fill(res, resp)
	switch {
	case res.Status != StatusOK && !e.limits.CaptureOnError:
		res.State = given
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

// broken reports a sandbox that broke the protocol; kiln treats it as dead.
func (e *Executor) broken(sb Sandbox, res *Result, err error) *Result {
	e.log.Warn("sandbox broke the protocol", "container", kiln.ShortID(sb.ID()), "err", err)
	return fail(res, StatusSandboxDied, 1, "Sandbox sent a malformed response")
}

// exited maps a sandbox that died before answering to a status.
func (e *Executor) exited(sb Sandbox, res *Result) *Result {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	code, oom, err := sb.Exit(ctx)
	if err != nil {
		e.log.Warn("sandbox exit status unknown", "container", kiln.ShortID(sb.ID()), "err", err)
	}
	if oom {
		return fail(res, StatusOOM, 137, "Out of memory")
	}
	if code < 0 {
		return fail(res, StatusSandboxDied, 1, "Sandbox exited (exit code unknown)")
	}
	return fail(res, StatusSandboxDied, code, fmt.Sprintf("Sandbox exited with code %d", code))
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
	res.Files, res.FilesError = r.Files, r.FilesError
	// Output files the sandbox could not return are a cut too (the REPL says which in
	// stderr).
	res.Truncated = r.Truncated || r.FilesError != nil
	// A MemoryError is the same event as the kernel's OOM kill, caught earlier.
	if r.Status == StatusError && r.Error != nil && strings.HasPrefix(*r.Error, "MemoryError") {
		msg := "Out of memory"
		res.Status, res.ExitCode, res.Error = StatusOOM, 137, &msg
	}
}

// Validate checks and normalises a request against the limits: the timeout is clamped,
// the code and state bounded. It uses no sandbox, and marks the request checked.
func (e *Executor) Validate(req *Request) (err error) {
	defer func() { req.validated = err == nil }()
	switch req.Lang {
	case LangPython, LangBash:
	default:
		return kiln.Errorf(kiln.CodeLanguage, "unsupported language %q", req.Lang)
	}
	if strings.TrimSpace(req.Code) == "" {
		return kiln.Errorf(kiln.CodeInvalid, "code is empty")
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
	return nil
}

func (e *Executor) checkoutError(err error) error {
	switch {
	case errors.Is(err, pool.ErrQueueFull):
		return &kiln.Error{Code: kiln.CodeUnavailable, Message: "all sandboxes are busy and the queue is full; retry later", RetryAfter: e.limits.RetryAfter}
	case errors.Is(err, pool.ErrTimeout):
		return &kiln.Error{Code: kiln.CodeUnavailable, Message: "no sandbox became free within the queue timeout; retry later", RetryAfter: e.limits.RetryAfter}
	case errors.Is(err, pool.ErrClosed):
		return &kiln.Error{Code: kiln.CodeUnavailable, Message: "kiln is shutting down", RetryAfter: e.limits.RetryAfter}
	}
	return err
}
