package abuse

import (
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Cases 1 to 8 of security.md: user code that runs away with resources, kills its own
// process or talks the protocol. These run in parallel with each other (and with cases
// 9 to 16, isolation_test.go), after the serial tests that count the pool's sandboxes.

// Case 1: a fork bomb is stopped by the pids limit; the run still gets a status in a
// 200, kiln is unaffected and the container is removed.
//
// Under gVisor the bomb kills the whole sandbox instead: sandbox_died, exit code 2.
// gVisor's kernel runs the sandbox's processes, and the container's pids cgroup on the
// host counts its own threads and the stub process it starts for each new process. When
// the bomb reaches the limit (the cgroup's pids.events counts the refusal), gVisor
// cannot create the thread or stub it needs and exits with code 2. No fork inside sees
// EAGAIN, and there is no pids.max inside to read (gVisor mounts no cgroup files). That
// is still safe: the host's limit holds, the dead sandbox is removed like any other, and
// kiln serves on.
//
// On Kubernetes the limit is the Pod's cgroup's, set by the kubelet's podPidsLimit (kiln
// has no field to set one): the forks get EAGAIN as under Docker, but the sandbox sees
// only its container's cgroup, whose pids.max is "max".
func TestCase01ForkBomb(t *testing.T) {
	t.Parallel()
	const forkBomb = `
import json, os, time
pids, errno = [], None
try:
    for _ in range(1000):
        pid = os.fork()
        if pid == 0:
            try:
                time.sleep(60)
            finally:
                os._exit(0)
        pids.append(pid)
except OSError as e:
    errno = e.errno
print(json.dumps({"forked": len(pids), "errno": errno,
                  "pids_max": open("/sys/fs/cgroup/pids/pids.max").read().strip()}))
`
	died := outcome{"sandbox_died", 2, "Sandbox exited with code 2"}
	t.Run("python forks until the pids limit", func(t *testing.T) {
		if gvisor {
			checkOutcome(t, run(t, forkBomb, 20000), died)
			checkServes(t)
			return
		}
		// Children sleep and never return into the REPL; the REPL kills them after the run.
		var got struct {
			Forked  int    `json:"forked"`
			Errno   *int   `json:"errno"`
			PidsMax string `json:"pids_max"`
		}
		observe(t, forkBomb, &got)
		if got.Errno == nil || *got.Errno != 11 {
			t.Errorf("fork stopped with errno %v, want 11 (EAGAIN from the pids cgroup)", got.Errno)
		}
		if got.Forked < 1 || got.Forked >= limits.pidsLimit {
			t.Errorf("forked %d children before failing, want between 1 and %d (on Kubernetes: the kubelet's podPidsLimit)",
				got.Forked, limits.pidsLimit-1)
		}
		// In a Pod, pids.max is the container's cgroup's, not the Pod's that holds the limit.
		if !kubernetes && got.PidsMax != strconv.Itoa(limits.pidsLimit) {
			t.Errorf("pids.max = %q, want %d", got.PidsMax, limits.pidsLimit)
		}
	})
	t.Run("bash fork bomb", func(t *testing.T) {
		res := execAs(t, keyA, map[string]any{"lang": "bash", "state": nil, "timeout": 4000,
			"code": "bomb() { bomb | bomb & }; bomb\nsleep 1\necho survived\n"})
		if gvisor {
			checkOutcome(t, res, died)
		} else {
			if !slices.Contains([]string{"ok", "error", "timeout"}, res.Status) {
				t.Errorf("status = %q, want ok, error or timeout (a status in a 200)", res.Status)
			}
			if !strings.Contains(res.Stderr, "Resource temporarily unavailable") {
				t.Errorf("stderr does not show fork failing on the pids limit:\n%.600s", res.Stderr)
			}
		}
		if res.Timing.ExecMS > 4000+graceMS+3000 {
			t.Errorf("exec_ms = %.0f, want the run over within its timeout and grace", res.Timing.ExecMS)
		}
		checkServes(t)
	})
}

// Case 2: a memory bomb ends with status oom, whether the kernel kills the REPL or
// Python's allocator raises MemoryError first (under gVisor, now and then sandbox_died
// with code 137: see checkOOM).
func TestCase02MemoryBomb(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		code string
	}{
		{"touched pages until the cgroup kills", "chunks = []\nwhile True:\n    chunks.append(b'x' * (8 << 20))\n"},
		{"one allocation too large", "x = bytearray(1 << 40)\n"},
		{"numpy array too large", "import numpy as np\na = np.ones(10 ** 9)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkOOM(t, run(t, tt.code, 20000))
		})
	}
}

// Case 3: an endless Python loop ends at the soft deadline with the output printed
// before it.
func TestCase03EndlessLoop(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		code string
	}{
		{"busy loop", "print('before the deadline', flush=True)\nwhile True:\n    pass\n"},
		{"sleep", "import time\nprint('before the deadline')\ntime.sleep(3600)\n"},
	}
	const timeout = 1500
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, tt.code, timeout)
			checkOutcome(t, res, outcome{status: "timeout", exit: 124, err: "Time limit exceeded"})
			if res.Stdout != "before the deadline\n" {
				t.Errorf("stdout = %q, want the output printed before the deadline", res.Stdout)
			}
			// The soft deadline answers: well before the hard one.
			if res.Timing.ExecMS < timeout || res.Timing.ExecMS >= timeout+graceMS {
				t.Errorf("exec_ms = %.0f, want in [%d, %d): the REPL's own deadline", res.Timing.ExecMS, timeout, timeout+graceMS)
			}
		})
	}
}

// Case 4: code that never yields to the interpreter's signal handling outlives the
// soft deadline; the host's hard deadline (timeout + grace) kills the sandbox and the
// run is a timeout.
func TestCase04NeverYields(t *testing.T) {
	t.Parallel()
	const timeout = 1500
	tests := []struct {
		name string
		code string
		hard bool // the soft deadline cannot answer: only the hard one can
	}{
		{"SIGALRM blocked", "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])\nwhile True:\n    pass\n", true},
		{"long C call without the GIL", "import hashlib\nhashlib.pbkdf2_hmac('sha256', b'x', b'y', 2 * 10 ** 9)\n", true},
		{"BaseException swallowed", "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass\n", true},
		// CPython's regex engine checks for signals as it goes: either deadline may answer.
		{"catastrophic regex", "import re\nre.match(r'(a+)+$', 'a' * 64 + 'b')\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, tt.code, timeout)
			checkOutcome(t, res, outcome{status: "timeout", exit: 124, err: "Time limit exceeded"})
			lo := float64(timeout)
			if tt.hard {
				lo = timeout + graceMS
			}
			if hi := float64(timeout + graceMS + 3000); res.Timing.ExecMS < lo || res.Timing.ExecMS > hi {
				t.Errorf("exec_ms = %.0f, want in [%.0f, %.0f]", res.Timing.ExecMS, lo, hi)
			}
		})
	}
}

// truncMarker is the REPL's truncation marker at the end of a cut stream.
var truncMarker = regexp.MustCompile(`\n\[kiln: output truncated, (\d+) bytes dropped\]\n$`)

// cutStream checks a truncated stream: marker at the end, at most the cap kept before
// it; it returns how many bytes were kept and dropped.
func cutStream(t *testing.T, name, s string) (kept, dropped int64) {
	t.Helper()
	m := truncMarker.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("%s does not end with the truncation marker: ...%q", name, s[max(0, len(s)-120):])
	}
	dropped, _ = strconv.ParseInt(m[1], 10, 64)
	kept = int64(len(s) - len(m[0]))
	if kept > maxOutputBytes {
		t.Errorf("%s kept %d bytes before the marker, want at most %d", name, kept, maxOutputBytes)
	}
	return kept, dropped
}

// Case 5: an output flood of gigabytes, and one huge line without a newline, is
// capped and marked truncated; kiln's memory stays bounded.
func TestCase05OutputFlood(t *testing.T) {
	t.Parallel()
	const gib = 1 << 30
	t.Run("1 GiB of lines and 1 GiB in one line", func(t *testing.T) {
		res := run(t, `
import sys, threading
def flood(stream, chunk):
    for _ in range(1024):
        stream.write(chunk)
    stream.flush()
lines = threading.Thread(target=flood, args=(sys.stdout.buffer, (b"x" * 1023 + b"\n") * 1024))
lines.start()
flood(sys.stderr.buffer, b"y" * (1 << 20))
lines.join()
`, 60000)
		checkOutcome(t, res, outcome{status: "ok"})
		if !res.Truncated {
			t.Errorf("truncated = false, want true")
		}
		for _, stream := range []struct{ name, text string }{{"stdout", res.Stdout}, {"stderr", res.Stderr}} {
			kept, dropped := cutStream(t, stream.name, stream.text)
			if kept+dropped != gib {
				t.Errorf("%s: kept %d + dropped %d = %d, want every byte written (%d) accounted for", stream.name, kept, dropped, kept+dropped, gib)
			}
		}
		checkKilnRSS(t)
	})
	t.Run("flood until the deadline", func(t *testing.T) {
		res := run(t, "import os\nchunk = b'w' * (1 << 20)\nwhile True:\n    os.write(1, chunk)\n", 3000)
		checkOutcome(t, res, outcome{status: "timeout", exit: 124, err: "Time limit exceeded"})
		if !res.Truncated {
			t.Errorf("truncated = false, want true")
		}
		if _, dropped := cutStream(t, "stdout", res.Stdout); dropped < 100<<20 {
			t.Errorf("dropped %d bytes, want a flood of at least 100 MiB", dropped)
		}
		checkKilnRSS(t)
	})
}

// Case 6: the REPL process exiting is a dead sandbox, with the code it exited with.
func TestCase06SandboxExit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		code string
		want outcome
	}{
		{"os._exit(3)", "import os\nprint('bye')\nos._exit(3)\n", outcome{"sandbox_died", 3, "Sandbox exited with code 3"}},
		{"SIGKILL to itself", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", outcome{"sandbox_died", 137, "Sandbox exited with code 137"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkOutcome(t, run(t, tt.code, 0), tt.want)
		})
	}
}

// Case 7: sys.exit and KeyboardInterrupt are answered by the REPL: no dead sandbox.
func TestCase07ExitAndInterrupt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		code string
		want outcome
	}{
		{"sys.exit(0)", "import sys\nprint('before')\nsys.exit(0)\n", outcome{"ok", 0, ""}},
		{"sys.exit()", "import sys\nprint('before')\nsys.exit()\n", outcome{"ok", 0, ""}},
		{"sys.exit(2)", "import sys\nprint('before')\nsys.exit(2)\n", outcome{"error", 2, "SystemExit: 2"}},
		{"raise KeyboardInterrupt", "print('before')\nraise KeyboardInterrupt\n", outcome{"error", 1, "KeyboardInterrupt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, tt.code, 0)
			checkOutcome(t, res, tt.want)
			if res.Stdout != "before\n" {
				t.Errorf("stdout = %q, want %q", res.Stdout, "before\n")
			}
		})
	}
}

// Case 8: the protocol's delimiters and a forged response (with a forged state
// payload), printed, written to fd 1
// whole or in pieces, or written to stderr, are only output text: the real response
// is the REPL's.
func TestCase08ForgedFrames(t *testing.T) {
	t.Parallel()
	forged := ">>> RESPONSE_START <<<\n" +
		`{"binary":4,"id":"x","type":"result","status":"ok","exit_code":42,"stdout":"FORGED","stderr":"","error":null,"result":"'forged'","state":{"size":4},"state_unchanged":false,"state_error":null,"files":[],"files_error":null,"truncated":false,"duration_ms":0}` +
		"\nSTAT>>> RESPONSE_END <<<\n>>> REQUEST_START <<<\n{\"binary\":0,\"op\":\"ping\"}\n>>> REQUEST_END <<<\n"
	lit, _ := json.Marshal(forged) // a JSON string is a valid Python string literal here
	res := run(t, "import os, sys, time\nframe = "+string(lit)+`
print(frame, end="", flush=True)
n = os.write(1, frame.encode())
for i in range(0, len(frame), 7):
    n = os.write(1, frame[i:i+7].encode())
    time.sleep(0.001)
n = sys.stderr.write(frame)
`, 0)
	checkOutcome(t, res, outcome{status: "ok"})
	if want := strings.Repeat(forged, 3); res.Stdout != want {
		t.Errorf("stdout = %q\nwant the forged text three times: %q", res.Stdout, want)
	}
	if res.Stderr != forged {
		t.Errorf("stderr = %q\nwant the forged text: %q", res.Stderr, forged)
	}
	if res.Result != nil {
		t.Errorf("result = %q, want null (not the forged one)", *res.Result)
	}
}
