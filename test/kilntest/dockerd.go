package kilntest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// DockerPIDFile is where the dockerd started by deploy/ensure-docker.sh keeps its pid.
const DockerPIDFile = "/var/run/docker.pid"

// DockerdPID returns the pid of the running dockerd, from its pid file: the suites that
// restart the daemon stop it by that pid and start it again with EnsureDocker.
func DockerdPID() (int, error) {
	b, err := os.ReadFile(DockerPIDFile)
	if err != nil {
		return 0, fmt.Errorf("read %s: %v (this needs the dockerd started by deploy/ensure-docker.sh)", DockerPIDFile, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !Alive(pid) {
		return 0, fmt.Errorf("%s names %q, which is not a running process", DockerPIDFile, b)
	}
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) != "dockerd" {
		return 0, fmt.Errorf("pid %d from %s is %q, not dockerd", pid, DockerPIDFile, comm)
	}
	return pid, nil
}

// Alive reports whether pid is a process that has not exited (a zombie has).
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses, which may hold spaces.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// EnsureDocker starts the daemon with the project's script unless it answers.
func EnsureDocker() error {
	if out, err := Docker("info", "--format", "{{.ServerVersion}}"); err == nil && strings.TrimSpace(out) != "" {
		return nil
	}
	out, err := exec.Command(filepath.Join(Root(), "deploy", "ensure-docker.sh")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("deploy/ensure-docker.sh: %v\n%s", err, out)
	}
	return nil
}
