package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
)

// OpNet carries one of a sandbox's outgoing connections over its channel: the REPL
// listens on the sandbox's loopback for the code's HTTP clients (its HTTP(S)_PROXY), and
// each connection one of them opens travels as net frames to kiln's egress proxy. The
// sandbox itself has no network.
const OpNet = "net"

// What a net frame says about its connection. Open comes from the REPL only (the code
// connected); the others go both ways.
const (
	NetOpen  = "open"  // a client connected to the REPL's proxy port
	NetData  = "data"  // bytes of the connection, the frame's payload
	NetEOF   = "eof"   // the sender will send no more bytes (a half close)
	NetClose = "close" // the connection is over, both ways; its id may be reused
	NetAck   = "ack"   // N bytes of data were delivered: the sender may send N more
)

// NetWindow is how many bytes of data one side may send on one connection before the
// other acknowledges them: the buffer each side holds per connection, at most.
const NetWindow = 1 << 20

// NetChunk is the most data one net frame carries.
const NetChunk = 256 << 10

// Net is one net frame: what it says (Op), of which connection, and its data or its
// acknowledged count.
type Net struct {
	Conn uint32
	Op   string
	N    int64  // NetAck: the bytes delivered
	Data []byte // NetData: the bytes
}

type netRequestHeader struct {
	Binary int64  `json:"binary"`
	Op     string `json:"op"` // OpNet
	Conn   uint32 `json:"conn"`
	Net    string `json:"net"`
	N      int64  `json:"n,omitempty"`
}

type netResponseHeader struct {
	Binary int64  `json:"binary"`
	Type   string `json:"type"` // OpNet
	Conn   uint32 `json:"conn"`
	Net    string `json:"net"`
	N      int64  `json:"n"`
}

// EncodeNet returns the request frame that carries n to the REPL; the data is not
// copied.
func EncodeNet(n Net) net.Buffers {
	header, _ := json.Marshal(netRequestHeader{Binary: int64(len(n.Data)), Op: OpNet, Conn: n.Conn, Net: n.Op, N: n.N}) // cannot fail
	return appendFrame(RequestStart, RequestEnd, header, [][]byte{n.Data})
}

// EncodeNetResponse returns the response frame that carries n from a REPL: what
// stand-ins of a REPL send.
func EncodeNetResponse(n Net) net.Buffers {
	header, _ := json.Marshal(netResponseHeader{Binary: int64(len(n.Data)), Type: OpNet, Conn: n.Conn, Net: n.Op, N: n.N}) // cannot fail
	return appendFrame(ResponseStart, ResponseEnd, header, [][]byte{n.Data})
}

// netMark is how a net frame's header goes on after its payload count: the REPL writes
// "binary" first and "type" second, so that a net frame is told from the others
// without decoding any JSON.
var netMark = []byte(`,"type":"net",`)

// IsNet reports whether a frame from a REPL is a net frame.
func IsNet(f Frame) bool {
	h := f.Header
	if !bytes.HasPrefix(h, []byte(binaryPrefix)) {
		return false
	}
	h = h[len(binaryPrefix):]
	i := 0
	for i < len(h) && h[i] >= '0' && h[i] <= '9' {
		i++
	}
	return bytes.HasPrefix(h[i:], netMark)
}

// DecodeNet decodes a net frame from a REPL.
func DecodeNet(f Frame) (Net, error) {
	var h netResponseHeader
	if err := json.Unmarshal(f.Header, &h); err != nil {
		return Net{}, fmt.Errorf("%w: net frame: %v", ErrMalformed, err)
	}
	if h.Type != OpNet || h.Binary != int64(len(f.Binary)) {
		return Net{}, fmt.Errorf("%w: net frame: not one", ErrMalformed)
	}
	switch h.Net {
	case NetOpen, NetEOF, NetClose:
	case NetData:
		if len(f.Binary) == 0 || len(f.Binary) > NetChunk {
			return Net{}, fmt.Errorf("%w: net frame: %d bytes of data", ErrMalformed, len(f.Binary))
		}
	case NetAck:
		if h.N <= 0 || h.N > NetWindow {
			return Net{}, fmt.Errorf("%w: net frame: ack of %d bytes", ErrMalformed, h.N)
		}
	default:
		return Net{}, fmt.Errorf("%w: net frame: unknown %q", ErrMalformed, h.Net)
	}
	if h.Net != NetData && len(f.Binary) > 0 {
		return Net{}, fmt.Errorf("%w: net frame: %s with data", ErrMalformed, h.Net)
	}
	return Net{Conn: h.Conn, Op: h.Net, N: h.N, Data: f.Binary}, nil
}
