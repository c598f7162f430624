package integration

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

func TestExecOutcomes(t *testing.T) {
	tests := []struct {
		name       string
		body       map[string]any
		wantStatus string
		wantCode   int
		wantStdout string
		wantResult string // "" means null
		wantError  string // prefix; "" means null
		wantStderr string // substring
	}{
		{name: "print", body: map[string]any{"code": "print('hello')"}, wantStatus: "ok", wantStdout: "hello\n"},
		{name: "last expression", body: map[string]any{"code": "x = 6\nx * 7"}, wantStatus: "ok", wantResult: "42"},
		{name: "preloaded numpy", body: map[string]any{"code": "np.arange(3).sum()"}, wantStatus: "ok", wantResult: "np.int64(3)"},
		{name: "runtime error", body: map[string]any{"code": "a = 1\nb = 0\nprint('before')\na / b"},
			wantStatus: "error", wantCode: 1, wantStdout: "before\n", wantError: "ZeroDivisionError: division by zero", wantStderr: "line 4"},
		{name: "syntax error", body: map[string]any{"code": "x = 1\ny = 2\nif x ==\n"},
			wantStatus: "error", wantCode: 1, wantError: "SyntaxError: invalid syntax (line 3)"},
		{name: "args", body: map[string]any{"code": "print(sys.argv[1:])", "args": []string{"a", "b c"}}, wantStatus: "ok", wantStdout: "['a', 'b c']\n"},
		{name: "bash", body: map[string]any{"code": "echo \"$1-$2\"; echo err >&2", "lang": "bash", "args": []string{"x", "y"}},
			wantStatus: "ok", wantStdout: "x-y\n", wantStderr: "err"},
		// coreutils stat every path with a flag that gVisor before 2023 refuses (images/python/statx.c).
		{name: "bash's file tools", body: map[string]any{"code": "echo hi > notes.txt && stat -c %s notes.txt && cp -a notes.txt copy.txt && du -s . > /dev/null && ls", "lang": "bash"},
			wantStatus: "ok", wantStdout: "3\ncopy.txt\nnotes.txt\n"},
		{name: "sandbox death", body: map[string]any{"code": "import os\nprint('bye', flush=True)\nos._exit(3)"},
			wantStatus: "sandbox_died", wantCode: 3, wantError: "Sandbox exited with code 3"},
		{name: "memory limit", body: map[string]any{"code": "blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))"},
			wantStatus: "oom", wantCode: 137, wantError: "Out of memory"},
		{name: "sys.exit answered", body: map[string]any{"code": "import sys\nsys.exit(2)"}, wantStatus: "error", wantCode: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := run(t, tc.body)
			if got.Status != tc.wantStatus || got.ExitCode != tc.wantCode {
				t.Errorf("status %q exit %d, want %q exit %d (error %s, stderr %q)", got.Status, got.ExitCode, tc.wantStatus, tc.wantCode, kilntest.Str(got.Error), got.Stderr)
			}
			if tc.wantStdout != "" && got.Stdout != tc.wantStdout {
				t.Errorf("stdout %q, want %q", got.Stdout, tc.wantStdout)
			}
			if r := kilntest.Str(got.Result); tc.wantResult != "" && r != tc.wantResult {
				t.Errorf("result %s, want %s", r, tc.wantResult)
			}
			if tc.wantError == "" && got.Error != nil && tc.wantStatus == "ok" {
				t.Errorf("error %q, want null", *got.Error)
			}
			if tc.wantError != "" && !strings.HasPrefix(kilntest.Str(got.Error), tc.wantError) {
				t.Errorf("error %q, want prefix %q", kilntest.Str(got.Error), tc.wantError)
			}
			if !strings.Contains(got.Stderr, tc.wantStderr) {
				t.Errorf("stderr %q does not contain %q", got.Stderr, tc.wantStderr)
			}
			if got.SessionID == "" {
				t.Error("no session_id")
			}
		})
	}
}

func TestSoftTimeoutKeepsOutput(t *testing.T) {
	waitWarm(t)
	start := time.Now()
	got := run(t, map[string]any{"code": "print('started', flush=True)\nwhile True:\n    pass", "timeout": 1000})
	took := time.Since(start)
	if got.Status != "timeout" || got.ExitCode != 124 || kilntest.Str(got.Error) != "Time limit exceeded" {
		t.Errorf("got status %q exit %d error %s, want timeout 124", got.Status, got.ExitCode, kilntest.Str(got.Error))
	}
	if got.Stdout != "started\n" {
		t.Errorf("stdout %q, want the output printed before the deadline", got.Stdout)
	}
	if took > 4*time.Second {
		t.Errorf("took %s for a 1s timeout", took)
	}
}

// Code that blocks the REPL's own alarm never yields: the host's hard deadline kills
// the container, the call returns soon after, and the pool replaces it.
func TestHardDeadlineKillsAndReplaces(t *testing.T) {
	waitWarm(t)
	before := srv.MustPool(t)
	start := time.Now()
	got := run(t, map[string]any{"code": "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])\nwhile True:\n    pass", "timeout": 1000})
	took := time.Since(start)
	if got.Status != "timeout" || got.ExitCode != 124 {
		t.Errorf("status %q exit %d, want timeout 124", got.Status, got.ExitCode)
	}
	// timeout 1s + grace 1s, plus a little for the HTTP round trip.
	if took < 2*time.Second || took > 4*time.Second {
		t.Errorf("returned after %s, want soon after the 2s hard deadline", took)
	}
	kilntest.WaitFor(t, 30*time.Second, "the killed sandbox to be removed and replaced", func() bool {
		c := srv.MustPool(t)
		return c.Removed > before.Removed && c.Ready == c.Target
	})
}

func TestStatelessStateCarriesOver(t *testing.T) {
	// "state": null asks for stateless mode with an empty namespace.
	first := run(t, map[string]any{"state": nil, "code": "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\ndef double(v):\n    return v * 2\ncounter = 10"})
	if first.State == nil || !first.HasState || first.StateSize == 0 {
		t.Fatalf("no state returned: %+v", first)
	}
	second := run(t, map[string]any{"code": "counter += 1\nint(double(df['a']).sum()) + counter", "state": *first.State})
	if second.Status != "ok" || kilntest.Str(second.Result) != "23" {
		t.Fatalf("second call: status %q result %s stderr %q, want ok 23", second.Status, kilntest.Str(second.Result), second.Stderr)
	}
	// A failed run hands back what it bound before the error, as a notebook does; with
	// on_error rollback, the state it was given.
	for _, tt := range []struct{ onError, want string }{{"", "999"}, {"rollback", "11"}} {
		body := map[string]any{"code": "counter = 999\n1/0", "state": *second.State}
		if tt.onError != "" {
			body["on_error"] = tt.onError
		}
		third := run(t, body)
		if third.Status != "error" || third.State == nil {
			t.Fatalf("third call: status %q, state %v", third.Status, third.State)
		}
		fourth := run(t, map[string]any{"code": "counter", "state": *third.State})
		if kilntest.Str(fourth.Result) != tt.want {
			t.Errorf("on_error %q: after a failed run counter is %s, want %s", tt.onError, kilntest.Str(fourth.Result), tt.want)
		}
	}
	noCapture := run(t, map[string]any{"state": nil, "code": "y = 1", "capture_state": false})
	if noCapture.State != nil || noCapture.HasState {
		t.Errorf("capture_state=false returned state %v", noCapture.State)
	}
}

// Every execution gets a container of its own, and nothing survives from one to the
// next. Under runc the container id is read from inside, from the cgroup path.
// gVisor shows no cgroup path (hiding the host is its point), so under runsc the
// sandbox is told apart by its REPL's string-hash seed: every container starts one
// interpreter with a random seed and never restarts it.
func TestEveryContainerServesOnce(t *testing.T) {
	const n = 6 // above the pool size of 2: some wait for a refill
	identity := "open('/proc/self/cgroup').read().strip().split('/')[-1][:64]"
	if kilntest.Runtime() == "runsc" {
		identity = "format(hash('kiln') & (2**64 - 1), 'x')"
	}
	code := "import pathlib\nmarker = pathlib.Path('/tmp/marker')\nseen = marker.exists()\nmarker.write_text('x')\n" +
		"print(seen, " + identity + ")"
	var mu sync.Mutex
	ids := map[string]bool{}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := run(t, map[string]any{"code": code})
			fields := strings.Fields(got.Stdout)
			if got.Status != "ok" || len(fields) != 2 {
				t.Errorf("status %q stdout %q stderr %q", got.Status, got.Stdout, got.Stderr)
				return
			}
			if fields[0] != "False" {
				t.Errorf("a marker from an earlier execution was visible")
			}
			mu.Lock()
			ids[fields[1]] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(ids) != n {
		t.Errorf("%d executions ran in %d distinct containers, want %d", n, len(ids), n)
	}
}

// waitWarm waits until the pool is full again, so that a test timing a run does not
// time the warm-up of its sandbox (seconds under gVisor) as well.
func waitWarm(t *testing.T) {
	t.Helper()
	kilntest.WaitFor(t, 90*time.Second, "a full pool", func() bool {
		p := srv.MustPool(t)
		return p.Ready == p.Target
	})
}
