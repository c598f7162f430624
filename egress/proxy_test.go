package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

func TestPlainHTTPAllowed(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "must not reach the client")
		fmt.Fprintf(w, "hello %s, %d bytes", r.Method, len(body))
	}))
	h := newHarness(t, harnessConfig{settings: Settings{
		Allow:        []string{at("files.test", up.port)},
		Resolve:      []string{"files.test=127.0.0.1"},
		AllowPrivate: []string{"127.0.0.0/8"},
	}})
	resp, err := h.client(nil).Post("http://files.test:"+fmt.Sprint(up.port)+"/upload", "text/plain", strings.NewReader(strings.Repeat("x", 1000)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "hello POST, 1000 bytes" {
		t.Fatalf("got %s %q, want 200 and the upstream's answer", resp.Status, body)
	}
	if got := resp.Header.Get("X-Hop"); got != "" {
		t.Errorf("a hop-by-hop header of the upstream reached the client: %q", got)
	}
	rec := h.audit.wait(t, 1)[0]
	want := Record{
		Caller: "tenant-1/user-1", Session: "session-1", Method: "POST", Host: "files.test", Port: up.port,
		Addr: netip.AddrPortFrom(loopback[0], up.port), Decision: allowed, Status: 200,
		BytesUp: 1000, BytesDown: int64(len(body)),
	}
	if rec.Duration <= 0 || rec.Start.IsZero() {
		t.Errorf("got start %v and duration %v, want both set", rec.Start, rec.Duration)
	}
	rec.Start, rec.Duration = want.Start, want.Duration
	if rec != want {
		t.Errorf("got record\n%+v\nwant\n%+v", rec, want)
	}
	if n := h.resolver.lookups.Load(); n != 0 {
		t.Errorf("a mapped name went to the resolver %d times", n)
	}
}

// TestPlainHTTPHostHeader sends an absolute-form request whose Host header names
// another site, and hop-by-hop headers: the upstream sees the URL's host and none of them.
func TestPlainHTTPHostHeader(t *testing.T) {
	up := newUpstream(t, hello("ok"))
	h := newHarness(t, harnessConfig{settings: Settings{
		Allow:        []string{at("files.test", up.port)},
		Resolve:      []string{"files.test=127.0.0.1"},
		AllowPrivate: []string{"127.0.0.0/8"},
	}})
	conn, err := net.Dial("tcp", h.url.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	target := at("files.test", up.port)
	fmt.Fprintf(conn, "GET http://%s/x HTTP/1.1\r\nHost: evil.test\r\nConnection: X-Secret\r\nX-Secret: 1\r\n"+
		"Proxy-Authorization: Basic c2VjcmV0\r\nKeep-Alive: 5\r\nX-Kept: 1\r\n\r\n", target)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("got %s, want 200", resp.Status)
	}
	got := <-up.lastReq
	if got.Host != target {
		t.Errorf("the upstream saw Host %q, want %q", got.Host, target)
	}
	for _, name := range []string{"X-Secret", "Proxy-Authorization", "Keep-Alive", "X-Forwarded-For"} {
		if v := got.Header.Get(name); v != "" {
			t.Errorf("the upstream got %s: %q", name, v)
		}
	}
	if got.Header.Get("X-Kept") != "1" {
		t.Error("an end-to-end header was dropped")
	}
}

func TestHTTPSThroughConnect(t *testing.T) {
	ca := newTestCA(t, "secure.test")
	up := newTLSUpstream(t, ca, hello("secret page"))
	h := newHarness(t, harnessConfig{
		settings: Settings{Allow: []string{at("secure.test", up.port)}, AllowPrivate: []string{"127.0.0.1"}},
		names:    map[string][]netip.Addr{"secure.test": loopback},
	})
	resp, err := h.client(ca).Get("https://" + at("secure.test", up.port) + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "secret page" {
		t.Fatalf("got %s %q, want 200 and the page", resp.Status, body)
	}
	rec := h.audit.wait(t, 1)[0]
	if rec.Method != "CONNECT" || rec.Host != "secure.test" || rec.Port != up.port || !rec.Decision.Allowed() ||
		rec.Status != 200 || rec.Addr != netip.AddrPortFrom(loopback[0], up.port) {
		t.Errorf("got record %+v, want an allowed CONNECT to secure.test", rec)
	}
	if rec.BytesUp == 0 || rec.BytesDown == 0 {
		t.Errorf("got %d bytes up and %d down, want both counted", rec.BytesUp, rec.BytesDown)
	}
}

// TestRefusals checks that what the policy refuses is answered with a 403 whose
// reason the client sees, before anything is dialled.
func TestRefusals(t *testing.T) {
	settings := Settings{
		Allow:        []string{"*.test", "169.254.169.254", "127.0.0.1:1"},
		Resolve:      []string{"mapped.test=127.0.0.1", "meta.test=169.254.169.254"},
		AllowPrivate: []string{"169.254.0.0/16"},
	}
	names := map[string][]netip.Addr{
		"rebind.test": loopback,
		"mixed.test":  {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("127.0.0.1")},
	}
	for _, tc := range []struct {
		name, url, want string
	}{
		{"a host not allowed over http", "http://other.example/", "egress denied: other.example not allowed"},
		{"a host not allowed over https", "https://other.example/", "egress denied: other.example not allowed"},
		{"a port not allowed", "https://a.test:8443/", "egress denied: a.test:8443 not allowed"},
		{"a mapped name on loopback", "http://mapped.test/", "egress denied: mapped.test resolves to 127.0.0.1, a loopback address"},
		{"a public name that rebinds to loopback", "https://rebind.test/", "egress denied: rebind.test resolves to 127.0.0.1, a loopback address"},
		{"a name with a public and a loopback address", "http://mixed.test/", "egress denied: mixed.test resolves to 127.0.0.1, a loopback address"},
		{"the metadata address", "http://169.254.169.254/latest/meta-data/", "egress denied: 169.254.169.254 is the cloud metadata address"},
		{"the metadata address over https", "https://169.254.169.254/", "egress denied: 169.254.169.254 is the cloud metadata address"},
		{"a name mapped to the metadata address", "http://meta.test/", "egress denied: meta.test resolves to 169.254.169.254, the cloud metadata address"},
		{"an address the client chose", "http://127.0.0.1:1/", "egress denied: 127.0.0.1 is a loopback address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{settings: settings, names: names})
			resp, err := h.client(nil).Get(tc.url)
			if strings.HasPrefix(tc.url, "https") {
				// Go's client reports a refused CONNECT by its reason phrase.
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want an error with %q", err, tc.want)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.Status != "403 "+tc.want || string(body) != tc.want+"\n" {
					t.Fatalf("got %q with body %q, want 403 %q", resp.Status, body, tc.want)
				}
			}
			rec := h.audit.wait(t, 1)[0]
			if rec.Decision.Allowed() || rec.Decision.Reason != tc.want || rec.Status != 403 || rec.Addr.IsValid() {
				t.Errorf("got record %+v, want the refusal", rec)
			}
			if n := h.dialer.dials.Load(); n != 0 {
				t.Errorf("the proxy dialled %d times for a refused request", n)
			}
		})
	}
}

// TestMappedNameOpenedByPrivateRange: the same mapping to loopback is reached once
// the operator lists 127.0.0.0/8.
func TestMappedNameOpenedByPrivateRange(t *testing.T) {
	up := newUpstream(t, hello("local"))
	for _, tc := range []struct {
		private []string
		want    int
	}{
		{nil, http.StatusForbidden},
		{[]string{"10.0.0.0/8"}, http.StatusForbidden},
		{[]string{"127.0.0.0/8"}, http.StatusOK},
	} {
		t.Run(strings.Join(tc.private, ","), func(t *testing.T) {
			h := newHarness(t, harnessConfig{settings: Settings{
				Allow: []string{at("mapped.test", up.port)}, Resolve: []string{"mapped.test=127.0.0.1"}, AllowPrivate: tc.private,
			}})
			resp, err := h.client(nil).Get("http://" + at("mapped.test", up.port) + "/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("got %s, want %d", resp.Status, tc.want)
			}
		})
	}
}

func TestResolveAndDialFailures(t *testing.T) {
	h := newHarness(t, harnessConfig{
		settings: Settings{Allow: []string{"nowhere.test", "closed.test:1"}, AllowPrivate: []string{"127.0.0.0/8"}},
		names:    map[string][]netip.Addr{"closed.test": loopback},
	})
	for _, tc := range []struct{ url, want string }{
		{"http://nowhere.test/", "502 egress: cannot resolve nowhere.test"},
		{"http://closed.test:1/", "502 egress: cannot reach closed.test:1: connection refused"},
	} {
		resp, err := h.client(nil).Get(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Status != tc.want {
			t.Errorf("%s: got %q, want %q", tc.url, resp.Status, tc.want)
		}
	}
	_, err := h.client(nil).Get("https://closed.test:1/")
	if err == nil || !strings.Contains(err.Error(), "egress: cannot reach closed.test:1: connection refused") {
		t.Errorf("got %v, want the CONNECT refused with the dial's failure", err)
	}
}

func TestNotAProxyRequest(t *testing.T) {
	h := newHarness(t, harnessConfig{settings: Settings{Allow: []string{"*"}}})
	for _, tc := range []struct{ request, want string }{
		{"GET /x HTTP/1.1\r\nHost: a.test\r\n\r\n", "400 egress: this is a proxy"},
		{"GET https://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", "400 egress: https URLs go through CONNECT"},
		{"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", "400 egress: protocol upgrades"},
		{"CONNECT a.test HTTP/1.1\r\nHost: a.test\r\n\r\n", "400 egress: CONNECT a.test: want host:port"},
	} {
		conn, err := net.Dial("tcp", h.url.Host)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, tc.request)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(resp.Status, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.request, resp.Status, tc.want)
		}
	}
}
