package protocol

import (
	"bytes"
	"errors"
	"fmt"
)

// The delimiter lines around every message, as they appear on the wire.
const (
	RequestStart  = ">>> REQUEST_START <<<"
	RequestEnd    = ">>> REQUEST_END <<<"
	ResponseStart = ">>> RESPONSE_START <<<"
	ResponseEnd   = ">>> RESPONSE_END <<<"
)

// ErrFrameTooLarge is returned by a Parser when a frame grows past its limit.
var ErrFrameTooLarge = errors.New("protocol: frame too large")

// AppendRequestFrame appends payload, framed as a request, to dst. The payload must be
// a single line of JSON (encoding/json never emits a raw newline).
func AppendRequestFrame(dst, payload []byte) []byte {
	dst = append(dst, RequestStart...)
	dst = append(dst, '\n')
	dst = append(dst, payload...)
	dst = append(dst, '\n')
	dst = append(dst, RequestEnd...)
	return append(dst, '\n')
}

// Parser extracts response frames from a byte stream fed in pieces of any size. Bytes
// outside frames are ignored: the REPL owns its channel, so there should be none.
// Memory stays bounded by the payload limit whatever the stream holds.
// A Parser is not safe for concurrent use.
type Parser struct {
	max      int          // largest payload accepted, in bytes
	line     bytes.Buffer // the current, unfinished line
	lineOver bool         // the current line passed max and is being skipped
	payload  bytes.Buffer // lines collected since the start delimiter
	inFrame  bool
	tooBig   bool // the current frame passed max; it is skipped to its end
}

// NewParser returns a Parser that refuses payloads larger than max bytes.
func NewParser(max int) *Parser {
	return &Parser{max: max}
}

// Feed consumes data and calls emit for every complete frame, in order. The payload
// slice is only valid during the call. A frame over the limit is skipped to its end
// delimiter and reported as ErrFrameTooLarge through emit, so that a caller can keep
// draining the stream past a bad frame.
func (p *Parser) Feed(data []byte, emit func(payload []byte, err error)) {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			p.appendLine(data)
			return
		}
		p.appendLine(data[:i])
		data = data[i+1:]
		p.endLine(emit)
	}
}

func (p *Parser) appendLine(b []byte) {
	if p.lineOver {
		return
	}
	if p.line.Len()+len(b) > p.max {
		p.lineOver = true
		p.line.Reset()
		return
	}
	p.line.Write(b)
}

func (p *Parser) endLine(emit func([]byte, error)) {
	line := p.line.Bytes()
	over := p.lineOver
	defer func() { p.line.Reset(); p.lineOver = false }()
	switch {
	case over:
		if p.inFrame {
			p.tooBig = true
			p.payload.Reset()
		}
	case string(line) == ResponseStart:
		// A start inside a frame means the previous one was cut: start again.
		p.inFrame, p.tooBig = true, false
		p.payload.Reset()
	case !p.inFrame:
	case string(line) == ResponseEnd:
		p.inFrame = false
		if p.tooBig {
			p.tooBig = false
			emit(nil, fmt.Errorf("%w (over %d bytes)", ErrFrameTooLarge, p.max))
			return
		}
		emit(p.payload.Bytes(), nil)
		p.payload.Reset()
	case p.tooBig:
	case p.payload.Len() == 0:
		// The usual frame is one line of JSON: take the line's buffer over instead
		// of copying what may be megabytes. (line passed the max check already.)
		p.payload, p.line = p.line, p.payload
	default:
		p.payload.WriteByte('\n')
		if p.payload.Len()+len(line) > p.max {
			p.tooBig = true
			p.payload.Reset()
			return
		}
		p.payload.Write(line)
	}
}
