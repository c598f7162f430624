package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kilnsh/kiln/docker"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/kube"
	"github.com/kilnsh/kiln/pool"
)

// The runtimes sandboxes can run on (RUNTIME).
const (
	RuntimeDocker     = "docker"
	RuntimeKubernetes = "kubernetes"
)

// kubeLiveMax is LIVE_SESSIONS_MAX on Kubernetes when unset: the cluster's room is not
// kiln's to see, so a fixed number, which operations.md says to size.
const kubeLiveMax = 32

// sandbox is what the pools hold and lend, whichever runtime made it.
type sandbox interface {
	executor.Sandbox
	Remove(ctx context.Context) error
}

// sandboxRuntime is a sandbox runtime as kiln's wiring needs it: the Docker daemon, or a
// Kubernetes cluster.
type sandboxRuntime interface {
	// Name is the runtime's name in logs and in /health/detailed.
	Name() string
	Ping(ctx context.Context) error
	// ImageID returns the id of a sandbox image, or an error when the runtime does not
	// have it; a runtime that cannot tell (a cluster pulls on each node) names the image.
	ImageID(ctx context.Context, image string) (string, error)
	// Start makes a sandbox of image, ready to serve.
	Start(ctx context.Context, image string) (sandbox, error)
	// RemoveOrphans removes every sandbox of this instance.
	RemoveOrphans(ctx context.Context) (int, error)
	pool.Runtime // for the reaper: this instance's sandboxes, and their removal
	Close() error
}

// newRuntime connects to the runtime cfg names and checks what it needs there.
func (m *Main) newRuntime(ctx context.Context, frames executor.Limits) (sandboxRuntime, error) {
	cfg := m.cfg
	switch cfg.Runtime {
	case RuntimeKubernetes:
		kc, err := kube.New(ctx, kube.Config{
			Namespace: cfg.KubeNamespace, Instance: cfg.InstanceID, OwnerPod: cfg.KubeOwnerPod, Log: m.log,
			Frames: kube.FrameLimits(frameLimits(frames, cfg.SandboxDataMB<<20)),
			// The cluster's room is not kiln's to see: when the pool's next Pod finds none,
			// an idle live session gives up its own, so that live sessions never starve the
			// pool (on Docker, LIVE_SESSIONS_MAX keeps them within the host's memory).
			Starved: func() {
				if l := m.liveRef.Load(); l != nil {
					l.EvictOldest()
				}
			},
		})
		if err != nil {
			return nil, err
		}
		selector, _ := parseSelector(cfg.KubeNodeSelector) // checked by Validate
		return &kubeRuntime{c: kc, spec: m.kubeSpec(selector), policy: cfg.KubeNetworkPolicy}, nil
	default:
		dc, err := docker.New(m.log, frameLimits(frames, cfg.SandboxDataMB<<20))
		if err != nil {
			return nil, err
		}
		return &dockerRuntime{dc: dc, spec: m.spec(), instance: cfg.InstanceID}, nil
	}
}

// dockerRuntime runs sandboxes as containers of the local Docker daemon.
type dockerRuntime struct {
	dc       *docker.Client
	spec     docker.Spec
	instance string
}

func (d *dockerRuntime) Name() string                   { return RuntimeDocker }
func (d *dockerRuntime) Ping(ctx context.Context) error { return d.dc.Ping(ctx) }
func (d *dockerRuntime) Close() error                   { return d.dc.Close() }

func (d *dockerRuntime) ImageID(ctx context.Context, image string) (string, error) {
	id, err := d.dc.ImageID(ctx, image)
	if errors.Is(err, docker.ErrImageMissing) {
		return "", fmt.Errorf("%w: build it with 'make image'", err)
	}
	return id, err
}

func (d *dockerRuntime) Start(ctx context.Context, image string) (sandbox, error) {
	spec := d.spec
	spec.Image = image
	sb, err := d.dc.Start(ctx, spec)
	if err != nil {
		return nil, err // not a nil *docker.Sandbox in an interface
	}
	return sb, nil
}

func (d *dockerRuntime) RemoveOrphans(ctx context.Context) (int, error) {
	return d.dc.RemoveOrphans(ctx, d.instance)
}

func (d *dockerRuntime) List(ctx context.Context) ([]pool.Found, error) {
	list, err := d.dc.List(ctx, d.instance)
	if err != nil {
		return nil, err
	}
	out := make([]pool.Found, 0, len(list))
	for _, c := range list {
		out = append(out, pool.Found{ID: c.ID, State: c.State, Created: c.Created})
	}
	return out, nil
}

func (d *dockerRuntime) Remove(ctx context.Context, id string) error { return d.dc.Remove(ctx, id) }

// kubeRuntime runs sandboxes as Pods of a Kubernetes cluster.
type kubeRuntime struct {
	c      *kube.Client
	spec   kube.Spec
	policy string // the NetworkPolicy that closes the sandboxes' network
}

func (k *kubeRuntime) Name() string                   { return RuntimeKubernetes }
func (k *kubeRuntime) Ping(ctx context.Context) error { return k.c.Ping(ctx) }
func (k *kubeRuntime) Close() error                   { return k.c.Close() }

// ImageID names the image: each node pulls it (or holds it, with KUBE_IMAGE_PULL_POLICY
// Never), and a Pod that cannot have it fails its warm-up, which says why.
func (k *kubeRuntime) ImageID(_ context.Context, image string) (string, error) { return image, nil }

func (k *kubeRuntime) Start(ctx context.Context, image string) (sandbox, error) {
	spec := k.spec
	spec.Image = image
	sb, err := k.c.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return sb, nil
}

func (k *kubeRuntime) RemoveOrphans(ctx context.Context) (int, error) { return k.c.RemoveOrphans(ctx) }

func (k *kubeRuntime) List(context.Context) ([]pool.Found, error) {
	list, err := k.c.List()
	if err != nil {
		return nil, err
	}
	out := make([]pool.Found, 0, len(list))
	for _, p := range list {
		out = append(out, pool.Found{ID: p.Name, State: p.Phase, Created: p.Created})
	}
	return out, nil
}

func (k *kubeRuntime) Remove(ctx context.Context, id string) error { return k.c.Remove(ctx, id) }

// kubeSpec is the sandbox Pod's shape from the configuration: the same limits as a
// container's, those Kubernetes has no field for (open files, file size, core dumps) set
// by the REPL on itself.
func (m *Main) kubeSpec(selector map[string]string) kube.Spec {
	c := m.cfg
	env := sandboxEnv(c.PreloadModules, c.SandboxWarmHeapMB)
	env = append(env, "KILN_RLIMITS=nofile=1024,fsize="+strconv.FormatInt(c.SandboxDataMB<<20, 10)+",core=0")
	return kube.Spec{
		Image:           c.SandboxImage,
		PullPolicy:      corev1.PullPolicy(c.KubeImagePullPolicy),
		RuntimeClass:    c.KubeRuntimeClass,
		Instance:        c.InstanceID,
		Env:             env,
		MemoryMB:        c.SandboxMemoryMB + max(c.SandboxWarmHeapMB, 0),
		MilliCPU:        int64(c.SandboxCPUs * 1000),
		MilliCPURequest: int64(c.KubeCPURequest * 1000),
		TmpMB:           c.SandboxTmpMB,
		DataMB:          c.SandboxDataMB,
		EphemeralMB:     c.KubeEphemeralMB,
		NodeSelector:    selector,
	}
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

// ensurePolicy checks, at start, that the NetworkPolicy closing the sandboxes' network is
// there (creating it when it is missing and kiln may).
func (k *kubeRuntime) ensurePolicy(ctx context.Context) (created bool, err error) {
	return k.c.EnsureNetworkPolicy(ctx, k.policy)
}

// startTimeout bounds connecting to the runtime at start.
const startTimeout = 30 * time.Second
