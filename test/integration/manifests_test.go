package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/kilntest"
)

// The manifests of deploy/k8s/manifests, on the test cluster: the API server accepts every
// one of them (the Deployment in a server-side dry run only: its image is not on the node,
// and the node must not try to pull it), and kiln, holding nothing but the rights of their
// ServiceAccount, serves a session in their namespace, under its restricted Pod Security
// Standard and its NetworkPolicy. (kilntest.Kubectl names the suites' namespace; a later
// --namespace overrides it.) The Role also refuses what kiln has no use for. The
// ServiceAccount's rights come from impersonation: kiln runs outside the cluster, which has
// no Pod network, with a kubeconfig whose user acts as system:serviceaccount:kiln:kiln.
func TestShippedManifests(t *testing.T) {
	if !kilntest.OnKubernetes() {
		t.Skip("the manifests are Kubernetes': this test runs in make test-k8s")
	}
	dir := filepath.Join(kilntest.Root(), "deploy", "k8s", "manifests")
	kubectl := func(args ...string) string { t.Helper(); return mustKubectl(t, args...) }
	for _, f := range []string{"namespace.yaml", "rbac.yaml", "networkpolicy.yaml", "configmap.yaml", "service.yaml"} {
		kubectl("apply", "--namespace", "kiln", "--filename", filepath.Join(dir, f))
	}
	t.Cleanup(func() { kilntest.Kubectl("delete", "namespace", "kiln", "--wait=false") })
	kubectl("apply", "--namespace", "kiln", "--dry-run=server", "--filename", filepath.Join(dir, "deployment.yaml"))

	const sa = "system:serviceaccount:kiln:kiln"
	checkRights(t, sa, []right{
		{"create", "pods", "", "kiln", "yes"},
		{"delete", "pods", "", "kiln", "yes"},
		{"create", "pods", "exec", "kiln", "yes"},
		{"get", "networkpolicies.networking.k8s.io", "", "kiln", "yes"},
		{"get", "pods", "log", "kiln", "no"},
		{"create", "pods", "attach", "kiln", "no"},
		{"get", "secrets", "", "kiln", "no"},
		{"delete", "networkpolicies.networking.k8s.io", "", "kiln", "no"},
		{"update", "pods", "", "kiln", "no"},
		{"create", "pods", "", "default", "no"},
		{"list", "nodes", "", "kiln", "no"},
	})

	// A kubeconfig of the test cluster whose user acts as kiln's ServiceAccount.
	kc := actingAs(t, sa)

	s, err := kilntest.Start(kilntest.Options{Env: []string{"KUBECONFIG=" + kc, "KUBE_NAMESPACE=kiln", "POOL_SIZE=1",
		"DATA_DIR=" + t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Stop(60 * time.Second); err != nil {
			t.Errorf("stopping kiln: %v", err)
		}
		if left := strings.TrimSpace(kubectl("get", "pods", "--namespace", "kiln", "--selector", "kiln.managed=true", "--output", "name")); left != "" {
			t.Errorf("sandbox Pods left in kiln's namespace after it stopped: %s", left)
		}
	}()
	first := runOn(t, s, map[string]any{"code": "import pandas as pd\ndf = pd.DataFrame({'x': range(50_000)})\ndf['y'] = df.x * 2\nprint(df.y.sum())"})
	if first.Status != "ok" || first.Stdout != "2499950000\n" {
		t.Fatalf("a session in kiln's namespace: %s %q %q", first.Status, first.Stdout, first.Stderr)
	}
	second := runOn(t, s, map[string]any{"session_id": first.SessionID, "code": "print(len(df), df.y.iloc[-1])"})
	if second.Status != "ok" || second.Stdout != "50000 99998\n" {
		t.Errorf("its next call: %s %q %q", second.Status, second.Stdout, second.Stderr)
	}
	if pods := kubectl("get", "pods", "--namespace", "kiln", "--selector", "kiln.managed=true", "--output", "name"); strings.Count(pods, "pod/") < 1 {
		t.Errorf("no sandbox Pod in kiln's namespace while it serves: %q", pods)
	}
}

// actingAs writes a kubeconfig of the test cluster whose user acts as sa (a
// ServiceAccount's user name) and returns its path.
func actingAs(t *testing.T, sa string) string {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	raw, err := kilntest.Kubectl("config", "view", "--raw", "--minify", "--flatten")
	if err != nil {
		t.Fatalf("kubectl config view: %v: %s", err, raw)
	}
	// The one user's credentials, and "as" beside them (kubectl config set cannot set it).
	acting := strings.Replace(raw, "\n  user:\n", "\n  user:\n    as: "+sa+"\n", 1)
	if acting == raw {
		t.Fatalf("no user entry to act as %s in the kubeconfig:\n%s", sa, raw)
	}
	if err := os.WriteFile(kc, []byte(acting), 0o600); err != nil {
		t.Fatal(err)
	}
	if who, err := kilntest.Kubectl("--kubeconfig", kc, "auth", "whoami", "--output", "jsonpath={.status.userInfo.username}"); err != nil || who != sa {
		t.Fatalf("the kubeconfig acts as %q (%v), want %s", who, err, sa)
	}
	return kc
}

// right is a question to the API server's authorizer: may the user verb the resource
// (and subresource) in namespace; want is kubectl's answer, yes or no.
type right struct{ verb, resource, subresource, namespace, want string }

// checkRights asks the authorizer each question as sa.
func checkRights(t *testing.T, sa string, rights []right) {
	t.Helper()
	for _, c := range rights {
		args := []string{"auth", "can-i", c.verb, c.resource, "--as", sa, "--namespace", c.namespace} // the last --namespace wins
		if c.subresource != "" {
			args = append(args, "--subresource", c.subresource)
		}
		out, _ := kilntest.Kubectl(args...) // exit status 1 means "no"
		lines := strings.Fields(out)        // a warning may come first (nodes are not namespaced)
		if len(lines) == 0 || lines[len(lines)-1] != c.want {
			t.Errorf("may %s %s %s %s in %q? %q, want %q", sa, c.verb, c.resource, c.subresource, c.namespace, out, c.want)
		}
	}
}

// mustKubectl runs kubectl on the test cluster and fails the test when it fails.
func mustKubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := kilntest.Kubectl(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out
}
