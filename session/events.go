package session

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/store"
)

// Kinds of Event.
const (
	EventStart   = "start"   // the run has its sandbox: SessionID and ExecutionID
	EventStdout  = "stdout"  // Text
	EventStderr  = "stderr"  // Text
	EventDisplay = "display" // File: a figure the run showed, already stored in the session
	EventOutput  = "output"  // Output: a rich output, as it was shown
)

// Event is what a caller hears of a run while it goes.
type Event struct {
	Type        string
	SessionID   string
	ExecutionID string
	Text        string
	File        *store.File
	Output      *Output
}

// Cancel interrupts a running execution the caller started (see executor.Executor.Cancel).
func (s *Service) Cancel(ctx context.Context, c Caller, executionID string) error {
	return s.cancel(executionID, c.Principal())
}

// Continue answers the tool calls a run the caller started waits on (see
// executor.Executor.Continue).
func (s *Service) Continue(ctx context.Context, c Caller, executionID, token string, results []protocol.ToolResult) error {
	if s.resume == nil {
		return kiln.Errorf(kiln.CodeNotFound, "execution %s not found", executionID)
	}
	return s.resume(executionID, c.Principal(), token, results)
}

// link is one run's link from the executor's events to the caller's: it stores each
// figure in the session as it is shown, creating a new session on the first one, so
// that the caller can fetch it at once.
type link struct {
	s     *Service
	ctx   context.Context
	c     Caller
	req   *ExecRequest
	sid   string         // the session's id, known before it exists
	sess  *store.Session // nil until the run's session exists
	shown map[string]shownFile
	png   map[string][]byte // the figure last shown, whose output event follows it
	err   error             // the first failure to store a figure; the run goes on
}

// shownFile is a figure stored while the run went, so that the same file in the
// result is not stored twice.
type shownFile struct {
	file *store.File
	sum  [32]byte
}

func (l *link) start(executionID string) {
	l.req.Events(Event{Type: EventStart, SessionID: l.sid, ExecutionID: executionID})
}

func (l *link) event(ev protocol.Event) {
	switch ev.Type {
	case protocol.EventOutput:
		l.req.Events(Event{Type: ev.Stream, Text: ev.Text})
	case protocol.EventDisplay:
		f, err := l.store(ev)
		if err != nil {
			if l.err == nil {
				l.err = err
			}
			return
		}
		l.req.Events(Event{Type: EventDisplay, File: f})
		l.png = map[string][]byte{ev.Name: ev.Data} // its output comes next
	case protocol.EventBundle:
		o, err := decodeOutput(ev.Output, func(name string) []byte { return l.png[name] })
		if err != nil {
			if l.err == nil {
				l.err = err
			}
			return
		}
		l.png = nil
		l.req.Events(Event{Type: EventOutput, Output: &o})
	}
}

// figureIn returns where a run's outputs find their figures' bytes: among its files.
func figureIn(files []protocol.File) func(string) []byte {
	return func(name string) []byte {
		for _, f := range files {
			if f.Path == name {
				return f.Content
			}
		}
		return nil
	}
}

// store keeps a shown figure in the run's session.
func (l *link) store(ev protocol.Event) (*store.File, error) {
	if l.sess == nil {
		sess, err := l.s.newSession(l.ctx, l.c, l.sid, l.req.EntityID)
		if err != nil {
			return nil, err
		}
		l.sess = sess
	}
	saved, err := l.s.saveOutputs(l.ctx, l.sess.ID, []protocol.File{{Path: ev.Name, Content: ev.Data}}, nil, nil)
	if err != nil {
		return nil, err
	}
	if len(saved.files) == 0 {
		return nil, fmt.Errorf("figure %s not kept: %s", ev.Name, saved.dropped)
	}
	f := saved.files[0]
	l.shown[f.Name] = shownFile{file: f, sum: sha256.Sum256(ev.Data)}
	return f, nil
}

// alreadyShown returns the stored file when pf is a figure this run stored as shown.
func (l *link) alreadyShown(name string, content []byte) (*store.File, bool) {
	if l == nil {
		return nil, false
	}
	sf, ok := l.shown[name]
	if !ok || sf.file.Size != int64(len(content)) {
		return nil, false
	}
	sum := sha256.Sum256(content)
	return sf.file, bytes.Equal(sum[:], sf.sum[:])
}
