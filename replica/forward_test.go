package replica_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln/replica"
	"github.com/kilnsh/kiln/replica/replicatest"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// The kinds' letters are part of the directory's keys, which every replica reads.
func TestKindKeys(t *testing.T) {
	for _, tt := range []struct {
		kind replica.Kind
		want string
	}{
		{replica.Session, "s:id"}, {replica.Run, "x:id"}, {replica.Request, "r:id"}, {replica.MCP, "m:id"},
	} {
		if got := tt.kind.Key("id"); got != tt.want {
			t.Errorf("%q.Key(id) = %q, want %q", tt.kind, got, tt.want)
		}
	}
	if got := replica.At("b").Key(); got != "" {
		t.Errorf("At(b).Key() = %q, want none", got)
	}
	if got := (replica.Owned{}).Key(); got != "" {
		t.Errorf("Owned{}.Key() = %q, want none", got)
	}
}

func TestOwner(t *testing.T) {
	dir := replicatest.New()
	dir.Announce("a", "http://a")
	dir.Announce("b", "http://b")
	dir.SetOwner(replica.Session.Key("held"), "b")
	dir.SetOwner(replica.Session.Key("mine"), "a")
	dir.SetOwner(replica.Run.Key("dead"), "c") // c is not announced: gone
	f := replica.NewForwarder("a", replica.Config{Peers: dir.As("a")})
	tests := []struct {
		name            string
		o               replica.Owned
		wantURL, wantBy string
		ownerAfter      string // of o's key, after the lookup
	}{
		{"nothing", replica.Owned{}, "", "", ""},
		{"this replica", replica.At("a"), "", "", ""},
		{"another replica", replica.At("b"), "http://b", "b", ""},
		{"a replica that is gone", replica.At("c"), "", "c", ""},
		{"held by another", replica.Of(replica.Session, "held"), "http://b", "b", "b"},
		{"held by this one", replica.Of(replica.Session, "mine"), "", "", "a"},
		{"held by one gone", replica.Of(replica.Run, "dead"), "", "", "c"},
		{"held by nobody", replica.Of(replica.Session, "free"), "", "", ""},
		{"claimed, held by another", replica.Claimed(replica.Session, "held"), "http://b", "b", "b"},
		{"claimed, held by nobody", replica.Claimed(replica.Session, "new"), "", "a", "a"},
		{"claimed, held by one gone", replica.Claimed(replica.Run, "dead"), "", "a", "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, by, err := f.Owner(t.Context(), tt.o)
			if err != nil || url != tt.wantURL || (url != "" && by != tt.wantBy) {
				t.Errorf("Owner = %q, %q, %v; want %q, %q", url, by, err, tt.wantURL, tt.wantBy)
			}
			if key := tt.o.Key(); key != "" {
				if got := dir.OwnerOf(key); got != tt.ownerAfter {
					t.Errorf("%s is held by %q after the lookup, want %q", key, got, tt.ownerAfter)
				}
			}
		})
	}
}

// A Forwarder without a directory is a lone kiln: it finds no owner, and claims nothing.
func TestLone(t *testing.T) {
	f := replica.NewForwarder("a", replica.Config{})
	ctx := t.Context()
	if f.Enabled() {
		t.Error("a lone Forwarder says replicas share a directory")
	}
	if url, _, err := f.Owner(ctx, replica.At("b")); url != "" || err != nil {
		t.Errorf("Owner(At(b)) = %q, %v, want none", url, err)
	}
	if other, err := f.Own(ctx, replica.Session, "s"); other != "" || err != nil {
		t.Errorf("Own = %q, %v, want none", other, err)
	}
	if err := f.Release(ctx, replica.Session, "s"); err != nil {
		t.Errorf("Release: %v", err)
	}
	if err := f.TakeOver(ctx, replica.Claimed(replica.Session, "s"), "b"); err != nil {
		t.Errorf("TakeOver: %v", err)
	}
}

func TestOwnReleaseTakeOver(t *testing.T) {
	dir := replicatest.New()
	dir.Announce("a", "http://a")
	dir.Announce("b", "http://b")
	a := replica.NewForwarder("a", replica.Config{Peers: dir.As("a")})
	b := replica.NewForwarder("b", replica.Config{Peers: dir.As("b")})
	ctx := t.Context()
	if other, err := a.Own(ctx, replica.MCP, "m1"); other != "" || err != nil {
		t.Fatalf("a owns a free key: %q, %v", other, err)
	}
	if other, err := b.Own(ctx, replica.MCP, "m1"); other != "a" || err != nil {
		t.Fatalf("b claims a's key: %q, %v, want a", other, err)
	}
	if err := b.Release(ctx, replica.MCP, "m1"); err != nil || dir.OwnerOf("m:m1") != "a" {
		t.Fatalf("b released a's claim: %v, held by %q", err, dir.OwnerOf("m:m1"))
	}
	if err := a.Release(ctx, replica.MCP, "m1"); err != nil || dir.OwnerOf("m:m1") != "" {
		t.Fatalf("a released its claim: %v, held by %q", err, dir.OwnerOf("m:m1"))
	}
	if other, err := a.Own(ctx, replica.Session, ""); other != "" || err != nil || dir.OwnerOf("s:") != "" {
		t.Errorf("Own of no id: %q, %v, held by %q; want nothing claimed", other, err, dir.OwnerOf("s:"))
	}

	// b could not reach a: what a request claimed passes to b; what it only looked up
	// stays a's.
	dir.SetOwner("s:s1", "a")
	dir.SetOwner("x:r1", "a")
	if err := b.TakeOver(ctx, replica.Of(replica.Run, "r1"), "a"); err != nil || dir.OwnerOf("x:r1") != "a" {
		t.Errorf("take over of a looked-up run: %v, held by %q, want a", err, dir.OwnerOf("x:r1"))
	}
	if err := b.TakeOver(ctx, replica.Claimed(replica.Session, "s1"), "c"); err != nil || dir.OwnerOf("s:s1") != "a" {
		t.Errorf("take over from c of what a holds: %v, held by %q, want a", err, dir.OwnerOf("s:s1"))
	}
	if err := b.TakeOver(ctx, replica.Claimed(replica.Session, "s1"), "a"); err != nil || dir.OwnerOf("s:s1") != "b" {
		t.Errorf("take over of a claimed session: %v, held by %q, want b", err, dir.OwnerOf("s:s1"))
	}
}

// ttlPeers records the TTLs of claims and take-overs.
type ttlPeers struct {
	replica.Peers
	ttls map[string]time.Duration
}

func (p ttlPeers) Claim(_ context.Context, key string, ttl time.Duration) (string, string, error) {
	p.ttls["claim "+key] = ttl
	return "", "a", nil
}

func (p ttlPeers) TakeOver(_ context.Context, key, _ string, ttl time.Duration) (bool, error) {
	p.ttls["take "+key] = ttl
	return true, nil
}

// Each kind is claimed for its own time.
func TestTTLs(t *testing.T) {
	p := ttlPeers{ttls: map[string]time.Duration{}}
	f := replica.NewForwarder("a", replica.Config{Peers: p, SessionTTL: time.Second, RunTTL: time.Minute, MCPTTL: time.Hour})
	ctx := t.Context()
	for _, k := range []replica.Kind{replica.Session, replica.Run, replica.Request, replica.MCP} {
		if _, err := f.Own(ctx, k, "1"); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := f.Owner(ctx, replica.Claimed(replica.Session, "2")); err != nil {
		t.Fatal(err)
	}
	if err := f.TakeOver(ctx, replica.Claimed(replica.Session, "3"), "b"); err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Duration{"claim s:1": time.Second, "claim x:1": time.Minute, "claim r:1": time.Minute,
		"claim m:1": time.Hour, "claim s:2": time.Second, "take s:3": time.Second}
	for k, ttl := range want {
		if p.ttls[k] != ttl {
			t.Errorf("%s for %v, want %v", k, p.ttls[k], ttl)
		}
	}
}

// front serves every request by forwarding it to target with f, and reports what Forward
// returned on errs.
func front(t *testing.T, f *replica.Forwarder, target string) (url string, errs <-chan error) {
	t.Helper()
	u := mustParse(t, target)
	ch := make(chan error, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		err := f.Forward(w, r, "b", u, body)
		if err != nil {
			w.WriteHeader(599) // what the caller writes: nothing was written before
		}
		ch <- err
	}))
	t.Cleanup(srv.Close)
	return srv.URL, ch
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A forwarded request reaches the owner signed, with its method, target and body, and
// the owner's answer comes back as it was.
func TestForward(t *testing.T) {
	owner := replica.NewForwarder("b", replica.Config{Secret: testSecret})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		from, err := owner.Verify(r, body)
		w.Header().Set("X-From", from)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, r.Method+" "+r.URL.RequestURI()+" "+string(body))
	}))
	t.Cleanup(srv.Close)
	url, errs := front(t, replica.NewForwarder("a", replica.Config{Secret: testSecret}), srv.URL)

	resp, err := http.Post(url+"/exec?x=1", "application/json", strings.NewReader(`{"code":"1"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-From") != "a" || string(body) != `POST /exec?x=1 {"code":"1"}` {
		t.Errorf("answer %d from %q: %q; want 201 from a, the request as sent", resp.StatusCode, resp.Header.Get("X-From"), body)
	}
	if err := <-errs; err != nil {
		t.Errorf("Forward: %v", err)
	}
}

// An event stream is relayed event by event, not when it ends.
func TestForwardStreams(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: first\n\n")
		_ = http.NewResponseController(w).Flush()
		<-release
		_, _ = io.WriteString(w, "data: last\n\n")
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	url, _ := front(t, replica.NewForwarder("a", replica.Config{Secret: testSecret}), srv.URL)
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(resp.Body).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if l != "data: first\n" {
			t.Errorf("first line %q", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first event did not come through while the stream stayed open")
	}
	close(release)
}

// An owner that takes no connections is gone; one that takes them and fails to answer
// is not: the caller is told which, and nothing was written either way.
func TestForwardFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	_ = ln.Close()

	broken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = broken.Close() })
	go func() {
		for {
			c, err := broken.Accept()
			if err != nil {
				return
			}
			_, _ = http.ReadRequest(bufio.NewReader(c))
			_ = c.Close()
		}
	}()

	for _, tt := range []struct {
		name     string
		target   string
		wantGone bool
	}{
		{"dead", dead, true},
		{"broken", "http://" + broken.Addr().String(), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			url, errs := front(t, replica.NewForwarder("a", replica.Config{Secret: testSecret}), tt.target)
			resp, err := http.Post(url+"/exec", "application/json", strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != 599 {
				t.Errorf("status %d, want the caller's own 599: Forward wrote something", resp.StatusCode)
			}
			err = <-errs
			if err == nil || errors.Is(err, replica.ErrOwnerGone) != tt.wantGone {
				t.Errorf("Forward = %v, want an error, ErrOwnerGone %v", err, tt.wantGone)
			}
		})
	}
}
