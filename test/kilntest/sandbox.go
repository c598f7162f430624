package kilntest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/kilnsh/kiln/docker"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox"
)

// DefaultLimits are the limits kiln sends with every request under its default
// configuration (cmd/kiln/config.go).
var DefaultLimits = protocol.Limits{MaxOutputBytes: 1 << 20, MaxFileBytes: 25 << 20, MaxFiles: 20,
	MaxStateBytes: 64 << 20, MaxStateRawBytes: 64 << 20}

// DefaultSpec is the sandbox kiln's pool starts under its default configuration
// (cmd/kiln/runtime.go, (*Main).spec).
func DefaultSpec(image string) sandbox.Spec {
	return sandbox.Spec{Image: image, MemoryMB: 512 + 32, MilliCPU: 1000,
		PidsLimit: 128, TmpMB: 64, DataMB: 128, NoFile: 1024,
		Env: sandbox.WithEnv(sandbox.WarmHeapVar + "=32")}
}

// DockerConfig is the Docker runtime's configuration in the OCI runtime the tests run
// under (runc, or runsc).
func DockerConfig() docker.Config {
	if rt := Runtime(); rt != "runc" {
		return docker.Config{OCIRuntime: rt}
	}
	return docker.Config{}
}

// SandboxFrames bound a frame from a sandbox started for a test.
var SandboxFrames = sandbox.FrameLimits{Header: 64 << 20, Binary: 256 << 20}

// Sandbox is one warm sandbox started for a test without kiln: the REPL on its own, to
// compare kiln with or to measure it against.
type Sandbox struct {
	*docker.Sandbox
	rt *docker.Runtime
}

// StartSandbox starts a sandbox of spec on Docker, owned by instance; an empty instance
// names this test process, so that a run killed outright leaves nothing the next one does
// not remove.
func StartSandbox(ctx context.Context, spec sandbox.Spec, instance string) (*Sandbox, error) {
	removeOrphans()
	if instance == "" {
		instance = NewInstance()
	}
	rt, err := docker.Open(ctx, sandbox.Options{Instance: instance, Frames: SandboxFrames,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, DockerConfig())
	if err != nil {
		return nil, err
	}
	sb, err := rt.StartContainer(ctx, spec)
	if err != nil {
		rt.Close()
		return nil, err
	}
	return &Sandbox{Sandbox: sb, rt: rt}, nil
}

// Exec sends one request and returns the REPL's answer (no events are asked for).
func (s *Sandbox) Exec(ctx context.Context, req *protocol.Request) (*protocol.Response, error) {
	msg, err := protocol.EncodeRequest(req)
	if err != nil {
		return nil, err
	}
	if err := s.Send(ctx, msg); err != nil {
		return nil, fmt.Errorf("send: %w (%s)", err, strings.TrimSpace(s.Stderr()))
	}
	f, err := s.Receive(ctx)
	if err != nil {
		return nil, fmt.Errorf("receive: %w (%s)", err, strings.TrimSpace(s.Stderr()))
	}
	lim := req.Limits
	lim.MaxStateBytes = max(lim.MaxStateBytes, 64<<20)
	return protocol.DecodeResponse(f, req.ID, lim)
}

// Close removes the sandbox, whatever its context.
func (s *Sandbox) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer s.rt.Close()
	return s.Remove(ctx)
}
