package sandboxtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"testing/iotest"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
)

// Handler runs one exec request in a fake REPL, as the image's REPL runs the code: it
// may send events, wait for tool results or an interrupt, and ends by answering
// (Exchange.Reply) or by ending the REPL (Exchange.End). A handler that returns without
// either leaves the request unanswered. Requests of one sandbox run one at a time, in
// the order they came; a handler that waits must also watch Exchange.Done, which closes
// when the REPL is gone (the sandbox was removed, or the host hung up).
type Handler func(x *Exchange)

// ExitStatus is how a fake REPL process ended, as Sandbox.Exit reports it.
type ExitStatus struct {
	Code      int  // its exit code; -1 for one the runtime could not learn
	OOMKilled bool // the kernel's out-of-memory killer ended it
	// Err is what Sandbox.Exit returns beside the code: the runtime could not tell.
	Err error
	// Broken, when set, breaks the REPL's streams with this error rather than ending them:
	// a connection to the runtime that was lost (kiln.ErrSandboxExited, with the reason).
	Broken error
}

// repl is the fake REPL process of one sandbox. A reader goroutine reads the host's
// frames from its stdin: it answers hellos and pings itself, hands interrupts and tool
// results to the request they name, and queues exec requests, which a runner goroutine
// serves one at a time through the handler, as the image's REPL does with its reader
// thread and its main thread.
type repl struct {
	handler Handler
	ready   protocol.Ready
	warm    time.Time // a hello is answered no sooner: the REPL's own warm-up

	stdinR *io.PipeReader // the REPL's end of its stdin
	stdinW *io.PipeWriter // kiln's end
	outR   *io.PipeReader // kiln's end of the REPL's stdout
	outW   *io.PipeWriter
	errR   *io.PipeReader // kiln's end of the REPL's own stderr
	errW   *io.PipeWriter

	writeMu sync.Mutex // one frame at a time on stdout

	mu         sync.Mutex
	pending    map[string]*Exchange // queued or running, by request id
	requests   []protocol.Request   // every exec request, in order
	interrupts int
	vars       map[string]string // the namespace of Commands

	execs   chan *Exchange
	exited  chan struct{} // closed when the process has ended; status is set before
	endOnce sync.Once
	status  ExitStatus
}

// maxQueued is how many exec requests wait behind the running one before the reader
// waits too, as a request waits in the pipe.
const maxQueued = 16

func newREPL(h Handler, ready protocol.Ready, warmUp time.Duration) *repl {
	r := &repl{handler: h, ready: ready, warm: time.Now().Add(warmUp),
		pending: map[string]*Exchange{}, vars: map[string]string{},
		execs: make(chan *Exchange, maxQueued), exited: make(chan struct{})}
	r.stdinR, r.stdinW = io.Pipe()
	r.outR, r.outW = io.Pipe()
	r.errR, r.errW = io.Pipe()
	go r.read()
	go r.serve()
	return r
}

// read reads the host's frames until the REPL's stdin ends, which ends the REPL with
// code 0, as the image's does at end of file.
func (r *repl) read() {
	parser := protocol.NewRequestParser(1<<20, 1<<30)
	buf := make([]byte, 32<<10)
	for {
		n, err := r.stdinR.Read(buf)
		parser.Feed(buf[:n], r.frame)
		if err != nil {
			r.end(ExitStatus{})
			return
		}
	}
}

// serve runs the queued exec requests, one at a time, until the REPL ends.
func (r *repl) serve() {
	for {
		select {
		case x := <-r.execs:
			r.handler(x)
			r.mu.Lock()
			delete(r.pending, x.Request.ID)
			r.mu.Unlock()
		case <-r.exited:
			return
		}
	}
}

// frame handles one frame from the host. An unreadable one gets an error frame, as the
// image's REPL answers it.
func (r *repl) frame(f protocol.Frame, err error) {
	if err != nil {
		r.sendError("", "bad request: "+err.Error())
		return
	}
	var h struct {
		ID string `json:"id"`
		Op string `json:"op"`
	}
	if err := json.Unmarshal(f.Header, &h); err != nil {
		r.sendError("", "bad request: "+err.Error())
		return
	}
	switch h.Op {
	case protocol.OpHello:
		select {
		case <-time.After(time.Until(r.warm)):
		case <-r.exited:
			return
		}
		r.sendReady(h.ID)
	case protocol.OpPing:
		_ = r.sendHeader(map[string]any{"binary": 0, "id": h.ID, "type": "pong"})
	case protocol.OpInterrupt:
		r.mu.Lock()
		r.interrupts++
		x := r.pending[h.ID]
		r.mu.Unlock()
		if x != nil {
			x.interruptOnce.Do(func() { close(x.interrupted) })
		}
	case protocol.OpToolResults:
		id, results, err := protocol.DecodeToolResults(f)
		if err != nil {
			r.sendError(h.ID, "bad request: "+err.Error())
			return
		}
		r.mu.Lock()
		x := r.pending[id]
		r.mu.Unlock()
		if x != nil {
			select {
			case x.tools <- results:
			default: // more rounds unread than a run makes: dropped, as for another id
			}
		}
	case protocol.OpExec, "":
		req, err := protocol.DecodeRequest(f)
		if err != nil {
			r.sendError(h.ID, "bad request: "+err.Error())
			return
		}
		x := &Exchange{Request: *req, r: r, interrupted: make(chan struct{}), tools: make(chan []protocol.ToolResult, 16)}
		r.mu.Lock()
		r.requests = append(r.requests, *req)
		r.pending[req.ID] = x
		r.mu.Unlock()
		select {
		case r.execs <- x:
		case <-r.exited:
		}
	default:
		r.sendError(h.ID, fmt.Sprintf("bad request: unknown op '%s'", h.Op))
	}
}

// readyHeader is the ready frame's header: the hello's id, then the handshake.
type readyHeader struct {
	Binary int64  `json:"binary"`
	ID     string `json:"id"`
	protocol.Ready
}

func (r *repl) sendReady(id string) {
	_ = r.sendHeader(readyHeader{ID: id, Ready: r.ready})
}

func (r *repl) sendError(id, msg string) {
	_ = r.sendHeader(map[string]any{"binary": 0, "id": id, "type": "error", "error": msg})
}

// sendHeader sends a frame of a header alone. A map's keys are written sorted, so its
// "binary" comes first as the framing requires.
func (r *repl) sendHeader(h any) error {
	header, err := json.Marshal(h)
	if err != nil {
		return err
	}
	frame := fmt.Sprintf("%s\n%s\n%s\n", protocol.ResponseStart, header, protocol.ResponseEnd)
	return r.send(net.Buffers{[]byte(frame)})
}

// send writes one frame, whole, to the REPL's stdout; it fails once the REPL has ended.
func (r *repl) send(frame net.Buffers) error {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	select {
	case <-r.exited:
		return errEnded
	default:
	}
	_, err := frame.WriteTo(r.outW)
	return err
}

// errEnded is what a handler's sends return once its REPL has ended.
var errEnded = fmt.Errorf("%w: the fake REPL has ended", kiln.ErrSandboxExited)

// end ends the REPL process: its streams end (or break), and writes to its stdin fail as
// a write to a process that exited does.
func (r *repl) end(st ExitStatus) {
	r.endOnce.Do(func() {
		r.status = st
		close(r.exited)
		_ = r.stdinR.CloseWithError(errEnded)
		if st.Broken != nil {
			_ = r.outW.CloseWithError(st.Broken)
			_ = r.errW.CloseWithError(st.Broken)
			return
		}
		_ = r.outW.Close()
		_ = r.errW.Close()
	})
}

// Exchange is one exec request as a Handler serves it.
type Exchange struct {
	// Request is the request as the REPL decoded it.
	Request protocol.Request

	r             *repl
	interrupted   chan struct{}
	interruptOnce sync.Once
	tools         chan []protocol.ToolResult
}

// Event sends an event of the request, as the REPL's sender thread does while code
// runs.
func (x *Exchange) Event(ev protocol.Event) error {
	frame, err := protocol.EncodeEvent(x.Request.ID, &ev)
	if err != nil {
		return err
	}
	return x.r.send(frame)
}

// Reply sends the request's result; an empty ID is the request's.
func (x *Exchange) Reply(resp protocol.Response) error {
	if resp.ID == "" {
		resp.ID = x.Request.ID
	}
	frame, err := protocol.EncodeResponse(&resp)
	if err != nil {
		return err
	}
	return x.r.send(frame)
}

// Write writes raw bytes to the REPL's stdout, the protocol channel: a frame of the
// test's own making, well formed or not.
func (x *Exchange) Write(p []byte) error { return x.r.send(net.Buffers{p}) }

// Log writes a line to the REPL's own stderr, its log, whose tail kiln keeps.
func (x *Exchange) Log(line string) error {
	_, err := io.WriteString(x.r.errW, line+"\n")
	return err
}

// ToolResults waits for the host's answer to the tool calls the request made (sent as an
// EventToolCalls event), or for the REPL's end.
func (x *Exchange) ToolResults() ([]protocol.ToolResult, error) {
	select {
	case results := <-x.tools:
		return results, nil
	case <-x.r.exited:
		return nil, errEnded
	}
}

// Interrupted is closed once the host has sent an interrupt for the request.
func (x *Exchange) Interrupted() <-chan struct{} { return x.interrupted }

// Done is closed once the REPL has ended, whatever ended it.
func (x *Exchange) Done() <-chan struct{} { return x.r.exited }

// End ends the REPL process without an answer, as os._exit, a crash or a kill would:
// its streams end and Sandbox.Exit reports st. The handler should return after.
func (x *Exchange) End(st ExitStatus) { x.r.end(st) }

// streams are the fake REPL's pipes as kiln's side of a runtime opens them.
type streams struct {
	r       *repl
	trickle bool // the REPL's stdout reaches kiln one byte at a time
}

func (s streams) Stdin() io.Writer { return s.r.stdinW }

// Copy copies the REPL's stdout and stderr until both end: nil when they ended, the
// reason when they broke.
func (s streams) Copy(stdout, stderr io.Writer) error {
	errc := make(chan error, 1)
	go func() {
		_, err := io.Copy(stderr, s.r.errR)
		errc <- err
	}()
	var out io.Reader = s.r.outR
	if s.trickle {
		out = iotest.OneByteReader(out)
	}
	_, err := io.Copy(stdout, out)
	if errErr := <-errc; err == nil {
		err = errErr
	}
	return err
}

// Close hangs up: the REPL reads the end of its stdin (and leaves, as the image's does),
// and what it writes goes nowhere.
func (s streams) Close() error {
	_ = s.r.stdinW.Close()
	_ = s.r.outR.CloseWithError(net.ErrClosed)
	_ = s.r.errR.CloseWithError(net.ErrClosed)
	return nil
}
