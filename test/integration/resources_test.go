package integration

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kilnsh/kiln/kube"
	"github.com/kilnsh/kiln/test/kilntest"
)

// limits lists the memory (bytes) and CPU (nanocores) limits of the shared server's
// sandboxes as the runtime holds them, each "MEMORY NANOCPUS": the daemon's (docker
// inspect), or the Pods' specs.
func limits(t *testing.T) []string {
	t.Helper()
	if kilntest.OnKubernetes() {
		got, err := kilntest.Kubectl("get", "pods", "--selector", "kiln.managed=true,kiln.instance="+kube.InstanceLabel(srv.Instance),
			"--output", `jsonpath={range .items[*]}{.spec.containers[0].resources.limits.memory} {.spec.containers[0].resources.limits.cpu}{"\n"}{end}`)
		if err != nil {
			t.Fatalf("kubectl get pods: %v: %s", err, got)
		}
		var out []string
		for line := range strings.Lines(got) {
			if f := strings.Fields(line); len(f) == 2 {
				mem, cpu := resource.MustParse(f[0]), resource.MustParse(f[1])
				out = append(out, fmt.Sprintf("%d %d", mem.Value(), cpu.MilliValue()*1_000_000))
			}
		}
		return out
	}
	ids, err := kilntest.Containers(srv.Instance)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, id := range ids {
		got, err := kilntest.Docker("inspect", "--format", "{{.HostConfig.Memory}} {{.HostConfig.NanoCpus}}", id)
		if err != nil {
			continue // removed since it was listed
		}
		out = append(out, strings.TrimSpace(got))
	}
	return out
}

// A request may ask for its sandbox's CPU and memory within the operator's bounds; past
// them is a 400 naming them. On Docker (runc) the warm sandbox is adjusted in place, and
// a live session holds those limits until its next call, which without them gets the
// defaults back. Under gVisor and on Kubernetes, where kiln does not resize a running
// sandbox, one of that size is started for the call; the session's next call without
// them resumes in a sandbox of the pool's size, and the one of its own size goes.
func TestPerRequestResources(t *testing.T) {
	const code = "import numpy as np\na = np.ones((1000, 1000))\nprint(a.sum())"
	defaults := limits(t)
	if len(defaults) == 0 {
		t.Fatal("no sandbox of the shared server")
	}
	def := defaults[0] // every warm sandbox has the pool's limits
	var defMem int64
	if _, err := fmt.Sscan(def, &defMem); err != nil {
		t.Fatalf("limits %q: %v", def, err)
	}
	// More than the pool's 256 MB: a sandbox of the REPL's own size plus a few MB has no room
	// left to capture its namespace, and the session's next call, resumed, would lack `a`.
	const asked = 320
	resized := fmt.Sprintf("%d 500000000", defMem+(asked-256)<<20)

	status, out := postExec(t, map[string]any{"code": code, "cpus": 0.5, "memory_mb": asked})
	if status != http.StatusOK || out.Stdout != "1000000.0\n" {
		t.Fatalf("cpus 0.5, memory_mb %d: %d %q %s", asked, status, out.Stdout, out.Message)
	}
	// The session's sandbox stays live with the limits its call asked for.
	if got := limits(t); !slices.Contains(got, resized) {
		t.Errorf("the sandboxes' limits %v, want one of %s (the live session's)", got, resized)
	}
	if again := run(t, map[string]any{"session_id": out.SessionID, "code": "print(a.shape)", "cpus": 0.5, "memory_mb": asked}); again.RuntimeStatus != "reused" {
		t.Errorf("the live session's next call of the same size: %s, want reused", again.RuntimeStatus)
	}
	next := run(t, map[string]any{"session_id": out.SessionID, "code": "print(a.shape)"})
	want := "reused" // resized back
	if kilntest.Runtime() != "runc" {
		want = "resumed" // in a sandbox of the pool's size
	}
	if next.RuntimeStatus != want || next.Stdout != "(1000, 1000)\n" {
		t.Errorf("the live session's next call without resources: %s %q (%s, state_error %s), want %s",
			next.RuntimeStatus, next.Stdout, kilntest.Str(next.Error), kilntest.Str(next.StateError), want)
	}
	var got []string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if got = limits(t); !slices.Contains(got, resized) {
			break
		}
	}
	if slices.Contains(got, resized) {
		t.Errorf("the sandboxes' limits %v after a call without resources, want the defaults (%s) only", got, def)
	}
	if status, out := postExec(t, map[string]any{"code": "print(1)", "memory_mb": 4096}); status != http.StatusBadRequest ||
		!strings.Contains(out.Message, "MAX_SANDBOX_MEMORY_MB") {
		t.Errorf("memory_mb over the bound: %d %q, want 400 naming MAX_SANDBOX_MEMORY_MB", status, out.Message)
	}
}

// postExec posts body to /exec on the shared server and returns the status and answer.
func postExec(t *testing.T, body map[string]any) (int, kilntest.ExecResponse) {
	t.Helper()
	body["lang"] = "py"
	var out kilntest.ExecResponse
	resp, err := srv.PostJSON("/exec", body, &out)
	if err != nil {
		t.Fatalf("POST /exec: %v", err)
	}
	return resp.StatusCode, out
}

// Capturing a live session's state never takes its sandbox over its memory: with 240 MB of
// floats in a 768 MB sandbox whose REPL holds about 230 MB of its own, a capture that held
// the pickle beside the compressed frame (as kiln's did) needed about 940 MB and ended the
// call as oom. Streamed, it holds the frame up to the 64 MB cap, names what it left out,
// and the session goes on live with the array.
func TestACaptureNeverTakesTheSandboxOverItsMemory(t *testing.T) {
	if kilntest.Runtime() != "runc" {
		return // 768 MB sandboxes beside the suite's: the runc pass of make test runs this
	}
	const code = "import numpy as np\nbig = np.random.default_rng(0).random(30_000_000)\nlabel = 'floats'\nprint(big.nbytes)"
	status, out := postExec(t, map[string]any{"code": code, "memory_mb": 768})
	if status != http.StatusOK || out.Status != "ok" || out.Stdout != "240000000\n" {
		t.Fatalf("240 MB of floats in 768 MB: %d %s %q %s", status, out.Status, out.Stdout, out.Message)
	}
	if out.StateError == nil || !strings.Contains(*out.StateError, "kept only while the session is live") ||
		!strings.Contains(*out.StateError, "big (") {
		t.Errorf("state_error %v, want big named as kept only while the session is live", out.StateError)
	}
	next := run(t, map[string]any{"session_id": out.SessionID, "memory_mb": 768,
		"code": "print(big.shape, round(float(big.mean()), 2), label)"})
	if next.Status != "ok" || next.RuntimeStatus != "reused" || next.Stdout != "(30000000,) 0.5 floats\n" {
		t.Errorf("the next call: %s %s %q", next.Status, next.RuntimeStatus, next.Stdout)
	}
}

// A capture keeps to the memory the sandbox has left (its cgroup's limit less what it
// uses), whatever the state cap allows. The session holds 120 MB of floats, under a 128 MB
// cap, and memory that is not state (an unpicklable holder of a large buffer) until 90 MB
// of its 1 GB are left: the floats' frame (about 115 MB) does not fit beside them. The
// capture names them as past the memory left and keeps the rest, the call answers ok, and
// the session goes on live with the floats, where a capture to the cap ended the finished
// call as oom.
func TestACaptureKeepsToTheMemoryLeft(t *testing.T) {
	if kilntest.Runtime() != "runc" {
		return // 1 GB sandboxes: the runc pass of make test runs this
	}
	s, err := kilntest.Start(kilntest.Options{Env: []string{"POOL_SIZE=1", "SANDBOX_MEMORY_MB=1024",
		"STATE_MAX_SIZE_MB=128", "STATE_MAX_RAW_MB=256", "DATA_DIR=" + t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(time.Minute)
	exec := func(body map[string]any) kilntest.ExecResponse {
		t.Helper()
		body["lang"] = "py"
		var out kilntest.ExecResponse
		if resp, err := s.PostJSON("/exec", body, &out); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /exec: %v %v %s", resp, err, out.Message)
		}
		return out
	}
	const code = `import numpy as np
def free():  # the limit less what is used, page cache that can go not counted (v2, else v1)
    for limit, used, stat, inactive in (("memory.max", "memory.current", "memory.stat", "inactive_file"),
            ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat", "total_inactive_file")):
        try:
            read = lambda name: open("/sys/fs/cgroup/" + name).read()
            cache = dict(line.split() for line in read(stat).splitlines())
            return int(read(limit)) - int(read(used)) + int(cache[inactive])
        except OSError:
            pass
def hold(buffer):  # a generator: never pickled, so its buffer is memory but not state
    yield buffer
big = np.random.default_rng(0).random(15_000_000)
label = "floats"
ballast = hold(np.ones(free() - (90 << 20), dtype=np.uint8))
next(ballast)
print(big.nbytes, free() >> 20 < 100)`
	out := exec(map[string]any{"code": code})
	if out.Status != "ok" || out.Stdout != "120000000 True\n" {
		t.Fatalf("120 MB of floats, 90 MB left: %s %q %s %s", out.Status, out.Stdout, out.Stderr, kilntest.Str(out.Error))
	}
	if out.StateError == nil || !strings.Contains(*out.StateError, "over the memory left in the sandbox") ||
		!strings.Contains(*out.StateError, "big (") || strings.Contains(*out.StateError, "label") {
		t.Errorf("state_error %v, want big named as over the memory left, label kept", kilntest.Str(out.StateError))
	}
	next := exec(map[string]any{"session_id": out.SessionID, "code": "print(big.shape, round(float(big.mean()), 2), label)"})
	if next.Status != "ok" || next.RuntimeStatus != "reused" || next.Stdout != "(15000000,) 0.5 floats\n" {
		t.Errorf("the next call: %s %s %q", next.Status, next.RuntimeStatus, next.Stdout)
	}
}
