package api

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/kilnsh/kiln"
)

// RateLimit bounds what one caller may ask of kiln. A caller is an API key (its
// fingerprint) or, when authentication is off, a client address. Zero turns a limit off.
type RateLimit struct {
	// PerMinute is the requests per minute on the execution and data routes, as a
	// token bucket: a caller may spend a whole minute's worth at once, and then one
	// more every 60/PerMinute seconds.
	PerMinute int
	// MaxCallers bounds the callers tracked at once; default 100000.
	MaxCallers int
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// sweepEvery is how often the limiter forgets callers it no longer needs to remember.
const sweepEvery = time.Minute

// limiter keeps one token bucket (golang.org/x/time/rate) per caller. A caller whose
// bucket has filled up again is indistinguishable from one never seen, so it is
// dropped: the map holds only callers active lately. (How many calls a caller has in
// flight is session's to count, for every front end: session.Service.Admit.)
type limiter struct {
	cfg   RateLimit
	every rate.Limit // tokens per second
	now   func() time.Time

	mu        sync.Mutex
	callers   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	tokens *rate.Limiter // nil when there is no rate limit
}

func newLimiter(cfg RateLimit) *limiter {
	if cfg.MaxCallers <= 0 {
		cfg.MaxCallers = 100_000
	}
	l := &limiter{cfg: cfg, every: rate.Limit(float64(cfg.PerMinute) / 60), now: cfg.Now, callers: map[string]*bucket{}}
	if l.now == nil {
		l.now = time.Now
	}
	l.lastSweep = l.now()
	return l
}

// get returns the caller's entry, creating it with a full bucket; l.mu must be held.
func (l *limiter) get(key string, now time.Time) *bucket {
	c, ok := l.callers[key]
	if !ok {
		l.sweepLocked(now)
		c = &bucket{}
		if l.cfg.PerMinute > 0 {
			c.tokens = rate.NewLimiter(l.every, l.cfg.PerMinute) // starts full
		}
		l.callers[key] = c
	}
	return c
}

// allow spends one request of key's budget. When the budget is spent it returns false
// and how long until the next request would be allowed.
func (l *limiter) allow(key string) (bool, time.Duration) {
	if l.cfg.PerMinute <= 0 {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	c := l.get(key, now)
	r := c.tokens.ReserveN(now, 1)
	if wait := r.DelayFrom(now); wait > 0 {
		r.CancelAt(now) // refused: the token is not spent
		return false, wait
	}
	return true, 0
}

// sweepLocked forgets idle callers, at most once per sweepEvery unless the map is
// full; when it is still full, it forgets callers even if their bucket is not full, so
// memory stays bounded whatever the callers do.
func (l *limiter) sweepLocked(now time.Time) {
	full := len(l.callers) >= l.cfg.MaxCallers
	if !full && now.Sub(l.lastSweep) < sweepEvery {
		return
	}
	l.lastSweep = now
	for k, c := range l.callers {
		refilled := c.tokens == nil || c.tokens.TokensAt(now) >= float64(l.cfg.PerMinute)
		if refilled {
			delete(l.callers, k)
		}
	}
	for k := range l.callers {
		if len(l.callers) < l.cfg.MaxCallers {
			break
		}
		delete(l.callers, k)
	}
}

// size returns how many callers are tracked.
func (l *limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.callers)
}

// callerKey names the caller of r for the limits: its key's fingerprint, or, when
// authentication is off, the address the connection comes from. Forwarding headers
// are not trusted (a client writes them); behind a proxy every caller shares the
// proxy's address. IPv6 clients are grouped by /64, what one host usually holds.
func callerKey(r *http.Request) string {
	if ri := info(r); ri.user != "" {
		return "user:" + ri.owner + "\x00" + ri.user // each user of a tenant has a budget of their own
	} else if ri.owner != "" {
		return "key:" + ri.owner
	} else if ri.client != "" {
		return ri.client // found once, when the request came in
	}
	return clientAddr(r)
}

// clientAddr is the address r's connection comes from, as the limits count it.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return "addr:" + host
	}
	addr = addr.Unmap()
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return "net:" + p.String()
	}
	return "addr:" + addr.String()
}

// limitRate answers 429 once the caller has spent its requests for the minute.
func (s *Server) limitRate(next http.Handler) http.Handler {
	if s.limiter.cfg.PerMinute <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A forwarded request was counted by the replica it reached first.
		if forwarded(r) {
			next.ServeHTTP(w, r)
			return
		}
		if ok, wait := s.limiter.allow(callerKey(r)); !ok {
			info(r).quota = kiln.QuotaRate
			writeError(w, r, &kiln.Error{
				Code:       kiln.CodeRateLimited,
				Message:    fmt.Sprintf("rate quota: this caller made RATE_LIMIT_PER_MINUTE=%d requests in the last minute; retry later", s.limiter.cfg.PerMinute),
				RetryAfter: retrySeconds(wait),
				Quota:      kiln.QuotaRate,
			})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// retrySeconds rounds a wait up to whole seconds, at least one.
func retrySeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
