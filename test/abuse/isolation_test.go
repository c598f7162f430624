package abuse

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kilnsh/kiln/test/kilntest"
)

// Cases 9 to 16 of security.md: what user code can see and reach from its sandbox,
// and what it leaves behind. Parallel, like cases 1 to 8.

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

// Case 11: no network: only the loopback interface exists, there is no route, a
// connection to an address outside fails at once (ENETUNREACH; EHOSTUNREACH under
// gVisor), and name resolution fails for want of any resolver. Nothing is sent anywhere:
// the checks read /sys and /proc, a connection with no route sends no packet, and a
// lookup with no interface and no nameserver cannot leave the sandbox.
//
// On Kubernetes the Pod also has an eth0 (down, on the test cluster), with the link's own
// route for its address and no other: no default route, no gateway. What must hold is
// that no connection can be made: to the internet, or to the API server's address, which
// the cluster gives every container (KUBERNETES_SERVICE_HOST); on the test cluster they
// fail for want of a route, where the network plugin enforces the NetworkPolicy they time
// out. Lookups go to the only nameserver, 127.0.0.1, the Pod's own loopback, where none
// listens.
func TestCase11NoNetwork(t *testing.T) {
	t.Parallel()
	var got struct {
		Interfaces []string          `json:"interfaces"`
		Routes     []string          `json:"routes"`
		Connect    map[string]string `json:"connect"`
		Resolve    string            `json:"resolve"`
		EAIAgain   bool              `json:"eai_again"`
	}
	observe(t, `
import json, os, socket
def connect(host, port):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port))
        return "connected"
    except socket.timeout:
        return "timed out"
    except OSError as e:
        return "errno %d" % e.errno
    finally:
        s.close()
targets = [("1.1.1.1", 443)]
if "KUBERNETES_SERVICE_HOST" in os.environ:
    targets.append((os.environ["KUBERNETES_SERVICE_HOST"], int(os.environ["KUBERNETES_SERVICE_PORT"])))
out = {"interfaces": sorted(os.listdir("/sys/class/net")),
       "routes": open("/proc/net/route").read().splitlines()[1:],
       "connect": {"%s:%d" % t: connect(*t) for t in targets}}
try:
    socket.getaddrinfo("example.invalid", 80)
    out["resolve"] = "resolved"
except socket.gaierror as e:
    out["resolve"] = "failed"
    out["eai_again"] = e.errno == socket.EAI_AGAIN
print(json.dumps(out))
`, &got)
	if kubernetes {
		if !slices.Equal(got.Interfaces, []string{"eth0", "lo"}) {
			t.Errorf("interfaces = %v, want [eth0 lo]", got.Interfaces)
		}
		// Iface, Destination, Gateway, Flags (hex): RTF_GATEWAY is 0x2.
		for _, r := range got.Routes {
			f := strings.Fields(r)
			flags, err := strconv.ParseUint(f[3], 16, 32)
			if err != nil || f[1] == "00000000" || f[2] != "00000000" || flags&0x2 != 0 {
				t.Errorf("IPv4 route %q, want only the link's own: no default route, no gateway", r)
			}
		}
		if len(got.Connect) != 2 {
			t.Errorf("connections tried: %v, want 1.1.1.1 and the API server (KUBERNETES_SERVICE_HOST)", got.Connect)
		}
		for to, res := range got.Connect {
			if res == "connected" {
				t.Errorf("connecting to %s: connected, want a failure", to)
			}
		}
	} else {
		if !slices.Equal(got.Interfaces, []string{"lo"}) {
			t.Errorf("interfaces = %v, want [lo]", got.Interfaces)
		}
		if len(got.Routes) != 0 {
			t.Errorf("IPv4 routes = %v, want none", got.Routes)
		}
		// gVisor's network stack says EHOSTUNREACH (113) for the same: no route.
		want := map[string]string{"1.1.1.1:443": "errno 101"} // ENETUNREACH
		if gvisor {
			want["1.1.1.1:443"] = "errno 113"
		}
		if !maps.Equal(got.Connect, want) {
			t.Errorf("connections = %v, want %v (no route)", got.Connect, want)
		}
	}
	// EAI_AGAIN: no resolver could be asked (a resolver saying "no such name" would
	// be EAI_NONAME, and would mean the sandbox reached one).
	if got.Resolve != "failed" || !got.EAIAgain {
		t.Errorf("name resolution: %s (EAI_AGAIN %v), want a failure with EAI_AGAIN", got.Resolve, got.EAIAgain)
	}
}

// Case 12: no secrets: nothing of kiln's configuration, its API keys above all, is in
// the sandbox's environment, in /proc/1/environ or any other process's, or in what bash's
// env prints.
//
// On Kubernetes PID 1 is the Pod's pause process, and the container's own process (sleep
// infinity) holds the Pod's environment as kiln made it; every container also gets the
// API server's address (KUBERNETES_SERVICE_HOST, KUBERNETES_PORT...), which is expected
// and no secret (case 11 shows it cannot be reached).
func TestCase12NoSecrets(t *testing.T) {
	t.Parallel()
	// kiln's own environment holds the keys, a canary and its configuration names.
	secrets := []string{keyA, keyB, canary, "API_KEYS", "KILN_ABUSE_CANARY", "DATA_DIR", "INSTANCE_ID", srv.Instance, dataDir}
	var got struct {
		Environ  map[string]string `json:"environ"`
		Proc1    string            `json:"proc1"`
		ProcSelf string            `json:"proc_self"`
		ProcAll  string            `json:"proc_all"`
		BashEnv  string            `json:"bash_env"`
	}
	// bash is started the way lang=bash starts it: a child of the REPL.
	observe(t, `
import json, os, subprocess
read = lambda p: open(p, "rb").read().decode("utf-8", "replace")
def environ_of(pid):
    try:
        return read("/proc/%s/environ" % pid)
    except OSError:  # gone since the listing
        return ""
print(json.dumps({"environ": dict(os.environ), "proc1": read("/proc/1/environ"),
                  "proc_self": read("/proc/self/environ"),
                  "proc_all": "\n".join(environ_of(p) for p in os.listdir("/proc") if p.isdigit()),
                  "bash_env": subprocess.run(["bash", "-c", "env"], capture_output=True, text=True).stdout}))
`, &got)

	environ, _ := json.Marshal(got.Environ)
	sources := map[string]string{
		"os.environ": string(environ), "/proc/1/environ": got.Proc1,
		"/proc/self/environ": got.ProcSelf, "every /proc/*/environ": got.ProcAll, "bash env": got.BashEnv,
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
//
// Under gVisor, creating a file in a directory the sandbox user may not write to fails
// with EACCES instead: gVisor's kernel checks the user's permission on the directory
// before it looks at the mount. A file in /var/tmp (mode 1777) and a new directory still
// get EROFS. Refused either way, and the root mount is read-only all the same (its
// options are checked below).
//
// On Kubernetes there is no service account token either (/var/run/secrets). The kubelet
// bind-mounts files of its own from the node's disk: /etc/hosts, and a termination-log
// file, which it makes writable by every user (0666) so that any container may leave a
// message there. What code wrote to it would land on the node's disk, outside the Pod's
// memory and its ephemeral-storage limit; docs/security.md promises that nothing of a run
// reaches the node's disk, so kiln mounts it in /root (0700, root's), and opening it must
// fail with EACCES.
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
                if stat.S_ISSOCK(os.lstat(p).st_mode) or "docker" in n or n == "serviceaccount":
                    socks.append(p)
            except OSError:
                pass
create = {p: errno_of(lambda: open(p, "x").close())
          for p in ["/x", "/usr/x", "/etc/x", "/var/x", "/var/tmp/x", "/opt/kiln/x", "/home/x", "/mnt/x", "/sys/x"]}
create.update({p: errno_of(lambda: os.mkdir(p)) for p in ["/newdir", "/usr/lib/newdir"]})
create["/tmp/ok"] = errno_of(lambda: open("/tmp/ok", "x").close())
create["/mnt/data/ok"] = errno_of(lambda: open("/mnt/data/ok", "x").close())
# Existing files: not writable either way (EACCES or EROFS). The runtime's own: /etc/hosts,
# /etc/hostname, /etc/resolv.conf and, on Kubernetes, the kubelet's termination log.
existing = ["/etc/passwd", "/usr/bin/python3", "/proc/sys/kernel/hostname", "/etc/hosts", "/etc/hostname",
            "/etc/resolv.conf"]
if "KUBERNETES_SERVICE_HOST" in os.environ:
    existing.append("/root/termination-log")
write = {p: errno_of(lambda: os.close(os.open(p, os.O_WRONLY | os.O_APPEND))) for p in existing}
write["/dev/termination-log"] = errno_of(lambda: os.close(os.open("/dev/termination-log", os.O_WRONLY | os.O_APPEND)))
mounts = [l.split()[1] + " " + l.split()[3] for l in open("/proc/mounts") if l.split()[1] in ("/", "/tmp", "/mnt/data", "/dev/shm", "/dev/mqueue")]
print(json.dumps({"sockets": socks, "create": create, "write": write, "mounts": mounts}))
`, &got)
	if len(got.Sockets) != 0 {
		t.Errorf("sockets, docker files or a service account found in the sandbox: %v", got.Sockets)
	}
	for p, errno := range got.Create {
		want := 30 // EROFS
		switch {
		case strings.HasPrefix(p, "/tmp/") || strings.HasPrefix(p, "/mnt/data/"):
			want = 0
		case gvisor && p != "/var/tmp/x" && p != "/newdir" && p != "/usr/lib/newdir":
			want = 13 // EACCES (see above)
		}
		if errno != want {
			t.Errorf("creating %s: errno %d, want %d", p, errno, want)
		}
	}
	tried := 7
	if kubernetes {
		tried++ // the termination log
		if errno := got.Write["/root/termination-log"]; errno != 13 {
			t.Errorf("opening the kubelet's termination log for writing: errno %d, want EACCES (13)", errno)
		}
	}
	if len(got.Write) != tried {
		t.Errorf("existing files tried: %v, want %d", got.Write, tried)
	}
	// Not where the kubelet would put it by default, nor anywhere else in /dev.
	if errno := got.Write["/dev/termination-log"]; errno != 2 {
		t.Errorf("opening /dev/termination-log for writing: errno %d, want ENOENT (2)", errno)
	}
	for p, errno := range got.Write {
		if p == "/dev/termination-log" {
			continue
		}
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
	//
	// gVisor mounts /dev/shm itself, noexec, with its size in bytes and neither nosuid
	// nor nodev, and has no /dev/mqueue at all. Still safe: nothing on /dev/shm can be
	// executed, so a set-uid bit there has no use (and no_new_privs is on); the device
	// nodes subtest below shows what nodev would have stopped. gVisor enforces the size.
	//
	// On Kubernetes they are the Pod's, in the IPC namespace its containers share (the
	// pause process's and the sandbox's), with the same options as Docker's.
	t.Run("IPC mounts", func(t *testing.T) {
		type mount struct {
			path  string
			flags []string
		}
		all := []string{"nosuid", "nodev", "noexec"}
		want := []mount{{"/dev/shm", all}, {"/dev/mqueue", all}}
		if gvisor {
			want = []mount{{"/dev/shm", []string{"noexec"}}}
			if opts, ok := mounts["/dev/mqueue"]; ok {
				t.Errorf("/dev/mqueue is mounted (%q), want none under gVisor", opts)
			}
		}
		for _, m := range want {
			opts := strings.Split(mounts[m.path], ",")
			for _, f := range m.flags {
				if !slices.Contains(opts, f) {
					t.Errorf("%s mount options = %q, want %s", m.path, mounts[m.path], f)
				}
			}
		}
		// runc shows the size in KiB ("size=65536k"), gVisor in bytes.
		size, err := strconv.ParseInt(tmpfsOptions(mounts["/dev/shm"])["size"], 10, 64)
		if err != nil || size <= 0 || size > 64<<20 {
			t.Errorf("/dev/shm options = %q: size %d bytes, want at most 64 MiB (Docker's default ShmSize)", mounts["/dev/shm"], size)
		}
	})
	// No device node gives the sandbox a host device. Under runc the user cannot make
	// one (no CAP_MKNOD, and the tmpfs mounts are nodev). gVisor lets it (this runsc
	// checks neither), but its kernel has only its own emulated devices: a node with a
	// host device's numbers (here /dev/mem, /dev/kmsg and a disk) opens nothing (ENXIO).
	t.Run("device nodes", func(t *testing.T) {
		var nodes map[string]string
		observe(t, `
import json, os, stat
def node(path, kind, major, minor):
    try:
        os.mknod(path, kind | 0o600, os.makedev(major, minor))
    except OSError as e:
        return "mknod errno %d" % e.errno
    try:
        os.close(os.open(path, os.O_RDONLY))
        return "opened"
    except OSError as e:
        return "open errno %d" % e.errno
print(json.dumps({p: node(p, kind, major, minor) for p, kind, major, minor in [
    ("/tmp/mem", stat.S_IFCHR, 1, 1), ("/mnt/data/mem", stat.S_IFCHR, 1, 1),
    ("/dev/shm/mem", stat.S_IFCHR, 1, 1), ("/tmp/kmsg", stat.S_IFCHR, 1, 11),
    ("/tmp/sda", stat.S_IFBLK, 8, 0)]}))
`, &nodes)
		want := "mknod errno 1" // EPERM
		if gvisor {
			want = "open errno 6" // ENXIO
		}
		if len(nodes) != 5 {
			t.Errorf("device nodes tried: %v, want 5", nodes)
		}
		for p, got := range nodes {
			if got != want {
				t.Errorf("device node %s: %s, want %s", p, got, want)
			}
		}
	})
}

// Case 14: filling /tmp or /mnt/data, in bytes or in inodes, is ENOSPC inside the
// sandbox: a normal error result.
//
// Under gVisor only bytes are: its tmpfs ignores nr_inodes and keeps no count of
// inodes. Every file and directory lives in gVisor's kernel memory, which the
// container's memory limit counts, so a flood of them ends as oom (in about 10 s at
// 512 MB). Safe: the memory limit holds, and the sandbox is removed like any other.
//
// On Kubernetes too only bytes are: a memory-backed emptyDir is a tmpfs with a size and
// the kernel's default inode cap (half the node's pages), far beyond what the memory limit
// allows (docs/security.md). Its inodes and directory entries are kernel memory charged to
// the container's cgroup, so a flood of them ends as oom, in under a second at 272 MB.
func TestCase14FillTmpfs(t *testing.T) {
	t.Parallel()
	// /tmp is filled in bytes, emptied, filled in inodes, emptied (each ENOSPC caught
	// and its errno printed); then /mnt/data is filled and the error left to end the run.
	fillTmp, want := "caught(fill_bytes, \"/tmp/b\")\ncaught(fill_inodes, \"/tmp/b\")\n", "28\n28\n"
	if gvisor || kubernetes {
		fillTmp, want = "caught(fill_bytes, \"/tmp/b\")\n", "28\n"
		t.Run("inodes until the memory limit", func(t *testing.T) {
			res := run(t, `
import os
name = "n" * 200
i = 0
while True:
    os.mkdir("/tmp/%s%d" % (name, i))
    i += 1
`, 60000)
			checkOOM(t, res)
		})
	}
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
`+fillTmp+`fill_bytes("/mnt/data")
`, 30000)
	checkOutcome(t, res, outcome{status: "error", exit: 1, err: "OSError: [Errno 28] No space left on device"})
	if res.Stdout != want {
		t.Errorf("errnos filling /tmp = %q, want %q (ENOSPC each time)", res.Stdout, want)
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
// session's state and files carry, and, within one session, its live container with its
// interpreter and files (never a process it started).
//
// The container is told apart by its id, read from /proc/self/cgroup. gVisor leaves
// that file empty (hiding the host is its point), so under gVisor it is told apart by
// its REPL's string-hash seed: each container starts one interpreter, with a random
// seed, and never restarts it.
func TestCase16NothingSurvives(t *testing.T) {
	t.Parallel()
	identity := "open('/proc/self/cgroup').read().split('/')[-1].strip()"
	if gvisor {
		identity = "format(hash('kiln') & (2**64 - 1), 'x')"
	}
	const plant = `
import os, subprocess
open("/tmp/marker", "w").write("x")
open("/mnt/data/marker.txt", "w").write("x")
MARKER = 1
subprocess.Popen(["sleep", "987"], start_new_session=True)
`
	look := `
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
                  "container": ` + identity + `}))
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
	plantAndID := plant + "print(" + identity + ")\n"

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
		same  bool // the same container: the session's live one
	}{
		{"stateless", stateless, map[string]any{"code": look, "state": nil}, seen{}, false},
		{"stateless with the state returned", stateless, map[string]any{"code": look, "state": *stateless.State}, seen{Global: true}, false},
		{"a new session", session, map[string]any{"code": look}, seen{}, false},
		{"the same session", session, map[string]any{"code": look, "session_id": session.SessionID}, seen{Tmp: true, Global: true, Data: true}, true},
		{"the same session without capture", session, map[string]any{"code": look, "session_id": session.SessionID, "capture_state": false},
			seen{Global: true, Data: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := lookAt(t, tt.body)
			firstID := strings.TrimSpace(tt.first.Stdout)
			if firstID == "" || got.Container == "" || (firstID == got.Container) != tt.same {
				t.Errorf("containers %q then %q, want the same one %v", firstID, got.Container, tt.same)
			}
			got.Container = ""
			if got != tt.want {
				t.Errorf("second run saw %+v, want %+v", got, tt.want)
			}
		})
	}
}
