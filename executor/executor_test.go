package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox/sandboxtest"
)

// checkCode checks that err is a *kiln.Error with the given code.
func checkCode(t *testing.T, err error, want kiln.Code) {
	t.Helper()
	var e *kiln.Error
	if !errors.As(err, &e) {
		t.Fatalf("got error %v (%T), want a *kiln.Error %s", err, err, want)
	}
	if e.Code != want {
		t.Errorf("got code %s (%s), want %s", e.Code, e.Message, want)
	}
}

func TestCheckState(t *testing.T) {
	small := lz4Frame(t, []byte("a pickled namespace"))
	bomb := lz4Frame(t, make([]byte, 8<<20)) // 8 MiB of zeros, a few KiB compressed
	if len(bomb) > 64<<10 {
		t.Fatalf("bomb is %d bytes compressed, want it small", len(bomb))
	}
	tests := []struct {
		name           string
		blob           []byte
		maxBlob        int64
		maxRaw         int64
		want           kiln.Code // "" for no error
		wantMsgContain string
	}{
		{name: "valid frame", blob: small, maxBlob: 1 << 20, maxRaw: 1 << 20},
		{name: "raw size exactly at the limit", blob: lz4Frame(t, make([]byte, 1000)), maxBlob: 1 << 20, maxRaw: 1000},
		{name: "empty frame", blob: lz4Frame(t, nil), maxBlob: 1 << 20, maxRaw: 1 << 20},
		{name: "not LZ4", blob: []byte("gASVJwAAAAAAAAB9lC4="), maxBlob: 1 << 20, maxRaw: 1 << 20, want: kiln.CodeInvalid},
		{name: "shorter than the magic", blob: []byte{0x04, 0x22}, maxBlob: 1 << 20, maxRaw: 1 << 20, want: kiln.CodeInvalid},
		{name: "empty blob", blob: []byte{}, maxBlob: 1 << 20, maxRaw: 1 << 20, want: kiln.CodeInvalid},
		{name: "LZ4 magic then junk", blob: append([]byte{0x04, 0x22, 0x4d, 0x18}, "not a frame at all"...), maxBlob: 1 << 20, maxRaw: 1 << 20, want: kiln.CodeInvalid},
		{name: "truncated frame", blob: small[:len(small)-6], maxBlob: 1 << 20, maxRaw: 1 << 20, want: kiln.CodeInvalid},
		{name: "blob over its limit", blob: small, maxBlob: int64(len(small)) - 1, maxRaw: 1 << 20, want: kiln.CodeTooLarge},
		{name: "blob at its limit", blob: small, maxBlob: int64(len(small)), maxRaw: 1 << 20},
		{name: "raw size one over the limit", blob: lz4Frame(t, make([]byte, 1001)), maxBlob: 1 << 20, maxRaw: 1000, want: kiln.CodeTooLarge},
		{name: "decompression bomb", blob: bomb, maxBlob: 1 << 20, maxRaw: 1 << 20, want: kiln.CodeTooLarge, wantMsgContain: "decompresses"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckState(tt.blob, tt.maxBlob, tt.maxRaw)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got error %v, want none", err)
				}
				return
			}
			checkCode(t, err, tt.want)
			if tt.wantMsgContain != "" && !strings.Contains(err.Error(), tt.wantMsgContain) {
				t.Errorf("got message %q, want it to mention %q", err, tt.wantMsgContain)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	lim := testLimits()
	tests := []struct {
		name        string
		req         Request
		want        kiln.Code // "" for no error
		wantTimeout time.Duration
	}{
		{name: "python", req: Request{Request: execution.Request{Lang: execution.LangPython, Code: "1"}}, wantTimeout: lim.DefaultTimeout},
		{name: "bash", req: Request{Request: execution.Request{Lang: execution.LangBash, Code: "echo"}}, wantTimeout: lim.DefaultTimeout},
		{name: "timeout kept", req: Request{Request: execution.Request{Lang: execution.LangPython, Code: "1", Timeout: 500 * time.Millisecond}}, wantTimeout: 500 * time.Millisecond},
		{name: "timeout clamped up", req: Request{Request: execution.Request{Lang: execution.LangPython, Code: "1", Timeout: time.Millisecond}}, wantTimeout: lim.MinTimeout},
		{name: "timeout clamped down", req: Request{Request: execution.Request{Lang: execution.LangPython, Code: "1", Timeout: time.Hour}}, wantTimeout: lim.MaxTimeout},
		{name: "negative timeout is the default", req: Request{Request: execution.Request{Lang: execution.LangPython, Code: "1", Timeout: -time.Second}}, wantTimeout: lim.DefaultTimeout},
		{name: "code at the limit", req: Request{Request: execution.Request{Lang: execution.LangPython, Code: strings.Repeat("1", 1000)}}, wantTimeout: lim.DefaultTimeout},
		{name: "code over the limit", req: Request{Request: execution.Request{Lang: execution.LangPython, Code: strings.Repeat("1", 1001)}}, want: kiln.CodeTooLarge},
		{name: "empty code", req: Request{Request: execution.Request{Lang: execution.LangPython, Code: ""}}, want: kiln.CodeInvalid},
		{name: "blank code", req: Request{Request: execution.Request{Lang: execution.LangPython, Code: " \n\t "}}, want: kiln.CodeInvalid},
		{name: "unknown language", req: Request{Request: execution.Request{Lang: "ruby", Code: "1"}}, want: kiln.CodeLanguage},
		{name: "alias not normalised here", req: Request{Request: execution.Request{Lang: "py", Code: "1"}}, want: kiln.CodeLanguage},
		{name: "empty language", req: Request{Request: execution.Request{Code: "1"}}, want: kiln.CodeLanguage},
		{name: "state not LZ4", req: Request{Request: execution.Request{Lang: execution.LangPython, Code: "1", State: []byte("junk")}}, want: kiln.CodeInvalid},
		{name: "file at the limit", req: Request{Request: execution.Request{Lang: execution.LangPython, Code: "1"}, Files: []protocol.File{{Path: "a", Content: make([]byte, 100)}}}, wantTimeout: lim.DefaultTimeout},
		{name: "file over the limit", req: Request{Request: execution.Request{Lang: execution.LangPython, Code: "1"}, Files: []protocol.File{{Path: "a", Content: make([]byte, 101)}}}, want: kiln.CodeTooLarge},
	}
	e := newTestExecutor(&fakePool{}, lim)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := tt.req
			err := e.Validate(&req)
			if tt.want != "" {
				checkCode(t, err, tt.want)
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if req.Timeout != tt.wantTimeout {
				t.Errorf("got timeout %v, want %v", req.Timeout, tt.wantTimeout)
			}
		})
	}
}

func TestValidateState(t *testing.T) {
	lim := testLimits()
	lim.MaxStateBytes = 4096
	lim.MaxStateRaw = 64 << 10
	e := newTestExecutor(&fakePool{}, lim)
	tests := []struct {
		name  string
		state []byte
		want  kiln.Code
	}{
		{"valid", lz4Frame(t, []byte("namespace")), ""},
		{"not LZ4", []byte("plain pickle bytes"), kiln.CodeInvalid},
		{"over the blob size", append(lz4Frame(t, nil), make([]byte, 4096)...), kiln.CodeTooLarge},
		{"decompression bomb", lz4Frame(t, make([]byte, 1<<20)), kiln.CodeTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := Request{Request: execution.Request{Lang: execution.LangPython, Code: "x", State: tt.state}}
			err := e.Validate(&req)
			if tt.want == "" {
				if err != nil {
					t.Errorf("got error %v, want none", err)
				}
				return
			}
			checkCode(t, err, tt.want)
		})
	}
}

// TestRunInvalidUsesNoSandbox checks that a request refused by Validate never takes a
// sandbox from the pool.
func TestRunInvalidUsesNoSandbox(t *testing.T) {
	p := &fakePool{sb: newSandbox(t, reply(nil))}
	e := newTestExecutor(p, testLimits())
	for _, req := range []Request{
		{Request: execution.Request{Lang: execution.LangPython, Code: ""}},
		{Request: execution.Request{Lang: "ruby", Code: "1"}},
		{Request: execution.Request{Lang: execution.LangPython, Code: "1", State: []byte("junk")}},
		{Request: execution.Request{Lang: execution.LangPython, Code: "1", State: lz4Frame(t, make([]byte, 2<<20))}},
	} {
		if _, err := e.Run(context.Background(), req); err == nil {
			t.Errorf("Run(%.20q): got no error, want one", req.Code)
		}
	}
	if p.checkouts != 0 {
		t.Errorf("got %d checkouts for invalid requests, want 0", p.checkouts)
	}
}

func TestRun(t *testing.T) {
	inState := lz4Frame(t, []byte("old namespace"))
	tests := []struct {
		name           string
		handler        sandboxtest.Handler
		onError        string
		rollbackByDflt bool
		wantStatus     string
		wantExit       int
		wantError      string // "" for a nil error field
		wantState      string
		wantStdout     string
	}{
		{
			name:       "ok",
			handler:    reply(func(r *protocol.Response) { r.Result = str("2") }),
			wantStatus: execution.StatusOK, wantState: "new-state", wantStdout: "out\n",
		},
		{
			name:       "a state the REPL did not send back is the input state",
			handler:    reply(func(r *protocol.Response) { r.State, r.StateUnchanged = nil, true }),
			wantStatus: execution.StatusOK, wantState: "old namespace", wantStdout: "out\n",
		},
		{
			name: "error keeps the state it left, as a notebook does",
			handler: reply(func(r *protocol.Response) {
				r.Status, r.ExitCode, r.Error = protocol.StatusError, 1, str("ZeroDivisionError: division by zero")
			}),
			wantStatus: execution.StatusError, wantExit: 1, wantError: "ZeroDivisionError: division by zero", wantState: "new-state", wantStdout: "out\n",
		},
		{
			name: "error with on_error rollback hands back the input state",
			handler: reply(func(r *protocol.Response) {
				r.Status, r.ExitCode, r.Error = protocol.StatusError, 1, str("NameError: x")
			}),
			onError:    execution.OnErrorRollback,
			wantStatus: execution.StatusError, wantExit: 1, wantError: "NameError: x", wantState: "old namespace", wantStdout: "out\n",
		},
		{
			name: "error with rollback by default",
			handler: reply(func(r *protocol.Response) {
				r.Status, r.ExitCode, r.Error = protocol.StatusError, 1, str("NameError: x")
			}),
			rollbackByDflt: true,
			wantStatus:     execution.StatusError, wantExit: 1, wantError: "NameError: x", wantState: "old namespace", wantStdout: "out\n",
		},
		{
			name: "on_error keep wins over a rollback default",
			handler: reply(func(r *protocol.Response) {
				r.Status, r.ExitCode, r.Error = protocol.StatusError, 1, str("NameError: x")
			}),
			onError: execution.OnErrorKeep, rollbackByDflt: true,
			wantStatus: execution.StatusError, wantExit: 1, wantError: "NameError: x", wantState: "new-state", wantStdout: "out\n",
		},
		{
			name: "REPL soft timeout keeps the state it left",
			handler: reply(func(r *protocol.Response) {
				r.Status, r.ExitCode, r.Error = protocol.StatusTimeout, 124, str("Time limit exceeded")
			}),
			wantStatus: execution.StatusTimeout, wantExit: 124, wantError: "Time limit exceeded", wantState: "new-state", wantStdout: "out\n",
		},
		{
			name: "MemoryError is oom",
			handler: reply(func(r *protocol.Response) {
				r.Status, r.ExitCode, r.Error = protocol.StatusError, 1, str("MemoryError: ")
			}),
			wantStatus: execution.StatusOOM, wantExit: 137, wantError: "Out of memory", wantState: "new-state", wantStdout: "out\n",
		},
		{
			name: "a user exception mentioning MemoryError is not oom",
			handler: reply(func(r *protocol.Response) {
				r.Status, r.ExitCode, r.Error = protocol.StatusError, 1, str("ValueError: MemoryError")
			}),
			wantStatus: execution.StatusError, wantExit: 1, wantError: "ValueError: MemoryError", wantState: "new-state", wantStdout: "out\n",
		},
		{
			name:       "exited, OOM-killed",
			handler:    exit(sandboxtest.ExitStatus{Code: 137, OOMKilled: true}),
			wantStatus: execution.StatusOOM, wantExit: 137, wantError: "Out of memory", wantState: "old namespace",
		},
		{
			name:       "exited with code 3",
			handler:    exit(sandboxtest.ExitStatus{Code: 3}),
			wantStatus: execution.StatusSandboxDied, wantExit: 3, wantError: "Sandbox exited with code 3", wantState: "old namespace",
		},
		{
			name:       "exited, exit status unknown",
			handler:    exit(sandboxtest.ExitStatus{Code: -1, Err: errors.New("inspect failed")}),
			wantStatus: execution.StatusSandboxDied, wantExit: 1, wantError: "Sandbox exited (exit code unknown)", wantState: "old namespace",
		},
		{
			name:       "malformed response",
			handler:    raw(frame(`{"binary":0,"nope`)),
			wantStatus: execution.StatusSandboxDied, wantExit: 1, wantError: "Sandbox sent a malformed response", wantState: "old namespace",
		},
		{
			name:       "broken framing",
			handler:    raw(frame(`{"nope`)),
			wantStatus: execution.StatusSandboxDied, wantExit: 1, wantError: "Sandbox sent a malformed response", wantState: "old namespace",
		},
		{
			name:       "response to another request",
			handler:    reply(func(r *protocol.Response) { r.ID = "someone-else" }),
			wantStatus: execution.StatusSandboxDied, wantExit: 1, wantError: "Sandbox sent a malformed response", wantState: "old namespace",
		},
		{
			name:       "unknown status",
			handler:    reply(func(r *protocol.Response) { r.Status = "oom" }),
			wantStatus: execution.StatusSandboxDied, wantExit: 1, wantError: "Sandbox sent a malformed response", wantState: "old namespace",
		},
		{
			name:       "oversized frame",
			handler:    raw(frame(`{"binary":1000000000000}`)),
			wantStatus: execution.StatusSandboxDied, wantExit: 1, wantError: "Sandbox sent a malformed response", wantState: "old namespace",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := newSandbox(t, tt.handler)
			p := &fakePool{sb: sb}
			lim := testLimits()
			lim.RollbackOnError = tt.rollbackByDflt
			e := newTestExecutor(p, lim)
			res, err := e.Run(context.Background(), Request{Request: execution.Request{Lang: execution.LangPython, Code: "x", State: inState, CaptureState: true, OnError: tt.onError}})
			if err != nil {
				t.Fatalf("got error %v, want a result", err)
			}
			p.checkHeldUntilRelease(t, res)
			if res.Status != tt.wantStatus || res.ExitCode != tt.wantExit {
				t.Errorf("got status %s exit %d, want %s %d", res.Status, res.ExitCode, tt.wantStatus, tt.wantExit)
			}
			switch {
			case tt.wantError == "" && res.Error != nil:
				t.Errorf("got error field %q, want nil", *res.Error)
			case tt.wantError != "" && (res.Error == nil || *res.Error != tt.wantError):
				t.Errorf("got error field %v, want %q", deref(res.Error), tt.wantError)
			}
			gotState := string(res.State)
			switch {
			case bytes.Equal(res.State, inState):
				gotState = "old namespace"
			case bytes.Equal(res.State, newStateBlob):
				gotState = "new-state"
			}
			if gotState != tt.wantState {
				t.Errorf("got state %q, want %q", gotState, tt.wantState)
			}
			// A state the run did not leave is always explained.
			if fromRun := gotState == "new-state" || res.Status == execution.StatusOK; res.StateFromRun != fromRun || !fromRun && res.StateError == nil {
				t.Errorf("got StateFromRun %v, state_error %v; want %v and a note unless the run left the state", res.StateFromRun, deref(res.StateError), fromRun)
			}
			if res.Stdout != tt.wantStdout {
				t.Errorf("got stdout %q, want %q", res.Stdout, tt.wantStdout)
			}
			if res.Sandbox != sb.ID() {
				t.Errorf("got sandbox %q, want %q", res.Sandbox, sb.ID())
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestRunRequest checks what the sandbox is sent.
func TestRunRequest(t *testing.T) {
	sb := newSandbox(t, reply(nil))
	p := &fakePool{sb: sb}
	lim := testLimits()
	e := newTestExecutor(p, lim)
	state := lz4Frame(t, []byte("ns"))
	_, err := e.Run(context.Background(), Request{Request: execution.Request{Lang: execution.LangBash, Code: "echo $1", Args: []string{"a b", "c"}, State: state, CaptureState: true, Timeout: 300 * time.Millisecond}, Files: []protocol.File{{Path: "in.csv", Content: []byte("x,y")}}})
	if err != nil {
		t.Fatalf("got error %v, want none", err)
	}
	reqs := sb.Requests()
	if len(reqs) != 1 {
		t.Fatalf("got %d exchanges, want 1", len(reqs))
	}
	r := reqs[0]
	if !kiln.ValidID(r.ID) {
		t.Errorf("got request id %q, want a kiln id", r.ID)
	}
	if r.Op != protocol.OpExec || r.Lang != "bash" || r.Code != "echo $1" || strings.Join(r.Args, "|") != "a b|c" {
		t.Errorf("got op %q lang %q code %q args %q, want exec bash, the code and args", r.Op, r.Lang, r.Code, r.Args)
	}
	if !bytes.Equal(r.State, state) || !r.CaptureState || r.TimeoutMS != 300 {
		t.Errorf("got state %d bytes, capture %v, timeout %d ms; want %d bytes, true, 300", len(r.State), r.CaptureState, r.TimeoutMS, len(state))
	}
	if len(r.Files) != 1 || r.Files[0].Path != "in.csv" || string(r.Files[0].Content) != "x,y" {
		t.Errorf("got files %+v, want in.csv", r.Files)
	}
	want := protocol.Limits{MaxOutputBytes: lim.MaxOutputBytes, MaxFileBytes: lim.MaxFileBytes, MaxFiles: lim.MaxFiles,
		MaxStateBytes: lim.MaxStateBytes, MaxStateRawBytes: lim.MaxStateRaw}
	if r.Limits != want {
		t.Errorf("got limits %+v, want %+v", r.Limits, want)
	}
}

// TestRunHardDeadline checks that a sandbox that never answers is given up on soon
// after the timeout plus the grace period, and reported as a timeout.
func TestRunHardDeadline(t *testing.T) {
	sb := &deadlines{Sandbox: newSandbox(t, deaf)}
	p := &fakePool{sb: sb}
	lim := testLimits()
	lim.Grace = 100 * time.Millisecond
	const timeout = 100 * time.Millisecond
	e := newTestExecutor(p, lim)
	state := lz4Frame(t, []byte("ns"))
	start := time.Now()
	res, err := e.Run(context.Background(), Request{Request: execution.Request{Lang: execution.LangPython, Code: "while True: pass", Timeout: timeout, State: state}})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("got error %v, want a timeout result", err)
	}
	want := timeout + lim.Grace
	if took < want || took > want+time.Second {
		t.Errorf("returned after %v, want soon after %v", took, want)
	}
	called, deadline := sb.first()
	if d := deadline.Sub(called); d <= timeout || d > want {
		t.Errorf("got a hard deadline %v after the exchange began, want timeout plus grace (%v)", d, want)
	}
	if res.Status != execution.StatusTimeout || res.ExitCode != 124 || deref(res.Error) != "Time limit exceeded" {
		t.Errorf("got %s %d %q, want timeout 124 %q", res.Status, res.ExitCode, deref(res.Error), "Time limit exceeded")
	}
	if !bytes.Equal(res.State, state) {
		t.Errorf("got state %q, want the input state", res.State)
	}
	p.checkHeldUntilRelease(t, res)
}

// TestRunCallerCancel checks that a caller who goes away gets the context's error,
// and that the sandbox is still released.
func TestRunCallerCancel(t *testing.T) {
	for _, name := range []string{"cancel", "deadline"} {
		t.Run(name, func(t *testing.T) {
			p := &fakePool{sb: newSandbox(t, deaf)}
			e := newTestExecutor(p, testLimits())
			var (
				ctx    context.Context
				cancel context.CancelFunc
				want   error
			)
			if name == "cancel" {
				ctx, cancel = context.WithCancel(context.Background())
				time.AfterFunc(10*time.Millisecond, cancel)
				want = context.Canceled
			} else {
				// The caller's own deadline, shorter than the run's: not a run timeout.
				ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
				want = context.DeadlineExceeded
			}
			defer cancel()
			res, err := e.Run(ctx, Request{Request: execution.Request{Lang: execution.LangPython, Code: "x", Timeout: 500 * time.Millisecond}})
			if !errors.Is(err, want) {
				t.Errorf("got %v, %v; want error %v", res, err, want)
			}
			p.checkReleasedOnce(t)
		})
	}
}

func TestRunPoolErrors(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		unavailable bool
	}{
		{"queue full", kiln.ErrQueueFull, true},
		{"queue timeout", kiln.ErrQueueTimeout, true},
		{"closed", kiln.ErrShuttingDown, true},
		{"wrapped timeout", fmt.Errorf("checkout: %w", kiln.ErrQueueTimeout), true},
		{"caller gone", context.Canceled, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakePool{err: tt.err}
			e := newTestExecutor(p, testLimits())
			res, err := e.Run(context.Background(), Request{Request: execution.Request{Lang: execution.LangPython, Code: "x"}})
			if res != nil {
				t.Errorf("got result %+v, want nil", res)
			}
			p.checkReleasedOnce(t)
			if !tt.unavailable {
				if !errors.Is(err, tt.err) {
					t.Errorf("got %v, want %v", err, tt.err)
				}
				return
			}
			checkCode(t, err, kiln.CodeUnavailable)
			var ke *kiln.Error
			if errors.As(err, &ke) && ke.RetryAfter != 7 {
				t.Errorf("got RetryAfter %d, want 7", ke.RetryAfter)
			}
		})
	}
}

// TestRunLanguageNotInSandbox checks that the sandbox's own capabilities decide, and
// that the sandbox is released anyway.
func TestRunLanguageNotInSandbox(t *testing.T) {
	sb := startOn(t, &sandboxtest.Fake{Languages: []string{"python"}, Handler: reply(nil)})
	p := &fakePool{sb: sb}
	e := newTestExecutor(p, testLimits())
	_, err := e.Run(context.Background(), Request{Request: execution.Request{Lang: execution.LangBash, Code: "echo"}})
	checkCode(t, err, kiln.CodeLanguage)
	if n := len(sb.Requests()); n != 0 {
		t.Errorf("got %d exchanges, want 0", n)
	}
	p.checkReleasedOnce(t)
}

// The REPL caps the compressed state only: a captured state that decompresses past
// MaxStateRaw would be refused on the way back in, so it is not kept.
func TestRunDropsStateOverRawLimit(t *testing.T) {
	inState := lz4Frame(t, []byte("old namespace"))
	bomb := lz4Frame(t, make([]byte, 2<<20)) // over testLimits' 1 MiB raw limit
	p := &fakePool{sb: newSandbox(t, reply(func(r *protocol.Response) { r.State = bomb }))}
	res, err := newTestExecutor(p, testLimits()).Run(context.Background(), Request{Request: execution.Request{Lang: execution.LangPython, Code: "x", State: inState, CaptureState: true}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(res.State, inState) {
		t.Errorf("got a state of %d bytes, want the state the run was given", len(res.State))
	}
	if res.StateError == nil || !strings.Contains(*res.StateError, "state not kept") {
		t.Errorf("got state_error %v, want a note that the state was not kept", deref(res.StateError))
	}
}

func TestLangName(t *testing.T) {
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"", execution.LangPython, true}, {"Py", execution.LangPython, true}, {"python3", execution.LangPython, true},
		{"SH", execution.LangBash, true}, {"bash", execution.LangBash, true}, {"JS", "js", true}, {"f90", "f90", true},
		{"c++", "c++", true}, {"a b", "a b", false}, {"9lang", "9lang", false},
	} {
		if got, ok := execution.LangName(c.in); got != c.want || ok != c.ok {
			t.Errorf("LangName(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// The CPU and memory a request asks for: within the operator's bounds, on every runtime.
// On a runtime that cannot resize a warm sandbox, a request of its own size gets one
// started for it (CheckoutSized, with kiln's extra memory added); one of the pools' size,
// or of none, a warm one. On a runtime that resizes, every request takes a warm one.
func TestARequestOfItsOwnSizeGetsASandboxOfIt(t *testing.T) {
	for _, tc := range []struct {
		name      string
		resizable bool
		cpu, mem  int64
		want      [][2]int64
	}{
		{"its own size", false, 500, 1024, [][2]int64{{500, 1024 + 64}}},
		{"memory alone", false, 0, 256, [][2]int64{{1000, 256 + 64}}},
		{"the pools' size", false, 1000, 512, nil},
		{"none", false, 0, 0, nil},
		{"resizable", true, 500, 1024, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &fakePool{sb: newSandbox(t, reply(func(*protocol.Response) {}))}
			lim := testLimits()
			lim.DefaultMilliCPU, lim.MaxMilliCPU, lim.DefaultMemoryMB, lim.MaxMemoryMB, lim.ExtraMemoryMB = 1000, 2000, 512, 2048, 64
			lim.Resizable = tc.resizable
			res, err := newTestExecutor(p, lim).Run(context.Background(), Request{Request: execution.Request{Lang: execution.LangPython, Code: "x", MilliCPU: tc.cpu, MemoryMB: tc.mem}})
			if err != nil {
				t.Fatal(err)
			}
			res.Release()
			if !slices.Equal(p.sized, tc.want) || p.checkouts != 1 {
				t.Errorf("sized checkouts %v of %d, want %v of 1", p.sized, p.checkouts, tc.want)
			}
		})
	}
}

func TestValidateResources(t *testing.T) {
	lim := testLimits()
	lim.DefaultMilliCPU, lim.MaxMilliCPU, lim.DefaultMemoryMB, lim.MaxMemoryMB = 1000, 2000, 512, 2048
	for _, tc := range []struct {
		name      string
		resizable bool
		cpu, mem  int64
		want      string // a part of the error, "" for none
	}{
		{"none", false, 0, 0, ""},
		{"the defaults, not resizable", false, 1000, 512, ""},
		{"more memory, not resizable", false, 0, 1024, ""},
		{"more memory than the bound, not resizable", false, 0, 4096, "MAX_SANDBOX_MEMORY_MB (2048)"},
		{"within the bounds", true, 2000, 2048, ""},
		{"less", true, 500, 256, ""},
		{"too many cpus", true, 2500, 0, "MAX_SANDBOX_CPUS (2)"},
		{"too much memory", true, 0, 4096, "MAX_SANDBOX_MEMORY_MB (2048)"},
		{"too little memory", true, 0, 64, "at least 128"},
		{"too few cpus", true, 50, 0, "at least 0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := lim
			l.Resizable = tc.resizable
			e := newTestExecutor(&fakePool{}, l)
			req := Request{Request: execution.Request{Lang: execution.LangPython, Code: "1", MilliCPU: tc.cpu, MemoryMB: tc.mem}}
			err := e.Validate(&req)
			if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}
