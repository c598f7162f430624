package integration

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// The Helm chart, installed into the test cluster: the API server takes every object (the
// namespace Helm created is the chart's, labelled to enforce the restricted standard), and
// kiln, holding nothing but the rights of the chart's ServiceAccount and behind the
// chart's NetworkPolicy, serves a session in the release's namespace. The Deployment is
// installed with no replica: its image is not on the node, and the cluster has no Pod
// network for kiln itself (kiln runs outside it, acting as the ServiceAccount, as in
// TestShippedManifests). Rendering and linting are checked in test/helm.
func TestHelmChartInstalls(t *testing.T) {
	if !kilntest.OnKubernetes() {
		t.Skip("the chart is installed on Kubernetes: this test runs in make test-k8s (test/helm renders and lints it everywhere)")
	}
	const ns, release = "kiln-helm", "kiln"
	helm := func(args ...string) string {
		t.Helper()
		out, err := kilntest.RunHelm(t, args...)
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	kubectl := func(args ...string) string { t.Helper(); return mustKubectl(t, args...) }
	chart := filepath.Join(kilntest.Root(), "deploy", "helm", "kiln")
	// As docs/operations.md says: the namespace first (Helm keeps its release record there),
	// then the chart, which takes it over and labels it.
	kubectl("create", "namespace", ns)
	helm("install", release, chart, "--namespace", ns, "--take-ownership", "--wait", "--timeout", "60s",
		"--set", "replicaCount=0", "--set", "auth.apiKeys={helm-test-key}", "--set", "sandbox.pools=python:1")
	t.Cleanup(func() {
		if out, err := kilntest.RunHelm(t, "uninstall", release, "--namespace", ns, "--wait", "--timeout", "60s"); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
		kilntest.Kubectl("delete", "namespace", ns, "--wait=false")
	})
	if got := kubectl("get", "deployment", "kiln", "--namespace", ns, "--output", "jsonpath={.spec.template.spec.serviceAccountName}"); got != "kiln" {
		t.Errorf("the Deployment runs as %q", got)
	}
	// The chart labelled its namespace, which kiln checks at start (below, it starts).
	if got := kubectl("get", "namespace", ns, "--output", `jsonpath={.metadata.labels.pod-security\.kubernetes\.io/enforce}`); got != "restricted" {
		t.Errorf("the chart's namespace enforces %q, want restricted", got)
	}
	kubectl("get", "networkpolicy", "kiln-sandboxes-deny-all", "--namespace", ns)
	kubectl("get", "poddisruptionbudget", "kiln", "--namespace", ns)

	sa := "system:serviceaccount:" + ns + ":kiln"
	checkRights(t, sa, []right{
		{"create", "pods", "", ns, "yes"},
		{"watch", "pods", "", ns, "yes"},
		{"create", "pods", "exec", ns, "yes"},
		{"get", "networkpolicies.networking.k8s.io", "", ns, "yes"},
		{"get", "secrets", "", ns, "no"},
		{"create", "pods", "attach", ns, "no"},
	})

	// kiln with the chart's settings and nothing but its ServiceAccount's rights.
	kc := actingAs(t, sa)
	s, err := kilntest.Start(kilntest.Options{Key: "helm-test-key", Env: []string{"KUBECONFIG=" + kc, "KUBE_NAMESPACE=" + ns,
		"POOL_SIZE=1", "API_KEYS=helm-test-key", "DATA_DIR=" + t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Stop(60 * time.Second); err != nil {
			t.Errorf("stopping kiln: %v", err)
		}
	}()
	res := runOn(t, s, map[string]any{"code": "import numpy as np\nprint(int(np.arange(100_000).sum()))"})
	if res.Status != "ok" || res.Stdout != "4999950000\n" {
		t.Errorf("a run in the chart's namespace: %s %q %q", res.Status, res.Stdout, res.Stderr)
	}
}
