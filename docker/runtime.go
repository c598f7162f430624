package docker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/sandbox"
)

// Name is the runtime's name (RUNTIME=docker).
const Name = "docker"

// removeTimeout bounds one container create or removal.
const removeTimeout = 30 * time.Second

// Config is what the Docker runtime needs beyond sandbox.Options.
type Config struct {
	// OCIRuntime is the daemon's runtime for sandboxes: "" for its default (runc), "runsc"
	// for gVisor.
	OCIRuntime string
	// SocketDir, when set, is where each sandbox that may reach the egress proxy
	// (Spec.Egress) gets a Unix socket of its own, mounted into it: a path the daemon sees
	// as kiln does. Empty: the REPL's connections travel as net frames on the attach
	// stream only, as they do under gVisor.
	SocketDir string
	// NoEgressPort keeps kiln from listening in each sandbox's own network namespace
	// for the code's proxy connections (see netns.go), which it does by default when it
	// may (runc, kiln on the host with CAP_SYS_ADMIN): the socket or the frames then.
	NoEgressPort bool
}

// Runtime makes sandboxes as containers of the local Docker daemon.
type Runtime struct {
	api       *client.Client
	log       *slog.Logger
	frames    sandbox.FrameLimits
	instance  string
	oci       string
	socketDir string
	noSockets atomic.Bool // the daemon could not mount socketDir: egress goes as frames
	ports     atomic.Bool // kiln listens in each egress sandbox's namespace (netns.go)
}

var _ sandbox.Runtime = (*Runtime)(nil)

// Open connects to the daemon named by the environment (DOCKER_HOST, or the local
// socket), negotiating the API version down to what the daemon speaks (1.41 for Debian's
// docker.io). It does not wait for the daemon to answer: Ping does.
func Open(_ context.Context, o sandbox.Options, cfg Config) (*Runtime, error) {
	api, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	r := &Runtime{api: api, log: o.Log, frames: o.Frames, instance: o.Instance, oci: cfg.OCIRuntime, socketDir: cfg.SocketDir}
	// Not under gVisor: the code's loopback is in its own network stack, not the namespace.
	if !cfg.NoEgressPort && cfg.OCIRuntime != gVisor {
		if err := probeNetns(); err != nil {
			o.Log.Debug("kiln cannot enter network namespaces: egress goes over sockets or frames", "err", err)
		} else {
			r.ports.Store(true)
		}
	}
	return r, nil
}

// Name returns "docker".
func (r *Runtime) Name() string { return Name }

// gVisor is the OCI runtime of gVisor's sandboxes (Config.OCIRuntime).
const gVisor = "runsc"

// Traits implements sandbox.Runtime: the daemon updates a running container's limits,
// but not those gVisor's sandbox holds.
func (r *Runtime) Traits() sandbox.Traits {
	return sandbox.Traits{Isolation: cmp.Or(r.oci, "runc"), Resizes: r.oci != gVisor}
}

// Close releases the client's connections.
func (r *Runtime) Close() error { return r.api.Close() }

// Ping checks that the daemon answers.
func (r *Runtime) Ping(ctx context.Context) error {
	if _, err := r.api.Ping(ctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("cannot reach the Docker daemon (is it running, and is DOCKER_HOST right?): %w", err)
	}
	return nil
}

// ImageID returns the id of the named local image, or an error wrapping
// sandbox.ErrImageMissing when the daemon does not have it.
func (r *Runtime) ImageID(ctx context.Context, image string) (string, error) {
	res, err := r.api.ImageInspect(ctx, image)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", fmt.Errorf("%w: %s: build it with 'make image'", sandbox.ErrImageMissing, image)
		}
		return "", fmt.Errorf("image inspect: %w", err)
	}
	return res.ID, nil
}

// Start creates a sandbox from spec and returns it once its REPL has answered the
// handshake.
func (r *Runtime) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	s, err := r.StartContainer(ctx, spec)
	if err != nil || !spec.PerCall {
		return sandbox.Started(s, err)
	}
	pc, err := sandbox.PerCall(ctx, s, s, r.frames, r.log)
	if err != nil {
		rctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
		defer cancel()
		return nil, errors.Join(err, s.Remove(rctx))
	}
	return pc, nil
}

// StartContainer is Start with the container's own type, for tests and benchmarks that
// measure a sandbox without kiln; with Spec.PerCall it returns the idle container, which
// Start wraps in sandbox.PerCall. The order matters: create, attach (before start, so no
// output is missed), wait (so the exit code is known), start. ctx bounds the whole
// warm-up; on any failure the container is removed with a context of its own.
func (r *Runtime) StartContainer(ctx context.Context, spec sandbox.Spec) (*Sandbox, error) {
	now := time.Now()
	cfg, host := r.configs(spec, now)
	var sock *egressSocket
	port := spec.Egress && r.ports.Load()
	if port {
		cfg.Env = append(cfg.Env[:len(cfg.Env):len(cfg.Env)], fmt.Sprintf("%s=%d", sandbox.EgressPortVar, sandbox.EgressPort))
	}
	// Not under gVisor: its Unix sockets to the host (runsc --host-uds) broke a bash
	// call's curl through the relay (runsc 2022-12); the frames serve it.
	if spec.Egress && !port && r.socketDir != "" && r.oci != gVisor && !r.noSockets.Load() {
		var err error
		if sock, err = r.newSocket(); err != nil {
			r.log.Warn("no egress socket for the sandbox: its connections go as net frames", "err", err)
		} else {
			sock.mount(cfg, host)
		}
	}
	// The create is not cut short by ctx: a create the daemon carries out after its caller
	// gave up would leave a container no one knows of. It is quick; ctx is checked after.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	created, err := r.api.ContainerCreate(cctx, client.ContainerCreateOptions{Config: cfg, HostConfig: host})
	if err != nil && sock != nil {
		// The daemon cannot mount the socket's directory: it does not see kiln's paths
		// (kiln runs in a container of its own). The frames carry egress from now on.
		sock.close()
		sock = nil
		cfg, host = r.configs(spec, now)
		created, err = r.api.ContainerCreate(cctx, client.ContainerCreateOptions{Config: cfg, HostConfig: host})
		if err == nil && !r.noSockets.Swap(true) {
			r.log.Warn("the Docker daemon cannot mount EGRESS_SOCKET_DIR: sandboxes reach the egress proxy over their attach streams", "dir", r.socketDir)
		}
	}
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%w: container create: %w", kiln.ErrRuntime, err)
	}
	s := &Sandbox{id: created.ID, created: time.Now(), rt: r, sock: sock,
		milliCPU: spec.MilliCPU, memoryMB: spec.MemoryMB}
	fail := func(err error) (*Sandbox, error) {
		rctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
		defer cancel()
		return nil, errors.Join(err, s.Remove(rctx))
	}
	if err := ctx.Err(); err != nil {
		return fail(fmt.Errorf("%w: %w", kiln.ErrWarmupTimeout, err))
	}

	att, err := r.api.ContainerAttach(ctx, s.id, client.ContainerAttachOptions{
		Stream: true, Stdin: true, Stdout: true, Stderr: true,
	})
	if err != nil {
		return fail(fmt.Errorf("%w: container attach: %w", kiln.ErrRuntime, err))
	}
	s.Conn = sandbox.Open(attached(att.HijackedResponse), r.frames, r.log, s.ID())
	if sock != nil {
		go s.Conn.Accept(sock.ln)
	}

	waitCtx, stopWait := context.WithCancel(context.Background())
	s.stopWait = stopWait
	s.waitResult = r.api.ContainerWait(waitCtx, s.id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})

	if _, err := r.api.ContainerStart(ctx, s.id, client.ContainerStartOptions{}); err != nil {
		return fail(fmt.Errorf("%w: container start: %w", kiln.ErrRuntime, err))
	}
	if port {
		// Before any code runs, so that nothing else can take the port.
		ln, err := r.listenEgressPort(ctx, s.id)
		if err != nil {
			if r.ports.Swap(false) {
				r.log.Warn("kiln cannot listen in a sandbox's network namespace: egress goes over sockets or frames from the next sandbox on", "err", err)
			}
			return fail(fmt.Errorf("%w: egress port: %w", kiln.ErrRuntime, err))
		}
		s.port = ln
		go s.Conn.Accept(ln)
	}
	if spec.PerCall {
		return s, nil // its container idles: Start wraps it (sandbox.PerCall)
	}
	if s.ready, err = s.Handshake(ctx); err != nil {
		return fail(err)
	}
	return s, nil
}

// Remove force-removes the container with id; one that is already gone is not an
// error. Sandboxes remove themselves: this is for containers no sandbox owns any more.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	_, err := r.api.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		if strings.Contains(err.Error(), "is already in progress") {
			return nil
		}
		return fmt.Errorf("container remove %s: %w", ShortID(id), err)
	}
	return nil
}

// List returns this instance's sandbox containers, of every state.
func (r *Runtime) List(ctx context.Context) ([]sandbox.Found, error) {
	f := make(client.Filters).Add("label", sandbox.LabelManaged+"=true").Add("label", sandbox.LabelInstance+"="+r.instance)
	res, err := r.api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("container list: %w", err)
	}
	out := make([]sandbox.Found, 0, len(res.Items))
	for _, it := range res.Items {
		out = append(out, sandbox.Found{ID: ShortID(it.ID), State: string(it.State), Created: time.Unix(it.Created, 0)})
	}
	return out, nil
}

// RemoveOrphans removes every sandbox container of this instance: at start-up these can
// only be leftovers of an earlier process of the same instance that died without
// cleaning up. It returns how many it removed.
func (r *Runtime) RemoveOrphans(ctx context.Context) (int, error) {
	list, err := r.List(ctx)
	if err != nil {
		return 0, err
	}
	ids := make([]string, 0, len(list))
	for _, ct := range list {
		ids = append(ids, ct.ID)
	}
	n, err := sandbox.RemoveEach(ctx, ids, r.Remove)
	if serr := r.removeSockets(); serr != nil {
		err = errors.Join(err, fmt.Errorf("egress sockets: %w", serr))
	}
	return n, err
}

// ShortID returns the first 12 characters of a container id, as Docker shows them and
// accepts them.
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
