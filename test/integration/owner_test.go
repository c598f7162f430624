package integration

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kilnsh/kiln/test/kilntest"
)

// KUBE_OWNER_POD on Kubernetes: every sandbox Pod names kiln's own Pod as its owner, and
// when that Pod goes (a kiln Pod that died or was replaced, whose INSTANCE_ID no later
// kiln carries) the cluster's garbage collector deletes them: warm ones and a live
// session's alike. kiln refuses to start when the named Pod is not in the sandboxes'
// namespace, where an owner reference that does not resolve would have every sandbox
// deleted as soon as it is made. Docker has no owners; the Docker pass checks that kiln
// refuses the setting there rather than ignoring it.
func TestSandboxPodsGoWithTheirOwner(t *testing.T) {
	missing := fmt.Sprintf("kiln-owner-missing-%d", os.Getpid())
	_, err := kilntest.Start(kilntest.Options{Env: []string{"POOL_SIZE=1", "DATA_DIR=" + t.TempDir(), "KUBE_OWNER_POD=" + missing}})
	want := "KUBE_OWNER_POD: reading the Pod " + missing
	if !kilntest.OnKubernetes() {
		want = "KUBE_OWNER_POD is Kubernetes'"
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("kiln with KUBE_OWNER_POD=%s: err %v, want a refusal at start saying %q", missing, err, want)
	}
	if !kilntest.OnKubernetes() {
		return
	}

	// The owner: any Pod of the namespace stands in for kiln's own (kiln runs outside the
	// test cluster, which has no Pod network).
	owner := fmt.Sprintf("kiln-owner-%d", os.Getpid())
	// It passes the restricted Pod Security Standard, as the namespace asks.
	overrides := `{"spec": {"securityContext": {"runAsNonRoot": true, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
		"containers": [{"name": "` + owner + `", "image": "kiln-python:latest", "imagePullPolicy": "Never", "command": ["sleep", "infinity"],
		"securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}}`
	if out, err := kilntest.Kubectl("run", owner, "--image=kiln-python:latest", "--image-pull-policy=Never", "--restart=Never",
		"--labels=kiln.test=owner", "--overrides="+overrides); err != nil {
		t.Fatalf("kubectl run %s: %v: %s", owner, err, out)
	}
	t.Cleanup(func() {
		kilntest.Kubectl("delete", "pod", owner, "--grace-period=0", "--force", "--ignore-not-found", "--wait=false")
	})
	var ownerPod corev1.Pod
	if err := kilntest.KubePod(owner, &ownerPod); err != nil {
		t.Fatal(err)
	}

	s, err := kilntest.Start(kilntest.Options{Env: []string{"POOL_SIZE=2", "DATA_DIR=" + t.TempDir(), "KUBE_OWNER_POD=" + owner}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(60 * time.Second)
	// A live session holds a Pod of its own, out of the pool.
	res := runOn(t, s, map[string]any{"code": "import pandas as pd\ndf = pd.DataFrame({'x': range(100_000)})\nprint(len(df))"})
	if res.Status != "ok" || res.Stdout != "100000\n" {
		t.Fatalf("the session's first call: %s %q %q", res.Status, res.Stdout, res.Stderr)
	}
	if err := s.WaitReady(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	pods, err := kilntest.Containers(s.Instance)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) < 3 {
		t.Fatalf("sandbox Pods %v, want the pool's 2 and the live session's", pods)
	}
	for _, name := range pods {
		var p corev1.Pod
		if err := kilntest.KubePod(name, &p); err != nil {
			t.Fatal(err)
		}
		refs := p.OwnerReferences
		if len(refs) != 1 || refs[0].Kind != "Pod" || refs[0].Name != owner || refs[0].UID != ownerPod.UID ||
			(refs[0].Controller != nil && *refs[0].Controller) || (refs[0].BlockOwnerDeletion != nil && *refs[0].BlockOwnerDeletion) {
			t.Errorf("Pod %s: ownerReferences %+v, want the Pod %s (uid %s) alone, neither controller nor blocking", name, refs, owner, ownerPod.UID)
		}
	}

	// The owner goes as a Node's eviction or a rollout would take kiln's Pod; kiln itself
	// stays up here, so that only the collector can have removed its Pods.
	if out, err := kilntest.Kubectl("delete", "pod", owner, "--grace-period=0", "--force", "--wait=false"); err != nil {
		t.Fatalf("deleting the owner: %v: %s", err, out)
	}
	deadline := time.Now().Add(90 * time.Second)
	for _, name := range pods {
		for {
			there, err := kilntest.SandboxExists(name)
			if err != nil {
				t.Fatal(err)
			}
			if !there {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sandbox Pod %s still there 90 s after its owner was deleted", name)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}
