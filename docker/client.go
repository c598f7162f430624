package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
)

// removeTimeout bounds one container removal.
const removeTimeout = 30 * time.Second

// Client talks to the Docker daemon on kiln's behalf.
type Client struct {
	api    *client.Client
	log    *slog.Logger
	frames FrameLimits
}

// FrameLimits bound one protocol frame from a sandbox: its JSON header, and its raw
// payloads (the state and the files).
type FrameLimits struct {
	Header int
	Binary int64
}

// New connects to the daemon named by the environment (DOCKER_HOST, or the local
// socket), negotiating the API version down to what the daemon speaks (1.41 for
// Debian's docker.io). lim bounds what kiln reads of one frame from a sandbox.
func New(log *slog.Logger, lim FrameLimits) (*Client, error) {
	api, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	return &Client{api: api, log: log, frames: lim}, nil
}

// Close releases the client's connections.
func (c *Client) Close() error { return c.api.Close() }

// Ping checks that the daemon answers.
func (c *Client) Ping(ctx context.Context) error {
	if _, err := c.api.Ping(ctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("docker ping: %w", err)
	}
	return nil
}

// ImageID returns the id of the named local image, or an error wrapping
// ErrImageMissing when the daemon does not have it.
func (c *Client) ImageID(ctx context.Context, image string) (string, error) {
	res, err := c.api.ImageInspect(ctx, image)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", fmt.Errorf("%w: %s", ErrImageMissing, image)
		}
		return "", fmt.Errorf("image inspect: %w", err)
	}
	return res.ID, nil
}

// ErrImageMissing means the sandbox image is not present on the daemon.
var ErrImageMissing = errors.New("sandbox image not found")

// Start creates a sandbox from spec and returns it once its REPL has sent the ready
// frame. The order matters: create, attach (before start, so no output is missed),
// wait (so the exit code is known), start. ctx bounds the whole warm-up; on any
// failure the container is removed with a context of its own.
func (c *Client) Start(ctx context.Context, spec Spec) (*Sandbox, error) {
	cfg, host := spec.configs(time.Now())
	// The create is not cut short by ctx: a create the daemon carries out after its caller
	// gave up would leave a container no one knows of. It is quick; ctx is checked after.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	created, err := c.api.ContainerCreate(cctx, client.ContainerCreateOptions{Config: cfg, HostConfig: host})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%w: container create: %w", kiln.ErrDaemon, err)
	}
	s := &Sandbox{id: created.ID, created: time.Now(), cli: c, exec: spec.Exec, execExit: -1}
	fail := func(err error) (*Sandbox, error) {
		rctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
		defer cancel()
		return nil, errors.Join(err, s.Remove(rctx))
	}
	if err := ctx.Err(); err != nil {
		return fail(fmt.Errorf("%w: %w", kiln.ErrWarmupTimeout, err))
	}

	att, err := c.api.ContainerAttach(ctx, s.id, client.ContainerAttachOptions{
		Stream: true, Stdin: true, Stdout: true, Stderr: true,
	})
	if err != nil {
		return fail(fmt.Errorf("%w: container attach: %w", kiln.ErrDaemon, err))
	}
	s.main = newStream(att.Conn, att.Reader, c.frames, c.log, s.id)

	waitCtx, stopWait := context.WithCancel(context.Background())
	s.stopWait = stopWait
	s.waitResult = c.api.ContainerWait(waitCtx, s.id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})

	if _, err := c.api.ContainerStart(ctx, s.id, client.ContainerStartOptions{}); err != nil {
		return fail(fmt.Errorf("%w: container start: %w", kiln.ErrDaemon, err))
	}
	if s.exec != nil {
		if err := s.probeExec(ctx); err != nil {
			return fail(err)
		}
		return s, nil
	}
	ready, err := s.main.receive(ctx)
	switch {
	case errors.Is(err, kiln.ErrSandboxExited):
		return fail(fmt.Errorf("%w during warm-up: %s", kiln.ErrSandboxExited, lastLine(s.Stderr())))
	case ctx.Err() != nil:
		return fail(fmt.Errorf("%w: no ready frame: %w", kiln.ErrWarmupTimeout, ctx.Err()))
	case err != nil:
		return fail(fmt.Errorf("%w: ready frame: %w", kiln.ErrSandboxExited, err))
	}
	if s.ready, err = protocol.DecodeReady(ready); err != nil {
		return fail(fmt.Errorf("%w: %w", kiln.ErrSandboxExited, err))
	}
	return s, nil
}

// Remove force-removes the container with id; one that is already gone is not an
// error. Sandboxes remove themselves: this is for containers no sandbox owns any more.
func (c *Client) Remove(ctx context.Context, id string) error { return c.remove(ctx, id) }

// remove force-removes a container; one that is already gone is not an error.
func (c *Client) remove(ctx context.Context, id string) error {
	_, err := c.api.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		if strings.Contains(err.Error(), "is already in progress") {
			return nil
		}
		return fmt.Errorf("container remove %s: %w", ShortID(id), err)
	}
	return nil
}

// Container is a sandbox container as the daemon lists it.
type Container struct {
	ID       string // short, as Sandbox.ID gives it
	Instance string
	State    string
	Created  time.Time
}

// List returns the kiln sandbox containers on the daemon, of every state. With a
// non-empty instance, only that instance's.
func (c *Client) List(ctx context.Context, instance string) ([]Container, error) {
	f := make(client.Filters).Add("label", LabelManaged+"=true")
	if instance != "" {
		f.Add("label", LabelInstance+"="+instance)
	}
	res, err := c.api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("container list: %w", err)
	}
	out := make([]Container, 0, len(res.Items))
	for _, it := range res.Items {
		out = append(out, Container{
			ID:       ShortID(it.ID),
			Instance: it.Labels[LabelInstance],
			State:    string(it.State),
			Created:  time.Unix(it.Created, 0),
		})
	}
	return out, nil
}

// RemoveOrphans removes every sandbox container labelled with instance: at start-up
// these can only be leftovers of an earlier process of the same instance that died
// without cleaning up. It returns how many it removed.
func (c *Client) RemoveOrphans(ctx context.Context, instance string) (int, error) {
	list, err := c.List(ctx, instance)
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, ct := range list {
		if err := c.remove(ctx, ct.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// ShortID returns the first 12 characters of a container id, as Docker shows them and
// accepts them.
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if s == "" {
		return "no output"
	}
	return s
}
