// Package runtime runs the sandbox contract (sandbox/sandboxtest) against the real
// runtimes, with the real image and real Python: Docker under runc, or under gVisor with
// KILN_TEST_RUNTIME=runsc (make test-runsc), and Kubernetes with
// KILN_TEST_RUNTIME=kubernetes and the cluster of $KUBECONFIG (make test-k8s). The same
// suite runs against sandboxtest.Fake in the unit tests: what it proves there holds here.
package runtime

import (
	"context"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kilnsh/kiln/docker"
	"github.com/kilnsh/kiln/kube"
	"github.com/kilnsh/kiln/sandbox"
	"github.com/kilnsh/kiln/sandbox/sandboxtest"
	"github.com/kilnsh/kiln/test/kilntest"
)

// image is the sandbox image the contract starts; make image builds it, and make test-k8s
// imports it into the cluster's node.
const image = "kiln-python:latest"

// pythonCode is the contract's code for the image's REPL.
var pythonCode = sandboxtest.Code{
	Print: `print("kiln")`, Printed: "kiln\n",
	Set: "x = 41", Get: "print(x + 1)", Got: "42\n",
	Sleep: "import time\nprint('sleeping', flush=True)\ntime.sleep(30)",
	Exit:  "import os; os._exit(3)", ExitCode: 3,
	OOM: "blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))",
}

func TestContract(t *testing.T) {
	spec := kilntest.DefaultSpec(image)
	spec.MemoryMB = 256 + 32 // its warm heap on top: the OOM case reaches the limit sooner
	// No pre-imports: the contract is the runtime's, and six REPLs that import the whole
	// scientific stack take seconds each on a small host.
	spec.Env = sandbox.WithEnv(sandbox.WarmHeapVar+"=32", sandbox.PreloadVar+"=none")
	h := sandboxtest.Harness{Spec: spec, Code: pythonCode}
	if kilntest.OnKubernetes() {
		h.Open = openKube
		h.Settle = time.Minute
		h.Traits = sandbox.Traits{Isolation: "default"} // a Pod's limits are fixed
		// A Pod asking for a terabyte: no node of the test cluster can take it.
		huge := spec
		huge.MemoryMB = 1 << 20
		h.NoRoom = &huge
	} else {
		// The daemon resizes a running container, but not the sandbox gVisor holds.
		h.Traits = sandbox.Traits{Isolation: kilntest.Runtime(), Resizes: kilntest.Runtime() == "runc"}
		if err := kilntest.EnsureDocker(); err != nil {
			t.Fatalf("the Docker daemon: %v", err)
		}
		h.Open = openDocker
		h.MissingImage = "kiln-no-such-image:never"
	}
	sandboxtest.Run(t, h)
}

func options(t *testing.T) sandbox.Options {
	instance := kilntest.NewInstance()
	t.Logf("instance %s, runtime %s", instance, kilntest.Runtime())
	t.Cleanup(func() {
		// Independent of the runtime's own List: nothing of the instance is left.
		if left, err := kilntest.Containers(instance); err != nil || len(left) > 0 {
			t.Errorf("sandboxes of %s left after the suite: %v (err %v)", instance, left, err)
		}
	})
	return sandbox.Options{Instance: instance, Frames: kilntest.SandboxFrames, Log: slog.New(slog.DiscardHandler)}
}

// openDocker opens the local daemon, its sandboxes under runc or runsc as
// KILN_TEST_RUNTIME says.
func openDocker(t *testing.T) sandbox.Runtime {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, err := docker.Open(ctx, options(t), kilntest.DockerConfig())
	if err != nil {
		t.Fatalf("docker.Open: %v", err)
	}
	return rt
}

// openKube opens the cluster of $KUBECONFIG, its Pods in the suites' namespace, as the
// integration suites' kiln runs there (test/kilntest's Start): the images imported into
// the node, the sandboxes' network closed, a sliver of the node's CPU asked for each.
func openKube(t *testing.T) sandbox.Runtime {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := kube.Open(ctx, options(t), kube.Config{
		Namespace:       kilntest.KubeNamespace,
		NetworkPolicy:   "kiln-sandboxes-deny-all", // kiln's default KUBE_NETWORK_POLICY
		PullPolicy:      corev1.PullNever,
		MilliCPURequest: 20,
	})
	if err != nil {
		t.Fatalf("kube.Open: %v", err)
	}
	return rt
}
