package programmatic

import (
	"regexp"
	"time"
)

// requestIDPattern is what a programmatic request's id may look like (a UUID is one).
var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// ValidRequestID reports whether id may name a programmatic request: 1 to 128
// characters of A-Z a-z 0-9 _ -. What the ledger keeps is bounded by it.
func ValidRequestID(id string) bool { return requestIDPattern.MatchString(id) }

// How long, and how many, request ids of ended runs and of early cancels are kept: a
// cancel that comes after the run ended, or before it started, still gets its answer.
const (
	recentFor = 10 * time.Minute
	recentMax = 10000
)

// ledger remembers, for a while, the request ids of runs that ended and of cancels that
// came before their run, each with its principal. The caller holds Runs.mu.
type ledger struct {
	done map[string]ledgerEntry
	// cancelled is keyed by principal and request id (cancelKey): a cancel one caller
	// records for an id stops only that caller's run, and never stands in another's way.
	cancelled map[string]ledgerEntry
}

// cancelKey is an early cancel's key in the ledger: principal's, of requestID (which
// cannot hold the separator).
func cancelKey(principal, requestID string) string { return principal + "\x00" + requestID }

type ledgerEntry struct {
	principal string
	at        time.Time
}

// remember adds an entry, first dropping those too old and, when recentMax are kept,
// as many others as it takes to make room (which ones, Go's map order decides). The
// caller holds mu.
func (p *Runs) remember(m map[string]ledgerEntry, key, principal string) map[string]ledgerEntry {
	now := p.clock()
	if m == nil {
		m = map[string]ledgerEntry{}
	}
	for id, e := range m {
		if now.Sub(e.at) > recentFor || len(m) >= recentMax {
			delete(m, id)
		}
	}
	m[key] = ledgerEntry{principal: principal, at: now}
	return m
}

// CancelledFirst reports, and forgets, a cancel of principal's that came before the run
// its request id names: that run must not start.
func (p *Runs) CancelledFirst(requestID, principal string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := cancelKey(principal, requestID)
	e, ok := p.recent.cancelled[key]
	if !ok || p.clock().Sub(e.at) > recentFor {
		return false
	}
	delete(p.recent.cancelled, key)
	return true
}

// Cancel is what the ledger made of a cancel (RecordCancel).
type Cancel int

// What became of a cancel of a request id that no run under way holds.
const (
	// CancelQueued: the id is recorded, and the run that comes with it will not start
	// (CancelledFirst).
	CancelQueued Cancel = iota
	// CancelEnded: the run the id named ended before.
	CancelEnded
	// CancelForeign: the id is another principal's run's, ended.
	CancelForeign
)

// RecordCancel answers principal's cancel of requestID, which no run under way holds
// (ByRequest found none), from the ledger; a cancel of an id it does not know is
// recorded, for principal's run that may still come with it. Another principal's
// early cancel of the same id changes nothing of it.
func (p *Runs) RecordCancel(requestID, principal string) Cancel {
	p.mu.Lock()
	defer p.mu.Unlock()
	if done, ended := p.recent.done[requestID]; ended {
		if done.principal != principal {
			return CancelForeign
		}
		return CancelEnded
	}
	p.recent.cancelled = p.remember(p.recent.cancelled, cancelKey(principal, requestID), principal)
	return CancelQueued
}
