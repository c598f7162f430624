package integration

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// kiln's Role may create Pods: in a namespace that admits Pods breaking the restricted Pod
// Security Standard, whoever took kiln over could start a privileged one. kiln refuses to
// start there, saying how to fix it, unless told otherwise; the suites' own namespace is
// labelled as production's (deploy/k8s/test.sh), and the chart labels its own
// (TestHelmChartInstalls).
func TestUnrestrictedNamespaceIsRefused(t *testing.T) {
	if !kilntest.OnKubernetes() {
		t.Skip("Pod Security is Kubernetes': this test runs in make test-k8s")
	}
	ns := fmt.Sprintf("kiln-unrestricted-%d", os.Getpid())
	mustKubectl(t, "create", "namespace", ns)
	t.Cleanup(func() { kilntest.Kubectl("delete", "namespace", ns, "--wait=false") })
	_, err := kilntest.Start(kilntest.Options{Env: []string{"POOL_SIZE=1", "DATA_DIR=" + t.TempDir(), "KUBE_NAMESPACE=" + ns}})
	if err == nil || !strings.Contains(err.Error(), "admits Pods that break the restricted Pod Security Standard") ||
		!strings.Contains(err.Error(), "pod-security.kubernetes.io/enforce=restricted") {
		t.Fatalf("kiln in an unlabelled namespace: err %v, want a refusal at start that says how to label it", err)
	}
	// Labelled baseline is not enough: baseline admits a container that may escalate.
	mustKubectl(t, "label", "namespace", ns, "pod-security.kubernetes.io/enforce=baseline")
	if _, err := kilntest.Start(kilntest.Options{Env: []string{"POOL_SIZE=1", "DATA_DIR=" + t.TempDir(), "KUBE_NAMESPACE=" + ns}}); err == nil ||
		!strings.Contains(err.Error(), "restricted Pod Security Standard") {
		t.Fatalf("kiln in a baseline namespace: err %v, want a refusal", err)
	}
	// Told otherwise, it starts.
	s, err := kilntest.Start(kilntest.Options{Env: []string{"POOL_SIZE=1", "DATA_DIR=" + t.TempDir(), "KUBE_NAMESPACE=" + ns,
		"KUBE_REQUIRE_RESTRICTED=false"}})
	if err != nil {
		t.Fatalf("kiln with KUBE_REQUIRE_RESTRICTED=false: %v", err)
	}
	if err := s.Stop(time.Minute); err != nil {
		t.Errorf("stopping kiln: %v", err)
	}
}
