package metrics

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/session"
)

// Statuses of kiln_executions_total beyond the executor's own (ok, error, timeout,
// oom, sandbox_died, cancelled): executions that never ran, and why. A client that
// went away counts as cancelled too: its run was stopped.
const (
	StatusUnavailable = "unavailable" // no sandbox free in time, or shutting down
	StatusRejected    = "rejected"    // the request was refused (invalid, too large, language)
	StatusInternal    = "internal"    // kiln itself failed
)

// runStatuses are the statuses of executions that ran.
var runStatuses = []string{
	execution.StatusOK, execution.StatusError, execution.StatusTimeout, execution.StatusOOM,
	execution.StatusSandboxDied, execution.StatusCancelled,
}

var executionStatuses = append(slices.Clone(runStatuses), StatusUnavailable, StatusRejected, StatusInternal)

// Observe returns next wrapped so that every execution is counted, timed and, when it
// did not end ok, remembered in the recent-failures ring.
func (m *Metrics) Observe(next session.Runner) session.Runner { return observed{m: m, next: next} }

type observed struct {
	m    *Metrics
	next session.Runner
}

func (o observed) Run(ctx context.Context, req executor.Request) (*executor.Result, error) {
	start := o.m.now()
	res, err := o.next.Run(ctx, req)
	o.m.executed(start, o.m.now().Sub(start), res, err)
	return res, err
}

// executed records one execution. res is nil exactly when err is not.
func (m *Metrics) executed(at time.Time, total time.Duration, res *executor.Result, err error) {
	status, summary := classify(res, err)
	m.executions.WithLabelValues(status).Inc()
	m.duration.WithLabelValues("total").Observe(total.Seconds())
	if res != nil {
		m.duration.WithLabelValues("execution").Observe(res.ExecTime.Seconds())
		m.outBytes.Observe(float64(len(res.Stdout) + len(res.Stderr)))
		m.wireBytes.WithLabelValues("in").Add(float64(res.WireIn))
		m.wireBytes.WithLabelValues("out").Add(float64(res.WireOut))
		if len(res.State) > 0 {
			m.stateBytes.Observe(float64(len(res.State)))
		}
	}
	if status != execution.StatusOK {
		f := Failure{Time: kiln.Timestamp(at), Status: status, Summary: summary, DurationMS: float64(total.Microseconds()) / 1000}
		if res != nil {
			f.Sandbox = res.Sandbox
		}
		m.recent.add(f)
	}
}

// classify returns an execution's status label and a one-line summary that is safe to
// show: it never carries the user's output or code. For a Python exception that is
// the exception's type only, since its message may quote user data.
func classify(res *executor.Result, err error) (status, summary string) {
	if err != nil {
		var ke *kiln.Error
		switch {
		case errors.Is(err, context.Canceled):
			return execution.StatusCancelled, "the client went away"
		case errors.As(err, &ke) && ke.Code == kiln.CodeUnavailable:
			return StatusUnavailable, ke.Message // kiln's own fixed wording
		case errors.As(err, &ke):
			return StatusRejected, "refused: " + string(ke.Code)
		}
		return StatusInternal, "internal error (see the log)"
	}
	status = res.Status
	if !slices.Contains(runStatuses, status) {
		status = StatusInternal
	}
	switch status {
	case execution.StatusOK:
		return status, ""
	case execution.StatusError:
		if res.Error == nil {
			return status, fmt.Sprintf("exit code %d", res.ExitCode)
		}
		return status, exceptionType(*res.Error)
	}
	if res.Error != nil && len(*res.Error) <= 80 {
		return status, *res.Error // written by kiln: time limit, out of memory, sandbox exit
	}
	return status, status
}

// exceptionType returns the leading "ValueError" of "ValueError: ...", the REPL's own
// "Exit code N (...)" for shell runs, or a neutral word for anything else.
func exceptionType(msg string) string {
	if strings.HasPrefix(msg, "Exit code ") && len(msg) <= 80 && !strings.Contains(msg, "\n") {
		return msg
	}
	name, _, _ := strings.Cut(msg, ":")
	if name == "" || len(name) > 64 {
		return "error"
	}
	for _, r := range name {
		ok := r == '_' || r == '.' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if !ok {
			return "error"
		}
	}
	return name
}
