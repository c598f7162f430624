package kilntest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// NodeTest runs `node --test file` in dir (a folder of Root with its own node_modules,
// installed by the make target named in install), with env added to this process's
// environment, and fails t when a test there fails. need is a package the folder must
// hold, as a path under node_modules.
func NodeTest(t *testing.T, dir, file, need, install string, env ...string) {
	t.Helper()
	dir = filepath.Join(Root(), dir)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", need)); err != nil {
		t.Fatalf("%s is not installed in %s: run make %s (%v)", need, dir, install, err)
	}
	cmd := exec.CommandContext(t.Context(), "node", "--test", "--test-reporter=spec", file)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test %s:\n%s", file, out)
	if err != nil {
		t.Fatalf("node --test %s failed: %v", file, err)
	}
}
