package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/kilnsh/kiln/protocol"
)

// MaxTunnels is how many of a sandbox's outgoing connections may be open at once; one
// more is refused (closed) at its open.
const MaxTunnels = 32

// Egress routes the connections the REPL opens out of the sandbox (net frames, see
// protocol.OpNet): each is handed to serve as a net.Conn of its own, in a goroutine
// of its own, until Egress is called again. It is set for one request and cleared
// (nil) after it: nil refuses every connection, and a change cuts those still open,
// so that no connection outlives the request it was opened in.
func (c *Conn) Egress(serve func(net.Conn)) {
	c.tunnelMu.Lock()
	c.serve = serve
	open, sockets := c.tunnels, c.sockets
	c.tunnels, c.sockets = nil, nil
	c.tunnelMu.Unlock()
	for _, t := range open {
		t.Close()
	}
	for s := range sockets {
		s.Close()
	}
}

// Accept serves the connections made to ln as it serves the REPL's tunnels: ln is a
// socket of the sandbox's own that its runtime lets the REPL reach (a Unix socket
// mounted into a container), a way out that costs no frames on the channel. They go to
// what Egress set, at most MaxTunnels of both kinds at once, and are cut when it
// changes. Accept returns when ln is closed.
func (c *Conn) Accept(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // out of descriptors, say: the next one may do
			c.log.Warn("sandbox socket accept failed", "sandbox", c.id, "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		c.tunnelMu.Lock()
		serve := c.serve
		if serve == nil || len(c.tunnels)+len(c.sockets) >= MaxTunnels {
			c.tunnelMu.Unlock()
			conn.Close()
			continue
		}
		if c.sockets == nil {
			c.sockets = map[net.Conn]bool{}
		}
		c.sockets[conn] = true
		c.tunnelMu.Unlock()
		go func() {
			defer func() {
				conn.Close()
				c.tunnelMu.Lock()
				delete(c.sockets, conn)
				c.tunnelMu.Unlock()
			}()
			serve(conn)
		}()
	}
}

// onNet takes a net frame from the reader. It never blocks on the REPL: what it must
// answer goes out from a goroutine.
func (c *Conn) onNet(f protocol.Frame) {
	n, err := protocol.DecodeNet(f)
	if err != nil {
		c.log.Warn("sandbox sent a bad net frame", "sandbox", c.id, "err", err)
		return
	}
	c.tunnelMu.Lock()
	t := c.tunnels[n.Conn]
	if n.Op == protocol.NetOpen {
		serve := c.serve
		if t != nil || serve == nil || len(c.tunnels)+len(c.sockets) >= MaxTunnels {
			c.tunnelMu.Unlock()
			go c.sendNet(protocol.Net{Conn: n.Conn, Op: protocol.NetClose})
			return
		}
		t = newTunnel(c, n.Conn)
		if c.tunnels == nil {
			c.tunnels = map[uint32]*tunnel{}
		}
		c.tunnels[n.Conn] = t
		c.tunnelMu.Unlock()
		go func() {
			defer t.Close()
			serve(t)
		}()
		return
	}
	if n.Op == protocol.NetClose && t != nil {
		delete(c.tunnels, n.Conn)
	}
	c.tunnelMu.Unlock()
	if t == nil {
		return // a connection already cut here: its last frames cross our close
	}
	switch n.Op {
	case protocol.NetData:
		if !t.deliver(n.Data) {
			c.log.Warn("sandbox sent past its window", "sandbox", c.id, "conn", n.Conn)
			t.Close()
		}
	case protocol.NetEOF:
		t.update(func() { t.remoteEOF = true })
	case protocol.NetClose:
		// What it sent before is still read; writes fail from now on.
		t.update(func() { t.remoteClosed = true; t.remoteEOF = true })
	case protocol.NetAck:
		t.update(func() { t.credit = min(t.credit+n.N, protocol.NetWindow) })
	}
}

// sendNet writes a net frame. It is never cut by a context: a frame cut short would end
// the REPL's channel, and a REPL that stops reading is ended by its request's deadline.
func (c *Conn) sendNet(n protocol.Net) error {
	return c.Send(context.Background(), protocol.EncodeNet(n))
}

// tunnel is one connection of the code's, as kiln's side sees it: a net.Conn whose reads
// are the data the REPL sent and whose writes go to the REPL, each way under the window.
type tunnel struct {
	c  *Conn
	id uint32

	mu           sync.Mutex
	changed      chan struct{} // closed and replaced on every change of the fields below
	in           []byte        // data received and not read yet
	unacked      int64         // bytes read and not acknowledged yet
	credit       int64         // bytes we may still send
	remoteEOF    bool
	remoteClosed bool
	closed       bool // closed here
	wroteEOF     bool
	readDL       deadline
	writeDL      deadline
}

func newTunnel(c *Conn, id uint32) *tunnel {
	t := &tunnel{c: c, id: id, changed: make(chan struct{}), credit: protocol.NetWindow}
	t.readDL.t, t.writeDL.t = t, t
	return t
}

// update changes the tunnel's state under its lock and wakes its waiters.
func (t *tunnel) update(change func()) {
	t.mu.Lock()
	change()
	t.wake()
	t.mu.Unlock()
}

// wake wakes the tunnel's waiters; the caller holds its lock.
func (t *tunnel) wake() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// deliver appends data from the REPL; false when the REPL sent past its window.
func (t *tunnel) deliver(data []byte) bool {
	ok := true
	t.update(func() {
		if int64(len(t.in))+t.unacked+int64(len(data)) > protocol.NetWindow {
			ok = false
			return
		}
		t.in = append(t.in, data...)
	})
	return ok
}

func (t *tunnel) Read(p []byte) (int, error) {
	t.mu.Lock()
	for len(t.in) == 0 {
		switch {
		case t.closed:
			t.mu.Unlock()
			return 0, net.ErrClosed
		case t.remoteEOF:
			t.mu.Unlock()
			return 0, io.EOF
		case t.readDL.passed():
			t.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		wait := t.changed
		t.mu.Unlock()
		<-wait
		t.mu.Lock()
	}
	n := copy(p, t.in)
	t.in = t.in[n:]
	if len(t.in) == 0 {
		t.in = nil // let the buffer go
	}
	t.unacked += int64(n)
	// Acknowledged a quarter window at a time, not read by read: a small message's read
	// does not wait for a frame back first. The REPL blocks only with a whole window
	// unacknowledged, so a quarter of it is always unread here and this Read comes again.
	ack := int64(0)
	if t.unacked >= protocol.NetWindow/4 {
		ack, t.unacked = t.unacked, 0
	}
	t.mu.Unlock()
	if ack > 0 {
		_ = t.c.sendNet(protocol.Net{Conn: t.id, Op: protocol.NetAck, N: ack})
	}
	return n, nil
}

func (t *tunnel) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		t.mu.Lock()
		for t.credit == 0 && !t.closed && !t.remoteClosed && !t.writeDL.passed() {
			wait := t.changed
			t.mu.Unlock()
			<-wait
			t.mu.Lock()
		}
		switch {
		case t.closed || t.wroteEOF:
			t.mu.Unlock()
			return written, net.ErrClosed
		case t.remoteClosed:
			t.mu.Unlock()
			return written, fmt.Errorf("sandbox connection %d: %w", t.id, io.ErrClosedPipe)
		case t.writeDL.passed():
			t.mu.Unlock()
			return written, os.ErrDeadlineExceeded
		}
		n := int(min(int64(len(p)), t.credit, protocol.NetChunk))
		t.credit -= int64(n)
		t.mu.Unlock()
		if err := t.c.sendNet(protocol.Net{Conn: t.id, Op: protocol.NetData, Data: p[:n]}); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// CloseWrite tells the REPL no more bytes come: the proxy's half close.
func (t *tunnel) CloseWrite() error {
	t.mu.Lock()
	if t.closed || t.wroteEOF {
		t.mu.Unlock()
		return nil
	}
	t.wroteEOF = true
	t.mu.Unlock()
	return t.c.sendNet(protocol.Net{Conn: t.id, Op: protocol.NetEOF})
}

// Close ends the connection both ways; the REPL is told unless it closed it first.
func (t *tunnel) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	tell := !t.remoteClosed
	t.readDL.stop()
	t.writeDL.stop()
	t.wake()
	t.in = nil
	t.mu.Unlock()
	t.c.tunnelMu.Lock()
	if t.c.tunnels[t.id] == t {
		delete(t.c.tunnels, t.id)
	}
	t.c.tunnelMu.Unlock()
	if tell {
		go t.c.sendNet(protocol.Net{Conn: t.id, Op: protocol.NetClose})
	}
	return nil
}

// tunnelAddr names both ends of a tunnel: the sandbox's connection number.
type tunnelAddr string

func (a tunnelAddr) Network() string { return "sandbox" }
func (a tunnelAddr) String() string  { return string(a) }

func (t *tunnel) LocalAddr() net.Addr { return tunnelAddr("kiln") }
func (t *tunnel) RemoteAddr() net.Addr {
	return tunnelAddr(fmt.Sprintf("%s#%d", t.c.id, t.id))
}

func (t *tunnel) SetDeadline(at time.Time) error {
	t.SetReadDeadline(at)
	return t.SetWriteDeadline(at)
}

func (t *tunnel) SetReadDeadline(at time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.readDL.set(at)
	return nil
}

func (t *tunnel) SetWriteDeadline(at time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.writeDL.set(at)
	return nil
}

// deadline is one of a tunnel's deadlines: a timer that wakes its waiters when it
// passes. Its fields are guarded by the tunnel's lock.
type deadline struct {
	t     *tunnel
	at    time.Time
	timer *time.Timer
}

func (d *deadline) set(at time.Time) {
	d.stop()
	d.at = at
	if at.IsZero() {
		return
	}
	if wait := time.Until(at); wait > 0 {
		d.timer = time.AfterFunc(wait, func() { d.t.update(func() {}) })
		return
	}
	d.t.wake() // passed already: wake the waiters now
}

func (d *deadline) stop() {
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}

func (d *deadline) passed() bool { return !d.at.IsZero() && !time.Now().Before(d.at) }
