package integration

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

// readLimits prints the sandbox's cgroup limits, as the code inside sees them.
const readLimits = "print(open('/sys/fs/cgroup/memory.max').read().strip(), open('/sys/fs/cgroup/cpu.max').read().strip())"

// A request may ask for its sandbox's CPU and memory within the operator's bounds: on
// Docker (runc) the warm sandbox is adjusted, and a live session's next call without them
// gets the defaults back; past the bounds is a 400 naming them. Under gVisor and on
// Kubernetes, where kiln does not resize a running sandbox, asking for other limits is a
// 400 that says so.
func TestPerRequestResources(t *testing.T) {
	if kilntest.Runtime() != "runc" {
		status, out := postExec(t, map[string]any{"code": "print(1)", "cpus": 0.5, "memory_mb": 192})
		if status != http.StatusBadRequest || !strings.Contains(out.Message, "resizes a running sandbox") {
			t.Errorf("resources under %s: %d %q, want 400 saying the runtime does not resize", kilntest.Runtime(), status, out.Message)
		}
		return
	}
	base := run(t, map[string]any{"code": readLimits})
	defMem, defCPU, ok := strings.Cut(strings.TrimSpace(base.Stdout), " ")
	if !ok || base.Status != "ok" {
		t.Fatalf("the default limits: %q %s", base.Stdout, kilntest.Str(base.Error))
	}
	status, out := postExec(t, map[string]any{"code": readLimits, "cpus": 0.5, "memory_mb": 192})
	if status != http.StatusOK {
		t.Fatalf("cpus 0.5, memory_mb 192: %d %s", status, out.Message)
	}
	mem, cpu, _ := strings.Cut(strings.TrimSpace(out.Stdout), " ")
	dm, _ := strconv.ParseInt(defMem, 10, 64)
	if m, _ := strconv.ParseInt(mem, 10, 64); m != dm-(256-192)<<20 || cpu != "50000 100000" {
		t.Errorf("limits %q %q, want memory %d (64 MB under the default %s) and cpu 50000 100000", mem, cpu, dm-(256-192)<<20, defMem)
	}
	// The session's next call, without resources, runs with the defaults again.
	next := run(t, map[string]any{"session_id": out.SessionID, "code": readLimits})
	if next.RuntimeStatus != "reused" || strings.TrimSpace(next.Stdout) != defMem+" "+defCPU {
		t.Errorf("the live session's next call: %s %q, want reused with the defaults %s %s", next.RuntimeStatus, next.Stdout, defMem, defCPU)
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
