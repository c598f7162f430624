package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
)

// OpAgent carries a call to the sandbox's agent (the REPL's kiln_repl.agent): a command to
// start, input for one, a file to read or write. Calls run beside the cells, each on a
// number of kiln's choosing; the REPL answers with agent frames of that number, events
// first, then one with End set.
const OpAgent = "agent"

// AgentChunk is the most data kiln puts in one agent call (a file's chunk).
const AgentChunk = 4 << 20

// AgentCall is one call kiln sends.
type AgentCall struct {
	Call   uint32
	Method string
	Args   any // JSON-encoded as the method's arguments; nil for none
	Data   []byte
}

// AgentEvent is one agent frame from the REPL: an event of the call, or its end, with the
// call's result as Event or its failure as Code (Connect's names) and Error.
type AgentEvent struct {
	Call  uint32          `json:"call"`
	Event json.RawMessage `json:"event"`
	End   bool            `json:"end"`
	Code  string          `json:"code"`
	Error string          `json:"error"`
	Data  []byte          `json:"-"`
}

type agentRequestHeader struct {
	Binary int64  `json:"binary"`
	Op     string `json:"op"`
	Call   uint32 `json:"call"`
	Method string `json:"method"`
	Args   any    `json:"args,omitempty"`
}

type agentResponseHeader struct {
	Binary int64  `json:"binary"`
	Type   string `json:"type"`
	AgentEvent
}

// EncodeAgent returns the frame that carries c to the REPL; the data is not copied.
func EncodeAgent(c AgentCall) (net.Buffers, error) {
	header, err := json.Marshal(agentRequestHeader{Binary: int64(len(c.Data)), Op: OpAgent, Call: c.Call, Method: c.Method, Args: c.Args})
	if err != nil {
		return nil, err
	}
	return appendFrame(RequestStart, RequestEnd, header, [][]byte{c.Data}), nil
}

// EncodeAgentResponse returns the frame a REPL sends for e: what stand-ins of a REPL send.
func EncodeAgentResponse(e AgentEvent) net.Buffers {
	if e.Event == nil {
		e.Event = json.RawMessage("{}")
	}
	header, _ := json.Marshal(agentResponseHeader{Binary: int64(len(e.Data)), Type: OpAgent, AgentEvent: e}) // cannot fail
	return appendFrame(ResponseStart, ResponseEnd, header, [][]byte{e.Data})
}

var agentMark = []byte(`,"type":"agent",`)

// IsAgent reports whether a frame from a REPL is an agent frame, without decoding its JSON
// (the REPL writes "binary" first and "type" second, as for net frames).
func IsAgent(f Frame) bool {
	h := f.Header
	if !bytes.HasPrefix(h, []byte(binaryPrefix)) {
		return false
	}
	h = h[len(binaryPrefix):]
	i := 0
	for i < len(h) && h[i] >= '0' && h[i] <= '9' {
		i++
	}
	return bytes.HasPrefix(h[i:], agentMark)
}

// DecodeAgent decodes an agent frame from a REPL.
func DecodeAgent(f Frame) (AgentEvent, error) {
	var h agentResponseHeader
	if err := json.Unmarshal(f.Header, &h); err != nil {
		return AgentEvent{}, fmt.Errorf("%w: agent frame: %v", ErrMalformed, err)
	}
	if h.Type != OpAgent || h.Binary != int64(len(f.Binary)) {
		return AgentEvent{}, fmt.Errorf("%w: agent frame: not one", ErrMalformed)
	}
	e := h.AgentEvent
	e.Data = f.Binary
	return e, nil
}
