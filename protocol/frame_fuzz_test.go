package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// fuzzCaps are the limits of the seeds' parsers: large enough for their frames, small
// enough that the fuzzer crosses them.
const (
	fuzzMaxHeader = 256
	fuzzMaxBinary = 64
)

// FuzzParser feeds any byte stream to a Parser in one piece, a byte at a time and in
// the pieces cuts describes. The three must emit the same frames and errors; no frame
// may break the parser's limits or the framing; the parser must hold no more than its
// limits between calls.
func FuzzParser(f *testing.F) {
	resp := func(rest, bin string) []byte { return []byte(frame(rest, bin)) }
	req := func(rest, bin string) []byte {
		return []byte(RequestStart + "\n" + header(len(bin), rest) + "\n" + bin + RequestEnd + "\n")
	}
	seeds := []struct {
		data    []byte
		cuts    []byte
		request bool
	}{
		{resp(`"type":"result"`, ""), nil, false},
		{resp(`"type":"result"`, "payload"), []byte{3, 1, 40}, false},
		{append(resp("", "one"), resp("", "two")...), []byte{30}, false},
		{req(`"op":"exec"`, "state"), []byte{7, 0, 2}, true},
		{resp("", "a\n"+ResponseEnd+"\nb"), []byte{1}, false},                                         // delimiters inside a payload
		{[]byte(ResponseStart + "\n" + `{"binary":9}` + "\nshort" + ResponseEnd + "\n"), nil, false},  // a count that lies high
		{[]byte(ResponseStart + "\n" + `{"binary":2}` + "\nlonger" + ResponseEnd + "\n"), nil, false}, // and low
		{[]byte(ResponseStart + "\n" + `{"binary":5}` + "\nabc"), nil, false},                         // cut inside the payload
		{[]byte(ResponseStart + "\n" + `{"binary":3}` + "\nabc" + ResponseEnd[:6]), []byte{5}, false}, // cut inside the end
		{[]byte(ResponseStart + "\n" + `{"binary":99999999999999999999}` + "\n"), nil, false},         // past int64
		{[]byte(ResponseStart + "\n" + `{"binary":-1}` + "\n" + ResponseEnd + "\n"), nil, false},
		{[]byte(ResponseStart + "\n" + `{"binary":65}` + "\n" + strings.Repeat("x", 65) + ResponseEnd + "\n"), nil, false}, // over the payload cap
		{[]byte(ResponseStart + "\n" + `{"binary":0,"x":"` + strings.Repeat("h", 300) + `"}` + "\n" + ResponseEnd + "\n"), []byte{100}, false},
		{[]byte(ResponseStart + "\n" + ResponseStart + "\n" + `{"binary":0}` + "\n" + ResponseEnd + "\n"), nil, false}, // a start where a header belongs
		{[]byte("noise\r\n" + ResponseStart + "\r\n" + `{"binary":0}` + "\r\n" + ResponseEnd + "\r\n"), nil, false},
		{[]byte(`{"type":"result"}` + "\n"), nil, false}, // a header without a start
		{resp("", "x"), nil, true}, // a response to a request parser
	}
	for _, s := range seeds {
		f.Add(s.data, s.cuts, s.request, uint16(fuzzMaxHeader), uint16(fuzzMaxBinary))
	}
	f.Fuzz(func(t *testing.T, data, cuts []byte, request bool, maxHeader, maxBinary uint16) {
		newParser := NewParser
		if request {
			newParser = NewRequestParser
		}
		fresh := func() *Parser { return newParser(int(maxHeader), int64(maxBinary)) }
		whole := feedPieces(t, fresh(), data, nil, false)
		for _, ev := range whole {
			if ev.err == nil && !bytes.Contains(data, []byte(encodeFrame(fresh(), ev))) {
				t.Fatalf("frame %q + %q is not in the stream", ev.header, ev.binary)
			}
		}
		checkSameEvents(t, "byte at a time", feedPieces(t, fresh(), data, []byte{1}, true), whole)
		checkSameEvents(t, "in pieces", feedPieces(t, fresh(), data, cuts, true), whole)
	})
}

// FuzzParserFrames builds two well-formed frames around an arbitrary payload and
// header member, with a line of noise before them, and feeds them in pieces. Frames
// within the limits must come out exactly as they went in; a frame over them must be
// ErrFrameTooLarge.
func FuzzParserFrames(f *testing.F) {
	f.Add([]byte("payload"), "text", "noise", []byte{5}, false, uint16(fuzzMaxHeader), uint16(fuzzMaxBinary))
	f.Add([]byte(""), "", "", []byte(nil), true, uint16(fuzzMaxHeader), uint16(fuzzMaxBinary))
	f.Add([]byte("\n"+ResponseStart+"\n"+ResponseEnd+"\n"), "\n", ResponseEnd, []byte{1, 2, 3}, false, uint16(fuzzMaxHeader), uint16(fuzzMaxBinary))
	f.Add([]byte(strings.Repeat("b", 65)), "over the payload cap", "", []byte{9}, false, uint16(fuzzMaxHeader), uint16(fuzzMaxBinary))
	f.Add([]byte("x"), strings.Repeat("h", 300), "", []byte{9}, true, uint16(fuzzMaxHeader), uint16(fuzzMaxBinary))
	f.Fuzz(func(t *testing.T, payload []byte, member, noise string, cuts []byte, request bool, maxHeader, maxBinary uint16) {
		p := NewParser(int(maxHeader), int64(maxBinary))
		if request {
			p = NewRequestParser(int(maxHeader), int64(maxBinary))
		}
		m, _ := json.Marshal(member) // a string always encodes, newlines escaped
		want := event{header: header(len(payload), `"m":`+string(m)), binary: string(payload)}
		fits := len(want.header) <= int(maxHeader) && len(payload) <= int(maxBinary) &&
			len(p.start) <= int(maxHeader) // a start line longer than the cap is skipped as noise
		stream := strings.ReplaceAll(noise, "\n", " ") + "\n" + encodeFrame(p, want) + encodeFrame(p, want)
		got := feedPieces(t, p, []byte(stream), cuts, true)
		switch {
		case fits:
			checkSameEvents(t, "two frames", got, []event{want, want})
		case len(p.start) > int(maxHeader):
			// The parser never sees a start; a payload may still hold one, so only
			// the limits, which feedPieces checked, are promised.
		case len(got) == 0 || !errors.Is(got[0].err, ErrFrameTooLarge):
			t.Fatalf("got %v, want ErrFrameTooLarge first", got)
		}
	})
}

// encodeFrame is ev as p's stream would carry it.
func encodeFrame(p *Parser, ev event) string {
	return p.start + "\n" + ev.header + "\n" + ev.binary + p.end
}

// feedPieces feeds data to p in pieces whose lengths cycle through cuts (all of it at
// once when cuts is empty; a zero is an empty piece, then a byte) and returns what p
// emitted. It checks every frame and error against p's limits, and p's buffers after
// every call. With scribble, it overwrites every frame it was handed once it has
// copied it, which must not change what follows: the frame's slices are the callee's.
func feedPieces(t *testing.T, p *Parser, data, cuts []byte, scribble bool) []event {
	t.Helper()
	var events []event
	emit := func(fr Frame, err error) {
		if err != nil {
			if fr.Header != nil || fr.Binary != nil {
				t.Fatalf("got an error %v with a frame %q + %q, want an empty frame", err, fr.Header, fr.Binary)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("got error %v, want ErrMalformed or ErrFrameTooLarge", err)
			}
		} else {
			checkFrame(t, p, fr)
		}
		events = append(events, event{header: string(fr.Header), binary: string(fr.Binary), err: err})
		if scribble {
			for _, b := range [][]byte{fr.Header, fr.Binary} {
				for i := range b {
					b[i] = '#'
				}
			}
		}
	}
	for i := 0; len(data) > 0; i++ {
		n := len(data)
		if len(cuts) > 0 {
			c := int(cuts[i%len(cuts)])
			if c == 0 { // an empty Feed, then a byte
				p.Feed(data[:0], emit)
				c = 1
			}
			n = min(n, c)
		}
		p.Feed(data[:n], emit)
		data = data[n:]
		checkParserBounds(t, p)
	}
	return events
}

// checkFrame checks an emitted frame: within p's limits, and a header whose count is
// the payload's length.
func checkFrame(t *testing.T, p *Parser, fr Frame) {
	t.Helper()
	if len(fr.Header) > p.maxHeader {
		t.Fatalf("got a header of %d bytes, over the cap of %d", len(fr.Header), p.maxHeader)
	}
	if int64(len(fr.Binary)) > p.maxBinary {
		t.Fatalf("got %d payload bytes, over the cap of %d", len(fr.Binary), p.maxBinary)
	}
	if n, ok := binaryCount(fr.Header); !ok || n != int64(len(fr.Binary)) {
		t.Fatalf("got header %q with %d payload bytes, want a count that matches", fr.Header, len(fr.Binary))
	}
}

// checkParserBounds checks what p holds between two calls of Feed.
func checkParserBounds(t *testing.T, p *Parser) {
	t.Helper()
	switch {
	case len(p.line) > p.maxHeader:
		t.Fatalf("parser holds a line of %d bytes, over the cap of %d", len(p.line), p.maxHeader)
	case int64(cap(p.binary)) > p.maxBinary:
		t.Fatalf("parser holds a payload buffer of %d bytes, over the cap of %d", cap(p.binary), p.maxBinary)
	case p.endSeen >= len(p.end):
		t.Fatalf("parser matched %d bytes of a %d-byte end delimiter", p.endSeen, len(p.end))
	}
}

// checkSameEvents compares two runs' frames and errors, the errors by their text.
func checkSameEvents(t *testing.T, name string, got, want []event) {
	t.Helper()
	text := func(evs []event) string {
		var b strings.Builder
		for _, ev := range evs {
			fmt.Fprintf(&b, "%q + %q err=%v\n", ev.header, ev.binary, ev.err)
		}
		return b.String()
	}
	if g, w := text(got), text(want); g != w {
		t.Fatalf("%s: got\n%s\nwant\n%s", name, g, w)
	}
}
