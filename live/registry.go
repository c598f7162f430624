package live

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/kilnsh/kiln/sandbox"
)

// Why a live sandbox ends: the label of kiln_live_sessions_ended_total.
const (
	EndIdle     = "idle"     // no call for Config.Idle
	EndLifetime = "lifetime" // older than Config.Lifetime
	EndCapacity = "capacity" // to make room under Config.Max (Put says whose goes)
	EndQuota    = "quota"    // its owner's least recently used, past Config.PerOwner
	EndDied     = "died"     // its sandbox died, or its run left it unusable (a kill, out of memory)
	EndDiscard  = "discard"  // its session let it go: a rollback, a deleted session
	EndStale    = "stale"    // its session's stored state changed elsewhere (another instance)
	EndShutdown = "shutdown" // kiln stops
)

// How a flush of a pending namespace went (Registry.CountFlush).
const (
	FlushStored    = "stored"    // its state was stored
	FlushUnchanged = "unchanged" // nothing had changed since the state stored before it
	FlushStale     = "stale"     // its session's stored state had changed elsewhere: not written back
	FlushFailed    = "failed"    // the capture or the store failed: the session resumes an older state
)

// Config bounds the live sandboxes.
type Config struct {
	Max int // live sandboxes at once, at most
	// PerOwner bounds the live sandboxes of one owner (QUOTA_LIVE_SESSIONS); 0 is no
	// bound but Max.
	PerOwner int
	Idle     time.Duration // a sandbox with no call for this long ends
	Lifetime time.Duration // a sandbox this old ends, whatever its use
}

// Binding is one session's live sandbox, with what the session layer knows of it.
type Binding struct {
	Session string
	// Owner is whose share the sandbox counts against: the caller's principal (a user
	// under signed tokens, else a key).
	Owner   string
	Sandbox sandbox.Sandbox
	// Files are the session's files the sandbox holds in /mnt/data: path -> file id.
	Files map[string]string
	// StateToken names the capture the sandbox last made that the session's store
	// holds ("" when none does): the next call's state base.
	StateToken string
	// StateSHA256 is the digest of the state the sandbox's namespace last left with kiln
	// ("" for none): the session's stored state, or the capture that waits for its store.
	// A session whose stored state is neither was changed elsewhere, and its sandbox is
	// stale.
	StateSHA256 string
	Memory      int64 // the REPL's resident memory after its last call
	Created     time.Time
	LastUsed    time.Time
	// Pending says the namespace is ahead of every capture kiln holds: a call answered
	// before its state was captured (STATE_SAVE_DELAY_MS), and the capture that follows
	// the answer has not run yet.
	Pending bool
	// StateNotes is what the last capture left out (its state_error), "" for nothing: a
	// pending answer says it.
	StateNotes string
	// MilliCPU and MemoryMB are the limits the last call left the sandbox with (0: the
	// pool's): a flush keeps them.
	MilliCPU, MemoryMB int64
}

// flushed are the reasons a pending binding's sandbox can still be captured before it
// goes: it can still answer, and nothing newer of its session is stored.
var flushed = map[string]bool{EndIdle: true, EndLifetime: true, EndCapacity: true, EndQuota: true, EndShutdown: true}

// Answers reports whether a sandbox that ends for reason can still be captured first: it
// ends idle, past its lifetime, for room, for a quota or at shutdown.
func Answers(reason string) bool { return flushed[reason] }

// Counts are the registry's totals since it started.
type Counts struct {
	Calls   map[string]int64 // calls by runtime status: new, reused, resumed
	Ended   map[string]int64 // live sandboxes ended, by reason (End*)
	Flushes map[string]int64 // flushes of pending namespaces, by outcome (Flush*)
}

func newCounts() Counts {
	return Counts{Calls: map[string]int64{}, Ended: map[string]int64{}, Flushes: map[string]int64{}}
}

// Stats is a snapshot of the registry.
type Stats struct {
	Idle, Busy int
	Memory     int64 // resident memory of the live sandboxes, as their last calls left it
	Max        int
	Counts     Counts
}

// Registry holds the live sandboxes. Create it with New, run Run in the background,
// and Close it at shutdown.
type Registry struct {
	cfg     Config
	release func(sandbox.Sandbox) // gives a sandbox back to its pool, which removes it
	log     *slog.Logger
	now     func() time.Time

	// flush hears of a binding whose sandbox goes with something of its own (SetFlush);
	// flushing counts the pending ones under way, which Close waits for.
	flush    func(b *Binding, reason string)
	flushing sync.WaitGroup

	mu     sync.Mutex
	idle   map[string]*Binding // by session, between calls
	busy   map[string]*Binding // by session, lent to a call
	closed bool
	counts Counts
}

// New returns a Registry; release gives an ended sandbox back to its pool.
func New(cfg Config, release func(sandbox.Sandbox), log *slog.Logger) *Registry {
	return &Registry{cfg: cfg, release: release, log: log, now: time.Now,
		idle: map[string]*Binding{}, busy: map[string]*Binding{},
		counts: newCounts()}
}

// SetFlush sets what hears of a binding whose sandbox ends, and why (End*), when it is
// pending or holds names its last capture left out (StateNotes): where the sandbox can
// still answer (Answers), a pending namespace can be captured first. For a pending one it
// runs in a goroutine of its own, the sandbox is released after it, and Close waits for
// it; for the other, before the sandbox is released. Set it before the first Put.
func (r *Registry) SetFlush(flush func(b *Binding, reason string)) { r.flush = flush }

// PendingSessions lists the sessions whose live sandbox's namespace is ahead of kiln's
// last capture of it, idle or lent to a call.
func (r *Registry) PendingSessions() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, set := range []map[string]*Binding{r.idle, r.busy} {
		for sid, b := range set {
			if b.Pending {
				out = append(out, sid)
			}
		}
	}
	return out
}

// IsPending reports whether the session has a live sandbox whose namespace is ahead of
// kiln's last capture of it, idle or lent to a call.
func (r *Registry) IsPending(session string) bool {
	return slices.Contains(r.PendingSessions(), session)
}

// TakePending lends the session's live sandbox as Take does, but only when it is idle
// and pending (its namespace ahead of kiln's last capture); nil otherwise, and then the
// binding is left as it was.
func (r *Registry) TakePending(session string) *Binding {
	r.mu.Lock()
	b := r.idle[session]
	if b == nil || !b.Pending {
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	return r.Take(session)
}

// Take lends the session's live sandbox to one call, or returns nil when the session
// has none (or only one that died or outlived its bounds, which ends now). The caller
// gives it back with Put, or ends it with End.
func (r *Registry) Take(session string) *Binding {
	r.mu.Lock()
	b := r.idle[session]
	if b == nil {
		r.mu.Unlock()
		return nil
	}
	delete(r.idle, session)
	reason := r.expiredLocked(b, r.now())
	if reason == "" {
		r.busy[session] = b
	}
	r.mu.Unlock()
	if reason != "" {
		r.end(b, reason)
		return nil
	}
	return b
}

// Put makes b its session's live sandbox for the next call: one lent by Take, or a new
// one. Past its owner's quota (PerOwner), the owner's own least recently used idle one
// ends. Past the cap (Max), one ends of an owner holding more than its fair share (the
// cap divided among the owners that hold some), the heaviest first, least recently used
// within: never one of an owner within its share. When there is none to end, b does.
// After Close, b ends.
func (r *Registry) Put(b *Binding) {
	now := r.now()
	b.LastUsed = now
	if b.Created.IsZero() {
		b.Created = now
	}
	r.mu.Lock()
	delete(r.busy, b.Session)
	var replaced *Binding
	var evicted []eviction
	reason := EndShutdown
	if !r.closed {
		reason = r.expiredLocked(b, now)
	}
	if reason == "" {
		if old := r.idle[b.Session]; old != nil && old != b {
			delete(r.idle, b.Session) // never two for one session: the older one goes
			replaced = old
		}
		reason, evicted = r.makeRoomLocked(b)
	}
	if reason == "" {
		r.idle[b.Session] = b
	}
	r.mu.Unlock()
	if replaced != nil {
		r.end(replaced, EndDiscard)
	}
	for _, e := range evicted {
		r.end(e.b, e.reason)
	}
	if reason != "" {
		r.end(b, reason)
	}
}

// ownedLocked counts the live sandboxes, idle and busy, by owner.
func (r *Registry) ownedLocked() map[string]int {
	counts := map[string]int{}
	for _, set := range []map[string]*Binding{r.idle, r.busy} {
		for _, o := range set {
			counts[o.Owner]++
		}
	}
	return counts
}

// eviction is a sandbox Put ends to make room, and why.
type eviction struct {
	b      *Binding
	reason string
}

// makeRoomLocked takes out of idle what must end for b to stay (Put), or says why b
// cannot: EndQuota when its owner's other ones are all busy, EndCapacity when no owner
// holds more than its share idle.
func (r *Registry) makeRoomLocked(b *Binding) (string, []eviction) {
	counts := r.ownedLocked()
	var evicted []eviction
	take := func(v *Binding, reason string) {
		delete(r.idle, v.Session)
		counts[v.Owner]--
		evicted = append(evicted, eviction{v, reason})
	}
	if r.cfg.PerOwner > 0 {
		for counts[b.Owner] >= r.cfg.PerOwner {
			v := r.leastRecentLocked(func(o *Binding) bool { return o.Owner == b.Owner })
			if v == nil {
				return EndQuota, evicted
			}
			take(v, EndQuota)
		}
	}
	for len(r.idle)+len(r.busy) >= max(r.cfg.Max, 1) {
		v := r.overShareLocked(b.Owner, counts)
		if v == nil {
			return EndCapacity, evicted // every one of those over their share is busy
		}
		take(v, EndCapacity)
	}
	return "", evicted
}

// overShareLocked is the idle sandbox to end for room: of the owner holding the most
// (counting the sandbox of newOwner's that needs the room), if that is more than its
// fair share of Max; the least recently used of that owner's. nil when every owner is
// within its share, or has none idle.
func (r *Registry) overShareLocked(newOwner string, counts map[string]int) *Binding {
	held := func(owner string) int {
		if owner == newOwner {
			return counts[owner] + 1
		}
		return counts[owner]
	}
	owners := map[string]bool{newOwner: true}
	for o, n := range counts {
		if n > 0 {
			owners[o] = true
		}
	}
	share := max(max(r.cfg.Max, 1)/len(owners), 1)
	var victim *Binding
	for _, v := range r.idle {
		n := held(v.Owner)
		if n <= share {
			continue
		}
		if victim == nil || n > held(victim.Owner) || (n == held(victim.Owner) && v.LastUsed.Before(victim.LastUsed)) {
			victim = v
		}
	}
	return victim
}

// End ends a sandbox lent by Take (or never put) that cannot serve again.
func (r *Registry) End(b *Binding, reason string) {
	r.mu.Lock()
	if r.busy[b.Session] == b {
		delete(r.busy, b.Session)
	}
	r.mu.Unlock()
	r.end(b, reason)
}

// EvictOldest ends an idle live sandbox, to make room for new work where the room is not
// kiln's to see (a cluster with no place for the pool's next sandbox): of the owner that
// holds the most, its least recently used. It reports whether there was one to end.
func (r *Registry) EvictOldest() bool {
	r.mu.Lock()
	counts := r.ownedLocked()
	var lru *Binding
	for _, v := range r.idle {
		if lru == nil || counts[v.Owner] > counts[lru.Owner] || (counts[v.Owner] == counts[lru.Owner] && v.LastUsed.Before(lru.LastUsed)) {
			lru = v
		}
	}
	if lru != nil {
		delete(r.idle, lru.Session)
	}
	r.mu.Unlock()
	if lru == nil {
		return false
	}
	r.end(lru, EndCapacity)
	return true
}

// Drop ends the session's idle live sandbox, if it has one (its session was deleted).
func (r *Registry) Drop(session, reason string) {
	r.mu.Lock()
	b := r.idle[session]
	delete(r.idle, session)
	r.mu.Unlock()
	if b != nil {
		r.end(b, reason)
	}
}

// Count records a call of a session by how it found its sandbox (new, reused, resumed).
func (r *Registry) Count(status string) {
	r.mu.Lock()
	r.counts.Calls[status]++
	r.mu.Unlock()
}

// Holds reports whether the sandbox with id is a live one.
func (r *Registry) Holds(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, set := range []map[string]*Binding{r.idle, r.busy} {
		for _, b := range set {
			if b.Sandbox.ID() == id {
				return true
			}
		}
	}
	return false
}

// Stats returns a snapshot of the registry.
func (r *Registry) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Stats{Idle: len(r.idle), Busy: len(r.busy), Max: r.cfg.Max, Counts: newCounts()}
	for _, set := range []map[string]*Binding{r.idle, r.busy} {
		for _, b := range set {
			st.Memory += b.Memory
		}
	}
	for k, v := range r.counts.Calls {
		st.Counts.Calls[k] = v
	}
	for k, v := range r.counts.Ended {
		st.Counts.Ended[k] = v
	}
	for k, v := range r.counts.Flushes {
		st.Counts.Flushes[k] = v
	}
	return st
}

// CountFlush counts a flush of a pending namespace by its outcome (Flush*).
func (r *Registry) CountFlush(outcome string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts.Flushes[outcome]++
}

// sweepEvery is how often Run looks for sandboxes past their bounds or dead.
const sweepEvery = time.Second

// Run ends idle sandboxes past their bounds, or dead, until ctx ends.
func (r *Registry) Run(ctx context.Context) {
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			r.sweep()
		}
	}
}

func (r *Registry) sweep() {
	now := r.now()
	r.mu.Lock()
	var ended []*Binding
	var reasons []string
	for session, b := range r.idle {
		if reason := r.expiredLocked(b, now); reason != "" {
			delete(r.idle, session)
			ended, reasons = append(ended, b), append(reasons, reason)
		}
	}
	r.mu.Unlock()
	for i, b := range ended {
		r.end(b, reasons[i])
	}
}

// Close ends every idle sandbox, flushing the pending ones (SetFlush), and waits for
// every flush under way; those lent to a call end when it puts them back.
func (r *Registry) Close() {
	r.mu.Lock()
	r.closed = true
	idle := r.idle
	r.idle = map[string]*Binding{}
	r.mu.Unlock()
	for _, b := range idle {
		r.end(b, EndShutdown)
	}
	r.flushing.Wait()
}

// expiredLocked says why b can serve no more, or "".
func (r *Registry) expiredLocked(b *Binding, now time.Time) string {
	select {
	case <-b.Sandbox.Done():
		return EndDied
	default:
	}
	switch {
	case r.cfg.Lifetime > 0 && !b.Created.IsZero() && now.Sub(b.Created) >= r.cfg.Lifetime:
		return EndLifetime
	case r.cfg.Idle > 0 && !b.LastUsed.IsZero() && now.Sub(b.LastUsed) >= r.cfg.Idle:
		return EndIdle
	}
	return ""
}

// leastRecentLocked is the least recently used idle sandbox of those keep takes (all
// when nil).
func (r *Registry) leastRecentLocked(keep func(*Binding) bool) *Binding {
	var lru *Binding
	for _, b := range r.idle {
		if keep != nil && !keep(b) {
			continue
		}
		if lru == nil || b.LastUsed.Before(lru.LastUsed) {
			lru = b
		}
	}
	return lru
}

// end counts b's end and gives its sandbox back.
func (r *Registry) end(b *Binding, reason string) {
	r.mu.Lock()
	r.counts.Ended[reason]++
	r.mu.Unlock()
	r.log.Info("live sandbox ended", "session", b.Session, "sandbox", b.Sandbox.ID(), "reason", reason)
	if b.Pending && r.flush != nil {
		r.flushing.Add(1)
		go func() {
			defer r.flushing.Done()
			r.flush(b, reason)
			r.release(b.Sandbox)
		}()
		return
	}
	if b.StateNotes != "" && r.flush != nil {
		r.flush(b, reason) // nothing to capture: only what goes with the sandbox is told
	}
	r.release(b.Sandbox)
}
