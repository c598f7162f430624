package kilntest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/kilnsh/kiln/docker"
	"github.com/kilnsh/kiln/protocol"
)

// DefaultLimits are the limits kiln sends with every request under its default
// configuration (cmd/kiln/config.go).
var DefaultLimits = protocol.Limits{MaxOutputBytes: 1 << 20, MaxFileBytes: 25 << 20, MaxFiles: 20,
	MaxStateBytes: 64 << 20, MaxStateRawBytes: 64 << 20}

// DefaultSpec is the sandbox kiln's pool starts under its default configuration
// (cmd/kiln/app.go, (*Main).spec), owned by instance, in the runtime the tests run under.
func DefaultSpec(image, instance string) docker.Spec {
	runtime := Runtime()
	if runtime == "runc" {
		runtime = ""
	}
	return docker.Spec{Image: image, Runtime: runtime, Instance: instance, MemoryMB: 512 + 32, NanoCPUs: 1e9,
		PidsLimit: 128, TmpMB: 64, DataMB: 128, NoFile: 1024,
		Env: append(slices.Clone(docker.DefaultEnv), docker.WarmHeapVar+"=32")}
}

// Sandbox is one warm sandbox started for a test without kiln: the REPL on its own, to
// compare kiln with or to measure it against.
type Sandbox struct {
	*docker.Sandbox
	client *docker.Client
}

// StartSandbox starts a sandbox of spec; its instance id, when empty, names this test
// process, so that a run killed outright leaves nothing the next one does not remove.
func StartSandbox(ctx context.Context, spec docker.Spec) (*Sandbox, error) {
	removeOrphans()
	if spec.Instance == "" {
		spec.Instance = newInstance()
	}
	dc, err := docker.New(slog.New(slog.NewTextHandler(io.Discard, nil)), docker.FrameLimits{Header: 64 << 20, Binary: 256 << 20})
	if err != nil {
		return nil, err
	}
	sb, err := dc.Start(ctx, spec)
	if err != nil {
		dc.Close()
		return nil, err
	}
	return &Sandbox{Sandbox: sb, client: dc}, nil
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
	defer s.client.Close()
	return s.Remove(ctx)
}
