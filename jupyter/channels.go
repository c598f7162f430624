package jupyter

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// maxMessage bounds one message a client sends (a cell's code, mostly).
const maxMessage = 16 << 20

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

	writeMu sync.Mutex
	once    sync.Once
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
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, typ, b); err != nil {
		c.close()
	}
}

func (c *conn) close() {
	c.once.Do(func() {
		c.cancel()
		_ = c.ws.Close(websocket.StatusNormalClosure, "")
	})
}

// channels upgrades to the kernel's WebSocket and serves it until either side closes.
// Origins are not checked: kiln's credentials travel in headers or the query, never in
// cookies, so a page of another origin has nothing to ride on.
func (h *Handler) channels(w http.ResponseWriter, r *http.Request) {
	k, ok := h.kernel(w, r)
	if !ok {
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: []string{subprotocolV1}, InsecureSkipVerify: true, CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		h.log.Info("kernel websocket not accepted", "kernel", k.id, "err", err)
		return
	}
	ws.SetReadLimit(maxMessage)
	// The connection outlives nothing of the request but its caller: a cell it started
	// runs to its end even when the socket goes (as a Jupyter kernel's does).
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	c := &conn{k: k, ws: ws, session: r.URL.Query().Get("session_id"), v1: ws.Subprotocol() == subprotocolV1, ctx: ctx, cancel: cancel}
	k.mu.Lock()
	if k.shutdown {
		k.mu.Unlock()
		c.close()
		return
	}
	k.conns[c] = true
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		delete(k.conns, c)
		k.mu.Unlock()
		c.close()
	}()
	// Cells run one at a time per kernel, in order; other requests are answered at once.
	cells := make(chan *message, 64)
	go func() {
		for m := range cells {
			k.execute(context.WithoutCancel(ctx), c, m)
		}
	}()
	defer close(cells)
	for {
		typ, b, err := ws.Read(ctx)
		if err != nil {
			return
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
		switch m.Header.MsgType {
		case "execute_request":
			select {
			case cells <- &m:
			default:
				c.send(reply(&m, c.session, "shell", "execute_reply", map[string]any{
					"status": "error", "ename": "KernelBusy", "evalue": "too many cells queued", "traceback": []string{}, "execution_count": nil}))
			}
		default:
			go h.answer(ctx, c, &m)
		}
	}
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
