package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tlsHarness is a proxy whose policy allows secure.test, an HTTPS upstream on loopback.
func tlsHarness(t *testing.T, opts Options) (*harness, *upstream, *testCA) {
	t.Helper()
	ca := newTestCA(t, "secure.test", "other.test")
	up := newTLSUpstream(t, ca, hello("secret page"))
	h := newHarness(t, harnessConfig{
		settings: Settings{
			Allow:        []string{at("secure.test", up.port), at("127.0.0.1", up.port)},
			Resolve:      []string{"secure.test=127.0.0.1"},
			AllowPrivate: []string{"127.0.0.0/8"},
		},
		opts: opts,
	})
	return h, up, ca
}

// openTunnel sends CONNECT and reads the 200, and returns the raw tunnel.
func openTunnel(t *testing.T, h *harness, target string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", h.url.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || br.Buffered() != 0 {
		t.Fatalf("CONNECT %s: got %s", target, resp.Status)
	}
	return conn
}

func TestConnectServerNameMismatch(t *testing.T) {
	h, up, ca := tlsHarness(t, Options{})
	conn := openTunnel(t, h, at("secure.test", up.port))
	// other.test is on the same certificate, as a second site behind one front would be.
	err := tls.Client(conn, &tls.Config{ServerName: "other.test", RootCAs: ca.pool}).Handshake()
	if err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("got %v, want the handshake refused with access denied", err)
	}
	rec := h.audit.wait(t, 1)[0]
	want := `egress denied: the TLS server name "other.test" is not secure.test, the CONNECT host`
	if rec.Decision.Code != CodeSNI || rec.Decision.Reason != want {
		t.Errorf("got decision %+v, want %q", rec.Decision, want)
	}
	if n := up.hellos.Load(); n != 0 {
		t.Errorf("the upstream got %d ClientHellos, want none", n)
	}
}

// A tunnel that starts with neither a TLS handshake nor an HTTP request is cut.
func TestConnectNeedsTLSOrHTTP(t *testing.T) {
	h, up, _ := tlsHarness(t, Options{})
	conn := openTunnel(t, h, at("secure.test", up.port))
	io.WriteString(conn, "\x00\x01 not a protocol\r\n\r\n")
	got, _ := io.ReadAll(conn)
	if strings.HasPrefix(string(got), "HTTP/1.1 2") {
		t.Errorf("got %q back", got)
	}
	if n := up.hellos.Load(); n != 0 {
		t.Errorf("the upstream got %d ClientHellos", n)
	}
}

// Plain HTTP in a tunnel (how undici, Node's fetch, sends http:// URLs through a proxy)
// reaches the CONNECT's host, request after request on one tunnel; a request naming
// another host in its Host is answered 403 and never goes up.
func TestConnectCarriesPlainHTTPForItsHostOnly(t *testing.T) {
	up := newUpstream(t, hello("plain page"))
	h := newHarness(t, harnessConfig{settings: Settings{
		Allow: []string{at("allowed.test", up.port)}, Resolve: []string{"allowed.test=127.0.0.1"},
		AllowPrivate: []string{"127.0.0.0/8"},
	}})
	target := at("allowed.test", up.port)
	conn := openTunnel(t, h, target)
	br := bufio.NewReader(conn)
	for i := range 2 {
		fmt.Fprintf(conn, "GET /page%d HTTP/1.1\r\nHost: %s\r\n\r\n", i, target)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(body), "plain page") {
			t.Fatalf("request %d: %s %q", i, resp.Status, body)
		}
		if r := <-up.lastReq; r.URL.Path != fmt.Sprintf("/page%d", i) || r.Host != target {
			t.Errorf("request %d reached the upstream as %s %s", i, r.Host, r.URL.Path)
		}
	}
	fmt.Fprintf(conn, "GET /secret HTTP/1.1\r\nHost: other.test:%d\r\n\r\n", up.port)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || !strings.Contains(string(body), "names") {
		t.Errorf("another host in the tunnel: %s %q", resp.Status, body)
	}
	select {
	case r := <-up.lastReq:
		t.Errorf("the request for another host reached the upstream: %s %s", r.Host, r.URL)
	case <-time.After(100 * time.Millisecond):
	}
	rec := h.audit.wait(t, 1)[0]
	if rec.Decision.Code != CodeHost || rec.BytesUp == 0 || rec.BytesDown == 0 {
		t.Errorf("record %+v", rec)
	}
}

// TestConnectToAnAddress: a tunnel to an allowed address carries no server name, and
// goes through.
func TestConnectToAnAddress(t *testing.T) {
	h, up, ca := tlsHarness(t, Options{})
	resp, err := h.client(ca).Get("https://" + at("127.0.0.1", up.port) + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("got %s, want 200", resp.Status)
	}
}

// earlyConn sends its CONNECT request in the same write as the TLS ClientHello, before
// the proxy answers, and skips the proxy's answer when it is first read.
type earlyConn struct {
	net.Conn
	connect []byte
	br      *bufio.Reader
	status  string
}

func (c *earlyConn) Write(p []byte) (int, error) {
	if c.connect != nil {
		all := append(c.connect, p...)
		c.connect = nil
		if _, err := c.Conn.Write(all); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *earlyConn) Read(p []byte) (int, error) {
	if c.br == nil {
		c.br = bufio.NewReader(c.Conn)
		resp, err := http.ReadResponse(c.br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			return 0, err
		}
		c.status = resp.Status
	}
	return c.br.Read(p)
}

func TestConnectClientHelloInTheSameWrite(t *testing.T) {
	h, up, ca := tlsHarness(t, Options{})
	raw, err := net.Dial("tcp", h.url.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	target := at("secure.test", up.port)
	conn := &earlyConn{Conn: raw, connect: []byte(fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target))}
	tc := tls.Client(conn, &tls.Config{ServerName: "secure.test", RootCAs: ca.pool})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake through a pipelined CONNECT: %v", err)
	}
	if conn.status != "200 Connection established" {
		t.Errorf("got %q, want the tunnel's 200", conn.status)
	}
}

// countingListener counts what its connections read and write: what an upstream saw.
type countingListener struct {
	net.Listener
	read, written atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, l: l}, nil
}

type countingConn struct {
	net.Conn
	l *countingListener
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.read.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.l.written.Add(int64(n))
	return n, err
}

// TestConnectAuditBytes: a tunnel's record counts exactly the bytes the client sent
// after its CONNECT and the bytes the upstream wrote.
func TestConnectAuditBytes(t *testing.T) {
	ca := newTestCA(t, "secure.test")
	up := &upstream{lastReq: make(chan *http.Request, 64)}
	up.Server = httptest.NewUnstartedServer(hello(strings.Repeat("z", 100_000)))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{ca.leaf}}
	counting := &countingListener{Listener: up.Listener}
	up.Listener = counting
	up.Config.ErrorLog = quietLog
	up.StartTLS()
	t.Cleanup(up.Close)
	up.port = portOf(t, up.Listener.Addr())
	h := newHarness(t, harnessConfig{settings: Settings{
		Allow: []string{at("secure.test", up.port)}, Resolve: []string{"secure.test=127.0.0.1"}, AllowPrivate: []string{"127.0.0.1"},
	}})
	client := h.client(ca)
	sent := &recordingWriter{}
	client.Transport.(*http.Transport).DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		return &teeConn{Conn: c, w: sent}, err
	}
	resp, err := client.Get("https://" + at("secure.test", up.port) + "/")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n != 100_000 {
		t.Fatalf("got %d bytes, want 100000", n)
	}
	rec := h.audit.wait(t, 1)[0]
	afterConnect := int64(len(sent.bytes()) - (strings.Index(string(sent.bytes()), "\r\n\r\n") + 4))
	if rec.BytesUp != afterConnect {
		t.Errorf("the record has %d bytes up, the client sent %d after its CONNECT", rec.BytesUp, afterConnect)
	}
	eventually(t, func() string {
		if rec.BytesDown != counting.written.Load() {
			return fmt.Sprintf("the record has %d bytes down, the upstream wrote %d", rec.BytesDown, counting.written.Load())
		}
		return ""
	})
	if rec.BytesDown < 100_000 {
		t.Errorf("got %d bytes down, want at least the body's 100000", rec.BytesDown)
	}
}

// recordingWriter keeps what a client wrote.
type recordingWriter struct {
	mu  sync.Mutex
	buf []byte
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	return len(p), nil
}

func (w *recordingWriter) bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]byte(nil), w.buf...)
}

type teeConn struct {
	net.Conn
	w io.Writer
}

// Write records p before it goes: once the proxy has read the bytes, the test sees them.
func (c *teeConn) Write(p []byte) (int, error) {
	c.w.Write(p)
	return c.Conn.Write(p)
}

// eventually retries check until it returns "" or two seconds pass.
func eventually(t *testing.T, check func() string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		msg := check()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConnectIdleTimeout(t *testing.T) {
	h, up, ca := tlsHarness(t, Options{IdleTimeout: 200 * time.Millisecond})
	conn := openTunnel(t, h, at("secure.test", up.port))
	tc := tls.Client(conn, &tls.Config{ServerName: "secure.test", RootCAs: ca.pool})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); err == nil {
		t.Fatal("read a byte from an idle tunnel")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the idle tunnel was cut after %v", d)
	}
	if rec := h.audit.wait(t, 1)[0]; rec.Err != "idle timeout" || !rec.Decision.Allowed() {
		t.Errorf("got record %+v, want an allowed tunnel ended by the idle timeout", rec)
	}
}

func TestScopeCloseCutsTunnels(t *testing.T) {
	h, up, ca := tlsHarness(t, Options{})
	conn := openTunnel(t, h, at("secure.test", up.port))
	tc := tls.Client(conn, &tls.Config{ServerName: "secure.test", RootCAs: ca.pool})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := h.scope.Close(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); err == nil {
		t.Fatal("read a byte from a tunnel of a closed scope")
	}
	if rec := h.audit.wait(t, 1)[0]; rec.Err != "call ended" {
		t.Errorf("got record %+v, want the tunnel ended with the call", rec)
	}
	_, err := h.client(ca).Get("https://" + at("secure.test", up.port) + "/")
	if err == nil || !strings.Contains(err.Error(), "egress denied: this call has ended") {
		t.Errorf("got %v, want a request after the call refused", err)
	}
	if err := h.scope.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

func TestCheckServerName(t *testing.T) {
	name := Host{Name: "secure.test"}
	addr := Host{Addr: netip.MustParseAddr("127.0.0.1")}
	for _, tc := range []struct {
		host       Host
		serverName string
		want       bool
	}{
		{name, "secure.test", true},
		{name, "Secure.Test", true},
		{name, "other.test", false},
		{name, "x.secure.test", false},
		{name, "", false},
		{name, "127.0.0.1", false},
		{addr, "", true},
		{addr, "127.0.0.1", true},
		{addr, "secure.test", false},
		{addr, "127.0.0.2", false},
	} {
		if got := checkServerName(tc.host, tc.serverName).Allowed(); got != tc.want {
			t.Errorf("CONNECT %s with server name %q: got %v, want %v", tc.host, tc.serverName, got, tc.want)
		}
	}
}
