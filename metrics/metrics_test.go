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
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/live"
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
		{fmt.Errorf("%w: container create: No such image: kiln-python:latest", kiln.ErrRuntime), ReasonRuntime},
		{fmt.Errorf("pool: %w", fmt.Errorf("%w: container start: OCI runtime create failed", kiln.ErrRuntime)), ReasonRuntime},
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
		{"canceled", nil, context.Canceled, execution.StatusCancelled, "the client went away"},
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
		{Name: "python", Stats: pool.Stats{Target: 4, Ready: 3, Warming: 1, Kept: 2, Counts: pool.Counts{Died: 2}}},
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
	obs.WarmFailed(fmt.Errorf("%w: container create: boom", kiln.ErrRuntime))
	obs.Removed(nil)
	obs.Removed(errors.New("remove failed"))
	obs.Waited(time.Millisecond, pool.ShareWithin, nil)
	obs.Waited(10*time.Second, pool.ShareOver, kiln.ErrQueueTimeout)
	m.Request("/exec", "POST", 200, time.Millisecond)
	m.Request("unmatched", "BREW", 404, time.Millisecond)
	m.Forwarded("/exec", "to_owner")
	m.Forwarded("/exec", "to_owner")
	m.Forwarded("/mcp", "from_replica")

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		`kiln_executions_total{status="ok"} 1`,
		`kiln_pool_queue_wait_seconds_count{share="within"} 1`,
		`kiln_pool_queue_wait_seconds_count{share="over"} 1`,
		`kiln_replica_forwards_total{how="to_owner",route="/exec"} 2`,
		`kiln_replica_forwards_total{how="from_replica",route="/mcp"} 1`,
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
		`kiln_pool_kept{pool="python"} 2`, `kiln_pool_kept{pool="polyglot"} 0`,
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

type fakeLive live.Stats

func (f fakeLive) Stats() live.Stats { return live.Stats(f) }

// scrapeText serves m's /metrics and returns the text.
func scrapeText(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics = %d, want 200: %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

func TestLiveCollector(t *testing.T) {
	tests := []struct {
		name string
		src  fakeLive
		want []string
	}{
		{
			name: "nothing yet: every known series at zero",
			src:  fakeLive{Max: 40, Counts: live.Counts{Calls: map[string]int64{}, Ended: map[string]int64{}}},
			want: []string{
				`kiln_live_sessions{state="idle"} 0`, `kiln_live_sessions{state="busy"} 0`,
				`kiln_live_sessions_max 40`, `kiln_live_memory_bytes 0`,
				`kiln_live_calls_total{status="new"} 0`, `kiln_live_calls_total{status="reused"} 0`,
				`kiln_live_calls_total{status="resumed"} 0`,
				`kiln_live_sessions_ended_total{reason="idle"} 0`, `kiln_live_sessions_ended_total{reason="lifetime"} 0`,
				`kiln_live_sessions_ended_total{reason="capacity"} 0`, `kiln_live_sessions_ended_total{reason="died"} 0`,
				`kiln_live_sessions_ended_total{reason="discard"} 0`, `kiln_live_sessions_ended_total{reason="shutdown"} 0`,
				`kiln_live_sessions_ended_total{reason="quota"} 0`, `kiln_live_sessions_ended_total{reason="stale"} 0`,
				`kiln_live_flushes_total{outcome="stored"} 0`, `kiln_live_flushes_total{outcome="unchanged"} 0`,
				`kiln_live_flushes_total{outcome="stale"} 0`, `kiln_live_flushes_total{outcome="failed"} 0`,
				"# TYPE kiln_live_sessions gauge", "# TYPE kiln_live_calls_total counter", "# TYPE kiln_live_flushes_total counter",
				"# TYPE kiln_live_sessions_ended_total counter",
			},
		},
		{
			name: "in use",
			src: fakeLive{Idle: 3, Busy: 2, Memory: 512 << 20, Max: 8, Counts: live.Counts{
				Calls:   map[string]int64{"new": 5, "reused": 12, "resumed": 1},
				Ended:   map[string]int64{"idle": 2, "capacity": 1, "died": 1},
				Flushes: map[string]int64{"stored": 9, "unchanged": 2},
			}},
			want: []string{
				`kiln_live_sessions{state="idle"} 3`, `kiln_live_sessions{state="busy"} 2`,
				`kiln_live_sessions_max 8`, `kiln_live_memory_bytes 5.36870912e+08`,
				`kiln_live_calls_total{status="new"} 5`, `kiln_live_calls_total{status="reused"} 12`,
				`kiln_live_calls_total{status="resumed"} 1`,
				`kiln_live_sessions_ended_total{reason="idle"} 2`, `kiln_live_sessions_ended_total{reason="capacity"} 1`,
				`kiln_live_sessions_ended_total{reason="died"} 1`, `kiln_live_sessions_ended_total{reason="lifetime"} 0`,
				`kiln_live_flushes_total{outcome="stored"} 9`, `kiln_live_flushes_total{outcome="unchanged"} 2`,
				`kiln_live_flushes_total{outcome="failed"} 0`,
			},
		},
		{
			// A reason the registry adds later is exported under its own name, not lost.
			name: "a reason metrics does not know yet",
			src:  fakeLive{Counts: live.Counts{Calls: map[string]int64{}, Ended: map[string]int64{"evicted": 4}}},
			want: []string{`kiln_live_sessions_ended_total{reason="evicted"} 4`, `kiln_live_sessions_ended_total{reason="idle"} 0`},
		},
		{
			// Stats always makes its maps; nil ones read as zeros all the same.
			name: "nil maps",
			src:  fakeLive{Idle: 1},
			want: []string{`kiln_live_sessions{state="idle"} 1`, `kiln_live_calls_total{status="reused"} 0`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New()
			m.WatchLive(tt.src)
			text := scrapeText(t, m)
			for _, want := range tt.want {
				if !strings.Contains(text, want+"\n") {
					t.Errorf("/metrics lacks %q", want)
				}
			}
		})
	}
}

// TestNoLiveSeriesWhenOff: without WatchLive (LIVE_SESSIONS=false) no kiln_live_ series
// exists, rather than zeros that would read as sessions never reused.
func TestNoLiveSeriesWhenOff(t *testing.T) {
	if text := scrapeText(t, New()); strings.Contains(text, "kiln_live_") {
		t.Errorf("/metrics has kiln_live_ series without live sessions:\n%s", text)
	}
}
