package jupyter

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// maxControl bounds a message that is not a cell: a completion's or an inspection's
// code, a comm's payload. A larger one is refused, and the connection goes on.
const maxControl = 1 << 20

// maxCellsQueued and maxIntrospectQueued bound what one connection has waiting: cells
// (also bounded in bytes, Config.MaxQueuedBytes) and completions, inspections and
// is_complete checks, which are answered one at a time in the order they came. One more is
// answered as busy.
const (
	maxCellsQueued      = 64
	maxIntrospectQueued = 8
)

// conn is one WebSocket connection to a kernel: the five channels multiplexed, as JSON
// text messages (Jupyter Server's legacy framing) or, when the client asks for it, in
// the v1 binary framing (wire.go).
type conn struct {
	k       *kernel
	ws      *websocket.Conn
	session string // the client's session id (?session_id=)
	v1      bool   // the v1 binary framing (subprotocolV1), else JSON text
	ctx     context.Context
	cancel  context.CancelFunc

	cells      chan *message // cells waiting, in order
	introspect chan *message // completions and inspections waiting, in order
	queuedMu   sync.Mutex
	queued     int64 // bytes of the cells waiting

	writeMu sync.Mutex
	once    sync.Once
}

// newConn is the connection ws of kernel k, opened by r.
func newConn(k *kernel, ws *websocket.Conn, r *http.Request) *conn {
	// The connection outlives nothing of the request but its caller: a cell it started
	// runs to its end even when the socket goes (as a Jupyter kernel's does).
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	return &conn{k: k, ws: ws, session: r.URL.Query().Get("session_id"), v1: ws.Subprotocol() == subprotocolV1,
		ctx: ctx, cancel: cancel,
		cells: make(chan *message, maxCellsQueued), introspect: make(chan *message, maxIntrospectQueued)}
}

func (c *conn) send(m *message) {
	typ, b, err := websocket.MessageText, []byte(nil), error(nil)
	if c.v1 {
		typ = websocket.MessageBinary
		b, err = encodeV1(m)
	} else {
		b, err = json.Marshal(m)
	}
	if err != nil {
		return
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	// Not c.ctx: a write cut short by close would drop the socket before its close frame.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, typ, b); err != nil {
		c.close(websocket.StatusInternalError, "write failed")
	}
}

// close ends the connection with a close frame saying why; what it has queued never runs.
func (c *conn) close(code websocket.StatusCode, reason string) {
	c.once.Do(func() {
		c.cancel()
		_ = c.ws.Close(code, reason)
	})
}

// queueCell puts a cell of size bytes behind the others, or reports that the connection
// has as many waiting as it may.
func (c *conn) queueCell(m *message, size int) bool {
	c.queuedMu.Lock()
	defer c.queuedMu.Unlock()
	if c.queued+int64(size) > c.k.h.cfg.MaxQueuedBytes {
		return false
	}
	select {
	case c.cells <- m:
		c.queued += int64(size)
		m.size = size
		return true
	default:
		return false
	}
}

// takeCell takes the next cell off the queue, or nil once the connection has ended.
func (c *conn) takeCell() *message {
	if c.ctx.Err() != nil {
		return nil
	}
	select {
	case m := <-c.cells:
		c.queuedMu.Lock()
		c.queued -= int64(m.size)
		c.queuedMu.Unlock()
		return m
	case <-c.ctx.Done():
		return nil
	}
}

// abortQueued answers every cell still waiting as aborted: its kernel was shut down.
func (c *conn) abortQueued() {
	for {
		select {
		case m := <-c.cells:
			aborted(c, m)
		default:
			return
		}
	}
}

// channels upgrades to the kernel's WebSocket and serves it until either side closes,
// the kernel is shut down, or the token that opened it expires. Origins are not checked:
// kiln's credentials travel in headers or the query, never in cookies, so a page of
// another origin has nothing to ride on.
func (h *Handler) channels(w http.ResponseWriter, r *http.Request) {
	k, ok := h.kernel(w, r)
	if !ok {
		return
	}
	caller := h.cfg.Caller(r)
	served, ok := h.serving()
	if !ok {
		fail(w, http.StatusServiceUnavailable, "kiln is shutting down")
		return
	}
	defer served()
	if !k.admit() {
		fail(w, http.StatusTooManyRequests, fmt.Sprintf(
			"kernel %s has %d connections open, JUPYTER_MAX_CONNECTIONS; close one first", k.id, h.cfg.MaxConnections))
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: []string{subprotocolV1}, InsecureSkipVerify: true, CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		k.admitted(nil)
		h.log.Info("kernel websocket not accepted", "kernel", k.id, "err", err)
		return
	}
	// Messages are bounded as they are read (next): one past its bound is skipped, not
	// read into memory, and refused.
	ws.SetReadLimit(-1)
	c := newConn(k, ws, r)
	ctx := c.ctx
	if !k.admitted(c) {
		c.close(websocket.StatusGoingAway, "the kernel was shut down")
		return
	}
	var workers sync.WaitGroup
	defer func() {
		// What the connection queued and has not started never runs; a cell under way
		// runs to its end, and the handler waits for it.
		k.mu.Lock()
		delete(k.conns, c)
		k.mu.Unlock()
		c.close(websocket.StatusNormalClosure, "")
		workers.Wait()
	}()
	if !caller.Expires.IsZero() {
		// What a token opened lasts no longer than the token.
		expiry := time.AfterFunc(time.Until(caller.Expires), func() {
			h.log.Info("kernel websocket closed: its token expired", "kernel", k.id)
			c.close(websocket.StatusPolicyViolation, "the token that opened this connection has expired")
		})
		defer expiry.Stop()
	}
	// Cells run one at a time per kernel, in order; so do the introspection requests of
	// one connection, between cells.
	workers.Go(func() {
		for m := c.takeCell(); m != nil; m = c.takeCell() {
			k.execute(context.WithoutCancel(ctx), c, m)
		}
	})
	workers.Go(func() {
		for {
			select {
			case m := <-c.introspect:
				h.answer(ctx, c, m)
			case <-ctx.Done():
				return
			}
		}
	})
	limit := max(h.cfg.MaxCellBytes, maxControl)
	for {
		typ, b, over, err := c.next(limit)
		if err != nil {
			return
		}
		if over {
			m, ok := headerOf(b, typ == websocket.MessageBinary)
			if !ok {
				// Clients write the header first: one that does not cannot be answered.
				h.log.Info("kernel websocket: a message over the limit, with no header to answer", "kernel", k.id)
				c.close(websocket.StatusMessageTooBig, fmt.Sprintf("a message of more than %d bytes is over kiln's limit", limit))
				return
			}
			refuse(c, m, fmt.Sprintf("a message of more than %d bytes is over kiln's limit", limit))
			continue
		}
		var m message
		if typ == websocket.MessageBinary {
			got, err := decodeV1(b)
			if err != nil {
				h.log.Info("kernel websocket: a binary message that is not a kernel message", "kernel", k.id)
				continue
			}
			m = *got
		} else if err := json.Unmarshal(b, &m); err != nil {
			h.log.Info("kernel websocket: a message that is not JSON", "kernel", k.id, "err", err)
			continue
		}
		if m.Channel == "" {
			m.Channel = "shell"
		}
		h.log.Debug("kernel message", "kernel", k.id, "channel", m.Channel, "type", m.Header.MsgType)
		if c.session == "" {
			c.session = m.Header.Session
		}
		kind := m.Header.MsgType
		if kind != "execute_request" && len(b) > maxControl {
			refuse(c, &m, fmt.Sprintf("a %s of %d bytes is over kiln's limit of %d for a message that is not a cell", kind, len(b), maxControl))
			continue
		}
		switch kind {
		case "execute_request":
			if !c.queueCell(&m, len(m.Content)) {
				c.send(reply(&m, c.session, "shell", "execute_reply", map[string]any{
					"status": "error", "ename": "KernelBusy", "evalue": fmt.Sprintf(
						"too many cells queued on this connection (at most %d, or %d MB)", maxCellsQueued, h.cfg.MaxQueuedBytes>>20),
					"traceback": []string{}, "execution_count": nil}))
			}
		case "complete_request", "inspect_request", "is_complete_request":
			select {
			case c.introspect <- &m:
			default:
				refuse(c, &m, fmt.Sprintf("busy: %d requests of this connection wait already", maxIntrospectQueued))
			}
		default:
			h.answer(ctx, c, &m)
		}
	}
}

// next reads the next message of ws, at most limit bytes of it: over says it was longer,
// and then b is only its start (the rest is read and dropped).
func (c *conn) next(limit int64) (typ websocket.MessageType, b []byte, over bool, err error) {
	// Not c.ctx: cancelling a read drops the socket at once, and close sends its frame
	// after cancelling; the read ends when the socket does.
	typ, r, err := c.ws.Reader(context.Background())
	if err != nil {
		return 0, nil, false, err
	}
	if b, err = io.ReadAll(io.LimitReader(r, limit+1)); err != nil {
		return 0, nil, false, err
	}
	if int64(len(b)) <= limit {
		return typ, b, false, nil
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return 0, nil, false, err
	}
	return typ, b[:min(len(b), 64<<10)], true, nil
}

// headerOf finds the header (and channel) of a message from its first bytes, so that a
// message too large to read can still be answered.
func headerOf(start []byte, isBinary bool) (*message, bool) {
	if isBinary {
		if len(start) < 8 {
			return nil, false
		}
		n := binary.LittleEndian.Uint64(start)
		if n < 3 || uint64(len(start)) < 8*(n+1) {
			return nil, false
		}
		at := func(i uint64) uint64 { return binary.LittleEndian.Uint64(start[8*(i+1):]) }
		if at(2) > uint64(len(start)) || at(0) > at(1) || at(1) > at(2) {
			return nil, false
		}
		m := &message{Channel: string(start[at(0):at(1)])}
		return m, json.Unmarshal(start[at(1):at(2)], &m.Header) == nil
	}
	// JSON: the top-level keys in order, until "header" is read (and "channel", when it
	// comes before the end of what was read).
	dec := json.NewDecoder(bytes.NewReader(start))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	m, found := &message{Channel: "shell"}, false
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			break
		}
		switch key {
		case "header":
			found = dec.Decode(&m.Header) == nil
		case "channel":
			_ = dec.Decode(&m.Channel)
		default:
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return m, found
			}
		}
	}
	return m, found
}

// admit takes a place for a connection about to open, or reports that the kernel has
// all its places taken (or was shut down).
func (k *kernel) admit() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.shutdown || len(k.conns)+k.opening >= k.h.cfg.MaxConnections {
		return false
	}
	k.opening++
	return true
}

// admitted turns the place admit took into c's (nil: the upgrade failed); false when the
// kernel was shut down meanwhile.
func (k *kernel) admitted(c *conn) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.opening--
	if c == nil || k.shutdown {
		return false
	}
	k.conns[c] = true
	return true
}

// refuse answers a request kiln will not serve with its reply type's error, and the
// busy and idle around it that a client counts a request done by.
func refuse(c *conn, m *message, why string) {
	kind, ok := strings.CutSuffix(m.Header.MsgType, "_request")
	if !ok {
		c.k.h.log.Info("kernel websocket: a message refused", "kernel", c.k.id, "type", m.Header.MsgType, "why", why)
		return
	}
	c.k.broadcast(reply(m, c.session, "iopub", "status", map[string]string{"execution_state": "busy"}))
	c.send(reply(m, c.session, m.Channel, kind+"_reply", map[string]any{
		"status": "error", "ename": "KilnRefused", "evalue": why, "traceback": []string{}}))
	c.k.broadcast(reply(m, c.session, "iopub", "status", map[string]string{"execution_state": c.k.model().ExecutionState}))
}

// answer serves a request that is not a cell, with busy and idle around it as a kernel
// does.
// A client counts a request done once it has both its reply and the IOPub status that
// follows it (idle, with the request as parent): every request gets the pair.
func (h *Handler) answer(ctx context.Context, c *conn, m *message) {
	k := c.k
	k.broadcast(reply(m, c.session, "iopub", "status", map[string]string{"execution_state": "busy"}))
	defer func() {
		k.broadcast(reply(m, c.session, "iopub", "status", map[string]string{"execution_state": k.model().ExecutionState}))
	}()
	switch m.Header.MsgType {
	case "kernel_info_request":
		c.send(reply(m, c.session, m.Channel, "kernel_info_reply", h.kernelInfo()))
	case "complete_request", "inspect_request", "is_complete_request":
		c.send(reply(m, c.session, "shell", strings.TrimSuffix(m.Header.MsgType, "_request")+"_reply", k.introspect(ctx, m)))
	case "comm_info_request":
		c.send(reply(m, c.session, "shell", "comm_info_reply", map[string]any{"status": "ok", "comms": map[string]any{}}))
	case "history_request":
		c.send(reply(m, c.session, "shell", "history_reply", map[string]any{"status": "ok", "history": []any{}}))
	case "interrupt_request":
		status := "ok"
		if err := k.interrupt(ctx); err != nil {
			status = "error"
		}
		c.send(reply(m, c.session, "control", "interrupt_reply", map[string]any{"status": status}))
	case "shutdown_request":
		var in shutdownRequest
		_ = json.Unmarshal(m.Content, &in)
		if in.Restart {
			err := k.restart(ctx)
			c.send(reply(m, c.session, m.Channel, "shutdown_reply", map[string]any{"status": okOr(err), "restart": true}))
			return
		}
		c.send(reply(m, c.session, m.Channel, "shutdown_reply", map[string]any{"status": "ok", "restart": false}))
		if err := h.shutdown(context.WithoutCancel(ctx), k); err != nil {
			h.log.Info("kernel shutdown", "kernel", k.id, "err", err)
		}
	case "input_reply", "comm_open", "comm_msg", "comm_close":
		// No stdin (input() says so) and no comms: nothing to answer.
	default:
		h.log.Debug("kernel websocket: an unknown message", "kernel", k.id, "type", m.Header.MsgType)
	}
}

func okOr(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

func (h *Handler) kernelInfo() map[string]any {
	version := h.cfg.PythonVersion
	if version == "" {
		version = "3"
	}
	return map[string]any{
		"status": "ok", "protocol_version": protocolVersion, "implementation": "kiln",
		"implementation_version": h.cfg.Version,
		"language_info": map[string]any{
			"name": "python", "version": version, "mimetype": "text/x-python", "file_extension": ".py",
			"pygments_lexer": "ipython3", "codemirror_mode": map[string]any{"name": "ipython", "version": 3},
			"nbconvert_exporter": "python",
		},
		"banner":     fmt.Sprintf("kiln %s: Python %s in a sandbox", h.cfg.Version, version),
		"help_links": []any{},
	}
}
