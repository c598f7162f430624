package protocol

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// event is one call of a Parser's emit function.
type event struct {
	payload string
	err     error
}

// collect returns an emit function that records every call, copying the payload.
func collect(events *[]event) func([]byte, error) {
	return func(payload []byte, err error) {
		*events = append(*events, event{payload: string(payload), err: err})
	}
}

// frame wraps payload in response delimiters.
func frame(payload string) string {
	return ResponseStart + "\n" + payload + "\n" + ResponseEnd + "\n"
}

// feedAll reads r to its end, feeding every read to p, and returns what p emitted.
func feedAll(t *testing.T, p *Parser, r io.Reader) []event {
	t.Helper()
	var events []event
	emit := collect(&events)
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		p.Feed(buf[:n], emit)
		if err == io.EOF {
			return events
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
	}
}

func checkEvents(t *testing.T, got, want []event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d frames %v, want %d %v", len(got), got, len(want), want)
	}
	for i := range want {
		if got[i].payload != want[i].payload {
			t.Errorf("frame %d: got payload %q, want %q", i, got[i].payload, want[i].payload)
		}
		switch {
		case want[i].err == nil && got[i].err != nil:
			t.Errorf("frame %d: got error %v, want none", i, got[i].err)
		case want[i].err != nil && !errors.Is(got[i].err, want[i].err):
			t.Errorf("frame %d: got error %v, want %v", i, got[i].err, want[i].err)
		}
	}
}

func TestParser(t *testing.T) {
	const max = 64
	big := strings.Repeat("x", max+1)
	tests := []struct {
		name   string
		stream string
		want   []event
	}{
		{
			name:   "one frame",
			stream: frame(`{"a":1}`),
			want:   []event{{payload: `{"a":1}`}},
		},
		{
			name:   "two frames back to back",
			stream: frame(`{"a":1}`) + frame(`{"b":2}`),
			want:   []event{{payload: `{"a":1}`}, {payload: `{"b":2}`}},
		},
		{
			name:   "bytes outside frames are ignored",
			stream: "noise\n\n>>> garbage <<<\n" + frame(`{"a":1}`) + "trailing\n",
			want:   []event{{payload: `{"a":1}`}},
		},
		{
			name:   "noise between frames",
			stream: frame(`1`) + "between\n" + frame(`2`),
			want:   []event{{payload: `1`}, {payload: `2`}},
		},
		{
			name:   "delimiter only as part of a longer line",
			stream: ResponseStart + "\n" + "x" + ResponseEnd + "\n" + ResponseEnd + " \n" + "y\n" + ResponseEnd + "\n",
			want:   []event{{payload: "x" + ResponseEnd + "\n" + ResponseEnd + " \ny"}},
		},
		{
			name:   "start delimiter with a prefix does not open a frame",
			stream: "x" + ResponseStart + "\n{}\n" + ResponseEnd + "\n",
			want:   nil,
		},
		{
			name:   "request delimiters are not response delimiters",
			stream: RequestStart + "\n{}\n" + RequestEnd + "\n",
			want:   nil,
		},
		{
			name:   "a new start inside a frame restarts it",
			stream: ResponseStart + "\ncut off\n" + frame(`{"a":1}`),
			want:   []event{{payload: `{"a":1}`}},
		},
		{
			name:   "frame at exactly the limit",
			stream: frame(strings.Repeat("y", max)),
			want:   []event{{payload: strings.Repeat("y", max)}},
		},
		{
			name:   "one line over the limit, then a good frame",
			stream: frame(big) + frame(`{"ok":true}`),
			want:   []event{{err: ErrFrameTooLarge}, {payload: `{"ok":true}`}},
		},
		{
			name:   "many short lines over the limit together, then a good frame",
			stream: frame(strings.Repeat("abcdefghij\n", 10)) + frame(`{"ok":true}`),
			want:   []event{{err: ErrFrameTooLarge}, {payload: `{"ok":true}`}},
		},
		{
			name:   "an over-long line outside a frame is skipped",
			stream: big + "\n" + frame(`{"ok":true}`),
			want:   []event{{payload: `{"ok":true}`}},
		},
		{
			name:   "unfinished frame emits nothing",
			stream: ResponseStart + "\n{\"a\":1}\n",
			want:   nil,
		},
		{
			name:   "end delimiter without a newline is not yet an end",
			stream: ResponseStart + "\n{}\n" + ResponseEnd,
			want:   nil,
		},
	}
	readers := []struct {
		name string
		wrap func(io.Reader) io.Reader
	}{
		{"whole", func(r io.Reader) io.Reader { return r }},
		{"byte at a time", iotest.OneByteReader},
		{"half reads", iotest.HalfReader},
	}
	for _, tt := range tests {
		for _, rd := range readers {
			t.Run(tt.name+"/"+rd.name, func(t *testing.T) {
				p := NewParser(max)
				got := feedAll(t, p, rd.wrap(strings.NewReader(tt.stream)))
				checkEvents(t, got, tt.want)
			})
		}
	}
}

// TestParserSplitEverywhere feeds a stream in two pieces cut at every possible
// offset, so that each delimiter is split at every one of its bytes.
func TestParserSplitEverywhere(t *testing.T) {
	stream := "junk\n" + frame(`{"a":1}`) + frame(`{"b":"c"}`)
	want := []event{{payload: `{"a":1}`}, {payload: `{"b":"c"}`}}
	for i := 0; i <= len(stream); i++ {
		p := NewParser(1024)
		var got []event
		p.Feed([]byte(stream[:i]), collect(&got))
		p.Feed([]byte(stream[i:]), collect(&got))
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("split at %d: got %v, want %v", i, got, want)
		}
	}
}

// TestParserPayloadCopy checks that the parser starts each frame afresh: a second,
// shorter payload carries nothing of the first.
func TestParserPayloadCopy(t *testing.T) {
	p := NewParser(1024)
	var kept [][]byte
	emit := func(payload []byte, err error) {
		if err != nil {
			t.Fatalf("got error %v, want none", err)
		}
		kept = append(kept, bytes.Clone(payload))
	}
	p.Feed([]byte(frame("first")), emit)
	p.Feed([]byte(frame("2nd")), emit)
	if len(kept) != 2 || string(kept[0]) != "first" || string(kept[1]) != "2nd" {
		t.Fatalf("got %q, want [first 2nd]", kept)
	}
}

// TestParserBoundedMemory feeds a 10 MB line without a newline, inside and outside a
// frame, and checks through behaviour that the parser neither keeps it nor lets it
// leak into the next frame; the buffers never grow past the limit.
func TestParserBoundedMemory(t *testing.T) {
	const max = 1024
	garbage := bytes.Repeat([]byte("g"), 10<<20)
	for _, inFrame := range []bool{false, true} {
		name := "outside a frame"
		if inFrame {
			name = "inside a frame"
		}
		t.Run(name, func(t *testing.T) {
			p := NewParser(max)
			var got []event
			if inFrame {
				p.Feed([]byte(ResponseStart+"\n"), collect(&got))
			}
			for off := 0; off < len(garbage); off += 64 << 10 {
				p.Feed(garbage[off:off+64<<10], collect(&got))
			}
			if p.line.Cap() > 2*max || p.payload.Cap() > 2*max {
				t.Errorf("got buffer capacities %d and %d, want at most %d", p.line.Cap(), p.payload.Cap(), 2*max)
			}
			p.Feed([]byte("\n"+ResponseEnd+"\n"+frame(`{"ok":1}`)), collect(&got))
			want := []event{{payload: `{"ok":1}`}}
			if inFrame {
				want = []event{{err: ErrFrameTooLarge}, {payload: `{"ok":1}`}}
			}
			checkEvents(t, got, want)
		})
	}
}

func TestAppendRequestFrame(t *testing.T) {
	tests := []struct {
		name    string
		dst     string
		payload string
		want    string
	}{
		{"empty dst", "", `{"id":"a"}`, ">>> REQUEST_START <<<\n{\"id\":\"a\"}\n>>> REQUEST_END <<<\n"},
		{"appends to dst", "prefix\n", `{}`, "prefix\n>>> REQUEST_START <<<\n{}\n>>> REQUEST_END <<<\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(AppendRequestFrame([]byte(tt.dst), []byte(tt.payload)))
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
