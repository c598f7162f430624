package kube

import (
	"context"
	"sync"

	"github.com/kilnsh/kiln/sandbox"
)

// Sandbox is one running sandbox Pod and the exec session of its REPL, which stays open
// for the Pod's whole life. It serves one request (or one session's, while the session
// is live), then it is removed.
type Sandbox struct {
	*sandbox.Conn

	name    string
	rt      *Runtime
	streams *execStreams

	removeOnce sync.Once
	removeErr  error
}

// ID returns the Pod's name.
func (s *Sandbox) ID() string { return s.name }

// Exit reports how the REPL ended: its exit code, from the exec's status, and whether
// the kernel's out-of-memory killer struck, from the container's memory cgroup (the REPL
// is not the container's process, so the kubelet's OOMKilled flag does not cover it).
// It waits within ctx for the stream to end. A Pod that is gone (its node was lost, or
// someone deleted it) has no exit to tell: -1.
func (s *Sandbox) Exit(ctx context.Context) (code int, oomKilled bool, err error) {
	select {
	case <-s.Done():
	case <-ctx.Done():
		return -1, false, nil
	}
	switch code := s.streams.exitCode; {
	case code == 137: // SIGKILL: the kernel's, or the code's own
		oom, err := s.rt.oomKilled(ctx, s.name)
		return code, oom, err
	case code >= 0:
		return code, false, nil
	}
	// The stream broke: the Pod's own end, if the kubelet saw one, says why.
	changed, unwatch := s.rt.watch(s.name)
	defer unwatch()
	for {
		p := s.rt.pod(s.name)
		if p == nil {
			return -1, false, nil
		}
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; cs.Name == container && t != nil {
				return int(t.ExitCode), t.Reason == "OOMKilled", nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return -1, false, nil
		}
	}
}

// Remove ends the exec session and deletes the Pod with no grace. It is idempotent,
// and must be given a context of its own, never a request's.
func (s *Sandbox) Remove(ctx context.Context) error {
	s.removeOnce.Do(func() {
		if s.Conn != nil {
			s.Conn.Close()
		}
		s.removeErr = s.rt.Remove(ctx, s.name)
	})
	return s.removeErr
}
