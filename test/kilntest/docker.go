package kilntest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Containers lists the ids of the sandboxes of an instance (every state), through the
// docker command line, independent of kiln's own code; on Kubernetes, the names of its
// Pods, through kubectl.
func Containers(instance string) ([]string, error) {
	if OnKubernetes() {
		return kubePods(instanceSelector(instance))
	}
	out, err := exec.Command("docker", "ps", "-aq", "--no-trunc",
		"--filter", "label=kiln.managed=true", "--filter", "label=kiln.instance="+instance).Output()
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// Docker runs a docker command and returns its combined output.
func Docker(args ...string) (string, error) {
	out, err := exec.Command("docker", args...).CombinedOutput()
	return string(out), err
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// NewInstance is an instance id for a server or runtime this process starts. It names the test
// process, so that a later run can tell when nobody is left to remove its sandboxes.
func NewInstance() string { return fmt.Sprintf("test-%d-%s", os.Getpid(), randomSuffix()) }

var sweepOnce sync.Once

// removeOrphans removes, once per test process, the sandboxes of test servers whose
// test process is gone. A run killed outright (SIGKILL to the test and its kiln, as
// when the machine's session ends) leaves them, and their instance ids never start
// again, so no kiln's own start-up sweep would find them.
func removeOrphans() { sweepOnce.Do(func() { _ = sweepOrphans() }) }

func sweepOrphans() error {
	if OnKubernetes() {
		return sweepKubeOrphans()
	}
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label=kiln.managed=true",
		"--format", `{{.ID}} {{.Label "kiln.instance"}}`).Output()
	if err != nil {
		return err
	}
	var ids []string
	for line := range strings.Lines(string(out)) {
		id, instance, _ := strings.Cut(strings.TrimSpace(line), " ")
		if pid, ok := testPID(instance); ok && syscall.Kill(pid, 0) == syscall.ESRCH {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if out, err := Docker(append([]string{"rm", "-f"}, ids...)...); err != nil {
		return fmt.Errorf("docker rm: %w: %s", err, out)
	}
	return nil
}

// testPID is the test process named in an instance id made by newInstance.
func testPID(instance string) (int, bool) {
	rest, ok := strings.CutPrefix(instance, "test-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
	return pid, err == nil && pid > 0
}

// NewMarker returns a random name, for a test to find its own things by.
func NewMarker() string { return randomSuffix() + randomSuffix() }

// sweepKubeOrphans is sweepOrphans for the Pods of KubeNamespace.
func sweepKubeOrphans() error {
	out, err := Kubectl("get", "pods", "--selector", "kiln.managed=true", "--output",
		`jsonpath={range .items[*]}{.metadata.name}{" "}{.metadata.labels.kiln\.instance}{"\n"}{end}`)
	if err != nil {
		return fmt.Errorf("kubectl get pods: %w: %s", err, out)
	}
	var names []string
	for line := range strings.Lines(out) {
		name, instance, _ := strings.Cut(strings.TrimSpace(line), " ")
		if pid, ok := testPID(instance); ok && syscall.Kill(pid, 0) == syscall.ESRCH {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	if out, err := Kubectl(append([]string{"delete", "pod", "--grace-period=0", "--force", "--wait=false"}, names...)...); err != nil {
		return fmt.Errorf("kubectl delete: %w: %s", err, out)
	}
	return nil
}
