package egress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCallPolicyThroughTheProxy: what a call's network field asks for is enforced by
// the proxy, and asking for more gets nothing more.
func TestCallPolicyThroughTheProxy(t *testing.T) {
	ca := newTestCA(t, "secure.test", "other.test")
	up := newTLSUpstream(t, ca, hello("page"))
	operator := Settings{
		Allow:        []string{at("secure.test", up.port)},
		Resolve:      []string{"secure.test=127.0.0.1", "other.test=127.0.0.1"},
		AllowPrivate: []string{"127.0.0.0/8"},
	}
	for _, tc := range []struct {
		name    string
		network *Network
		url     string
		want    string // "" for a 200
	}{
		{"no field", nil, "https://secure.test:PORT", ""},
		{"narrowed to the host", &Network{Allow: []string{"secure.test:PORT"}}, "https://secure.test:PORT", ""},
		{"a wildcard wider than the operator's", &Network{Allow: []string{"*.test:PORT"}}, "https://other.test:PORT", "egress denied: other.test:PORT not allowed"},
		{"the wildcard keeps the operator's host", &Network{Allow: []string{"*.test:PORT"}}, "https://secure.test:PORT", ""},
		{"any host", &Network{Allow: []string{"*:PORT"}}, "https://other.test:PORT", "egress denied: other.test:PORT not allowed"},
		{"another port", &Network{Allow: []string{"secure.test:1"}}, "https://secure.test:1", "egress denied: secure.test:1 not allowed"},
		{"a loopback address", &Network{Allow: []string{"127.0.0.1:PORT"}}, "https://127.0.0.1:PORT", "egress denied: 127.0.0.1:PORT not allowed"},
		{"narrowed to another host", &Network{Allow: []string{"pypi.test:PORT"}}, "https://secure.test:PORT", "egress denied: secure.test:PORT not allowed for this call"},
		{"network false", &Network{Off: true}, "https://secure.test:PORT", "egress denied: network is off for this call"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := strconv.Itoa(int(up.port))
			if tc.network != nil {
				for i, p := range tc.network.Allow {
					tc.network.Allow[i] = strings.ReplaceAll(p, "PORT", port)
				}
			}
			tc.want = strings.ReplaceAll(tc.want, "PORT", port)
			h := newHarness(t, harnessConfig{settings: operator, network: tc.network})
			resp, err := h.client(ca).Get(strings.ReplaceAll(tc.url, "PORT", port) + "/")
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("got %s, want 200", resp.Status)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want the CONNECT refused with %q", err, tc.want)
			}
			if n := h.dialer.dials.Load(); n != 0 {
				t.Errorf("the proxy dialled %d times for a refused request", n)
			}
		})
	}
}

func TestConnectionCap(t *testing.T) {
	ca := newTestCA(t, "secure.test")
	tlsUp := newTLSUpstream(t, ca, hello("s"))
	up := newUpstream(t, hello("p"))
	h := newHarness(t, harnessConfig{settings: Settings{
		Allow:          []string{at("secure.test", tlsUp.port), at("files.test", up.port)},
		Resolve:        []string{"secure.test=127.0.0.1", "files.test=127.0.0.1"},
		AllowPrivate:   []string{"127.0.0.1"},
		MaxConnections: 2,
	}})
	c := h.client(ca)
	for _, url := range []string{"https://" + at("secure.test", tlsUp.port), "http://" + at("files.test", up.port)} {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	want := "egress denied: this call's connection cap (2) is spent"
	resp, err := c.Get("http://" + at("files.test", up.port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Status != "403 "+want {
		t.Errorf("got %q, want 403 %q", resp.Status, want)
	}
	if _, err := c.Get("https://" + at("secure.test", tlsUp.port)); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
	// A tunnel's record comes when it ends, so the order of records is not the order
	// of requests.
	codes := map[Code]int{}
	for _, rec := range h.audit.wait(t, 4) {
		codes[rec.Decision.Code]++
	}
	if codes[CodeAllowed] != 2 || codes[CodeConnections] != 2 {
		t.Errorf("got decisions %v, want two allowed and two past the cap", codes)
	}
}

func TestByteCap(t *testing.T) {
	ca := newTestCA(t, "secure.test")
	big := strings.Repeat("b", 50_000)
	tlsUp := newTLSUpstream(t, ca, hello(big))
	up := newUpstream(t, hello(big))
	for _, tc := range []struct{ name, url string }{
		{"plain HTTP", "http://files.test"},
		{"a tunnel", "https://secure.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{settings: Settings{
				Allow:        []string{at("secure.test", tlsUp.port), at("files.test", up.port)},
				Resolve:      []string{"secure.test=127.0.0.1", "files.test=127.0.0.1"},
				AllowPrivate: []string{"127.0.0.1"},
				MaxBytes:     10_000,
			}})
			c := h.client(ca)
			port := up.port
			if strings.HasPrefix(tc.url, "https") {
				port = tlsUp.port
			}
			url := tc.url + ":" + strconv.Itoa(int(port)) + "/"
			resp, err := c.Get(url)
			if err == nil {
				var n int64
				n, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil {
					t.Fatalf("read %d bytes whole past a cap of 10000", n)
				}
			}
			want := "egress denied: this call's byte cap (10000 bytes) is spent"
			if rec := h.audit.wait(t, 1)[0]; rec.Err != want || rec.BytesUp+rec.BytesDown > 10_000 {
				t.Errorf("got record %+v, want it cut at the cap", rec)
			}
			resp, err = c.Get(url)
			if err == nil {
				resp.Body.Close()
				err = errors.New(resp.Status)
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("after the cap: got %v, want %q", err, want)
			}
		})
	}
}

// TestDownload50MB takes 50 MB through the proxy over plain HTTP and through a
// tunnel, and checks every byte. Its speed is make bench's business, not this test's.
func TestDownload50MB(t *testing.T) {
	if testing.Short() {
		t.Skip("50 MB")
	}
	const size = 50 << 20
	block := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range block {
		block[i] = byte(rng.Uint32())
	}
	want := sha256.New()
	for range size / len(block) {
		want.Write(block)
	}
	serve := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for range size / len(block) {
			if _, err := w.Write(block); err != nil {
				return
			}
		}
	})
	ca := newTestCA(t, "secure.test")
	tlsUp := newTLSUpstream(t, ca, serve)
	up := newUpstream(t, serve)
	h := newHarness(t, harnessConfig{settings: Settings{
		Allow:        []string{at("secure.test", tlsUp.port), at("files.test", up.port)},
		Resolve:      []string{"secure.test=127.0.0.1", "files.test=127.0.0.1"},
		AllowPrivate: []string{"127.0.0.1"},
	}})
	for _, url := range []string{"http://" + at("files.test", up.port) + "/big", "https://" + at("secure.test", tlsUp.port) + "/big"} {
		resp, err := h.client(ca).Get(url)
		if err != nil {
			t.Fatal(err)
		}
		got := sha256.New()
		n, err := io.Copy(got, resp.Body)
		resp.Body.Close()
		if err != nil || n != size || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
			t.Fatalf("%s: got %d bytes (%v), want %d with the upstream's digest", url, n, err, size)
		}
	}
	for _, rec := range h.audit.wait(t, 2) {
		// The body exactly over plain HTTP; the body and TLS's framing through a tunnel.
		if rec.Method == "GET" && rec.BytesDown != size || rec.BytesDown < size {
			t.Errorf("%s: the record has %d bytes down, want %d", rec.Method, rec.BytesDown, size)
		}
	}
}

// TestServeConnOverAPipe serves one connection that is no TCP connection, as a
// sandbox's channel hands them over, with the scope's labels in its record.
func TestServeConnOverAPipe(t *testing.T) {
	up := newUpstream(t, hello("through a pipe"))
	policy := mustPolicy(t, Settings{
		Allow: []string{at("files.test", up.port)}, Resolve: []string{"files.test=127.0.0.1"}, AllowPrivate: []string{"127.0.0.1"},
	})
	audit := newAuditLog()
	p := New(Options{Resolver: &fakeResolver{}, Dialer: &loopbackOnly{t: t}, Audit: audit.add})
	defer p.Close()
	scope := p.NewScope(policy, Labels{Caller: "pipe-caller", Session: "pipe-session"})
	served := make(chan error, 1)
	tr := &http.Transport{
		Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: "kiln-egress.invalid"}),
		DisableKeepAlives: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			client, server := net.Pipe()
			go func() { served <- p.ServeConn(server, scope) }()
			return client, nil
		},
	}
	resp, err := (&http.Client{Transport: tr}).Get("http://" + at("files.test", up.port) + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "through a pipe" {
		t.Fatalf("got %q", body)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("ServeConn returned %v, want nil once the client closed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeConn did not return after the client closed")
	}
	rec := audit.wait(t, 1)[0]
	if rec.Caller != "pipe-caller" || rec.Session != "pipe-session" || !rec.Decision.Allowed() || rec.BytesDown != int64(len(body)) {
		t.Errorf("got record %+v", rec)
	}
}

// blockingDialer never connects: it waits for its context, like a host that drops SYNs.
type blockingDialer struct{}

func (blockingDialer) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestDialTimeout(t *testing.T) {
	h := newHarness(t, harnessConfig{
		settings: Settings{Allow: []string{"slow.test"}, Resolve: []string{"slow.test=127.0.0.1"}, AllowPrivate: []string{"127.0.0.1"}},
		opts:     Options{Dialer: blockingDialer{}, DialTimeout: 100 * time.Millisecond},
	})
	resp, err := h.client(nil).Get("http://slow.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := "502 egress: cannot reach slow.test: timed out"; resp.Status != want {
		t.Errorf("got %q, want %q", resp.Status, want)
	}
}

func TestRequestIdleTimeout(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers
	}))
	h := newHarness(t, harnessConfig{
		settings: Settings{Allow: []string{at("files.test", up.port)}, Resolve: []string{"files.test=127.0.0.1"}, AllowPrivate: []string{"127.0.0.1"}},
		opts:     Options{IdleTimeout: 200 * time.Millisecond},
	})
	resp, err := h.client(nil).Get("http://" + at("files.test", up.port) + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := "504 egress: " + at("files.test", up.port) + " sent nothing for 200ms"
	if resp.Status != want {
		t.Errorf("got %q, want %q", resp.Status, want)
	}
	if rec := h.audit.wait(t, 1)[0]; rec.Decision.Code != CodeTimeout {
		t.Errorf("got record %+v, want a timeout", rec)
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	p := New(Options{Resolver: &fakeResolver{}})
	scope := p.NewScope(Policy{}, Labels{})
	for range 2 {
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	client, server := net.Pipe()
	defer client.Close()
	if err := p.ServeConn(server, scope); !errors.Is(err, ErrClosed) {
		t.Errorf("ServeConn after Close: got %v, want ErrClosed", err)
	}
	if d := scope.admit(); d.Code != CodeEnded {
		t.Errorf("a scope of a closed proxy admits: %+v", d)
	}
}
