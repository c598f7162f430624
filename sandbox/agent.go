package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
)

// agentQueue is how many events of one agent call wait for their reader before the
// Conn's reader waits too: a slow reader holds back the REPL's output, as for a run.
const agentQueue = 64

// ErrNoAgent is returned for an agent call to a REPL that did not say it answers them.
var ErrNoAgent = errors.New("the sandbox's REPL answers no agent calls")

// AgentStream is one agent call under way: its events, then its end.
type AgentStream struct {
	c      *Conn
	call   uint32
	events chan protocol.AgentEvent
	gone   chan struct{} // closed by Close
}

// Agent sends an agent call to the REPL and returns its stream at once. The caller reads
// it to its end or closes it; a call closed early is forgotten here (its events are
// dropped), and the REPL is told with proc.unsubscribe when it is a process's stream.
func (c *Conn) Agent(ctx context.Context, method string, args any, data []byte) (*AgentStream, error) {
	if !c.ready.Capabilities.Agent {
		return nil, ErrNoAgent
	}
	s := &AgentStream{c: c, events: make(chan protocol.AgentEvent, agentQueue), gone: make(chan struct{})}
	c.tunnelMu.Lock()
	if c.agents == nil {
		c.agents = map[uint32]*AgentStream{}
	}
	c.agentSeq++
	s.call = c.agentSeq
	c.agents[s.call] = s
	c.tunnelMu.Unlock()
	frame, err := protocol.EncodeAgent(protocol.AgentCall{Call: s.call, Method: method, Args: args, Data: data})
	if err == nil {
		err = c.Send(ctx, frame)
	}
	if err != nil {
		s.forget()
		return nil, err
	}
	return s, nil
}

// Call is the call's number, which proc.unsubscribe names.
func (s *AgentStream) Call() uint32 { return s.call }

// Next returns the call's next event; the last has End set. kiln.ErrSandboxExited means
// the REPL ended first.
func (s *AgentStream) Next(ctx context.Context) (protocol.AgentEvent, error) {
	select {
	case e := <-s.events:
		if e.End {
			s.forget()
		}
		return e, nil
	case <-ctx.Done():
		return protocol.AgentEvent{}, ctx.Err()
	case <-s.c.done:
		select {
		case e := <-s.events:
			return e, nil
		default:
		}
		return protocol.AgentEvent{}, fmt.Errorf("%w: %s", kiln.ErrSandboxExited, LastLine(s.c.Stderr()))
	}
}

// Close forgets the call: what the REPL still sends of it is dropped.
func (s *AgentStream) Close() { s.forget() }

func (s *AgentStream) forget() {
	s.c.tunnelMu.Lock()
	defer s.c.tunnelMu.Unlock()
	if s.c.agents[s.call] == s {
		delete(s.c.agents, s.call)
		close(s.gone)
	}
}

// onAgent takes an agent frame from the reader and hands it to its call's stream,
// waiting while the stream's queue is full.
func (c *Conn) onAgent(f protocol.Frame) {
	e, err := protocol.DecodeAgent(f)
	if err != nil {
		c.log.Warn("sandbox sent a bad agent frame", "sandbox", c.id, "err", err)
		return
	}
	c.tunnelMu.Lock()
	s := c.agents[e.Call]
	c.tunnelMu.Unlock()
	if s == nil {
		return // closed by its reader
	}
	select {
	case s.events <- e:
	case <-s.gone:
	case <-c.quit:
	}
}
