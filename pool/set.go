package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/sandbox"
)

// Member is one pool of a Set, by name (POOLS=python:4,polyglot:1 names two).
type Member struct {
	Name string
	Pool *Pool
}

// MemberStats is one pool of a Set as /health/detailed, the dashboard and the metrics
// show it.
type MemberStats struct {
	Name      string
	Languages []string // nil until the pool has learned them
	Stats     Stats
}

// Set lends sandboxes from several pools, one per image, by language. A pool serves
// the languages its sandboxes say they run in their handshakes: each pool learns them
// from its first sandbox that becomes ready, and the Set knows no language itself. A
// request goes to the first pool, in the order of the members, that serves its language.
type Set struct {
	members []Member
	wait    time.Duration // longest a checkout waits for pools to learn their languages
	log     *slog.Logger

	mu    sync.Mutex
	known int            // pools whose languages all was made from
	all   []string       // every known pool's languages, sorted
	out   map[string]int // checked-out sandbox id -> member index
}

// NewSet returns a Set of the members. A checkout for a language no pool is known to
// serve waits at most wait for the pools that have not said yet.
func NewSet(members []Member, wait time.Duration, log *slog.Logger) *Set {
	return &Set{members: members, wait: wait, log: log, out: map[string]int{}}
}

// Members returns the members, in order.
func (s *Set) Members() []Member { return s.members }

// Probe learns the languages of the pools that keep no sandbox warm, by checking out
// one sandbox of each (which starts it) and giving it back. Run it once, in the
// background; it returns when done or when ctx ends.
func (s *Set) Probe(ctx context.Context) {
	var wg sync.WaitGroup
	for _, m := range s.members {
		if m.Pool.cfg.Size > 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, known := m.Pool.Languages(); known {
					return
				}
				sb, err := m.Pool.Checkout(ctx)
				if err == nil {
					m.Pool.Release(sb)
					return
				}
				s.log.Warn("probing a pool for its languages failed; retrying", "pool", m.Name, "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Second):
				}
			}
		}()
	}
	wg.Wait()
}

// Languages returns every language some pool serves, sorted (the caller must not
// change the slice), and whether every pool has said what it serves. Every execution
// asks: the list is sorted again only when another pool has learned.
func (s *Set) Languages() ([]string, bool) {
	var all []string
	known := 0
	for _, m := range s.members {
		if langs, ok := m.Pool.Languages(); ok {
			known++
			all = append(all, langs...)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if known > s.known { // a caller that saw fewer pools learned leaves a newer list as it is
		slices.Sort(all)
		s.all, s.known = slices.Compact(all), known
	}
	return s.all, s.known == len(s.members)
}

// member returns the index of the first pool that serves lang, or -1, and whether
// every pool has learned its languages.
func (s *Set) member(lang string) (int, bool) {
	complete := true
	for i, m := range s.members {
		langs, ok := m.Pool.Languages()
		if slices.Contains(langs, lang) {
			return i, true
		}
		complete = complete && ok
	}
	return -1, complete
}

// awaitLearned waits until every pool has learned its languages, but for those that
// await what they need (they learn nothing until then), or until ctx ends.
func (s *Set) awaitLearned(ctx context.Context) {
	for _, m := range s.members {
		if m.Pool.Awaiting() != nil {
			continue
		}
		select {
		case <-m.Pool.learned:
		case <-ctx.Done():
			return
		}
	}
}

// Checkout hands out a ready sandbox of the first pool that serves lang, as
// Pool.Checkout does. kiln.ErrUnsupportedLanguage when every pool has said what it serves
// and none serves lang.
func (s *Set) Checkout(ctx context.Context, lang string) (sandbox.Sandbox, error) {
	return s.lend(ctx, lang, func(p *Pool) (sandbox.Sandbox, error) { return p.Checkout(ctx) })
}

// lend takes a sandbox for lang from the pool that serves it with take, and remembers
// which pool lent it, for Release and Keep.
func (s *Set) lend(ctx context.Context, lang string, take func(*Pool) (sandbox.Sandbox, error)) (sandbox.Sandbox, error) {
	i, err := s.pick(ctx, lang)
	if err != nil {
		return nil, err
	}
	sb, err := take(s.members[i].Pool)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.out[sb.ID()] = i
	s.mu.Unlock()
	return sb, nil
}

// pick returns the member that serves lang, waiting for the pools to say what they run
// when they have not all said yet.
func (s *Set) pick(ctx context.Context, lang string) (int, error) {
	i, complete := s.member(lang)
	if i < 0 && !complete {
		if err := s.awaiting(lang); err != nil {
			return -1, err // the pools that could serve lang cannot start yet: no use waiting
		}
		wctx, cancel := context.WithTimeout(ctx, s.wait)
		defer cancel()
		s.awaitLearned(wctx)
		switch {
		case ctx.Err() != nil:
			return -1, ctx.Err()
		case wctx.Err() != nil:
			return -1, fmt.Errorf("%w: the pools have not said what they run yet", kiln.ErrQueueTimeout)
		}
		if i, _ = s.member(lang); i < 0 {
			if err := s.awaiting(lang); err != nil {
				return -1, err
			}
		}
	}
	if i < 0 {
		return -1, kiln.ErrUnsupportedLanguage
	}
	return i, nil
}

// CheckoutSized starts a sandbox for lang with a request's own limits (Pool.CheckoutSized),
// in the pool that serves lang; Release and Keep take it as any checkout's.
func (s *Set) CheckoutSized(ctx context.Context, lang string, milliCPU, memoryMB int64) (sandbox.Sandbox, error) {
	return s.lend(ctx, lang, func(p *Pool) (sandbox.Sandbox, error) { return p.CheckoutSized(ctx, milliCPU, memoryMB) })
}

// awaiting returns the 503 of the first pool that awaits what it needs (Config.Await),
// when every pool that has not learned its languages awaits: one of them may be the one
// that serves lang.
func (s *Set) awaiting(lang string) error {
	var first error
	for _, m := range s.members {
		if _, ok := m.Pool.Languages(); ok {
			continue
		}
		err := m.Pool.Awaiting()
		if err == nil {
			return nil
		}
		if first == nil {
			e := m.Pool.awaitingError(err)
			e.Message = fmt.Sprintf("language %s is not served yet: pool %s cannot start its sandboxes: %v", lang, m.Name, err)
			first = e
		}
	}
	return first
}

// Release gives a sandbox back to the pool it came from.
func (s *Set) Release(sb sandbox.Sandbox) {
	s.mu.Lock()
	i, ok := s.out[sb.ID()]
	delete(s.out, sb.ID())
	s.mu.Unlock()
	if !ok {
		s.log.Error("release of a sandbox no pool lent", "sandbox", sb.ID())
		return
	}
	s.members[i].Pool.Release(sb)
}

// Keep ends the checkout of sb without removing it, as Pool.Keep does; Release gives it
// back.
func (s *Set) Keep(sb sandbox.Sandbox) {
	s.mu.Lock()
	i, ok := s.out[sb.ID()]
	s.mu.Unlock()
	if !ok {
		s.log.Error("keep of a sandbox no pool lent", "sandbox", sb.ID())
		return
	}
	s.members[i].Pool.Keep(sb)
}

// Holds reports whether some pool holds the sandbox with that id.
func (s *Set) Holds(id string) bool {
	for _, m := range s.members {
		if m.Pool.Holds(id) {
			return true
		}
	}
	return false
}

// CanServe reports whether every pool that keeps sandboxes warm could serve soon. A pool
// that awaits what it needs (its image, being built) does not count: the others serve,
// and its languages answer 503 meanwhile.
func (s *Set) CanServe() bool {
	for _, m := range s.members {
		if m.Pool.cfg.Size > 0 && m.Pool.Awaiting() == nil && !m.Pool.CanServe() {
			return false
		}
	}
	return true
}

// Stats returns the pools' numbers added up; LastError is the first pool's that has one.
func (s *Set) Stats() Stats {
	var sum Stats
	for _, m := range s.members {
		st := m.Pool.Stats()
		sum.Target += st.Target
		sum.Ready += st.Ready
		sum.Warming += st.Warming
		sum.InUse += st.InUse
		sum.Kept += st.Kept
		sum.Waiting += st.Waiting
		sum.Counts.Created += st.Counts.Created
		sum.Counts.Failed += st.Counts.Failed
		sum.Counts.Removed += st.Counts.Removed
		sum.Counts.Leaked += st.Counts.Leaked
		sum.Counts.Died += st.Counts.Died
		if sum.LastError == "" && st.LastError != "" {
			sum.LastError = m.Name + ": " + st.LastError
		}
		sum.Sandboxes = append(sum.Sandboxes, st.Sandboxes...)
	}
	return sum
}

// PoolStats returns each pool's own numbers and languages, in order.
func (s *Set) PoolStats() []MemberStats {
	out := make([]MemberStats, 0, len(s.members))
	for _, m := range s.members {
		langs, _ := m.Pool.Languages()
		out = append(out, MemberStats{Name: m.Name, Languages: langs, Stats: m.Pool.Stats()})
	}
	return out
}

// Close closes every pool.
func (s *Set) Close(ctx context.Context) error {
	var errs []error
	for _, m := range s.members {
		if err := m.Pool.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("pool %s: %w", m.Name, err))
		}
	}
	return errors.Join(errs...)
}
