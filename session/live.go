package session

import "github.com/kilnsh/kiln/live"

// Live is the registry of live sessions' sandboxes.
type Live = live.Registry

type binding = live.Binding

// dropLive ends a session's live sandbox, when it has one: its stored state changed
// under it, or it was deleted.
func (s *Service) dropLive(sid string) {
	if s.live != nil {
		s.live.Drop(sid, live.EndDiscard)
	}
}
