package docker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
)

// daemonView answers inspections with the container's state as the daemon reports it
// on each call, the last one repeated, and counts the calls.
type daemonView struct {
	states []container.State
	err    error
	calls  int
}

func (d *daemonView) inspect(context.Context) (*container.State, error) {
	d.calls++
	if d.err != nil {
		return nil, d.err
	}
	st := d.states[min(d.calls, len(d.states))-1]
	return &st, nil
}

// unflagged returns n inspections of a container killed by SIGKILL whose
// out-of-memory flag is not set yet.
func unflagged(n int) []container.State {
	s := make([]container.State, n)
	for i := range s {
		s[i] = container.State{Status: "exited", ExitCode: 137}
	}
	return s
}

func notKilled(context.Context) bool { return false }

func TestExplainExit(t *testing.T) {
	const every, within = time.Millisecond, 200 * time.Millisecond
	oom := container.State{Status: "exited", ExitCode: 137, OOMKilled: true}
	tests := []struct {
		name      string
		code      int
		view      daemonView
		killed    func(context.Context) bool // notKilled when nil
		wantCode  int
		wantOOM   bool
		wantErr   bool
		wantCalls func(int) bool
	}{
		{
			// The flag came well after five looks 50 ms apart would have given up.
			name: "flag set late", code: 137,
			view:     daemonView{states: append(unflagged(40), oom)},
			wantCode: 137, wantOOM: true,
			wantCalls: func(n int) bool { return n == 41 },
		},
		{
			name: "flag set at once", code: 137,
			view:     daemonView{states: []container.State{oom}},
			wantCode: 137, wantOOM: true,
			wantCalls: func(n int) bool { return n == 1 },
		},
		{
			name: "killed from outside the daemon", code: 137,
			view:     daemonView{states: unflagged(1)},
			wantCode: 137,
			// Looked at until the deadline: every call is at least `every` apart.
			wantCalls: func(n int) bool { return n > 1 && n <= int(within/every)+1 },
		},
		{
			name: "killed through the daemon", code: 137,
			view:      daemonView{states: unflagged(1)},
			killed:    func(context.Context) bool { return true },
			wantCode:  137,
			wantCalls: func(n int) bool { return n == 1 },
		},
		{
			name: "a plain exit is not looked at again", code: 1,
			view:      daemonView{states: []container.State{{Status: "exited", ExitCode: 1}}},
			wantCode:  1,
			wantCalls: func(n int) bool { return n == 1 },
		},
		{
			// The wait failed: the code comes from the first look at a stopped container.
			name: "code unknown, still running at first", code: -1,
			view: daemonView{states: []container.State{
				{Status: "running", Running: true}, {Status: "running", Running: true}, oom}},
			wantCode: 137, wantOOM: true,
			wantCalls: func(n int) bool { return n == 3 },
		},
		{
			name: "code unknown and never stopped", code: -1,
			view:      daemonView{states: []container.State{{Status: "running", Running: true}}},
			wantCode:  -1,
			wantCalls: func(n int) bool { return n > 1 },
		},
		{
			name: "inspect fails, code known", code: 137,
			view:      daemonView{err: errors.New("no such container")},
			wantCode:  137,
			wantCalls: func(n int) bool { return n == 1 },
		},
		{
			name: "inspect fails, code unknown", code: -1,
			view:     daemonView{err: errors.New("no such container")},
			wantCode: -1, wantErr: true,
			wantCalls: func(n int) bool { return n == 1 },
		},
	}
	for _, tt := range tests {
		if tt.killed == nil {
			tt.killed = notKilled
		}
		t.Run(tt.name, func(t *testing.T) {
			code, oom, err := explainExit(context.Background(), tt.code, tt.view.inspect, tt.killed, within, every)
			if code != tt.wantCode || oom != tt.wantOOM || (err != nil) != tt.wantErr {
				t.Errorf("got (%d, %v, %v), want (%d, %v, error %v)", code, oom, err, tt.wantCode, tt.wantOOM, tt.wantErr)
			}
			if !tt.wantCalls(tt.view.calls) {
				t.Errorf("inspected %d times", tt.view.calls)
			}
		})
	}
}

// A caller that gives up ends the wait for the flag.
func TestExplainExitCancelled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	view := daemonView{states: unflagged(1)}
	start := time.Now()
	code, oom, err := explainExit(ctx, 137, view.inspect, notKilled, time.Hour, time.Millisecond)
	if code != 137 || oom || err != nil {
		t.Errorf("got (%d, %v, %v), want (137, false, nil)", code, oom, err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("returned after %s, want soon after the context ended", took)
	}
}
