package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
)

// The delimiter lines around every message, as they appear on the wire.
const (
	RequestStart  = ">>> REQUEST_START <<<"
	RequestEnd    = ">>> REQUEST_END <<<"
	ResponseStart = ">>> RESPONSE_START <<<"
	ResponseEnd   = ">>> RESPONSE_END <<<"
)

// binaryPrefix is how every header starts: its first member counts the raw payload
// bytes after it, so that a reader knows where a frame ends without scanning them.
const binaryPrefix = `{"binary":`

// ErrFrameTooLarge is returned by a Parser when a frame's header or payloads are over
// its limits.
var ErrFrameTooLarge = errors.New("protocol: frame too large")

// Frame is one message: its JSON header and the raw payload bytes after it.
type Frame struct {
	Header []byte
	Binary []byte
}

// appendFrame returns the frame as buffers for one vectored write: the delimiters and
// the header around the payloads, which are not copied.
func appendFrame(start, end string, header []byte, payloads [][]byte) net.Buffers {
	head := make([]byte, 0, len(start)+len(header)+2)
	head = append(append(append(append(head, start...), '\n'), header...), '\n')
	bufs := net.Buffers{head}
	for _, p := range payloads {
		if len(p) > 0 {
			bufs = append(bufs, p)
		}
	}
	return append(bufs, []byte(end+"\n"))
}

// binaryCount reads the payload count at the start of a header.
func binaryCount(header []byte) (int64, bool) {
	if !bytes.HasPrefix(header, []byte(binaryPrefix)) {
		return 0, false
	}
	rest := header[len(binaryPrefix):]
	i := 0
	for i < len(rest) && i < 19 && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i == 0 || i == len(rest) || (rest[i] != ',' && rest[i] != '}') {
		return 0, false
	}
	n, err := strconv.ParseInt(string(rest[:i]), 10, 64)
	return n, err == nil
}

// Parser extracts frames from a byte stream fed in pieces of any size. Bytes outside
// frames are ignored: the REPL owns its channel, so there should be none. Memory stays
// bounded by the limits whatever the stream holds: a header longer than maxHeader, or a
// payload count over maxBinary, is refused before anything is kept of it.
// A Parser is not safe for concurrent use.
type Parser struct {
	start, end string
	maxHeader  int
	maxBinary  int64

	state    parseState
	line     []byte // the current, unfinished line
	lineOver bool   // the current line passed maxHeader and is being skipped
	header   []byte
	binary   []byte // the payloads read so far; cap is their count
	endSeen  int    // bytes of the end delimiter matched so far
}

type parseState int

const (
	seekStart parseState = iota // outside a frame, line by line
	inHeader                    // the line after the start delimiter
	inBinary                    // counting payload bytes
	atEnd                       // matching the end delimiter after the payloads
)

// NewParser returns a Parser of response frames that refuses headers over maxHeader
// bytes and payloads over maxBinary bytes.
func NewParser(maxHeader int, maxBinary int64) *Parser {
	return newParser(ResponseStart, ResponseEnd, maxHeader, maxBinary)
}

// NewRequestParser returns a Parser of request frames, for stand-ins of a REPL.
func NewRequestParser(maxHeader int, maxBinary int64) *Parser {
	return newParser(RequestStart, RequestEnd, maxHeader, maxBinary)
}

func newParser(start, end string, maxHeader int, maxBinary int64) *Parser {
	return &Parser{start: start, end: end + "\n", maxHeader: maxHeader, maxBinary: maxBinary}
}

// Feed consumes data and calls emit for every complete frame, in order. The frame's
// slices belong to the callee: the parser keeps no reference to them. A frame that
// breaks the framing or the limits is reported through emit as an error wrapping
// ErrMalformed or ErrFrameTooLarge, and the parser looks for the next start delimiter,
// so that a caller can keep draining the stream past a bad frame.
func (p *Parser) Feed(data []byte, emit func(f Frame, err error)) {
	for len(data) > 0 {
		switch p.state {
		case seekStart, inHeader:
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				p.appendLine(data)
				return
			}
			p.appendLine(data[:i])
			data = data[i+1:]
			p.endLine(emit)
		case inBinary:
			n := min(int64(len(data)), int64(cap(p.binary)-len(p.binary)))
			p.binary = append(p.binary, data[:n]...)
			data = data[n:]
			if len(p.binary) == cap(p.binary) {
				p.state = atEnd
			}
		case atEnd:
			n := min(len(data), len(p.end)-p.endSeen)
			if !bytes.Equal(data[:n], []byte(p.end[p.endSeen:p.endSeen+n])) {
				seen := p.end[:p.endSeen] // matched in earlier pieces: part of the first line now
				p.fail(emit, fmt.Errorf("%w: no end delimiter after %d payload bytes", ErrMalformed, len(p.binary)))
				p.appendLine([]byte(seen))
				continue // what follows is read as lines again, however the stream was cut
			}
			data = data[n:]
			if p.endSeen += n; p.endSeen == len(p.end) {
				f := Frame{Header: p.header, Binary: p.binary}
				p.reset()
				emit(f, nil)
			}
		}
	}
}

func (p *Parser) appendLine(b []byte) {
	if p.lineOver {
		return
	}
	if len(p.line)+len(b) > p.maxHeader {
		p.lineOver = true
		p.line = p.line[:0]
		return
	}
	p.line = append(p.line, b...)
}

func (p *Parser) endLine(emit func(Frame, error)) {
	line, over := p.line, p.lineOver
	p.lineOver = false
	switch {
	case string(line) == p.start:
		// A start where a header is expected means the previous frame was cut.
		p.state = inHeader
		p.line = p.line[:0]
	case p.state == seekStart:
		p.line = p.line[:0]
	case over:
		p.fail(emit, fmt.Errorf("%w: header over %d bytes", ErrFrameTooLarge, p.maxHeader))
	default:
		n, ok := binaryCount(line)
		switch {
		case !ok:
			p.fail(emit, fmt.Errorf("%w: a header must start with %s and a count", ErrMalformed, binaryPrefix))
			return
		case n > p.maxBinary:
			p.fail(emit, fmt.Errorf("%w: %d payload bytes, over %d", ErrFrameTooLarge, n, p.maxBinary))
			return
		}
		// The header's buffer goes with the frame; the next line starts a new one.
		p.header, p.line = line, nil
		p.binary = make([]byte, 0, n)
		p.state = inBinary
		if n == 0 {
			p.state = atEnd
		}
	}
}

// fail reports a broken frame and goes back to looking for a start delimiter.
func (p *Parser) fail(emit func(Frame, error), err error) {
	p.reset()
	emit(Frame{}, err)
}

func (p *Parser) reset() {
	p.state, p.header, p.binary, p.endSeen = seekStart, nil, nil, 0
	p.line = p.line[:0]
}
