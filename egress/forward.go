package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"

	"golang.org/x/net/http/httpguts"
)

// Why a plain HTTP request's context was cancelled, besides the client going away.
var (
	errIdle      = errors.New("idle timeout")
	errCallEnded = errors.New("call ended")
)

// forward serves a plain HTTP request in absolute form. The URL's host is what is
// checked and what is reached: the server keeps the URL's authority as the request's
// Host (RFC 9112, 3.2.2: a proxy ignores a Host header that disagrees with an
// absolute URL), and the request goes out with that Host, so a Host header naming
// another site never reaches the upstream. httputil.ReverseProxy drops the hop-by-hop
// headers both ways and adds no X-Forwarded-For.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, s *Scope, rec *Record) {
	if !r.URL.IsAbs() || r.URL.Host == "" {
		rec.Decision = Decision{CodeMalformed, "egress: this is a proxy: send http://host/path in the request line, or CONNECT"}
		rec.Status = refuse(w, r, rec.Decision)
		return
	}
	if r.URL.Scheme != "http" {
		rec.Decision = Decision{CodeMalformed, fmt.Sprintf("egress: %s URLs go through CONNECT", r.URL.Scheme)}
		rec.Status = refuse(w, r, rec.Decision)
		return
	}
	portText := r.URL.Port()
	if portText == "" {
		portText = "80"
	}
	h, port, err := splitHostPort(net.JoinHostPort(r.URL.Hostname(), portText))
	if err != nil {
		rec.Decision = Decision{CodeMalformed, fmt.Sprintf("egress: %s: %v", r.URL.Host, err)}
		rec.Status = refuse(w, r, rec.Decision)
		return
	}
	rec.Host, rec.Port = h.String(), port
	if httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade") {
		rec.Decision = Decision{CodeMalformed, "egress: protocol upgrades go through CONNECT (use wss:// for WebSocket)"}
		rec.Status = refuse(w, r, rec.Decision)
		return
	}
	if d := s.policy.CheckHost(h, port); !d.Allowed() {
		rec.Decision, rec.Status = d, refuse(w, r, d)
		return
	}
	if d := s.admit(); !d.Allowed() {
		rec.Decision, rec.Status = d, refuse(w, r, d)
		return
	}
	rec.Decision = allowed

	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(s.ctx, func() { cancel(errCallEnded) })
	defer stop()
	dog := newWatchdog(p.opts.IdleTimeout, func() { cancel(errIdle) })
	defer dog.stop()
	upMeter := &meter{scope: s, idle: dog}
	downMeter := &meter{scope: s, idle: dog}
	defer func() {
		rec.BytesUp, rec.BytesDown = upMeter.n.Load(), downMeter.n.Load()
		if rec.Decision.Allowed() && rec.Err == "" {
			rec.Err = requestEnd(ctx, s, upMeter, downMeter)
		}
	}()

	rp := &httputil.ReverseProxy{
		Transport:  s.httpTransport(),
		BufferPool: bufferPool{},
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.Host = "" // the URL's host
			if pr.Out.Body != nil && pr.Out.Body != http.NoBody {
				pr.Out.Body = meteredBody{meteredReader{pr.Out.Body, upMeter}, pr.Out.Body}
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			rec.Status = resp.StatusCode
			resp.Body = meteredBody{meteredReader{resp.Body, downMeter}, resp.Body}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			rec.Decision = p.failure(ctx, s, h, port, err)
			rec.Status = refuse(w, r, rec.Decision)
		},
		ErrorLog: p.srv.ErrorLog,
	}
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if dc, ok := info.Conn.(*dialedConn); ok {
			rec.Addr = dc.addr
		}
	}}
	rp.ServeHTTP(w, r.WithContext(httptrace.WithClientTrace(ctx, trace)))
}

// failure turns the error of a request that got no response into the decision the
// client is answered with.
func (p *Proxy) failure(ctx context.Context, s *Scope, h Host, port uint16, err error) Decision {
	var ref *refusal
	switch cause := context.Cause(ctx); {
	case errors.As(err, &ref):
		return ref.Decision
	case errors.Is(err, errBytesCap):
		return s.bytesSpent()
	case cause == errCallEnded:
		return denied(CodeEnded, "this call has ended")
	case cause == errIdle:
		return Decision{CodeTimeout, fmt.Sprintf("egress: %s sent nothing for %s", hostPort(h, port), p.opts.IdleTimeout)}
	}
	return Decision{CodeDial, fmt.Sprintf("egress: no response from %s", hostPort(h, port))}
}

// requestEnd says how an allowed request that got its response ended, when not cleanly.
func requestEnd(ctx context.Context, s *Scope, up, down *meter) string {
	if up.capped.Load() || down.capped.Load() {
		return s.bytesSpent().Reason
	}
	switch cause := context.Cause(ctx); cause {
	case errIdle, errCallEnded:
		return cause.Error()
	}
	return ""
}

// dialedConn remembers the address a plain HTTP connection was dialled to, for the
// audit of each request it carries.
type dialedConn struct {
	net.Conn
	addr netip.AddrPort
}
