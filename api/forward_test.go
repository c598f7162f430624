package api

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// directory is an in-memory replica directory with replica.Directory's rules, shared by
// the replicas of a test; each replica sees it through as(instance).
type directory struct {
	mu    sync.Mutex
	peers map[string]string // instance → URL
	own   map[string]string // key → instance
	obs   map[string]*ObserverLog
}

func newDirectory() *directory {
	return &directory{peers: map[string]string{}, own: map[string]string{}, obs: map[string]*ObserverLog{}}
}

type dirView struct {
	d        *directory
	instance string
}

func (d *directory) as(instance string) dirView { return dirView{d, instance} }

func (v dirView) Claim(_ context.Context, key string, _ time.Duration) (string, string, error) {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	if cur, ok := v.d.own[key]; ok && cur != v.instance {
		if url := v.d.peers[cur]; url != "" {
			return url, cur, nil
		}
	}
	v.d.own[key] = v.instance
	return "", v.instance, nil
}

func (v dirView) Owner(_ context.Context, key string) (string, string, error) {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	cur := v.d.own[key]
	if cur == "" || cur == v.instance || v.d.peers[cur] == "" {
		return "", "", nil
	}
	return v.d.peers[cur], cur, nil
}

func (v dirView) Peer(_ context.Context, instance string) (string, error) {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	return v.d.peers[instance], nil
}

func (v dirView) TakeOver(_ context.Context, key, gone string, _ time.Duration) (bool, error) {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	if v.d.own[key] != gone {
		return false, nil
	}
	v.d.own[key] = v.instance
	return true, nil
}

func (v dirView) Release(_ context.Context, key string) error {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	if v.d.own[key] == v.instance {
		delete(v.d.own, key)
	}
	return nil
}

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// replica is a harness that is one of several replicas sharing dir.
func replica(t *testing.T, dir *directory, instance string) (*Harness, *httptest.Server) {
	obs := &ObserverLog{}
	h := NewHarness(t, HarnessConfig{InstanceID: instance, Observer: obs, Replicas: Replicas{
		Peers: dir.as(instance), Secret: testSecret, SessionTTL: time.Minute, RunTTL: time.Minute, MCPTTL: time.Minute}})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	dir.mu.Lock()
	dir.peers[instance], dir.obs[instance] = srv.URL, obs
	dir.mu.Unlock()
	return h, srv
}

func (h *Harness) runs() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.reqs)
}

func postJSON(t *testing.T, url string, body string, header http.Header) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp, out
}

// A call of a session owned by another replica runs there; one of a session nobody
// owns runs where it lands, which then owns it.
func TestForwardToOwner(t *testing.T) {
	dir := newDirectory()
	a, srvA := replica(t, dir, "a")
	b, srvB := replica(t, dir, "b")

	_, first := postJSON(t, srvB.URL+"/exec", `{"code":"x = 1","lang":"py"}`, nil)
	sid, _ := first["session_id"].(string)
	if sid == "" || b.runs() != 1 {
		t.Fatalf("first call on b: %v (b ran %d)", first, b.runs())
	}
	if owner := dir.own[sessionKey(sid)]; owner != "b" {
		t.Fatalf("the session is owned by %q after its first call on b", owner)
	}
	resp, out := postJSON(t, srvA.URL+"/exec", `{"code":"x","lang":"py","session_id":"`+sid+`"}`, nil)
	if resp.StatusCode != http.StatusOK || out["session_id"] != sid || a.runs() != 0 || b.runs() != 2 {
		t.Fatalf("call through a: %d %v; a ran %d, b ran %d, want b to run it", resp.StatusCode, out, a.runs(), b.runs())
	}

	// b dies: its URL no longer answers, though it is still announced.
	srvB.Close()
	resp, out = postJSON(t, srvA.URL+"/exec", `{"code":"x","lang":"py","session_id":"`+sid+`"}`, nil)
	if resp.StatusCode != http.StatusOK || a.runs() != 1 {
		t.Fatalf("call through a with b dead: %d %v; a ran %d, want a to serve it", resp.StatusCode, out, a.runs())
	}
	if owner := dir.own[sessionKey(sid)]; owner != "a" {
		t.Errorf("the session is owned by %q after a served it in place of dead b, want a", owner)
	}
	// Each crossing is counted where it happened (the metric kiln_replica_forwards_total),
	// once the request is over: after its answer reached the client.
	want := map[string][]string{"a": {"/exec " + ForwardedOut, "/exec " + PassedOver}, "b": {"/exec " + ForwardedIn}}
	for instance, obs := range dir.obs {
		deadline := time.Now().Add(5 * time.Second)
		got := obs.ForwardedSeen()
		for !slices.Equal(got, want[instance]) && len(got) < len(want[instance]) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			got = obs.ForwardedSeen()
		}
		if !slices.Equal(got, want[instance]) {
			t.Errorf("replica %s observed crossings %q, want %q", instance, got, want[instance])
		}
	}
}

// brokenOwner is a replica that takes connections and drops each request unanswered, as a
// kiln dying mid-answer does; after die, the next request it takes is its last: it stops
// listening before dropping it, as a killed kiln's port goes with it.
func brokenOwner(t *testing.T) (url string, die func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var dying atomic.Bool
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = http.ReadRequest(bufio.NewReader(c))
			if dying.Load() {
				_ = ln.Close()
			}
			_ = c.Close()
		}
	}()
	return "http://" + ln.Addr().String(), func() { dying.Store(true) }
}

// An owner that broke while answering: while it still takes connections, the client is
// told to retry; when it no longer does, it is gone, and the call is served where it
// landed (from the stored state).
func TestForwardOwnerBreaksMidAnswer(t *testing.T) {
	dir := newDirectory()
	a, srvA := replica(t, dir, "a")
	_, first := postJSON(t, srvA.URL+"/exec", `{"code":"x = 1","lang":"py"}`, nil)
	sid, _ := first["session_id"].(string)
	url, die := brokenOwner(t)
	dir.mu.Lock()
	dir.peers["c"], dir.own[sessionKey(sid)] = url, "c"
	dir.mu.Unlock()

	resp, out := postJSON(t, srvA.URL+"/exec", `{"code":"x","lang":"py","session_id":"`+sid+`"}`, nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || a.runs() != 1 {
		t.Fatalf("owner alive but failing: %d %v (Retry-After %q), a ran %d; want 503, Retry-After 1, not run on a",
			resp.StatusCode, out, resp.Header.Get("Retry-After"), a.runs())
	}
	// It dies with the next request under way: the connection breaks, and no new one is
	// taken.
	die()
	resp, out = postJSON(t, srvA.URL+"/exec", `{"code":"x","lang":"py","session_id":"`+sid+`"}`, nil)
	if resp.StatusCode != http.StatusOK || a.runs() != 2 {
		t.Fatalf("owner gone: %d %v, a ran %d; want a to serve it", resp.StatusCode, out, a.runs())
	}
	dir.mu.Lock()
	owner := dir.own[sessionKey(sid)]
	dir.mu.Unlock()
	if owner != "a" {
		t.Errorf("the session is owned by %q after a served it in place of gone c, want a", owner)
	}
}

// A forwarded request is served by the replica it reaches, never forwarded again; one
// whose signature does not hold is refused.
func TestPeerSignature(t *testing.T) {
	dir := newDirectory()
	a, srvA := replica(t, dir, "a")
	dir.own[sessionKey("s1")] = "ghost"
	dir.peers["ghost"] = "http://127.0.0.1:1" // would be forwarded to, if not signed

	sign := func(secret []byte, at time.Time) http.Header {
		ts := strconv.FormatInt(at.Unix(), 10)
		return http.Header{peerHeader: {"b"}, peerTimeHeader: {ts},
			peerSigHeader: {peerSignature(secret, "b", ts, http.MethodPost, "/exec")}}
	}
	resp, out := postJSON(t, srvA.URL+"/exec", `{"code":"1","lang":"py"}`, sign(testSecret, time.Now()))
	if resp.StatusCode != http.StatusOK || a.runs() != 1 {
		t.Fatalf("signed forward: %d %v, want it served", resp.StatusCode, out)
	}
	for name, h := range map[string]http.Header{
		"another secret": sign([]byte("another secret, as long as the right one"), time.Now()),
		"too old":        sign(testSecret, time.Now().Add(-2*peerClockSkew)),
		"no signature":   {peerHeader: {"b"}, peerTimeHeader: {strconv.FormatInt(time.Now().Unix(), 10)}},
	} {
		resp, out := postJSON(t, srvA.URL+"/exec", `{"code":"1","lang":"py"}`, h)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(out["message"].(string), `"b"`) {
			t.Errorf("%s: %d %v, want 401 naming the replica", name, resp.StatusCode, out)
		}
	}
	if a.runs() != 1 {
		t.Errorf("a refused forward ran: %d runs", a.runs())
	}
}

// A continuation whose replica is gone gets a 404 that says so.
func TestContinuationOfAGoneReplica(t *testing.T) {
	dir := newDirectory()
	_, srvA := replica(t, dir, "a")
	resp, out := postJSON(t, srvA.URL+"/exec/programmatic", `{"continuation_token":"ghost.AAAAAAAAAAAAAAAAAAAAA.secret","tool_results":[]}`, nil)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(out["message"].(string), "gone") {
		t.Errorf("continuation of a gone replica: %d %v", resp.StatusCode, out)
	}
}
