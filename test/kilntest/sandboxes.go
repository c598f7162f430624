package kilntest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/kilnsh/kiln/kube"
)

// KubeNamespace holds the suites' sandbox Pods on Kubernetes (make test-k8s creates it).
const KubeNamespace = "kiln-test"

// OnKubernetes reports whether the suites run their sandboxes as Pods of the cluster of
// $KUBECONFIG (KILN_TEST_RUNTIME=kubernetes, as make test-k8s sets it).
func OnKubernetes() bool { return Runtime() == "kubernetes" }

// Kubectl runs kubectl in KubeNamespace (KILN_K8S_KUBECTL, from deploy/k8s/cluster.sh env,
// or the one on PATH) and returns its combined output.
func Kubectl(args ...string) (string, error) {
	bin := os.Getenv("KILN_K8S_KUBECTL")
	if bin == "" {
		bin = "kubectl"
	}
	out, err := exec.Command(bin, append([]string{"--namespace", KubeNamespace}, args...)...).CombinedOutput()
	return string(out), err
}

// instanceSelector selects an instance's sandbox Pods.
func instanceSelector(instance string) string {
	return "kiln.managed=true,kiln.instance=" + kube.InstanceLabel(instance)
}

// kubePods lists the names of the Pods a selector selects, but those already being
// deleted.
func kubePods(selector string) ([]string, error) {
	out, err := Kubectl("get", "pods", "--selector", selector, "--output",
		`jsonpath={range .items[*]}{.metadata.name}{" "}{.metadata.deletionTimestamp}{"\n"}{end}`)
	if err != nil {
		return nil, fmt.Errorf("kubectl get pods: %w: %s", err, out)
	}
	var names []string
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) == 1 {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// KillSandbox ends a sandbox from outside kiln, as a crash or an operator would: docker
// kill, or the Pod deleted at once.
func KillSandbox(id string) (string, error) {
	if OnKubernetes() {
		return Kubectl("delete", "pod", id, "--grace-period=0", "--force", "--wait=false")
	}
	return Docker("kill", id)
}

// SandboxExec runs a command in a running sandbox from outside kiln (docker exec, kubectl
// exec) and returns its combined output; err is set when it exits non-zero.
func SandboxExec(id string, args ...string) (string, error) {
	if OnKubernetes() {
		return Kubectl(append([]string{"exec", id, "--container", "sandbox", "--"}, args...)...)
	}
	return Docker(append([]string{"exec", id}, args...)...)
}

// SandboxExists reports whether a sandbox is still there (of any state, but not being
// deleted).
func SandboxExists(id string) (bool, error) {
	if OnKubernetes() {
		out, err := Kubectl("get", "pod", id, "--ignore-not-found", "--output", "jsonpath={.metadata.name}{.metadata.deletionTimestamp}")
		if err != nil {
			return false, fmt.Errorf("kubectl get pod: %w: %s", err, out)
		}
		return strings.TrimSpace(out) == id, nil
	}
	out, err := Docker("ps", "-aq", "--no-trunc", "--filter", "id="+id)
	if err != nil {
		return false, fmt.Errorf("docker ps: %w: %s", err, out)
	}
	return strings.TrimSpace(out) != "", nil
}

// KubePod returns a sandbox Pod as the API server holds it, for the tests that check its
// shape (the hardening).
func KubePod(id string, into any) error {
	out, err := Kubectl("get", "pod", id, "--output", "json")
	if err != nil {
		return fmt.Errorf("kubectl get pod %s: %w: %s", id, err, out)
	}
	return json.Unmarshal([]byte(out), into)
}

// WhoAmICode is Python that sets sandbox_ref to what names, from inside, the sandbox it
// runs in: the container's id (Docker), or its Pod's uid (Kubernetes), read from the
// mounts (the kubelet's /etc/hosts and termination log are files of the Pod's directory;
// its memory-backed volumes show no path); "unknown" when neither shows. SandboxID turns
// it into the sandbox's id.
const WhoAmICode = `import re as _re
_mounts = open("/proc/self/mountinfo").read()
_ids = _re.findall(r"/containers/([0-9a-f]{64})/", _mounts) or _re.findall(r"/pods/([0-9a-f-]{36})/", _mounts)
sandbox_ref = _ids[0] if _ids else "unknown"
`

// SandboxRefPattern matches what WhoAmICode finds.
const SandboxRefPattern = `[0-9a-f]{64}|[0-9a-f-]{36}`

// SandboxID returns the id of the sandbox WhoAmICode named ref: the container id as it is,
// or the name of the Pod with that uid.
func SandboxID(ref string) (string, error) {
	if !OnKubernetes() {
		return ref, nil
	}
	out, err := Kubectl("get", "pods", "--selector", "kiln.managed=true", "--output",
		`jsonpath={range .items[?(@.metadata.uid=="`+ref+`")]}{.metadata.name}{end}`)
	if err != nil || strings.TrimSpace(out) == "" {
		return "", fmt.Errorf("no sandbox Pod with uid %s: %v %s", ref, err, out)
	}
	return strings.TrimSpace(out), nil
}
