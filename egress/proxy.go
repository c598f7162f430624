package egress

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Resolver looks names up; *net.Resolver is one. Tests give a fake, so that no name
// ever reaches real DNS.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer opens connections to the addresses the proxy chose; *net.Dialer is one. It
// is always given an IP address and port, never a name.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Options configure a Proxy. Zero values take the defaults.
type Options struct {
	Resolver Resolver // default net.DefaultResolver
	Dialer   Dialer   // default a net.Dialer
	// DialTimeout bounds the lookup of a name and the dial of each of its addresses.
	DialTimeout time.Duration // default 10s
	// IdleTimeout cuts a tunnel or request once no byte has moved either way for
	// this long, and closes a client connection idle between requests.
	IdleTimeout time.Duration // default 60s
	// HandshakeTimeout bounds reading a request's header and a tunnel's ClientHello.
	HandshakeTimeout time.Duration // default 10s
	// Audit is given one Record per tunnel and per request, when it is over. It is
	// called from the connection's goroutine and should not block.
	Audit func(Record)
	// Now is the clock of audit records.
	Now func() time.Time // default time.Now
	// Logger receives what the HTTP server logs about connections it could not read.
	Logger *slog.Logger // default slog.Default()
}

// The defaults of Options.
const (
	DefaultDialTimeout      = 10 * time.Second
	DefaultIdleTimeout      = 60 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
)

// maxHeaderBytes bounds a request's header, and a response's from upstream.
const maxHeaderBytes = 64 << 10

// ErrClosed is what Serve and ServeConn return once the proxy is closed.
var ErrClosed = errors.New("egress: proxy closed")

// Proxy is an HTTP/1.1 forward proxy that enforces egress policy. It serves any
// net.Listener or single net.Conn, TCP or not, under the Scope the caller gives it;
// it never looks at who the peer is.
type Proxy struct {
	opts   Options
	srv    *http.Server
	ctx    context.Context // parent of every scope; cancelled by Close
	cancel context.CancelFunc

	mu        sync.Mutex
	closed    bool
	handlers  sync.WaitGroup // tunnels and requests in flight
	closeOnce sync.Once
	closeErr  error
}

// New returns a proxy; it serves nothing until Serve or ServeConn.
func New(opts Options) *Proxy {
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.Dialer == nil {
		opts.Dialer = &net.Dialer{}
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if opts.Audit == nil {
		opts.Audit = func(Record) {}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	p := &Proxy{opts: opts}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	p.srv = &http.Server{
		Handler:           http.HandlerFunc(p.serveHTTP),
		ReadHeaderTimeout: opts.HandshakeTimeout,
		IdleTimeout:       opts.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		Protocols:         &protocols,
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if sc, ok := c.(*scopedConn); ok {
				return context.WithValue(ctx, scopeKey{}, sc.scope)
			}
			return ctx
		},
	}
	return p
}

// Serve serves every connection ln accepts under scope s, until ln fails or the proxy
// closes (ErrClosed). It closes ln.
func (p *Proxy) Serve(ln net.Listener, s *Scope) error {
	err := p.srv.Serve(&scopedListener{Listener: ln, scope: s})
	if errors.Is(err, http.ErrServerClosed) {
		return ErrClosed
	}
	return err
}

// ServeConn serves one connection under scope s and returns once it is closed: by the
// client, by an idle timeout, or by the scope or proxy closing (ErrClosed). It is
// how a connection that arrives over a sandbox's channel is handed to the proxy.
func (p *Proxy) ServeConn(c net.Conn, s *Scope) error {
	l := &oneConnListener{conn: c, done: make(chan struct{})}
	err := p.Serve(l, s)
	if errors.Is(err, errServed) {
		return nil
	}
	return err
}

// Close stops the proxy: listeners and connections are closed, every scope's tunnels
// and requests cut, and Close waits for their handlers to finish. It is idempotent.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.cancel()
		p.closeErr = p.srv.Close()
		p.handlers.Wait()
	})
	return p.closeErr
}

// enter counts a handler in, unless the proxy is closing.
func (p *Proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.handlers.Add(1)
	return true
}

type scopeKey struct{}

func (p *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	s, _ := r.Context().Value(scopeKey{}).(*Scope)
	if s == nil || s.proxy != p {
		refuse(w, r, denied(CodeEnded, "no call is open on this connection"))
		return
	}
	if !p.enter() {
		refuse(w, r, denied(CodeEnded, "this call has ended"))
		return
	}
	defer p.handlers.Done()
	rec := Record{Caller: s.labels.Caller, Session: s.labels.Session, Method: r.Method, Start: p.opts.Now()}
	defer func() {
		rec.Duration = p.opts.Now().Sub(rec.Start)
		p.opts.Audit(rec)
	}()
	if r.Method == http.MethodConnect {
		p.connect(w, r, s, &rec)
	} else {
		p.forward(w, r, s, &rec)
	}
}

// scopedListener labels each connection it accepts with its scope, which ConnContext
// puts in every request's context.
type scopedListener struct {
	net.Listener
	scope *Scope
}

func (l *scopedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &scopedConn{Conn: c, scope: l.scope}, nil
}

type scopedConn struct {
	net.Conn
	scope *Scope
}

// CloseWrite half-closes the connection when the one beneath can.
func (c *scopedConn) CloseWrite() error { return closeWrite(c.Conn) }

var errNoHalfClose = errors.New("connection cannot half-close")

func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errNoHalfClose
}

// errServed ends the Serve of a oneConnListener once its connection is closed.
var errServed = errors.New("connection served")

// oneConnListener accepts its one connection, then blocks until that connection is
// closed, so that Serve returns when the connection is done.
type oneConnListener struct {
	mu       sync.Mutex
	conn     net.Conn
	done     chan struct{}
	once     sync.Once
	accepted bool
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.accepted {
		l.accepted = true
		l.mu.Unlock()
		return &notifyConn{Conn: l.conn, closed: l.close}, nil
	}
	l.mu.Unlock()
	<-l.done
	return nil, errServed
}

func (l *oneConnListener) close() { l.once.Do(func() { close(l.done) }) }

// Close unblocks Accept; the connection itself belongs to the server by then.
func (l *oneConnListener) Close() error {
	l.close()
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

// notifyConn tells its listener when it is closed.
type notifyConn struct {
	net.Conn
	closed func()
}

func (c *notifyConn) Close() error {
	err := c.Conn.Close()
	c.closed()
	return err
}

func (c *notifyConn) CloseWrite() error { return closeWrite(c.Conn) }
