package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
)

var testLimits = FrameLimits{Header: 1 << 16, Binary: 1 << 20}

// scripted are a REPL's streams played by a script: Copy runs it, with the writers kiln
// gave, and returns what it returns. What kiln writes to stdin is kept, or, with stdin
// set, goes there.
type scripted struct {
	script func(stdout, stderr io.Writer) error
	stdin  io.Writer

	mu     sync.Mutex
	sent   bytes.Buffer
	closes atomic.Int32
	closed chan struct{}
	once   sync.Once
}

func newScripted(script func(stdout, stderr io.Writer) error) *scripted {
	return &scripted{script: script, closed: make(chan struct{})}
}

func (s *scripted) Stdin() io.Writer {
	if s.stdin != nil {
		return s.stdin
	}
	return writerFunc(func(p []byte) (int, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.sent.Write(p)
	})
}

func (s *scripted) Copy(stdout, stderr io.Writer) error { return s.script(stdout, stderr) }

func (s *scripted) Close() error {
	s.closes.Add(1)
	s.once.Do(func() { close(s.closed) })
	return nil
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// open opens a connection over s, closed when the test ends.
func open(t *testing.T, s Streams) *Conn {
	t.Helper()
	c := Open(s, testLimits, slog.New(slog.DiscardHandler), "test-sandbox")
	t.Cleanup(c.Close)
	return c
}

// readyFrame is the frame a REPL answers a hello with.
func readyFrame(id string) []byte {
	header, _ := json.Marshal(map[string]any{"binary": 0, "id": id, "type": "ready", "protocol": protocol.Version,
		"capabilities": map[string]any{"languages": []string{"python", "bash"}}})
	return fmt.Appendf(nil, "%s\n%s\n%s\n", protocol.ResponseStart, header, protocol.ResponseEnd)
}

// join flattens an encoded frame's buffers; the tests encode only valid messages.
func join(bufs net.Buffers, err error) []byte {
	if err != nil {
		panic(err)
	}
	return bytes.Join(bufs, nil)
}

// session is what a REPL says in a short exchange: ready, an event, and a result whose
// payloads are a state and a file.
func session(t *testing.T) []byte {
	t.Helper()
	out := readyFrame("hello")
	out = append(out, join(protocol.EncodeEvent("r1", &protocol.Event{Type: protocol.EventOutput, Stream: "stdout", Text: "hi\n"}))...)
	return append(out, join(protocol.EncodeResponse(&protocol.Response{ID: "r1", Status: protocol.StatusOK, Stdout: "hi\n",
		State: []byte("\x04\x22\x4d\x18 state"), Files: []protocol.File{{Path: "out.csv", Content: []byte("a,b\n1,2\n")}}}))...)
}

// checkSession reads what session says through c: the handshake, the event, the result.
func checkSession(t *testing.T, c *Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ready, err := c.Handshake(ctx)
	if err != nil || !ready.Capabilities.Supports("bash") || !c.Ready().Capabilities.Supports("python") {
		t.Fatalf("Handshake: got %+v, %v; want python and bash", ready, err)
	}
	f, err := c.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive the event: %v", err)
	}
	if ev, _, err := protocol.Decode(f, "r1", protocol.Limits{}); err != nil || ev == nil || ev.Text != "hi\n" {
		t.Fatalf("got event %+v, %v; want output hi", ev, err)
	}
	f, err = c.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive the result: %v", err)
	}
	resp, err := protocol.DecodeResponse(f, "r1", protocol.Limits{})
	if err != nil || string(resp.State) != "\x04\x22\x4d\x18 state" || len(resp.Files) != 1 || string(resp.Files[0].Content) != "a,b\n1,2\n" {
		t.Fatalf("got result %+v, %v; want the state and the file", resp, err)
	}
}

// TestOneByteAtATime checks that frames read one byte at a time come out whole.
func TestOneByteAtATime(t *testing.T) {
	out := session(t)
	s := newScripted(func(stdout, _ io.Writer) error {
		_, err := io.Copy(stdout, iotest.OneByteReader(bytes.NewReader(out)))
		return err
	})
	c := open(t, s)
	checkSession(t, c)
	s.mu.Lock()
	sent := s.sent.String()
	s.mu.Unlock()
	if want := string(join(protocol.EncodeHello("hello"), nil)); sent != want {
		t.Errorf("sent %q, want the hello %q", sent, want)
	}
}

// TestSplitFrames checks frames cut into two writes anywhere: in a delimiter, in the
// header, in the payloads, at their edges.
func TestSplitFrames(t *testing.T) {
	out := session(t)
	result := bytes.LastIndex(out, []byte(protocol.ResponseStart))
	payload := bytes.Index(out[result:], []byte("\x04\x22")) + result
	end := bytes.LastIndex(out, []byte(protocol.ResponseEnd))
	for _, tt := range []struct {
		name string
		cut  int
	}{
		{"in the first start delimiter", 5},
		{"before the first header", len(protocol.ResponseStart) + 1},
		{"in the result's start delimiter", result + 3},
		{"in the result's header", result + len(protocol.ResponseStart) + 10},
		{"just before the payloads", payload},
		{"in the payloads", payload + 3},
		{"just after the payloads", end},
		{"in the end delimiter", end + 4},
		{"before the last newline", len(out) - 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newScripted(func(stdout, _ io.Writer) error {
				if _, err := stdout.Write(out[:tt.cut]); err != nil {
					return err
				}
				_, err := stdout.Write(out[tt.cut:])
				return err
			})
			checkSession(t, open(t, s))
		})
	}
}

// TestStderrTail checks that the last protocol.StderrTail bytes of the REPL's own stderr
// are kept, and that a warm-up that ends says its last line.
func TestStderrTail(t *testing.T) {
	s := newScripted(func(_, stderr io.Writer) error {
		for i := range 200 {
			fmt.Fprintf(stderr, "kiln-repl: importing module %03d of a long warm-up\n", i)
		}
		_, err := io.WriteString(stderr, "kiln-repl: MemoryError while importing numpy\n")
		return err
	})
	c := open(t, s)
	_, err := c.Handshake(context.Background())
	if !errors.Is(err, kiln.ErrSandboxExited) || !strings.Contains(err.Error(), "kiln-repl: MemoryError while importing numpy") {
		t.Errorf("Handshake: got %v, want kiln.ErrSandboxExited with the last line of stderr", err)
	}
	tail := c.Stderr()
	if len(tail) != protocol.StderrTail || !strings.HasSuffix(tail, "numpy\n") {
		t.Errorf("Stderr: got %d bytes ending %q, want the last %d", len(tail), tail[max(len(tail)-20, 0):], protocol.StderrTail)
	}
}

// TestStreamEnds checks how an end of the streams reaches Receive: frames sent before it
// still come, then kiln.ErrSandboxExited, with the reason when the streams broke; a
// broken stream is closed, and Done closes either way.
func TestStreamEnds(t *testing.T) {
	frame := join(protocol.EncodeResponse(&protocol.Response{ID: "r1", Status: protocol.StatusOK, Stdout: strings.Repeat("x", 100)}))
	reset := errors.New("connection reset by peer")
	tests := []struct {
		name       string
		out        []byte // what the REPL writes before its streams end
		err        error  // how they end
		wantFrames int
		wantCloses int32
	}{
		{"clean end", nil, nil, 0, 0},
		{"clean end after a frame", frame, nil, 1, 0},
		{"broken between frames", frame, reset, 1, 1},
		{"broken mid-frame", append(slicesClone(frame), frame[:len(frame)/2]...), reset, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScripted(func(stdout, _ io.Writer) error {
				_, _ = stdout.Write(tt.out)
				return tt.err
			})
			c := open(t, s)
			<-c.Done()
			for i := range tt.wantFrames {
				if _, err := c.Receive(context.Background()); err != nil {
					t.Fatalf("frame %d: got %v, want it delivered before the end", i, err)
				}
			}
			_, err := c.Receive(context.Background())
			switch {
			case !errors.Is(err, kiln.ErrSandboxExited):
				t.Errorf("Receive: got %v, want kiln.ErrSandboxExited", err)
			case tt.err == nil && err != kiln.ErrSandboxExited:
				t.Errorf("Receive: got %q, want kiln.ErrSandboxExited alone for a clean end", err)
			case tt.err != nil && !strings.Contains(err.Error(), tt.err.Error()):
				t.Errorf("Receive: got %q, want the reason %q", err, tt.err)
			}
			if got := s.closes.Load(); got != tt.wantCloses {
				t.Errorf("got %d closes of the streams, want %d", got, tt.wantCloses)
			}
		})
	}
}

func slicesClone(b []byte) []byte { return append([]byte(nil), b...) }

// TestSendCancelled checks that a context that ends while a frame is going out closes
// the connection (a frame cut short leaves the stream unusable), and that one that ends
// after the frame is out ends nothing.
func TestSendCancelled(t *testing.T) {
	t.Run("mid-frame", func(t *testing.T) {
		s := newScripted(nil)
		// stdin takes the first bytes, then waits as a full pipe does, until the streams close.
		var took atomic.Int32
		s.stdin = writerFunc(func(p []byte) (int, error) {
			if took.Add(1) == 1 {
				return len(p), nil
			}
			<-s.closed
			return 0, net.ErrClosed
		})
		s.script = func(io.Writer, io.Writer) error {
			<-s.closed
			return net.ErrClosed
		}
		c := open(t, s)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		frame := join(protocol.EncodeRequest(&protocol.Request{ID: "r1", Op: protocol.OpExec, Code: "x", State: make([]byte, 1000)}))
		start := time.Now()
		err := c.Send(ctx, net.Buffers{frame[:10], frame[10:]})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Send: got %v, want context.DeadlineExceeded", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("Send returned after %v, want soon after its context ended", took)
		}
		select {
		case <-c.Done():
		case <-time.After(time.Second):
			t.Fatal("Done not closed: the connection stayed open after a frame cut short")
		}
		if _, err := c.Receive(context.Background()); !errors.Is(err, kiln.ErrSandboxExited) {
			t.Errorf("Receive after: got %v, want kiln.ErrSandboxExited", err)
		}
	})
	t.Run("after the frame", func(t *testing.T) {
		s := newScripted(nil)
		s.script = func(io.Writer, io.Writer) error {
			<-s.closed
			return nil
		}
		c := open(t, s)
		ctx, cancel := context.WithCancel(context.Background())
		if err := c.Send(ctx, protocol.EncodeInterrupt("r1")); err != nil {
			t.Fatalf("Send: %v", err)
		}
		cancel()
		time.Sleep(20 * time.Millisecond)
		select {
		case <-c.Done():
			t.Error("Done closed by a context that ended after the frame was out")
		default:
		}
	})
	t.Run("ending as the frame goes out", func(t *testing.T) {
		// The context ends while the frame's last bytes are being taken, and the close it
		// causes lands before the write returns: the frame is out, but the connection is
		// not, and Send must say so rather than report a frame sent.
		s := newScripted(nil)
		s.script = func(io.Writer, io.Writer) error {
			<-s.closed
			return net.ErrClosed
		}
		ctx, cancel := context.WithCancel(context.Background())
		frame := protocol.EncodeInterrupt("r1")
		var writes atomic.Int32
		s.stdin = writerFunc(func(p []byte) (int, error) {
			if int(writes.Add(1)) == len(frame) {
				cancel()
				select {
				case <-s.closed:
				case <-time.After(time.Second):
				}
			}
			return len(p), nil
		})
		c := open(t, s)
		err := c.Send(ctx, frame)
		select {
		case <-s.closed:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Send: got %v on a connection its context closed, want context.Canceled", err)
			}
		default:
			if err != nil {
				t.Errorf("Send: got %v, want nil with the connection open", err)
			}
		}
	})
	t.Run("to a REPL that ended", func(t *testing.T) {
		s := newScripted(func(io.Writer, io.Writer) error { return nil })
		s.stdin = writerFunc(func([]byte) (int, error) { return 0, io.ErrClosedPipe })
		c := open(t, s)
		<-c.Done()
		if err := c.Send(context.Background(), protocol.EncodeInterrupt("r1")); err != kiln.ErrSandboxExited {
			t.Errorf("Send: got %v, want kiln.ErrSandboxExited", err)
		}
	})
}

// TestBackPressure checks that frames nobody receives hold the REPL's output back once
// the queue is full, and that receiving lets it go on, in order.
func TestBackPressure(t *testing.T) {
	const total = frameQueue + 10
	var written atomic.Int32
	s := newScripted(func(stdout, _ io.Writer) error {
		for i := range total {
			frame := join(protocol.EncodeEvent("r1", &protocol.Event{Type: protocol.EventOutput, Stream: "stdout", Text: fmt.Sprint(i)}))
			if _, err := stdout.Write(frame); err != nil {
				return err
			}
			written.Add(1)
		}
		return nil
	})
	c := open(t, s)
	time.Sleep(50 * time.Millisecond)
	if got := written.Load(); got != frameQueue {
		t.Errorf("the REPL wrote %d frames with nobody receiving, want %d: the queue, then it waits", got, frameQueue)
	}
	for i := range total {
		f, err := c.Receive(context.Background())
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if ev, _, err := protocol.Decode(f, "r1", protocol.Limits{}); err != nil || ev.Text != fmt.Sprint(i) {
			t.Fatalf("frame %d: got %+v, %v", i, ev, err)
		}
	}
}

// TestReceive checks Receive's other ends: its context, a malformed frame (reported,
// and the next one still comes) and Close, which is idempotent.
func TestReceive(t *testing.T) {
	good := join(protocol.EncodeEvent("r1", &protocol.Event{Type: protocol.EventOutput, Stream: "stdout", Text: "ok"}))
	release := make(chan struct{})
	s := newScripted(nil)
	s.script = func(stdout, _ io.Writer) error {
		<-release
		fmt.Fprintf(stdout, "%s\n{\"nope\": 1}\n%s\n", protocol.ResponseStart, protocol.ResponseEnd)
		fmt.Fprintf(stdout, "%s\n{\"binary\":%d}\n", protocol.ResponseStart, testLimits.Binary+1)
		_, _ = stdout.Write(good)
		<-s.closed
		return net.ErrClosed
	}
	c := open(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Receive(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Receive with nothing sent: got %v, want context.DeadlineExceeded", err)
	}
	close(release)
	for _, want := range []error{protocol.ErrMalformed, protocol.ErrFrameTooLarge} {
		if _, err := c.Receive(context.Background()); !errors.Is(err, want) {
			t.Errorf("Receive: got %v, want %v", err, want)
		}
	}
	if f, err := c.Receive(context.Background()); err != nil || !bytes.Contains(f.Header, []byte(`"text":"ok"`)) {
		t.Errorf("Receive after the bad frames: got %s, %v; want the good one", f.Header, err)
	}
	c.Close()
	c.Close()
	if _, err := c.Receive(context.Background()); err != kiln.ErrSandboxExited {
		t.Errorf("Receive after Close: got %v, want kiln.ErrSandboxExited alone", err)
	}
	if got := s.closes.Load(); got != 1 {
		t.Errorf("got %d closes of the streams, want 1", got)
	}
}

func TestLastLine(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", "no output"},
		{"  \n\n", "no output"},
		{"one", "one"},
		{"first\nsecond\n\n", "second"},
	} {
		if got := LastLine(tt.in); got != tt.want {
			t.Errorf("LastLine(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}

// A REPL that dies at start, before kiln's hello can be written, is told by its end: the
// handshake waits for it and names the last line of its stderr, whatever the write said.
func TestHandshakeHelloRefused(t *testing.T) {
	died := make(chan struct{})
	s := newScripted(func(_, stderr io.Writer) error {
		<-died
		time.Sleep(20 * time.Millisecond) // the traceback comes a moment after the pipe broke
		_, err := io.WriteString(stderr, "repl_server.py: error: unrecognized arguments: --await-hello\n")
		return err
	})
	s.stdin = writerFunc(func([]byte) (int, error) {
		close(died)
		return 0, io.ErrClosedPipe
	})
	c := open(t, s)
	_, err := c.Handshake(context.Background())
	if !errors.Is(err, kiln.ErrSandboxExited) || !strings.Contains(err.Error(), "unrecognized arguments: --await-hello") {
		t.Errorf("Handshake: got %v, want kiln.ErrSandboxExited with the REPL's last line", err)
	}
}

// A Send on a connection someone else closed (a sandbox removed, a Pod deleted) says the
// sandbox exited, even while its streams are still unwinding.
func TestSendAfterClose(t *testing.T) {
	unwound := make(chan struct{})
	s := newScripted(func(io.Writer, io.Writer) error {
		<-unwound
		return nil
	})
	s.stdin = writerFunc(func([]byte) (int, error) { return 0, io.ErrClosedPipe })
	c := open(t, s)
	c.Close()
	err := c.Send(context.Background(), protocol.EncodeHello("h"))
	close(unwound)
	if !errors.Is(err, kiln.ErrSandboxExited) {
		t.Errorf("Send after Close: got %v, want kiln.ErrSandboxExited", err)
	}
}
