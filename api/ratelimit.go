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
	// Concurrent is the /exec calls one caller may have in flight at once.
	Concurrent int
	// MaxCallers bounds the callers tracked at once; default 100000.
	MaxCallers int
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// sweepEvery is how often the limiter forgets callers it no longer needs to remember.
const sweepEvery = time.Minute

// limiter keeps one token bucket (golang.org/x/time/rate) and one in-flight count per
// caller. A caller whose
// bucket has filled up again and who has nothing in flight is indistinguishable from
// one never seen, so it is dropped: the map holds only callers active lately.
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
	active int
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

// acquire takes one of key's concurrent /exec slots; the caller must call the
// returned release exactly once. It returns false when every slot is taken.
func (l *limiter) acquire(key string) (release func(), ok bool) {
	if l.cfg.Concurrent <= 0 {
		return func() {}, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.get(key, l.now())
	if c.active >= l.cfg.Concurrent {
		return nil, false
	}
	c.active++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			c.active--
			l.mu.Unlock()
		})
	}, true
}

// sweepLocked forgets idle callers, at most once per sweepEvery unless the map is
// full; when it is still full, it forgets callers with nothing in flight even if
// their bucket is not full, so memory stays bounded whatever the callers do.
func (l *limiter) sweepLocked(now time.Time) {
	full := len(l.callers) >= l.cfg.MaxCallers
	if !full && now.Sub(l.lastSweep) < sweepEvery {
		return
	}
	l.lastSweep = now
	for k, c := range l.callers {
		refilled := c.tokens == nil || c.tokens.TokensAt(now) >= float64(l.cfg.PerMinute)
		if c.active == 0 && refilled {
			delete(l.callers, k)
		}
	}
	for k, c := range l.callers {
		if len(l.callers) < l.cfg.MaxCallers {
			break
		}
		if c.active == 0 {
			delete(l.callers, k)
		}
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
	}
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

// limitConcurrency answers 429 when the caller already has its allowance of
// executions in flight.
func (s *Server) limitConcurrency(next http.Handler) http.Handler {
	if s.limiter.cfg.Concurrent <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		release, ok := s.limiter.acquire(callerKey(r))
		if !ok {
			// Nobody knows when a run ends; a second is a polite first retry.
			writeError(w, r, &kiln.Error{Code: kiln.CodeRateLimited, Message: s.limiter.concurrencyMessage(), RetryAfter: 1, Quota: kiln.QuotaConcurrency})
			return
		}
		// The slot is free once the run is over, before the answer goes out (see
		// runOver): a client that has its answer may start its next run at once.
		var once sync.Once
		info(r).runOver = func() { once.Do(release) }
		defer info(r).runOver()
		next.ServeHTTP(w, r)
	})
}

// concurrencyMessage says which quota a caller with too many executions in flight met.
func (l *limiter) concurrencyMessage() string {
	return fmt.Sprintf("concurrency quota: this caller (a user under signed tokens, else an API key) has MAX_CONCURRENT_PER_KEY=%d executions in flight; wait for one to finish", l.cfg.Concurrent)
}

// retrySeconds rounds a wait up to whole seconds, at least one.
func retrySeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
