package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnsh/kiln/test/testca"
)

// Every test here stays on loopback: names resolve through EGRESS_RESOLVE or
// fakeResolver, never real DNS, and loopbackOnly fails a test that dials anything else.

// fakeResolver answers from a table; any other name fails, as it would in no DNS.
type fakeResolver struct {
	names   map[string][]netip.Addr
	lookups atomic.Int64
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.lookups.Add(1)
	if addrs, ok := r.names[host]; ok {
		return addrs, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// loopbackOnly dials loopback addresses and fails the test on any other.
type loopbackOnly struct {
	t     *testing.T
	dials atomic.Int64
}

func (d *loopbackOnly) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !ap.Addr().IsLoopback() {
		d.t.Errorf("the proxy dialled %s, which is not a loopback address", address)
		return nil, errors.New("not loopback")
	}
	d.dials.Add(1)
	var nd net.Dialer
	return nd.DialContext(ctx, network, address)
}

// auditLog collects the proxy's records.
type auditLog struct {
	mu      sync.Mutex
	records []Record
	added   chan struct{}
}

func newAuditLog() *auditLog { return &auditLog{added: make(chan struct{}, 1024)} }

func (a *auditLog) add(r Record) {
	a.mu.Lock()
	a.records = append(a.records, r)
	a.mu.Unlock()
	a.added <- struct{}{}
}

// wait returns the first n records, failing the test if they do not come.
func (a *auditLog) wait(t *testing.T, n int) []Record {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		a.mu.Lock()
		if len(a.records) >= n {
			out := append([]Record(nil), a.records[:n]...)
			a.mu.Unlock()
			return out
		}
		a.mu.Unlock()
		select {
		case <-a.added:
		case <-deadline:
			t.Fatalf("got %d audit records, want %d", len(a.records), n)
		}
	}
}

// harness is a proxy serving one scope on a loopback listener.
type harness struct {
	proxy    *Proxy
	scope    *Scope
	url      *url.URL
	audit    *auditLog
	resolver *fakeResolver
	dialer   *loopbackOnly
}

type harnessConfig struct {
	settings Settings
	network  *Network
	opts     Options
	names    map[string][]netip.Addr // the fake DNS
}

func newHarness(t *testing.T, cfg harnessConfig) *harness {
	t.Helper()
	policy, err := ParsePolicy(cfg.settings)
	if err != nil {
		t.Fatal(err)
	}
	if policy, err = policy.Narrow(cfg.network); err != nil {
		t.Fatal(err)
	}
	h := &harness{audit: newAuditLog(), resolver: &fakeResolver{names: cfg.names}, dialer: &loopbackOnly{t: t}}
	opts := cfg.opts
	opts.Resolver, opts.Audit = h.resolver, h.audit.add
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Dialer == nil {
		opts.Dialer = h.dialer
	}
	h.proxy = New(opts)
	h.scope = h.proxy.NewScope(policy, Labels{Caller: "tenant-1/user-1", Session: "session-1"})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.url = &url.URL{Scheme: "http", Host: ln.Addr().String()}
	served := make(chan error, 1)
	go func() { served <- h.proxy.Serve(ln, h.scope) }()
	t.Cleanup(func() {
		if err := h.proxy.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-served; !errors.Is(err, ErrClosed) {
			t.Errorf("Serve returned %v, want ErrClosed", err)
		}
	})
	return h
}

// client is an HTTP client that goes through the proxy and trusts the test's CA.
func (h *harness) client(ca *testCA) *http.Client {
	tr := &http.Transport{Proxy: http.ProxyURL(h.url), DisableKeepAlives: true}
	if ca != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: ca.pool}
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// testCA is a certificate authority made by the test, and a server certificate it
// signed for the test's names and 127.0.0.1.
type testCA struct {
	pool *x509.CertPool
	leaf tls.Certificate
}

func newTestCA(t *testing.T, names ...string) *testCA {
	t.Helper()
	ca, err := testca.New(names...)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{pool: ca.Pool, leaf: ca.Leaf}
}

// upstream is a loopback server standing for a host on the internet.
type upstream struct {
	*httptest.Server
	port    uint16
	hellos  atomic.Int64 // TLS ClientHellos it received
	lastReq chan *http.Request
}

func newUpstream(t *testing.T, handler http.Handler) *upstream {
	t.Helper()
	u := &upstream{lastReq: make(chan *http.Request, 64)}
	u.Server = httptest.NewServer(u.record(handler))
	t.Cleanup(u.Close)
	u.port = portOf(t, u.Listener.Addr())
	return u
}

func newTLSUpstream(t *testing.T, ca *testCA, handler http.Handler) *upstream {
	t.Helper()
	u := &upstream{lastReq: make(chan *http.Request, 64)}
	u.Server = httptest.NewUnstartedServer(u.record(handler))
	u.TLS = &tls.Config{
		Certificates: []tls.Certificate{ca.leaf},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			u.hellos.Add(1)
			return nil, nil
		},
	}
	u.Config.ErrorLog = quietLog
	u.StartTLS()
	t.Cleanup(u.Close)
	u.port = portOf(t, u.Listener.Addr())
	return u
}

func (u *upstream) record(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case u.lastReq <- r.Clone(context.Background()):
		default:
		}
		h.ServeHTTP(w, r)
	})
}

func portOf(t *testing.T, a net.Addr) uint16 {
	t.Helper()
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		t.Fatal(err)
	}
	return ap.Port()
}

// at is host:port.
func at(host string, port uint16) string { return net.JoinHostPort(host, strconv.Itoa(int(port))) }

// quietLog keeps the upstreams' complaints about tunnels the tests cut out of the output.
var quietLog = log.New(io.Discard, "", 0)

var loopback = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

func hello(body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, body)
	})
}
