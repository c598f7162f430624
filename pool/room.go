package pool

import (
	"context"
	"errors"

	"github.com/kilnsh/kiln/sandbox"
)

// MakeRoomWith gives the pool what it asks for room when its runtime has none for a new
// sandbox (sandbox.NoRoomError): kiln's live registry, which ends an idle live session's
// sandbox and reports whether there was one. Until it is given, the pool only waits.
func (p *Pool) MakeRoomWith(makeRoom func() bool) {
	p.mu.Lock()
	p.makeRoom = makeRoom
	p.mu.Unlock()
}

// MakeRoomWith gives every pool of the set what it asks for room (Pool.MakeRoomWith).
func (s *Set) MakeRoomWith(makeRoom func() bool) {
	for _, m := range s.members {
		m.Pool.MakeRoomWith(makeRoom)
	}
}

// start starts a sandbox of spec. When the runtime has no room for it yet, the pool asks
// for room once and waits for that same sandbox, which takes the room as soon as it frees:
// starting another would ask again, and end a second live session for one sandbox.
func (p *Pool) start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := p.starter.Start(ctx, spec)
	var room *sandbox.NoRoomError
	if !errors.As(err, &room) {
		return sb, err
	}
	p.mu.Lock()
	makeRoom := p.makeRoom
	p.mu.Unlock()
	if makeRoom != nil && makeRoom() {
		p.log.Info("no room for a sandbox: an idle live session gave up its own", "why", room.Why)
	} else {
		p.log.Info("no room for a sandbox: waiting for some", "why", room.Why)
	}
	return room.Wait(ctx)
}
