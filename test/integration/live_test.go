package integration

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// Live sessions (on by default): a session's calls run in one interpreter, with the
// stored state as the fallback.

func TestLiveSessionKeepsItsInterpreter(t *testing.T) {
	first := run(t, map[string]any{"code": "import threading\nlock = threading.Lock()\ngen = (i for i in range(3))\nnext(gen)"})
	if first.RuntimeStatus != "new" || kilntest.Str(first.Result) != "0" {
		t.Fatalf("first: runtime %q, result %s; want new, 0", first.RuntimeStatus, kilntest.Str(first.Result))
	}
	if want := "kept only while the session is live (unpicklable): lock (lock), gen (generator)"; kilntest.Str(first.StateError) != want {
		t.Errorf("state_error %s, want %s", kilntest.Str(first.StateError), want)
	}
	next := run(t, map[string]any{"session_id": first.SessionID, "code": "next(gen), lock.locked()"})
	if next.RuntimeStatus != "reused" || kilntest.Str(next.Result) != "(1, False)" {
		t.Errorf("next: runtime %q, result %s (%s); want reused, (1, False)", next.RuntimeStatus, kilntest.Str(next.Result), kilntest.Str(next.Error))
	}
}

func TestLiveSessionFiles(t *testing.T) {
	first := run(t, map[string]any{"code": "open('a.txt', 'w').write('a')"})
	sid := first.SessionID
	second := run(t, map[string]any{"session_id": sid, "code": "import os\nprint(open('a.txt').read())\nos.remove('a.txt')"})
	if second.RuntimeStatus != "reused" || second.Stdout != "a\n" || !slices.Equal(second.DeletedFiles, []string{"a.txt"}) {
		t.Fatalf("second: runtime %q stdout %q deleted %v, want reused, a, [a.txt]", second.RuntimeStatus, second.Stdout, second.DeletedFiles)
	}
	resp, body, err := srv.Request(http.MethodGet, "/files/"+sid, nil, nil)
	if err != nil || resp.StatusCode != http.StatusOK || strings.Contains(string(body), "a.txt") {
		t.Errorf("files of the session: %v %s, want no a.txt", err, body)
	}
	third := run(t, map[string]any{"session_id": sid, "code": "import os\nsorted(os.listdir('.'))"})
	if third.RuntimeStatus != "reused" || kilntest.Str(third.Result) != "[]" {
		t.Errorf("third: runtime %q, files %s; want reused, []", third.RuntimeStatus, kilntest.Str(third.Result))
	}
}

// A live sandbox that dies between calls: the next call resumes from the stored state,
// which holds what could be pickled.
func TestLiveSandboxKilledResumes(t *testing.T) {
	marker := "/tmp/kiln-test-" + kilntest.NewMarker()
	first := run(t, map[string]any{"code": "x = 41\ngen = (i for i in [1])\nopen('" + marker + "', 'w').close()"})
	killLiveSandbox(t, marker)
	next := run(t, map[string]any{"session_id": first.SessionID, "code": "x + 1, 'gen' in globals()"})
	if next.RuntimeStatus != "resumed" || kilntest.Str(next.Result) != "(42, False)" {
		t.Errorf("after the kill: runtime %q, result %s (%s); want resumed, (42, False)", next.RuntimeStatus, kilntest.Str(next.Result), kilntest.Str(next.Error))
	}
}

func TestLiveSessionFaults(t *testing.T) {
	for _, tt := range []struct {
		name, code  string
		body        map[string]any
		wantStatus  string
		wantRuntime string // of the call after
		wantX       string
	}{
		// The REPL's own deadline interrupts the code: the interpreter stays, with what
		// the cell bound before.
		{"soft timeout", "import time\nx = 2\ntime.sleep(30)", map[string]any{"timeout": 1000}, "timeout", "reused", "2"},
		// Code that swallows the interrupt outlives the hard deadline: its sandbox is
		// killed, and the session resumes from the state before the call.
		{"hard timeout", "x = 2\nwhile True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass",
			map[string]any{"timeout": 500}, "timeout", "resumed", "1"},
		{"sandbox died", "import os\nx = 2\nos.kill(os.getpid(), 9)", nil, "sandbox_died", "resumed", "1"},
		{"rollback", "x = 2\n1 / 0", map[string]any{"on_error": "rollback"}, "error", "resumed", "1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			first := run(t, map[string]any{"code": "x = 1"})
			body := map[string]any{"session_id": first.SessionID, "code": tt.code}
			for k, v := range tt.body {
				body[k] = v
			}
			if failed := run(t, body); failed.Status != tt.wantStatus || failed.RuntimeStatus != "reused" {
				t.Fatalf("the call: %s (%s), runtime %q; want %s, reused", failed.Status, kilntest.Str(failed.Error), failed.RuntimeStatus, tt.wantStatus)
			}
			after := run(t, map[string]any{"session_id": first.SessionID, "code": "x"})
			if after.RuntimeStatus != tt.wantRuntime || kilntest.Str(after.Result) != tt.wantX {
				t.Errorf("after: runtime %q, x = %s; want %s, %s", after.RuntimeStatus, kilntest.Str(after.Result), tt.wantRuntime, tt.wantX)
			}
		})
	}
}

// Calls of one session sent at once run one after the other, each seeing the last's
// names: no update is lost, no second copy of the session runs.
func TestLiveSessionCallsTakeTurns(t *testing.T) {
	sid := run(t, map[string]any{"code": "n = 0"}).SessionID
	var wg sync.WaitGroup
	results := make([]string, 3)
	for i := range results {
		wg.Go(func() {
			var out kilntest.ExecResponse
			resp, err := srv.PostJSON("/exec", map[string]any{"session_id": sid, "code": "import time\ntime.sleep(0.5)\nn += 1\nn"}, &out)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("call %d: %v %v %s", i, err, resp, out.Message)
				return
			}
			results[i] = kilntest.Str(out.Result)
		})
	}
	wg.Wait()
	slices.Sort(results)
	if !slices.Equal(results, []string{"1", "2", "3"}) {
		t.Errorf("the calls saw n = %v, want 1, 2 and 3", results)
	}
}

// Another language runs in a sandbox of its own pool with the session's files, and
// leaves the live Python as it was.
func TestOtherLanguageLeavesTheLivePythonAlone(t *testing.T) {
	first := run(t, map[string]any{"code": "gen = (i for i in range(5))\nnext(gen)\nopen('p.txt', 'w').write('py')"})
	sh := run(t, map[string]any{"session_id": first.SessionID, "lang": "bash", "code": "cat p.txt; echo sh > s.txt"})
	if sh.Stdout != "py" || sh.RuntimeStatus != "resumed" {
		t.Fatalf("bash: stdout %q, runtime %q; want py, resumed", sh.Stdout, sh.RuntimeStatus)
	}
	py := run(t, map[string]any{"session_id": first.SessionID, "code": "next(gen), open('s.txt').read()"})
	if py.RuntimeStatus != "reused" || kilntest.Str(py.Result) != "(1, 'sh\\n')" {
		t.Errorf("python after: runtime %q, result %s (%s); want reused, (1, 'sh\\n')", py.RuntimeStatus, kilntest.Str(py.Result), kilntest.Str(py.Error))
	}
}

func TestStatelessCallsStaySingleUse(t *testing.T) {
	code := "import os\nseen = os.path.exists('/tmp/been-here')\nopen('/tmp/been-here', 'w').close()\nseen"
	for i := range 2 {
		r := run(t, map[string]any{"code": code, "state": nil})
		if kilntest.Str(r.Result) != "False" || r.RuntimeStatus != "new" {
			t.Errorf("stateless call %d: saw another call's file %s, runtime %q; want a fresh sandbox (False, new)", i, kilntest.Str(r.Result), r.RuntimeStatus)
		}
	}
}

// containerWith returns the id of the instance's container that holds the file at path.
// killLiveSandbox kills the live sandbox that holds the file at marker, and returns once
// kiln has heard of the death (the attach stream's end, or the Pod's deletion through the
// watch, which may lag the kubectl that deleted it): a death kiln has not heard of yet is
// one during the next call, sandbox_died.
func killLiveSandbox(t *testing.T, marker string) {
	t.Helper()
	id := containerWith(t, marker)
	died := srv.Live(t).Ended["died"]
	if out, err := kilntest.KillSandbox(id); err != nil {
		t.Fatalf("killing sandbox %s: %v: %s", id, err, out)
	}
	kilntest.WaitFor(t, 10*time.Second, "kiln to see the live sandbox dead", func() bool {
		return srv.Live(t).Ended["died"] > died
	})
}

func containerWith(t *testing.T, path string) string {
	t.Helper()
	ids, err := kilntest.Containers(srv.Instance)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := kilntest.SandboxExec(id, "test", "-e", path); err == nil {
			return id
		}
	}
	t.Fatalf("no container of %s holds %s", srv.Instance, path)
	return ""
}

// Live sandboxes are shared fairly: one caller opening session after session under
// LIVE_SESSIONS_MAX ends its own older ones, never another caller's within its share,
// and QUOTA_LIVE_SESSIONS bounds what one caller holds.
func TestLiveSessionsAreSharedAcrossCallers(t *testing.T) {
	s, err := kilntest.Start(kilntest.Options{Key: keyA, Env: []string{"POOL_SIZE=2", "DATA_DIR=" + t.TempDir(),
		"API_KEYS=" + keyA + "," + keyB, "LIVE_SESSIONS_MAX=3", "QUOTA_LIVE_SESSIONS=2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(time.Minute)
	as := func(key string, body map[string]any) kilntest.ExecResponse {
		t.Helper()
		b, _ := json.Marshal(body)
		resp, raw, err := s.Request(http.MethodPost, "/exec", bytes.NewReader(b), http.Header{"Content-Type": {"application/json"}, "X-Api-Key": {key}})
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /exec as %s: %v %s", key, err, raw)
		}
		var out kilntest.ExecResponse
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	frame := "import numpy as np, pandas as pd\ndf = pd.DataFrame(np.random.default_rng(1).normal(size=(20_000, 8)))\nprint(len(df))"
	b := as(keyB, map[string]any{"code": frame})
	var sessionsA []string
	for range 5 {
		sessionsA = append(sessionsA, as(keyA, map[string]any{"code": frame}).SessionID)
	}
	again := as(keyB, map[string]any{"session_id": b.SessionID, "code": "round(float(df.values.sum()), 3) == round(float(df.sum().sum()), 3)"})
	if again.RuntimeStatus != "reused" || kilntest.Str(again.Result) != "True" {
		t.Errorf("B's session after A opened 5: runtime %q, result %s; want reused, True", again.RuntimeStatus, kilntest.Str(again.Result))
	}
	// A holds at most its quota of 2: its most recent two are live, the first resumes.
	if got := as(keyA, map[string]any{"session_id": sessionsA[4], "code": "len(df)"}); got.RuntimeStatus != "reused" {
		t.Errorf("A's last session: runtime %q, want reused", got.RuntimeStatus)
	}
	if got := as(keyA, map[string]any{"session_id": sessionsA[0], "code": "len(df)"}); got.RuntimeStatus != "resumed" || kilntest.Str(got.Result) != "20000" {
		t.Errorf("A's first session: runtime %q, result %s; want resumed, 20000", got.RuntimeStatus, kilntest.Str(got.Result))
	}
	live := s.Live(t)
	if live.Ended["quota"] < 3 {
		t.Errorf("live sessions ended %v, want at least 3 of A's for its quota", live.Ended)
	}
}

// A live call answers before its state is stored (state_pending), with a real
// DataFrame and 8 MB of floats in the session (this suite's sandboxes have 256 MB): the
// state is stored a moment later, so that a sandbox that dies after that resumes with
// the call's names.
func TestALiveCallAnswersBeforeItsStateIsStored(t *testing.T) {
	marker := "/tmp/kiln-test-" + kilntest.NewMarker()
	first := run(t, map[string]any{"code": "import numpy as np, pandas as pd\nrng = np.random.default_rng(0)\n" +
		"df = pd.DataFrame({'a': np.arange(200_000), 'b': rng.random(200_000), 'c': rng.choice(['x', 'y', 'z'], 200_000)})\n" +
		"arr = rng.random(1_000_000)\nopen('" + marker + "', 'w').close()"})
	if first.Status != "ok" || first.StatePending || !first.HasState {
		t.Fatalf("a session's first call: %s (%s), pending %v, has_state %v (%s); want its state stored before the answer",
			first.Status, kilntest.Str(first.Error), first.StatePending, first.HasState, kilntest.Str(first.StateError))
	}
	sid := first.SessionID
	for i := range 3 {
		res := run(t, map[string]any{"session_id": sid, "code": "print(1)"})
		if !res.StatePending || res.RuntimeStatus != "reused" || res.Stdout != "1\n" {
			t.Fatalf("call %d: pending %v, runtime %s, stdout %q; want a pending answer from the live sandbox", i, res.StatePending, res.RuntimeStatus, res.Stdout)
		}
	}
	if res := run(t, map[string]any{"session_id": sid, "code": "y = df['b'].sum() + arr.sum()\ndf.loc[0, 'a'] = -1"}); !res.StatePending {
		t.Fatal("the call that changed the names is not pending")
	}
	// GET /state/{id}/info stores the pending namespace first: it is the newest.
	resp, body, err := srv.Request(http.MethodGet, "/state/"+sid+"/info", nil, nil)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"exists":true`) {
		t.Fatalf("state info: %v %v %s", resp, err, body)
	}
	killLiveSandbox(t, marker)
	next := run(t, map[string]any{"session_id": sid, "code": "round(y) > 0, int(df.loc[0, 'a']), df.shape"})
	if next.RuntimeStatus != "resumed" || kilntest.Str(next.Result) != "(True, -1, (200000, 3))" {
		t.Errorf("after the kill: runtime %q, result %s (%s); want resumed with the last call's names",
			next.RuntimeStatus, kilntest.Str(next.Result), kilntest.Str(next.Error))
	}
}

// A call that answered keeps what it bound whatever its sandbox does next: the call
// right after it kills the sandbox (os._exit, out of memory, a crash in C, the hard
// deadline), sent as soon as the answer is in, and the call after that resumes with the
// answered call's names. The session holds a DataFrame and 8 MB of floats, so that the
// capture after the answer takes a while.
func TestAnAnsweredCallSurvivesTheNextCallKillingItsSandbox(t *testing.T) {
	for _, tt := range []struct {
		name, code string
		timeout    int
		want       string
	}{
		{"os._exit", "import os; os._exit(3)", 0, "sandbox_died"},
		{"out of memory", "hog = b'x' * (600 << 20)", 0, "oom"},
		{"segfault", "import ctypes; ctypes.string_at(0)", 0, "sandbox_died"},
		{"hard deadline", "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass", 500, "timeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			first := run(t, map[string]any{"code": "import numpy as np, pandas as pd\nrng = np.random.default_rng(0)\n" +
				"df = pd.DataFrame({'a': np.arange(200_000), 'b': rng.random(200_000)})\narr = rng.random(1_000_000)\nx = 1"})
			sid := first.SessionID
			kept := run(t, map[string]any{"session_id": sid, "code": "keep = 41\ndf.loc[0, 'a'] = -7"})
			if kept.Status != "ok" || !kept.StatePending || kept.RuntimeStatus != "reused" {
				t.Fatalf("keep = 41: %s, pending %v, runtime %s; want an ok pending answer from the live sandbox", kept.Status, kept.StatePending, kept.RuntimeStatus)
			}
			body := map[string]any{"session_id": sid, "code": tt.code}
			if tt.timeout > 0 {
				body["timeout"] = tt.timeout
			}
			if died := run(t, body); died.Status != tt.want {
				t.Fatalf("the killing call: %s (%s), want %s", died.Status, kilntest.Str(died.Error), tt.want)
			}
			next := run(t, map[string]any{"session_id": sid, "code": "keep + 1, int(df.loc[0, 'a']), x"})
			if next.RuntimeStatus != "resumed" || kilntest.Str(next.Result) != "(42, -7, 1)" {
				t.Errorf("after the sandbox died: runtime %q, result %s (%s, state_error %s); want resumed with (42, -7, 1)",
					next.RuntimeStatus, kilntest.Str(next.Result), kilntest.Str(next.Error), kilntest.Str(next.StateError))
			}
		})
	}
}
