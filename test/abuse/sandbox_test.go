package abuse

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kilnsh/kiln/test/kilntest"
)

// Cases 1 to 16 of security.md: what user code can do inside its sandbox. These run
// in parallel with each other, after the serial tests that count the pool's sandboxes.

// Case 1: a fork bomb is stopped by the pids limit; the run still gets a status in a
// 200, kiln is unaffected and the container is removed.
func TestCase01ForkBomb(t *testing.T) {
	t.Parallel()
	t.Run("python forks until the pids limit", func(t *testing.T) {
		// Children sleep and never return into the REPL; the REPL kills them after the run.
		var got struct {
			Forked  int    `json:"forked"`
			Errno   *int   `json:"errno"`
			PidsMax string `json:"pids_max"`
		}
		observe(t, `
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
`, &got)
		if got.Errno == nil || *got.Errno != 11 {
			t.Errorf("fork stopped with errno %v, want 11 (EAGAIN from the pids cgroup)", got.Errno)
		}
		if got.Forked < 1 || got.Forked >= pidsLimit {
			t.Errorf("forked %d children before failing, want between 1 and %d", got.Forked, pidsLimit-1)
		}
		if got.PidsMax != strconv.Itoa(pidsLimit) {
			t.Errorf("pids.max = %q, want %d", got.PidsMax, pidsLimit)
		}
	})
	t.Run("bash fork bomb", func(t *testing.T) {
		res := execAs(t, keyA, map[string]any{"lang": "bash", "state": nil, "timeout": 4000,
			"code": "bomb() { bomb | bomb & }; bomb\nsleep 1\necho survived\n"})
		if !slices.Contains([]string{"ok", "error", "timeout"}, res.Status) {
			t.Errorf("status = %q, want ok, error or timeout (a status in a 200)", res.Status)
		}
		if !strings.Contains(res.Stderr, "Resource temporarily unavailable") {
			t.Errorf("stderr does not show fork failing on the pids limit:\n%.600s", res.Stderr)
		}
		if res.Timing.ExecMS > 4000+graceMS+3000 {
			t.Errorf("exec_ms = %.0f, want the run over within its timeout and grace", res.Timing.ExecMS)
		}
		checkServes(t)
	})
}

// Case 2: a memory bomb ends with status oom, whether the kernel kills the REPL or
// Python's allocator raises MemoryError first.
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
			res := run(t, tt.code, 20000)
			checkOutcome(t, res, outcome{status: "oom", exit: 137, err: "Out of memory"})
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

// Case 8: the protocol's delimiters and a forged response, printed, written to fd 1
// whole or in pieces, or written to stderr, are only output text: the real response
// is the REPL's.
func TestCase08ForgedFrames(t *testing.T) {
	t.Parallel()
	forged := ">>> RESPONSE_START <<<\n" +
		`{"id":"x","type":"result","status":"ok","exit_code":42,"stdout":"FORGED","stderr":"","error":null,"result":"'forged'","state":null,"state_error":null,"files":[],"files_error":null,"truncated":false,"duration_ms":0}` +
		"\n>>> RESPONSE_END <<<\n>>> REQUEST_START <<<\n{\"op\":\"ping\"}\n>>> REQUEST_END <<<\n"
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

// Case 9: output of child processes and of C code is in the response.
func TestCase09ChildOutput(t *testing.T) {
	t.Parallel()
	res := run(t, `
import ctypes, os, subprocess
subprocess.run(["echo", "hi"])
os.system("echo from-system")
subprocess.run(["sh", "-c", "echo to-stderr >&2"])
libc = ctypes.CDLL(None)
libc.printf(b"from-c\n")
libc.fflush(None)
`, 0)
	checkOutcome(t, res, outcome{status: "ok"})
	if want := "hi\nfrom-system\nfrom-c\n"; res.Stdout != want {
		t.Errorf("stdout = %q, want %q", res.Stdout, want)
	}
	if want := "to-stderr\n"; res.Stderr != want {
		t.Errorf("stderr = %q, want %q", res.Stderr, want)
	}
}

// Case 10: invalid UTF-8, NUL bytes and terminal escapes in output still make a valid
// JSON body, with invalid bytes replaced and the rest kept.
func TestCase10InvalidUTF8(t *testing.T) {
	t.Parallel()
	r := postJSON(t, "/exec", keyA, map[string]any{"code": `
import os, sys
os.write(1, b"bad:\xff\xfe|nul:\x00|esc:\x1b[31mred\x1b[0m|bell:\x07|\n")
sys.stderr.write("err:\x00\x1b[2J\n")
open(b"/mnt/data/bad\xffname\x01.txt", "wb").write(b"hi")
b"\xff\x00"
`})
	if r.status != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", r.status, r.body)
	}
	if !utf8.Valid(r.body) || !json.Valid(r.body) {
		t.Fatalf("the body is not valid UTF-8 JSON: %q", r.body)
	}
	var res kilntest.ExecResponse
	if err := json.Unmarshal(r.body, &res); err != nil {
		t.Fatal(err)
	}
	checkOutcome(t, res, outcome{status: "ok"})
	if want := "bad:\uFFFD\uFFFD|nul:\x00|esc:\x1b[31mred\x1b[0m|bell:\x07|\n"; res.Stdout != want {
		t.Errorf("stdout = %q, want %q", res.Stdout, want)
	}
	if want := "err:\x00\x1b[2J\n"; res.Stderr != want {
		t.Errorf("stderr = %q, want %q", res.Stderr, want)
	}
	if want := `b'\xff\x00'`; kilntest.Str(res.Result) != want {
		t.Errorf("result = %q, want %q", kilntest.Str(res.Result), want)
	}
	if len(res.Files) != 1 {
		t.Fatalf("files = %+v, want the one file written", res.Files)
	}
	name := res.Files[0].Name
	if !utf8.ValidString(name) || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		t.Errorf("file name = %q, want valid UTF-8 without control characters", name)
	}
}

// Case 11: no network: only the loopback interface exists, there is no route, and
// name resolution fails for want of any resolver. Nothing is sent anywhere: the
// checks read /sys and /proc, and a lookup with no interface and no nameserver
// cannot leave the sandbox.
func TestCase11NoNetwork(t *testing.T) {
	t.Parallel()
	var got struct {
		Interfaces []string `json:"interfaces"`
		Routes     []string `json:"routes"`
		Resolve    string   `json:"resolve"`
		EAIAgain   bool     `json:"eai_again"`
	}
	observe(t, `
import json, os, socket
out = {"interfaces": sorted(os.listdir("/sys/class/net")),
       "routes": open("/proc/net/route").read().splitlines()[1:]}
try:
    socket.getaddrinfo("example.invalid", 80)
    out["resolve"] = "resolved"
except socket.gaierror as e:
    out["resolve"] = "failed"
    out["eai_again"] = e.errno == socket.EAI_AGAIN
print(json.dumps(out))
`, &got)
	if !slices.Equal(got.Interfaces, []string{"lo"}) {
		t.Errorf("interfaces = %v, want [lo]", got.Interfaces)
	}
	if len(got.Routes) != 0 {
		t.Errorf("IPv4 routes = %v, want none", got.Routes)
	}
	// EAI_AGAIN: no resolver could be asked (a resolver saying "no such name" would
	// be EAI_NONAME, and would mean the sandbox reached one).
	if got.Resolve != "failed" || !got.EAIAgain {
		t.Errorf("name resolution: %s (EAI_AGAIN %v), want a failure with EAI_AGAIN", got.Resolve, got.EAIAgain)
	}
}

// Case 12: no secrets: nothing of kiln's configuration, its API keys above all, is in
// the sandbox's environment, in /proc/1/environ, or in what bash's env prints.
func TestCase12NoSecrets(t *testing.T) {
	t.Parallel()
	// kiln's own environment holds the keys, a canary and its configuration names.
	secrets := []string{keyA, keyB, canary, "API_KEYS", "KILN_ABUSE_CANARY", "DATA_DIR", "INSTANCE_ID", srv.Instance, dataDir}
	var got struct {
		Environ  map[string]string `json:"environ"`
		Proc1    string            `json:"proc1"`
		ProcSelf string            `json:"proc_self"`
		BashEnv  string            `json:"bash_env"`
	}
	// bash is started the way lang=bash starts it: a child of the REPL.
	observe(t, `
import json, os, subprocess
read = lambda p: open(p, "rb").read().decode("utf-8", "replace")
print(json.dumps({"environ": dict(os.environ), "proc1": read("/proc/1/environ"),
                  "proc_self": read("/proc/self/environ"),
                  "bash_env": subprocess.run(["bash", "-c", "env"], capture_output=True, text=True).stdout}))
`, &got)

	environ, _ := json.Marshal(got.Environ)
	sources := map[string]string{
		"os.environ": string(environ), "/proc/1/environ": got.Proc1,
		"/proc/self/environ": got.ProcSelf, "bash env": got.BashEnv,
	}
	for name, text := range sources {
		// Each source must hold an environment, or the check below proves nothing.
		if !strings.Contains(text, "PATH") {
			t.Errorf("%s holds no PATH: the check read nothing: %.300q", name, text)
		}
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s contains %q", name, s)
			}
		}
	}
	if got.Environ["HOME"] != "/tmp" {
		t.Errorf("HOME = %q, want /tmp (not kiln's)", got.Environ["HOME"])
	}
}

// Case 13: no Docker socket and a read-only root filesystem: creating anything
// outside /tmp and /mnt/data fails with EROFS.
func TestCase13NoSocketReadOnlyRoot(t *testing.T) {
	t.Parallel()
	var got struct {
		Sockets []string       `json:"sockets"`
		Create  map[string]int `json:"create"`
		Write   map[string]int `json:"write"`
		Mounts  []string       `json:"mounts"`
	}
	observe(t, `
import json, os, stat
def errno_of(f):
    try:
        f()
        return 0
    except OSError as e:
        return e.errno
socks = []
for top in ["/run", "/var", "/tmp", "/mnt", "/home", "/root", "/srv", "/opt", "/etc", "/dev"]:
    for root, dirs, files in os.walk(top):
        for n in dirs + files:
            p = os.path.join(root, n)
            try:
                if stat.S_ISSOCK(os.lstat(p).st_mode) or "docker" in n:
                    socks.append(p)
            except OSError:
                pass
create = {p: errno_of(lambda: open(p, "x").close())
          for p in ["/x", "/usr/x", "/etc/x", "/var/x", "/var/tmp/x", "/opt/kiln/x", "/home/x", "/mnt/x", "/sys/x"]}
create.update({p: errno_of(lambda: os.mkdir(p)) for p in ["/newdir", "/usr/lib/newdir"]})
create["/tmp/ok"] = errno_of(lambda: open("/tmp/ok", "x").close())
create["/mnt/data/ok"] = errno_of(lambda: open("/mnt/data/ok", "x").close())
# Existing root-owned files: not writable either way (EACCES or EROFS).
write = {p: errno_of(lambda: os.close(os.open(p, os.O_WRONLY)))
         for p in ["/etc/passwd", "/usr/bin/python3", "/proc/sys/kernel/hostname"]}
mounts = [l.split()[1] + " " + l.split()[3] for l in open("/proc/mounts") if l.split()[1] in ("/", "/tmp", "/mnt/data", "/dev/shm", "/dev/mqueue")]
print(json.dumps({"sockets": socks, "create": create, "write": write, "mounts": mounts}))
`, &got)
	if len(got.Sockets) != 0 {
		t.Errorf("sockets or docker files found in the sandbox: %v", got.Sockets)
	}
	for p, errno := range got.Create {
		want := 30 // EROFS
		if strings.HasPrefix(p, "/tmp/") || strings.HasPrefix(p, "/mnt/data/") {
			want = 0
		}
		if errno != want {
			t.Errorf("creating %s: errno %d, want %d", p, errno, want)
		}
	}
	for p, errno := range got.Write {
		if errno != 13 && errno != 30 {
			t.Errorf("opening %s for writing: errno %d, want EACCES (13) or EROFS (30)", p, errno)
		}
	}
	mounts := map[string]string{}
	for _, m := range got.Mounts {
		p, opts, _ := strings.Cut(m, " ")
		mounts[p] = opts
	}
	if !strings.HasPrefix(mounts["/"], "ro,") {
		t.Errorf("root filesystem options = %q, want ro", mounts["/"])
	}
	// security.md asks for IpcMode=private, and with it Docker mounts a private
	// /dev/shm (tmpfs, ShmSize) and /dev/mqueue: the only writable places besides /tmp
	// and /mnt/data. docs/security.md says so. They must stay private, small (shm
	// pages count against the container's memory limit) and free of exec, suid and
	// devices.
	t.Run("IPC mounts", func(t *testing.T) {
		for _, p := range []string{"/dev/shm", "/dev/mqueue"} {
			opts := strings.Split(mounts[p], ",")
			for _, want := range []string{"nosuid", "nodev", "noexec"} {
				if !slices.Contains(opts, want) {
					t.Errorf("%s mount options = %q, want %s", p, mounts[p], want)
				}
			}
		}
		size := -1
		for _, o := range strings.Split(mounts["/dev/shm"], ",") {
			if v, ok := strings.CutPrefix(o, "size="); ok {
				size, _ = strconv.Atoi(strings.TrimSuffix(v, "k"))
			}
		}
		if size <= 0 || size > 64<<10 {
			t.Errorf("/dev/shm size = %dk, want at most 64 MiB (Docker's default ShmSize)", size)
		}
	})
}

// Case 14: filling /tmp or /mnt/data, in bytes or in inodes, is ENOSPC inside the
// sandbox: a normal error result.
func TestCase14FillTmpfs(t *testing.T) {
	t.Parallel()
	// /tmp is filled in bytes, emptied, filled in inodes, emptied (each ENOSPC caught
	// and its errno printed); then /mnt/data is filled and the error left to end the run.
	res := run(t, `
import errno, os, shutil
def fill_bytes(d):
    chunk = b"\0" * (1 << 20)
    n = 0
    while True:
        with open("%s/fill-%d" % (d, n), "wb") as f:
            for _ in range(4):
                f.write(chunk)
        n += 1
def fill_inodes(d):
    for i in range(100000):
        open("%s/i%d" % (d, i), "w").close()
def caught(fill, d):
    try:
        fill(d)
    except OSError as e:
        print(e.errno)
    for n in os.listdir(d):
        os.remove(os.path.join(d, n))
os.mkdir("/tmp/b")
caught(fill_bytes, "/tmp/b")
caught(fill_inodes, "/tmp/b")
fill_bytes("/mnt/data")
`, 30000)
	checkOutcome(t, res, outcome{status: "error", exit: 1, err: "OSError: [Errno 28] No space left on device"})
	if want := "28\n28\n"; res.Stdout != want {
		t.Errorf("errnos filling /tmp in bytes then inodes = %q, want %q (ENOSPC twice)", res.Stdout, want)
	}
}

// Case 15: a symlink in /mnt/data to /etc/passwd or /proc/self/environ (or any
// non-regular file) is never returned as a file.
func TestCase15Symlinks(t *testing.T) {
	t.Parallel()
	res := execAs(t, keyA, map[string]any{"code": `
import os
os.symlink("/etc/passwd", "passwd")
os.symlink("/proc/self/environ", "environ")
os.symlink("/etc", "etc")
os.mkdir("sub")
os.symlink("/etc/shadow", "sub/shadow")
os.mkfifo("fifo")
open("real.txt", "w").write("real")
`})
	checkOutcome(t, res, outcome{status: "ok"})
	var names []string
	for _, f := range res.Files {
		names = append(names, f.Name)
	}
	if !slices.Equal(names, []string{"real.txt"}) {
		t.Errorf("files returned = %v, want only [real.txt]", names)
	}
	r := do(t, http.MethodGet, "/files/"+res.SessionID+"?detail=simple", keyA, nil, nil)
	var listed []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(r.body, &listed); err != nil || r.status != http.StatusOK {
		t.Fatalf("GET /files: %d %v: %s", r.status, err, r.body)
	}
	if len(listed) != 1 || listed[0].Name != "real.txt" {
		t.Errorf("session files = %s, want only real.txt", r.body)
	}
}

// Case 16: nothing survives from one execution to the next (a file in /tmp, a file in
// /mnt/data, a global, a background process, the container itself) except what the
// session's state and files carry.
func TestCase16NothingSurvives(t *testing.T) {
	t.Parallel()
	const plant = `
import os, subprocess
open("/tmp/marker", "w").write("x")
open("/mnt/data/marker.txt", "w").write("x")
MARKER = 1
subprocess.Popen(["sleep", "987"], start_new_session=True)
`
	const look = `
import json, os
procs = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            procs.append(open("/proc/%s/cmdline" % pid, "rb").read().replace(b"\0", b" ").decode())
        except OSError:
            pass
print(json.dumps({"tmp": os.path.exists("/tmp/marker"), "data": os.path.exists("/mnt/data/marker.txt"),
                  "global": "MARKER" in globals(), "sleeper": any("sleep 987" in p for p in procs),
                  "container": open("/proc/self/cgroup").read().split("/")[-1].strip()}))
`
	type seen struct {
		Tmp       bool   `json:"tmp"`
		Data      bool   `json:"data"`
		Global    bool   `json:"global"`
		Sleeper   bool   `json:"sleeper"`
		Container string `json:"container"`
	}
	lookAt := func(t *testing.T, body map[string]any) seen {
		t.Helper()
		res := execAs(t, keyA, body)
		checkOutcome(t, res, outcome{status: "ok"})
		var s seen
		if err := json.Unmarshal([]byte(res.Stdout), &s); err != nil {
			t.Fatalf("decoding %q: %v", res.Stdout, err)
		}
		return s
	}
	// The container of the planting run, read the same way.
	plantAndID := plant + "print(open('/proc/self/cgroup').read().split('/')[-1].strip())\n"

	// Two planting runs: one stateless (its state comes back in the body), one in a
	// new session; each is followed by runs that may or may not carry things over.
	stateless := execAs(t, keyA, map[string]any{"code": plantAndID, "state": nil})
	checkOutcome(t, stateless, outcome{status: "ok"})
	session := execAs(t, keyA, map[string]any{"code": plantAndID})
	checkOutcome(t, session, outcome{status: "ok"})
	if stateless.State == nil || !session.HasState {
		t.Fatalf("planting runs: stateless state %v, session has_state %v; want state from both", stateless.State != nil, session.HasState)
	}
	tests := []struct {
		name  string
		first kilntest.ExecResponse
		body  map[string]any
		want  seen // Container is checked apart
	}{
		{"stateless", stateless, map[string]any{"code": look, "state": nil}, seen{}},
		{"stateless with the state returned", stateless, map[string]any{"code": look, "state": *stateless.State}, seen{Global: true}},
		{"a new session", session, map[string]any{"code": look}, seen{}},
		{"the same session", session, map[string]any{"code": look, "session_id": session.SessionID}, seen{Global: true, Data: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := lookAt(t, tt.body)
			if firstID := strings.TrimSpace(tt.first.Stdout); firstID == "" || got.Container == "" || firstID == got.Container {
				t.Errorf("containers %q then %q, want two different ones", firstID, got.Container)
			}
			got.Container = ""
			if got != tt.want {
				t.Errorf("second run saw %+v, want %+v", got, tt.want)
			}
		})
	}
}
