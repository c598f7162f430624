package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// copyBuffer is the size of each direction's buffer in a tunnel, and of a plain HTTP
// body's copy: a sandbox's connection is carried in frames of up to this much (its
// channel's net frames take 256 KiB), and each write is one frame, so small buffers
// would cost a frame's overhead many times over on a large download.
const copyBuffer = 256 << 10

var buffers = sync.Pool{New: func() any { b := make([]byte, copyBuffer); return &b }}

// bufferPool lends httputil.ReverseProxy the tunnels' buffers.
type bufferPool struct{}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }

// connect serves a CONNECT request. Before anything is answered the host is checked,
// resolved by kiln, its addresses checked, and one dialled; a refusal is a 403 (a 502
// when the host cannot be reached) and no tunnel. After the 200 the client's
// ClientHello is read and its server name checked against the CONNECT host; only then
// does any byte go upstream, after which bytes are spliced both ways, TLS end to end.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request, s *Scope, rec *Record) {
	h, port, err := splitHostPort(r.Host)
	if err != nil {
		rec.Decision = Decision{CodeMalformed, fmt.Sprintf("egress: CONNECT %s: %v", r.Host, err)}
		rec.Status = refuse(w, r, rec.Decision)
		return
	}
	rec.Host, rec.Port = h.String(), port
	if d := s.policy.CheckHost(h, port); !d.Allowed() {
		rec.Decision, rec.Status = d, refuse(w, r, d)
		return
	}
	if d := s.admit(); !d.Allowed() {
		rec.Decision, rec.Status = d, refuse(w, r, d)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(s.ctx, cancel)
	up, addr, d := p.open(ctx, s.policy, h, port)
	stop()
	cancel()
	rec.Decision, rec.Addr = d, addr
	if !d.Allowed() {
		rec.Status = refuse(w, r, d)
		return
	}
	defer up.Close()

	hj, ok := w.(http.Hijacker)
	if !ok {
		rec.Decision = Decision{CodeMalformed, "egress: this connection cannot carry a tunnel"}
		rec.Status = refuse(w, r, rec.Decision)
		return
	}
	client, rw, err := hj.Hijack()
	if err != nil {
		rec.Err = err.Error()
		return
	}
	defer client.Close()
	rec.Status = http.StatusOK
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		rec.Err = err.Error()
		return
	}
	// What the server read past the CONNECT request is still in its buffer, and the
	// buffer may not be read past that after a hijack: take it, then read the conn.
	early, _ := rw.Reader.Peek(rw.Reader.Buffered())
	fromClient := io.MultiReader(bytes.NewReader(bytes.Clone(early)), client)
	p.tunnel(s, h, port, client, fromClient, up, rec)
}

// tunnel checks the ClientHello, then splices client and up until both directions end,
// the connection idles, a cap is spent, or the scope closes. A tunnel that starts with
// anything but a TLS handshake carries plain HTTP, each request checked (plainInTunnel).
func (p *Proxy) tunnel(s *Scope, h Host, port uint16, client net.Conn, fromClient io.Reader, up net.Conn, rec *Record) {
	var ended struct {
		sync.Mutex
		why string
	}
	cut := func(why string) {
		ended.Lock()
		if ended.why == "" {
			ended.why = why
		}
		ended.Unlock()
		_ = client.Close()
		_ = up.Close()
	}
	stopScope := context.AfterFunc(s.ctx, func() { cut("call ended") })
	defer stopScope()
	dog := newWatchdog(p.opts.IdleTimeout, func() { cut("idle timeout") })
	defer dog.stop()
	upMeter := &meter{scope: s, idle: dog}
	downMeter := &meter{scope: s, idle: dog}
	defer func() {
		rec.BytesUp, rec.BytesDown = upMeter.n.Load(), downMeter.n.Load()
		ended.Lock()
		if ended.why != "" {
			rec.Err = ended.why
		}
		ended.Unlock()
	}()

	_ = client.SetReadDeadline(time.Now().Add(p.opts.HandshakeTimeout))
	br := bufio.NewReader(fromClient)
	if first, err := br.Peek(1); err == nil && first[0] != tlsHandshake {
		_ = client.SetReadDeadline(time.Time{})
		rec.Decision = allowed
		if err := plainInTunnel(h, port, client, br, up, upMeter, downMeter, rec); err != nil {
			cut(endReason(err, s))
		}
		return
	}
	raw, serverName, err := peekClientHello(br)
	_ = client.SetReadDeadline(time.Time{})
	if err != nil {
		rec.Decision = denied(CodeSNI, "the tunnel to %s did not start with a TLS ClientHello", h)
		sendAlert(client)
		return
	}
	if d := checkServerName(h, serverName); !d.Allowed() {
		rec.Decision = d
		sendAlert(client)
		return
	}
	dog.touch()

	// The hello goes up through the meter like every later byte.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := p.pipe(client, up, downMeter); err != nil {
			cut(endReason(err, s))
		} else if closeWrite(client) != nil {
			cut("")
		}
	}()
	source := io.MultiReader(bytes.NewReader(raw), fromClient)
	if err := p.pipe(up, source, upMeter); err != nil {
		cut(endReason(err, s))
	} else if closeWrite(up) != nil {
		cut("")
	}
	wg.Wait()
}

// sendAlert tells a client whose tunnel is refused after its 200 why, as TLS can.
func sendAlert(client net.Conn) {
	_ = client.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = client.Write(alertAccessDenied)
}

// pipe copies src to dst through m until src ends (nil) or either side fails.
func (p *Proxy) pipe(dst io.Writer, src io.Reader, m *meter) error {
	buf := buffers.Get().(*[]byte)
	defer buffers.Put(buf)
	_, err := io.CopyBuffer(dst, meteredReader{r: src, m: m}, *buf)
	return err
}

// endReason is what a tunnel's record says when a direction fails.
func endReason(err error, s *Scope) string {
	switch {
	case errors.Is(err, errBytesCap):
		return s.bytesSpent().Reason
	case errors.Is(err, net.ErrClosed):
		return "" // the other direction, or a cut, closed it and says why
	}
	return err.Error()
}
