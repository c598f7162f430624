package kilntest

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// Main runs a package's tests against one shared kiln: it starts one with opts, its
// DATA_DIR a fresh temporary directory, sets *srv, runs m, and stops the kiln. The run
// fails when the kiln does not stop cleanly or leaves containers; a failed run prints
// the tail of the kiln's log. It returns the exit code for os.Exit.
func Main(m *testing.M, opts Options, srv **Server) int {
	dataDir, err := os.MkdirTemp("", "kiln-data-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dataDir)
	opts.Env = append(opts.Env, "DATA_DIR="+dataDir)
	s, err := Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting kiln:", err)
		return 1
	}
	*srv = s
	code := m.Run()
	if err := s.Stop(60 * time.Second); err != nil {
		fmt.Fprintf(os.Stderr, "kiln did not stop cleanly: %v\n", err)
		code = 1
	}
	left, err := Containers(s.Instance)
	if err != nil || len(left) > 0 {
		fmt.Fprintf(os.Stderr, "containers left after shutdown: %v (err %v)\n", left, err)
		code = 1
	}
	if code != 0 {
		logs := s.Logs()
		fmt.Fprintf(os.Stderr, "--- kiln log ---\n%s", logs[max(0, len(logs)-8000):])
	}
	return code
}
