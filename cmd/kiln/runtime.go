package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kilnsh/kiln/docker"
	"github.com/kilnsh/kiln/kube"
	"github.com/kilnsh/kiln/sandbox"
)

// The runtimes sandboxes can run on (RUNTIME).
const (
	RuntimeDocker     = docker.Name
	RuntimeKubernetes = kube.Name
)

// kubeLiveMax is LIVE_SESSIONS_MAX on Kubernetes when unset: the cluster's room is not
// kiln's to see, so a fixed number, which operations.md says to size.
const kubeLiveMax = 32

// opener opens a sandbox runtime from kiln's configuration; what every runtime is given
// is in o, what only this one needs it reads from c.
type opener func(ctx context.Context, c Config, o sandbox.Options) (sandbox.Runtime, error)

// gVisor is Docker's OCI runtime for gVisor (SANDBOX_RUNTIME).
const gVisor = "runsc"

// checker records a failed check of the configuration (Config.Validate).
type checker func(ok bool, format string, args ...any)

// runtimeKind is one sandbox runtime: how kiln opens it, and what cmd must know of it
// before it is open (the defaults and checks of the configuration). What it is once
// open, it says itself (sandbox.Runtime.Traits).
type runtimeKind struct {
	open opener
	// liveMax is LIVE_SESSIONS_MAX when unset; 0 derives it from this host's memory, which
	// holds the sandboxes.
	liveMax int
	// minMemoryMB is the SANDBOX_MEMORY_MB below which kiln warns at start; 0 for none.
	minMemoryMB func(c Config) int64
	// validate checks the settings only this runtime reads, and that others' are unset.
	validate func(c Config, check checker)
}

// runtimes are the sandbox runtimes kiln can run on, by the value of RUNTIME. A runtime
// is added here and nowhere else: above this table kiln knows only sandbox.Runtime.
var runtimes = map[string]runtimeKind{
	RuntimeDocker: {
		open: func(ctx context.Context, c Config, o sandbox.Options) (sandbox.Runtime, error) {
			return opened(docker.Open(ctx, o, docker.Config{OCIRuntime: c.SandboxRuntime, SocketDir: c.socketDir(), NoEgressPort: !c.SandboxPort}))
		},
		// gVisor's own kernel and the tmpfs it holds count against the limit: below the
		// default, a run that forks can take the whole sandbox down.
		minMemoryMB: func(c Config) int64 {
			if c.SandboxRuntime == gVisor {
				return 512
			}
			return 0
		},
		validate: func(c Config, check checker) {
			check(c.SandboxRuntime == "" || c.SandboxRuntime == "runc" || c.SandboxRuntime == gVisor, "SANDBOX_RUNTIME must be empty, runc or runsc, got %q", c.SandboxRuntime)
			// Named, it means "my sandboxes go when I do": silently ignored, it would
			// promise a cleanup that never happens.
			check(c.KubeOwnerPod == "", "KUBE_OWNER_POD is Kubernetes' (RUNTIME=kubernetes); Docker's sandboxes of a kiln that is gone are removed by the next kiln of its INSTANCE_ID")
		},
	},
	RuntimeKubernetes: {
		open: func(ctx context.Context, c Config, o sandbox.Options) (sandbox.Runtime, error) {
			selector, _ := parseSelector(c.KubeNodeSelector) // checked by Validate
			return opened(kube.Open(ctx, o, kube.Config{
				Namespace:         c.KubeNamespace,
				OwnerPod:          c.KubeOwnerPod,
				NetworkPolicy:     c.KubeNetworkPolicy,
				RequireRestricted: c.KubeRequireRestricted,
				PullPolicy:        corev1.PullPolicy(c.KubeImagePullPolicy),
				RuntimeClass:      c.KubeRuntimeClass,
				MilliCPURequest:   int64(c.KubeCPURequest * 1000),
				EphemeralMB:       c.KubeEphemeralMB,
				NodeSelector:      selector,
			}))
		},
		liveMax:     kubeLiveMax,
		minMemoryMB: func(Config) int64 { return 0 },
		validate: func(c Config, check checker) {
			check(c.ReplEnabled, "REPL_ENABLED=false is not supported with RUNTIME=kubernetes: sandbox Pods always run the warm REPL")
			check(c.SandboxRuntime == "", "SANDBOX_RUNTIME is Docker's; with RUNTIME=kubernetes, name a RuntimeClass in KUBE_RUNTIME_CLASS (gVisor's, say)")
			check(slices.Contains([]string{"Always", "IfNotPresent", "Never"}, c.KubeImagePullPolicy), "KUBE_IMAGE_PULL_POLICY must be Always, IfNotPresent or Never, got %q", c.KubeImagePullPolicy)
			check(c.KubeNetworkPolicy != "", "KUBE_NETWORK_POLICY must name the NetworkPolicy that closes the sandboxes' network")
			check(c.KubeEphemeralMB >= 0, "KUBE_SANDBOX_EPHEMERAL_MB must not be negative, got %d", c.KubeEphemeralMB)
			check(c.KubeCPURequest > 0 && c.KubeCPURequest <= c.SandboxCPUs, "KUBE_SANDBOX_CPU_REQUEST must be above 0 and at most SANDBOX_CPUS (%g), got %g", c.SandboxCPUs, c.KubeCPURequest)
			_, err := parseSelector(c.KubeNodeSelector)
			check(err == nil, "%v", err)
		},
	},
}

// opened returns a runtime just opened as a sandbox.Runtime: nil, not a nil pointer in
// an interface, when opening it failed.
func opened[R sandbox.Runtime](rt R, err error) (sandbox.Runtime, error) {
	if err != nil {
		return nil, err
	}
	return rt, nil
}

// newRuntime opens the runtime cfg names.
func (m *Main) newRuntime(ctx context.Context, frames sandbox.FrameLimits) (sandbox.Runtime, error) {
	rt, ok := runtimes[m.cfg.Runtime]
	if !ok {
		return nil, fmt.Errorf("RUNTIME %q is not a sandbox runtime", m.cfg.Runtime)
	}
	return rt.open(ctx, m.cfg, sandbox.Options{
		Instance: m.cfg.InstanceID,
		Frames:   frames,
		Log:      m.log,
	})
}

// spec is what a sandbox of image is, from the configuration, on every runtime.
func (m *Main) spec(image string) sandbox.Spec {
	c := m.cfg
	warmHeap := c.warmHeapMB()
	return sandbox.Spec{
		Image:     image,
		Env:       sandboxEnv(c.PreloadModules, warmHeap, c.egressEnv(c.egress)...),
		MemoryMB:  c.SandboxMemoryMB + warmHeap,
		MilliCPU:  int64(c.SandboxCPUs * 1000),
		PidsLimit: c.SandboxPidsLimit,
		TmpMB:     c.SandboxTmpMB,
		DataMB:    c.SandboxDataMB,
		NoFile:    1024,
		PerCall:   !c.ReplEnabled,
		Egress:    c.egress.On(),
	}
}

// warmHeapMB is the REPL's warm heap, on top of the code's memory; a REPL started per
// execution would touch it on the request's own time, so it gets none.
func (c Config) warmHeapMB() int64 {
	if !c.ReplEnabled {
		return 0
	}
	return max(c.SandboxWarmHeapMB, 0)
}

// parseSelector reads KUBE_NODE_SELECTOR: "key=value" pairs, comma-separated.
func parseSelector(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("KUBE_NODE_SELECTOR: %q is not key=value", pair)
		}
		out[k] = v
	}
	return out, nil
}

// startTimeout bounds connecting to the runtime at start.
const startTimeout = 30 * time.Second
