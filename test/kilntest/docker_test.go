package kilntest

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The sweep removes the sandboxes of a test process that is gone, and leaves those of
// a live one (this process) and those of instance ids it did not make.
func TestSweepOrphans(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	create := func(instance string) string {
		out, err := exec.Command("docker", "create", "--label", "kiln.managed=true", "--label", "kiln.instance="+instance,
			"--network", "none", "kiln-python:latest").Output()
		if err != nil {
			t.Fatalf("docker create: %v", err)
		}
		id := strings.TrimSpace(string(out))
		t.Cleanup(func() { _, _ = Docker("rm", "-f", id) })
		return id
	}
	dead := create("test-" + strconv.Itoa(gone.Process.Pid) + "-" + randomSuffix())
	live := create(NewInstance())
	other := create("test-torn-" + randomSuffix())

	if err := sweepOrphans(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("docker", "ps", "-aq", "--no-trunc", "--filter", "label=kiln.managed=true").Output()
	if err != nil {
		t.Fatal(err)
	}
	left := strings.Fields(string(out))
	if slices.Contains(left, dead) {
		t.Errorf("the sandbox of a test process that is gone (pid %d) is still there", gone.Process.Pid)
	}
	if !slices.Contains(left, live) || !slices.Contains(left, other) {
		t.Errorf("the sweep removed a sandbox it should have left (live %v, other %v)", slices.Contains(left, live), slices.Contains(left, other))
	}
	if pid, ok := testPID(NewInstance()); !ok || pid != os.Getpid() {
		t.Errorf("testPID(NewInstance()) = %d, %v; want this process, %d", pid, ok, os.Getpid())
	}
}
