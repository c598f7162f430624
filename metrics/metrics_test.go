package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/pool"
)

func TestWarmupReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: no ready frame: %w", kiln.ErrWarmupTimeout, context.DeadlineExceeded), ReasonTimeout},
		{context.DeadlineExceeded, ReasonTimeout},
		{fmt.Errorf("%w during warm-up: ImportError", kiln.ErrSandboxExited), ReasonExited},
		{fmt.Errorf("%w: ready frame: unexpected EOF", kiln.ErrSandboxExited), ReasonExited},
		{fmt.Errorf("%w: container create: No such image: kiln-python:latest", kiln.ErrDaemon), ReasonDocker},
		{fmt.Errorf("pool: %w", fmt.Errorf("%w: container start: OCI runtime create failed", kiln.ErrDaemon)), ReasonDocker},
		// The wording alone does not count: only the sentinels do.
		{errors.New("container create: sandbox exited"), ReasonOther},
		{errors.New("something new"), ReasonOther},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			if got := WarmupReason(tt.err); got != tt.want {
				t.Errorf("WarmupReason(%q) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	str := func(s string) *string { return &s }
	tests := []struct {
		name        string
		res         *executor.Result
		err         error
		wantStatus  string
		wantSummary string
	}{
		{"ok", &executor.Result{Status: "ok"}, nil, "ok", ""},
		{"exception keeps only its type", &executor.Result{Status: "error", Error: str("ValueError: secret=hunter2")}, nil, "error", "ValueError"},
		{"odd error text", &executor.Result{Status: "error", Error: str("<user text> with spaces: x")}, nil, "error", "error"},
		{"shell exit", &executor.Result{Status: "error", Error: str("Exit code 3")}, nil, "error", "Exit code 3"},
		{"no error text", &executor.Result{Status: "error", ExitCode: 2}, nil, "error", "exit code 2"},
		{"timeout", &executor.Result{Status: "timeout", Error: str("Time limit exceeded")}, nil, "timeout", "Time limit exceeded"},
		{"unknown status", &executor.Result{Status: "weird"}, nil, StatusInternal, StatusInternal},
		{"unavailable", nil, &kiln.Error{Code: kiln.CodeUnavailable, Message: "queue full"}, StatusUnavailable, "queue full"},
		{"rejected hides the message", nil, kiln.Errorf(kiln.CodeTooLarge, "file %q too big", "secret.txt"), StatusRejected, "refused: too_large"},
		{"canceled", nil, context.Canceled, executor.StatusCancelled, "the client went away"},
		{"internal", nil, errors.New("disk on fire"), StatusInternal, "internal error (see the log)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, summary := classify(tt.res, tt.err)
			if status != tt.wantStatus || summary != tt.wantSummary {
				t.Errorf("classify = %q, %q; want %q, %q", status, summary, tt.wantStatus, tt.wantSummary)
			}
		})
	}
}

type fakeRunner struct {
	res *executor.Result
	err error
}

func (f fakeRunner) Run(context.Context, executor.Request) (*executor.Result, error) {
	return f.res, f.err
}

type fakePools []pool.MemberStats

func (f fakePools) PoolStats() []pool.MemberStats { return f }

func TestExportedNamesAndRecent(t *testing.T) {
	m := New()
	m.WatchPools(fakePools{
		{Name: "python", Stats: pool.Stats{Target: 4, Ready: 3, Warming: 1, Counts: pool.Counts{Died: 2}}},
		{Name: "polyglot", Stats: pool.Stats{Target: 1}},
	})
	obs := m.Pool("python")
	msg := "NameError: name 'x' is not defined"
	runs := []fakeRunner{
		{res: &executor.Result{Status: "ok", Stdout: "hello", State: make([]byte, 100), ExecTime: 3 * time.Millisecond, WireIn: 300, WireOut: 40}},
		{res: &executor.Result{Status: "error", Error: &msg, Sandbox: "0123456789ab"}},
		{err: &kiln.Error{Code: kiln.CodeUnavailable, Message: "no sandbox became free"}},
	}
	for _, r := range runs {
		_, _ = m.Observe(r).Run(context.Background(), executor.Request{})
	}
	obs.Warmed(time.Second)
	obs.WarmFailed(fmt.Errorf("%w: container create: boom", kiln.ErrDaemon))
	obs.Removed(nil)
	obs.Removed(errors.New("remove failed"))
	obs.Waited(time.Millisecond, nil)
	obs.Waited(10*time.Second, kiln.ErrQueueTimeout)
	m.Request("/exec", "POST", 200, time.Millisecond)
	m.Request("unmatched", "BREW", 404, time.Millisecond)

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		`kiln_executions_total{status="ok"} 1`,
		`kiln_executions_total{status="error"} 1`,
		`kiln_executions_total{status="unavailable"} 1`,
		`kiln_executions_total{status="oom"} 0`,
		`kiln_execution_duration_seconds_count{phase="total"} 3`,
		`kiln_execution_duration_seconds_count{phase="execution"} 2`,
		`kiln_execution_duration_seconds_count{phase="queue"} 2`,
		`kiln_execution_state_bytes_count 1`,
		`kiln_execution_output_bytes_sum 5`,
		`kiln_sandbox_wire_bytes_total{direction="in"} 300`,
		`kiln_sandbox_wire_bytes_total{direction="out"} 40`,
		`kiln_pool_checkouts_total{outcome="timeout"} 1`,
		`kiln_pool_target{pool="python"} 4`, `kiln_pool_ready{pool="python"} 3`, `kiln_pool_warming{pool="python"} 1`,
		`kiln_pool_in_use{pool="python"} 0`, `kiln_pool_waiting{pool="python"} 0`, `kiln_pool_target{pool="polyglot"} 1`,
		`kiln_sandboxes_died_total{pool="python"} 2`,
		`kiln_sandboxes_created_total{pool="python"} 1`,
		`kiln_sandbox_warmup_duration_seconds_count{pool="python"} 1`,
		`kiln_sandbox_warmup_failures_total{pool="python",reason="docker"} 1`,
		`kiln_sandbox_warmup_failures_total{pool="python",reason="timeout"} 0`,
		`kiln_sandboxes_removed_total 1`,
		`kiln_sandboxes_leaked_total 1`,
		`kiln_http_requests_total{code="200",method="POST",route="/exec"} 1`,
		`kiln_http_requests_total{code="404",method="other",route="unmatched"} 1`,
		`go_goroutines `, `process_resident_memory_bytes `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(text, "not defined") || strings.Contains(text, "hello") {
		t.Error("/metrics carries user output")
	}

	st := m.Snapshot()
	if got := st.Executions["ok"]; got != 1 {
		t.Errorf("Snapshot executions[ok] = %d, want 1", got)
	}
	if got, want := len(st.Latency["total"]), len(st.Buckets)+1; got != want {
		t.Errorf("total latency has %d counts, want %d (buckets and the total)", got, want)
	}
	if len(st.Recent) != 2 || st.Recent[0].Status != StatusUnavailable || st.Recent[1].Summary != "NameError" {
		t.Errorf("Recent = %+v, want the unavailable run first, then NameError", st.Recent)
	}
	if st.Recent[1].Sandbox != "0123456789ab" {
		t.Errorf("Recent sandbox = %q, want the id the result names", st.Recent[1].Sandbox)
	}
}

func TestRingKeepsNewest(t *testing.T) {
	r := newRing(3)
	for i := range 5 {
		r.add(Failure{Status: fmt.Sprint(i)})
	}
	var got []string
	for _, f := range r.list() {
		got = append(got, f.Status)
	}
	if strings.Join(got, ",") != "4,3,2" {
		t.Errorf("list = %v, want [4 3 2]", got)
	}
}
