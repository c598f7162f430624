package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// clock is a hand-turned clock for the limiter.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestLimiterAllow(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	l := newLimiter(RateLimit{PerMinute: 3, Now: c.now})
	steps := []struct {
		advance  time.Duration
		key      string
		want     bool
		wantWait time.Duration
	}{
		{0, "a", true, 0},
		{0, "a", true, 0},
		{0, "a", true, 0},
		{0, "a", false, 20 * time.Second}, // 3 a minute: one token every 20s
		{0, "b", true, 0},                 // another caller has its own budget
		{5 * time.Second, "a", false, 15 * time.Second},
		{15 * time.Second, "a", true, 0},
		{0, "a", false, 20 * time.Second},
		{2 * time.Minute, "a", true, 0}, // refilled, but never past the burst of 3
		{0, "a", true, 0},
		{0, "a", true, 0},
		{0, "a", false, 20 * time.Second},
	}
	for i, st := range steps {
		c.advance(st.advance)
		ok, wait := l.allow(st.key)
		if ok != st.want || wait.Round(time.Millisecond) != st.wantWait {
			t.Errorf("step %d (%s): got allow %v wait %s, want %v %s", i, st.key, ok, wait, st.want, st.wantWait)
		}
	}
}

// Callers that have gone quiet are forgotten, and a flood of new callers cannot grow
// the table past its bound.
func TestLimiterForgetsIdleCallers(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	l := newLimiter(RateLimit{PerMinute: 60, MaxCallers: 100, Now: c.now})
	for i := range 50 {
		l.allow(fmt.Sprint("quiet-", i))
	}
	if got := l.size(); got != 50 {
		t.Fatalf("tracking %d callers, want 50", got)
	}
	c.advance(2 * time.Minute)
	l.allow("new") // the first new caller after sweepEvery triggers a sweep
	if got := l.size(); got != 1 {
		t.Errorf("after two idle minutes tracking %d callers, want 1 (new)", got)
	}
	for i := range 1000 {
		l.allow(fmt.Sprint("flood-", i))
	}
	if got := l.size(); got > 100 {
		t.Errorf("tracking %d callers, want at most 100", got)
	}
}

func TestCallerKey(t *testing.T) {
	tests := []struct {
		remote, owner, want string
	}{
		{"192.0.2.7:4321", "", "addr:192.0.2.7"},
		{"192.0.2.7:4321", "abcd", "key:abcd"},
		{"[2001:db8:1:2:3:4:5:6]:80", "", "net:2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:80", "", "net:2001:db8:1:2::/64"},
		{"[::ffff:192.0.2.7]:80", "", "addr:192.0.2.7"},
		{"not-an-address", "", "addr:not-an-address"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tt.remote
		if tt.owner != "" {
			r = r.WithContext(context.WithValue(r.Context(), keyRequest, &reqInfo{owner: tt.owner}))
		}
		if got := callerKey(r); got != tt.want {
			t.Errorf("callerKey(%q, owner %q) = %q, want %q", tt.remote, tt.owner, got, tt.want)
		}
	}
}
