package sandbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kilnsh/kiln/protocol"
)

// peer plays the REPL's side of net frames: it sends what a test tells it to, and
// records what kiln sends, checking kiln never sends past the window.
type peer struct {
	t      *testing.T
	stdout *io.PipeWriter // to kiln
	stdinR *io.PipeReader
	stdinW *io.PipeWriter

	mu       sync.Mutex
	changed  *sync.Cond
	got      map[uint32]*bytes.Buffer // data kiln sent, by connection
	ops      []string                 // every net op kiln sent, "close 3" and so on
	credit   map[uint32]int64         // what the peer may still send
	inFlight map[uint32]int64         // data kiln sent the peer has not acknowledged
	over     bool                     // kiln sent past the window
	autoAck  bool
}

type peerStreams struct {
	p      *peer
	stdout *io.PipeReader
}

func (s peerStreams) Stdin() io.Writer { return s.p.stdinW }
func (s peerStreams) Copy(stdout, _ io.Writer) error {
	_, err := io.Copy(stdout, s.stdout)
	return err
}
func (s peerStreams) Close() error {
	s.stdout.Close()
	s.p.stdinR.Close()
	return nil
}

// newPeer returns a REPL peer and kiln's Conn to it.
func newPeer(t *testing.T) (*peer, *Conn) {
	outR, outW := io.Pipe()
	inR, inW := io.Pipe()
	p := &peer{t: t, stdout: outW, stdinR: inR, stdinW: inW, got: map[uint32]*bytes.Buffer{},
		credit: map[uint32]int64{}, inFlight: map[uint32]int64{}, autoAck: true}
	p.changed = sync.NewCond(&p.mu)
	go p.read()
	c := open(t, peerStreams{p: p, stdout: outR})
	return p, c
}

// read decodes kiln's request frames: net frames only, here.
func (p *peer) read() {
	parser := protocol.NewRequestParser(1<<16, 1<<20)
	w := parser.Writer(func(f protocol.Frame, err error) {
		if err != nil {
			p.t.Errorf("kiln sent a bad frame: %v", err)
			return
		}
		var h struct {
			Op   string `json:"op"`
			Conn uint32 `json:"conn"`
			Net  string `json:"net"`
			N    int64  `json:"n"`
		}
		if err := json.Unmarshal(f.Header, &h); err != nil || h.Op != protocol.OpNet {
			p.t.Errorf("kiln sent %s (%v)", f.Header, err)
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		defer p.changed.Broadcast()
		p.ops = append(p.ops, h.Net)
		switch h.Net {
		case protocol.NetData:
			if p.got[h.Conn] == nil {
				p.got[h.Conn] = &bytes.Buffer{}
			}
			p.got[h.Conn].Write(f.Binary)
			p.inFlight[h.Conn] += int64(len(f.Binary))
			if p.inFlight[h.Conn] > protocol.NetWindow {
				p.over = true
			}
			if p.autoAck {
				n := p.inFlight[h.Conn]
				p.inFlight[h.Conn] = 0
				go p.send(protocol.Net{Conn: h.Conn, Op: protocol.NetAck, N: n})
			}
		case protocol.NetAck:
			p.credit[h.Conn] += h.N
		}
	})
	_, _ = io.Copy(w, p.stdinR)
}

var peerWrite sync.Mutex

func (p *peer) send(n protocol.Net) {
	peerWrite.Lock()
	defer peerWrite.Unlock()
	bufs := protocol.EncodeNetResponse(n)
	_, _ = bufs.WriteTo(p.stdout)
}

// open opens connection id and sends data within the window, as the REPL does.
func (p *peer) open(id uint32) {
	p.mu.Lock()
	p.credit[id] = protocol.NetWindow
	p.mu.Unlock()
	p.send(protocol.Net{Conn: id, Op: protocol.NetOpen})
}

func (p *peer) write(id uint32, data []byte) {
	for len(data) > 0 {
		p.mu.Lock()
		for p.credit[id] == 0 {
			p.changed.Wait()
		}
		n := min(int64(len(data)), p.credit[id], protocol.NetChunk)
		p.credit[id] -= n
		p.mu.Unlock()
		p.send(protocol.Net{Conn: id, Op: protocol.NetData, Data: data[:n]})
		data = data[n:]
	}
}

// await waits until cond holds of what kiln sent.
func (p *peer) await(what string, cond func() bool) {
	p.t.Helper()
	done := make(chan struct{})
	go func() {
		p.mu.Lock()
		for !cond() {
			p.changed.Wait()
		}
		p.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.mu.Lock()
		defer p.mu.Unlock()
		p.t.Fatalf("no %s: kiln sent %v", what, p.ops)
	}
}

func (p *peer) sawOp(op string) bool {
	for _, o := range p.ops {
		if o == op {
			return true
		}
	}
	return false
}

// Megabytes each way pass whole through a served connection, and kiln never has more
// than the window unacknowledged.
func TestTunnelCarriesManyMegabytesEachWay(t *testing.T) {
	p, c := newPeer(t)
	const size = 5<<20 + 123
	up := make([]byte, size)
	for i := range up {
		up[i] = byte(i * 7)
	}
	received := make(chan [32]byte, 1)
	c.Egress(func(conn net.Conn) {
		h := sha256.New()
		if _, err := io.CopyN(h, conn, size); err != nil {
			t.Errorf("reading the upload: %v", err)
		}
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		received <- sum
		if _, err := conn.Write(bytes.Repeat([]byte("down"), size/4)); err != nil {
			t.Errorf("writing the download: %v", err)
		}
		conn.(interface{ CloseWrite() error }).CloseWrite()
	})
	p.open(7)
	p.write(7, up)
	if got := <-received; got != sha256.Sum256(up) {
		t.Fatal("the upload arrived changed")
	}
	p.await("download and eof", func() bool { return p.got[7] != nil && p.got[7].Len() == size/4*4 && p.sawOp(protocol.NetEOF) })
	p.mu.Lock()
	defer p.mu.Unlock()
	if !bytes.Equal(p.got[7].Bytes(), bytes.Repeat([]byte("down"), size/4)) {
		t.Error("the download arrived changed")
	}
	if p.over {
		t.Error("kiln sent past the window")
	}
}

// Without a serve function, or past MaxTunnels, an open is answered with a close.
func TestTunnelRefusedWithoutEgress(t *testing.T) {
	p, _ := newPeer(t)
	p.open(1)
	p.await("close", func() bool { return p.sawOp(protocol.NetClose) })
}

// A writer kiln side waits for acknowledgements: without them, it stops at the window.
func TestTunnelWaitsForAcknowledgements(t *testing.T) {
	p, c := newPeer(t)
	p.mu.Lock()
	p.autoAck = false
	p.mu.Unlock()
	wrote := make(chan error, 1)
	c.Egress(func(conn net.Conn) {
		_, err := conn.Write(make([]byte, 3*protocol.NetWindow))
		wrote <- err
	})
	p.open(2)
	p.await("a window's worth", func() bool { return p.got[2] != nil && p.got[2].Len() == protocol.NetWindow })
	select {
	case err := <-wrote:
		t.Fatalf("the write ended (%v) without acknowledgements", err)
	case <-time.After(200 * time.Millisecond):
	}
	p.mu.Lock()
	p.autoAck = true
	n := p.inFlight[2]
	p.inFlight[2] = 0
	p.mu.Unlock()
	p.send(protocol.Net{Conn: 2, Op: protocol.NetAck, N: n})
	if err := <-wrote; err != nil {
		t.Fatalf("write: %v", err)
	}
	p.await("all of it", func() bool { return p.got[2].Len() == 3*protocol.NetWindow })
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.over {
		t.Error("kiln sent past the window")
	}
}

// Clearing egress at the end of a request cuts what is open: the served side's read
// fails, and the REPL is told.
func TestEgressClearedCutsOpenConnections(t *testing.T) {
	p, c := newPeer(t)
	readErr := make(chan error, 1)
	c.Egress(func(conn net.Conn) {
		_, err := conn.Read(make([]byte, 10))
		readErr <- err
	})
	p.open(3)
	time.Sleep(50 * time.Millisecond)
	c.Egress(nil)
	select {
	case err := <-readErr:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("read after the cut: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the served read did not end")
	}
	p.await("close", func() bool { return p.sawOp(protocol.NetClose) })
}

// The REPL's close after its data: the data is read first, then end of file.
func TestTunnelRemoteCloseKeepsItsData(t *testing.T) {
	p, c := newPeer(t)
	got := make(chan []byte, 1)
	c.Egress(func(conn net.Conn) {
		time.Sleep(100 * time.Millisecond) // the close is in before the read
		b, err := io.ReadAll(conn)
		if err != nil {
			t.Errorf("read: %v", err)
		}
		got <- b
	})
	p.open(4)
	p.write(4, []byte("GET / HTTP/1.1\r\n\r\n"))
	p.send(protocol.Net{Conn: 4, Op: protocol.NetClose})
	if b := <-got; string(b) != "GET / HTTP/1.1\r\n\r\n" {
		t.Errorf("read %q", b)
	}
}

// A read deadline ends a read with a timeout, as net.Conn's contract says.
func TestTunnelReadDeadline(t *testing.T) {
	p, c := newPeer(t)
	readErr := make(chan error, 1)
	c.Egress(func(conn net.Conn) {
		conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := conn.Read(make([]byte, 10))
		readErr <- err
	})
	p.open(5)
	select {
	case err := <-readErr:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("read past the deadline: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the deadline did not end the read")
	}
}

// Connections to the sandbox's own socket (Accept) go to what Egress set, share
// MaxTunnels with the frames' tunnels, are refused without egress and cut when it changes.
func TestAcceptedSocketsFollowEgress(t *testing.T) {
	_, c := newPeer(t)
	ln, err := net.Listen("unix", t.TempDir()+"/egress.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go c.Accept(ln)
	dial := func() net.Conn {
		conn, err := net.Dial("unix", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	closed := func(conn net.Conn) bool {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := conn.Read(make([]byte, 1))
		return err == io.EOF
	}

	if !closed(dial()) {
		t.Error("a connection without egress was not closed")
	}

	release := make(chan struct{})
	c.Egress(func(conn net.Conn) {
		io.WriteString(conn, "served")
		<-release
	})
	var held []net.Conn
	for range MaxTunnels {
		conn := dial()
		got := make([]byte, 6)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(conn, got); err != nil || string(got) != "served" {
			t.Fatalf("connection %d: %q, %v", len(held), got, err)
		}
		held = append(held, conn)
	}
	if !closed(dial()) {
		t.Errorf("connection %d past MaxTunnels was not closed", MaxTunnels+1)
	}

	c.Egress(nil) // the request ended: what is open is cut
	for i, conn := range held {
		if !closed(conn) {
			t.Errorf("connection %d outlived its request", i)
		}
	}
	close(release)
}
