package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
)

// gatedRun holds every run until gate closes, or its caller leaves.
func gatedRun(gate chan struct{}) func(context.Context, executor.Request) (*executor.Result, error) {
	return func(ctx context.Context, req executor.Request) (*executor.Result, error) {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &executor.Result{Status: execution.StatusOK}, nil
	}
}

func limitedServer(t *testing.T, keys []string, gate chan struct{}, rl RateLimit) *Harness {
	t.Helper()
	return NewHarness(t, HarnessConfig{Keys: keys, RateLimit: rl, Run: gatedRun(gate)})
}

// call sends one request through h as remote, with key when not empty.
func call(h http.Handler, method, path, key, remote string) *httptest.ResponseRecorder {
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"code":"print(1)"}`)
	}
	r := httptest.NewRequest(method, path, body)
	r.RemoteAddr = remote
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		r.Header.Set("X-API-Key", key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// checkRateLimited checks a 429 against api.md: the envelope's code, the
// retry_after_seconds field and a matching Retry-After header.
func checkRateLimited(t *testing.T, w *httptest.ResponseRecorder, wantRetry int) {
	t.Helper()
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("got status %d, want 429: %s", w.Code, w.Body)
	}
	var body struct {
		Error      string `json:"error"`
		RequestID  string `json:"request_id"`
		RetryAfter int    `json:"retry_after_seconds"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if body.Error != "rate_limited" || body.RequestID == "" {
		t.Errorf("got error %q request_id %q, want rate_limited with an id", body.Error, body.RequestID)
	}
	if body.RetryAfter != wantRetry {
		t.Errorf("got retry_after_seconds %d, want %d", body.RetryAfter, wantRetry)
	}
	if got := w.Header().Get("Retry-After"); got != strconv.Itoa(wantRetry) {
		t.Errorf("got Retry-After %q, want %d", got, wantRetry)
	}
}

func TestRateLimitPerKey(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	h := limitedServer(t, []string{"key-a", "key-b"}, closedGate(), RateLimit{PerMinute: 2, Now: c.now})
	const addr = "192.0.2.1:1000"
	// The execution and data routes share one budget per key, under / and /v1.
	if w := call(h, http.MethodPost, "/exec", "key-a", addr); w.Code != http.StatusOK {
		t.Fatalf("first call: %d %s", w.Code, w.Body)
	}
	if w := call(h, http.MethodGet, "/v1/files/abc", "key-a", addr); w.Code != http.StatusOK {
		t.Fatalf("second call: %d %s", w.Code, w.Body)
	}
	checkRateLimited(t, call(h, http.MethodPost, "/v1/exec", "key-a", addr), 30)
	checkRateLimited(t, call(h, http.MethodGet, "/sessions/abc", "key-a", addr), 30)

	t.Run("other key, same address", func(t *testing.T) {
		if w := call(h, http.MethodPost, "/exec", "key-b", addr); w.Code != http.StatusOK {
			t.Errorf("got %d, want 200: %s", w.Code, w.Body)
		}
	})
	t.Run("health and monitoring are not limited", func(t *testing.T) {
		for _, p := range []string{"/health", "/health/ready", "/health/detailed"} {
			if w := call(h, http.MethodGet, p, "key-a", addr); w.Code != http.StatusOK {
				t.Errorf("%s: got %d, want 200", p, w.Code)
			}
		}
	})
	t.Run("a wrong key is refused before it costs anything", func(t *testing.T) {
		if w := call(h, http.MethodPost, "/exec", "nope", addr); w.Code != http.StatusUnauthorized {
			t.Errorf("got %d, want 401", w.Code)
		}
	})
	t.Run("the budget comes back", func(t *testing.T) {
		c.advance(29 * time.Second)
		checkRateLimited(t, call(h, http.MethodPost, "/exec", "key-a", addr), 1)
		c.advance(time.Second)
		if w := call(h, http.MethodPost, "/exec", "key-a", addr); w.Code != http.StatusOK {
			t.Errorf("after 30s: got %d, want 200", w.Code)
		}
	})
}

// Without keys, callers are told apart by address.
func TestRateLimitWithoutAuthByAddress(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	h := limitedServer(t, nil, closedGate(), RateLimit{PerMinute: 1, Now: c.now})
	if w := call(h, http.MethodPost, "/exec", "", "192.0.2.1:1000"); w.Code != http.StatusOK {
		t.Fatalf("first call: %d", w.Code)
	}
	checkRateLimited(t, call(h, http.MethodPost, "/exec", "", "192.0.2.1:2000"), 60)
	if w := call(h, http.MethodPost, "/exec", "", "192.0.2.2:1000"); w.Code != http.StatusOK {
		t.Errorf("another address: got %d, want 200", w.Code)
	}
	// A forwarding header is the client's word and changes nothing.
	r := httptest.NewRequest(http.MethodPost, "/exec", strings.NewReader(`{"code":"1"}`))
	r.RemoteAddr = "192.0.2.1:3000"
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Forwarded-For", "198.51.100.9")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	checkRateLimited(t, w, 60)
}

func TestConcurrencyPerKey(t *testing.T) {
	gate := make(chan struct{})
	obs := &ObserverLog{}
	h := NewHarness(t, HarnessConfig{
		Keys: []string{"key-a", "key-b"}, MaxConcurrent: 1, Run: gatedRun(gate), Observer: obs,
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(key string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/exec", strings.NewReader(`{"code":"1"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", key)
		return srv.Client().Do(req)
	}
	first := make(chan int, 1)
	go func() {
		resp, err := post("key-a")
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	for len(h.Requests()) == 0 {
		time.Sleep(time.Millisecond)
	}
	resp, err := post("key-a")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("second run of the same key: got %d Retry-After %q, want 429 with 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if got := obs.QuotasSeen(); !slices.Equal(got, []string{kiln.QuotaConcurrency}) {
		t.Errorf("quota refusals observed %v, want one for concurrency", got)
	}
	go func() {
		resp, err := post("key-b")
		if err == nil {
			resp.Body.Close()
		}
	}()
	for len(h.Requests()) < 2 {
		time.Sleep(time.Millisecond) // another key is not held back
	}
	close(gate)
	if got := <-first; got != http.StatusOK {
		t.Errorf("the first run: got %d, want 200", got)
	}
	// The slot is free again once the request is over (both runs observed done).
	for countStatus(obs.Seen(), http.StatusOK) < 2 {
		time.Sleep(time.Millisecond)
	}
	resp, err = post("key-a")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after the first run: got %d, want 200", resp.StatusCode)
	}
}

// countStatus counts the requests seen that answered status.
func countStatus(seen []Observed, status int) int {
	n := 0
	for _, o := range seen {
		if o.Status == status {
			n++
		}
	}
	return n
}

// TestConcurrencySlotFreeOnceAnswered: a client that has its answer may run again at
// once, even while the handler is still handing its sandbox back, as a client with
// several connections would. The release here waits for the client's next run to be
// answered; each run goes over a new connection (on a reused one the server reads the
// next request only once the handler is done).
func TestConcurrencySlotFreeOnceAnswered(t *testing.T) {
	nextAnswered := make(chan struct{})
	h := NewHarness(t, HarnessConfig{
		Keys: []string{"key-a"}, MaxConcurrent: 1,
		Release: func() {
			select {
			case <-nextAnswered:
			case <-time.After(5 * time.Second):
			}
		},
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func() int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/exec", strings.NewReader(`{"code":"1"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", "key-a")
		req.Close = true
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post(); got != http.StatusOK {
		t.Fatalf("first run: got %d, want 200", got)
	}
	got := post()
	close(nextAnswered)
	if got != http.StatusOK {
		t.Errorf("run after the first was answered: got %d, want 200", got)
	}
}

func TestSecurityHeaders(t *testing.T) {
	h := limitedServer(t, []string{"key-a"}, closedGate(), RateLimit{})
	want := map[string]string{
		"X-Content-Type-Options": "nosniff",
		"X-Frame-Options":        "DENY",
		"Referrer-Policy":        "no-referrer",
		"Cache-Control":          "no-store",
	}
	for _, tc := range []struct{ method, path, key string }{
		{http.MethodGet, "/health", ""},
		{http.MethodPost, "/exec", "key-a"},
		{http.MethodPost, "/exec", ""}, // a 401
		{http.MethodGet, "/no/such/route", ""},
	} {
		w := call(h, tc.method, tc.path, tc.key, "192.0.2.1:1")
		for k, v := range want {
			if got := w.Header().Get(k); got != v {
				t.Errorf("%s %s (%d): %s is %q, want %q", tc.method, tc.path, w.Code, k, got, v)
			}
		}
	}
}

func closedGate() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
