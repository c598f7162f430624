package api

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnsh/kiln/replica"
	"github.com/kilnsh/kiln/replica/replicatest"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// replicas are the replicas of a test, sharing one in-memory directory, each with the
// observer that hears of its requests.
type replicas struct {
	dir *replicatest.Directory
	obs map[string]*ObserverLog
}

func newReplicas() *replicas {
	return &replicas{dir: replicatest.New(), obs: map[string]*ObserverLog{}}
}

// start starts a harness that is the replica instance.
func (rs *replicas) start(t *testing.T, instance string) (*Harness, *httptest.Server) {
	t.Helper()
	obs := &ObserverLog{}
	h := NewHarness(t, HarnessConfig{InstanceID: instance, Observer: obs, Replicas: replica.Config{
		Peers: rs.dir.As(instance), Secret: testSecret, SessionTTL: time.Minute, RunTTL: time.Minute, MCPTTL: time.Minute}})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	rs.dir.Announce(instance, srv.URL)
	rs.obs[instance] = obs
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
	rs := newReplicas()
	a, srvA := rs.start(t, "a")
	b, srvB := rs.start(t, "b")

	_, first := postJSON(t, srvB.URL+"/exec", `{"code":"x = 1","lang":"py"}`, nil)
	sid, _ := first["session_id"].(string)
	if sid == "" || b.runs() != 1 {
		t.Fatalf("first call on b: %v (b ran %d)", first, b.runs())
	}
	if owner := rs.dir.OwnerOf(replica.Session.Key(sid)); owner != "b" {
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
	if owner := rs.dir.OwnerOf(replica.Session.Key(sid)); owner != "a" {
		t.Errorf("the session is owned by %q after a served it in place of dead b, want a", owner)
	}
	// Each crossing is counted where it happened (the metric kiln_replica_forwards_total),
	// once the request is over: after its answer reached the client.
	want := map[string][]string{"a": {"/exec " + ForwardedOut, "/exec " + PassedOver}, "b": {"/exec " + ForwardedIn}}
	for instance, obs := range rs.obs {
		if !waitSeen(obs, want[instance]) {
			t.Errorf("replica %s observed crossings %q, want %q", instance, obs.ForwardedSeen(), want[instance])
		}
	}
}

// A session's state is read, replaced and forked on the replica that owns the session,
// where its live sandbox and any state waiting for its store are.
func TestStateRoutesGoToTheOwner(t *testing.T) {
	rs := newReplicas()
	_, srvA := rs.start(t, "a")
	b, srvB := rs.start(t, "b")
	_, first := postJSON(t, srvB.URL+"/exec", `{"code":"x = 1","lang":"py"}`, nil)
	sid, _ := first["session_id"].(string)
	if sid == "" || b.runs() != 1 {
		t.Fatalf("first call on b: %v", first)
	}
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/state/" + sid}, {http.MethodGet, "/state/" + sid + "/info"},
		{http.MethodPost, "/sessions/" + sid + "/fork"},
	} {
		req, _ := http.NewRequest(r.method, srvA.URL+r.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	want := []string{"/state/{session_id} " + ForwardedOut, "/state/{session_id}/info " + ForwardedOut,
		"/sessions/{session_id}/fork " + ForwardedOut}
	if !waitSeen(rs.obs["a"], want) {
		t.Errorf("a observed crossings %q, want %q", rs.obs["a"].ForwardedSeen(), want)
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
	rs := newReplicas()
	a, srvA := rs.start(t, "a")
	_, first := postJSON(t, srvA.URL+"/exec", `{"code":"x = 1","lang":"py"}`, nil)
	sid, _ := first["session_id"].(string)
	url, die := brokenOwner(t)
	rs.dir.Announce("c", url)
	rs.dir.SetOwner(replica.Session.Key(sid), "c")

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
	if owner := rs.dir.OwnerOf(replica.Session.Key(sid)); owner != "a" {
		t.Errorf("the session is owned by %q after a served it in place of gone c, want a", owner)
	}
}

// A forwarded request is served by the replica it reaches, never forwarded again; one
// whose signature does not hold is refused, naming the replica it claims to come from.
// (What makes a signature hold is replica's to test.)
func TestPeerSignature(t *testing.T) {
	rs := newReplicas()
	a, srvA := rs.start(t, "a")
	_, first := postJSON(t, srvA.URL+"/exec", `{"code":"x = 1","lang":"py"}`, nil)
	sid, _ := first["session_id"].(string)
	var ghostCalls atomic.Int32
	ghost := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ghostCalls.Add(1)
		w.WriteHeader(http.StatusTeapot)
	}))
	t.Cleanup(ghost.Close)
	rs.dir.Announce("ghost", ghost.URL) // a forwards the session's calls there, unless signed
	rs.dir.SetOwner(replica.Session.Key(sid), "ghost")
	call := `{"code":"x","lang":"py","session_id":"` + sid + `"}`

	sign := func(secret []byte, body string) http.Header {
		req := httptest.NewRequest(http.MethodPost, "/exec", nil)
		replica.NewForwarder("b", replica.Config{Secret: secret}).Sign(req, "a", []byte(body))
		h := http.Header{}
		for _, name := range []string{replica.PeerHeader, replica.TimeHeader, replica.NonceHeader, replica.SignatureHeader, replica.Signature2Header} {
			h[name] = req.Header[name]
		}
		return h
	}
	signed := sign(testSecret, call)
	resp, out := postJSON(t, srvA.URL+"/exec", call, signed)
	if resp.StatusCode != http.StatusOK || a.runs() != 2 || ghostCalls.Load() != 0 {
		t.Fatalf("signed forward: %d %v, a ran %d, the owner had %d calls; want it served on a",
			resp.StatusCode, out, a.runs(), ghostCalls.Load())
	}
	if want := []string{"/exec " + ForwardedIn}; !waitSeen(rs.obs["a"], want) {
		t.Errorf("a observed crossings %q, want %q", rs.obs["a"].ForwardedSeen(), want)
	}
	if resp, _ := postJSON(t, srvA.URL+"/exec", call, nil); resp.StatusCode != http.StatusTeapot || ghostCalls.Load() != 1 {
		t.Fatalf("unsigned call of the session: %d, the owner had %d calls; want it forwarded there", resp.StatusCode, ghostCalls.Load())
	}
	withKey := sign(testSecret, call)
	withKey.Set("X-Api-Key", "a caller's key the forward did not carry")
	for name, h := range map[string]http.Header{
		"another secret": sign([]byte("another secret, as long as the right one"), call),
		"another body":   sign(testSecret, `{"code":"import os; os.remove('/etc/passwd')","lang":"py","session_id":"`+sid+`"}`),
		"another caller": withKey,
		"replayed":       signed,
		"no signature":   {replica.PeerHeader: {"b"}, replica.TimeHeader: {strconv.FormatInt(time.Now().Unix(), 10)}, replica.Signature2Header: {"00"}},
	} {
		resp, out := postJSON(t, srvA.URL+"/exec", call, h)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(out["message"].(string), `"b"`) {
			t.Errorf("%s: %d %v, want 401 naming the replica", name, resp.StatusCode, out)
		}
	}
	if a.runs() != 2 || ghostCalls.Load() != 1 {
		t.Errorf("a refused forward ran: a ran %d, the owner had %d calls", a.runs(), ghostCalls.Load())
	}
	// A replica of the version before signs with version 1 alone: its forward is served as
	// a call straight from its caller, so it goes where the session lives.
	v1 := sign(testSecret, call)
	delete(v1, replica.Signature2Header)
	if resp, _ := postJSON(t, srvA.URL+"/exec", call, v1); resp.StatusCode != http.StatusTeapot || ghostCalls.Load() != 2 || a.runs() != 2 {
		t.Errorf("a version 1 forward: %d, the owner had %d calls, a ran %d; want it routed as a caller's", resp.StatusCode, ghostCalls.Load(), a.runs())
	}
}

// waitSeen waits, a few seconds at most, for obs to have heard of the crossings want
// (an observer hears of a request after its answer), and reports whether it did.
func waitSeen(obs *ObserverLog, want []string) bool {
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(obs.ForwardedSeen(), want) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return slices.Equal(obs.ForwardedSeen(), want)
}

// A continuation whose replica is gone gets a 404 that says so.
func TestContinuationOfAGoneReplica(t *testing.T) {
	rs := newReplicas()
	_, srvA := rs.start(t, "a")
	resp, out := postJSON(t, srvA.URL+"/exec/programmatic", `{"continuation_token":"ghost.AAAAAAAAAAAAAAAAAAAAA.secret","tool_results":[]}`, nil)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(out["message"].(string), "gone") {
		t.Errorf("continuation of a gone replica: %d %v", resp.StatusCode, out)
	}
}
