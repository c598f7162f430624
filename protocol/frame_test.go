package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// event is one call of a Parser's emit function.
type event struct {
	header string
	binary string
	err    error
}

func collect(events *[]event) func(Frame, error) {
	return func(f Frame, err error) {
		*events = append(*events, event{header: string(f.Header), binary: string(f.Binary), err: err})
	}
}

// frame is a response frame with a header of the given rest (after the count) and
// binary payload bytes.
func frame(rest, binary string) string {
	return ResponseStart + "\n" + header(len(binary), rest) + "\n" + binary + ResponseEnd + "\n"
}

func header(n int, rest string) string {
	if rest == "" {
		return fmt.Sprintf(`{"binary":%d}`, n)
	}
	return fmt.Sprintf(`{"binary":%d,%s}`, n, rest)
}

func ok(rest, binary string) event { return event{header: header(len(binary), rest), binary: binary} }

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
		if got[i].header != want[i].header || got[i].binary != want[i].binary {
			t.Errorf("frame %d: got %q + %q, want %q + %q", i, got[i].header, got[i].binary, want[i].header, want[i].binary)
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
	const maxHeader, maxBinary = 64, 32
	delims := ResponseEnd + "\n" + ">>>" // payload bytes that look like framing
	tests := []struct {
		name   string
		stream string
		want   []event
	}{
		{"one frame, no payloads", frame(`"a":1`, ""), []event{ok(`"a":1`, "")}},
		{"one frame with payloads", frame(`"a":1`, "raw\x00\xff\nbytes"), []event{ok(`"a":1`, "raw\x00\xff\nbytes")}},
		{"payloads that hold delimiters", frame("", delims), []event{ok("", delims)}},
		{"two frames back to back", frame(`"a":1`, "xy") + frame(`"b":2`, ""), []event{ok(`"a":1`, "xy"), ok(`"b":2`, "")}},
		{"bytes outside frames are ignored", "noise\n\n>>> garbage <<<\n" + frame("", "p") + "trailing\n", []event{ok("", "p")}},
		{"start delimiter with a prefix does not open a frame", "x" + ResponseStart + "\n" + header(0, "") + "\n" + ResponseEnd + "\n", nil},
		{"request delimiters are not response delimiters", RequestStart + "\n" + header(0, "") + "\n" + RequestEnd + "\n", nil},
		{"a new start where a header is due restarts the frame", ResponseStart + "\n" + frame("", "z"), []event{ok("", "z")}},
		{"payloads at exactly the limit", frame("", strings.Repeat("b", maxBinary)), []event{ok("", strings.Repeat("b", maxBinary))}},
		{"header at exactly the limit", frame(`"s":"`+strings.Repeat("h", maxHeader-len(`{"binary":0,"s":""}`))+`"`, ""),
			[]event{ok(`"s":"`+strings.Repeat("h", maxHeader-len(`{"binary":0,"s":""}`))+`"`, "")}},
		{"a count over the limit is refused before the payloads, then a good frame",
			ResponseStart + "\n" + header(maxBinary+1, "") + "\n" + frame("", "ok"),
			[]event{{err: ErrFrameTooLarge}, ok("", "ok")}},
		{"a header over the limit, then a good frame",
			frame(`"s":"`+strings.Repeat("h", maxHeader)+`"`, "") + frame("", "ok"),
			[]event{{err: ErrFrameTooLarge}, ok("", "ok")}},
		{"a header without the count", ResponseStart + "\n{\"id\":1}\n" + ResponseEnd + "\n" + frame("", "ok"), []event{{err: ErrMalformed}, ok("", "ok")}},
		{"a count with spaces", ResponseStart + "\n{\"binary\": 1}\nx" + ResponseEnd + "\n", []event{{err: ErrMalformed}}},
		{"a negative count", ResponseStart + "\n{\"binary\":-1}\n" + ResponseEnd + "\n", []event{{err: ErrMalformed}}},
		{"a count that lies low: no end delimiter where it must be",
			ResponseStart + "\n" + header(2, "") + "\nabc" + ResponseEnd + "\n" + frame("", "ok"),
			[]event{{err: ErrMalformed}, ok("", "ok")}},
		{"a count that lies high swallows the end delimiter and waits",
			ResponseStart + "\n" + header(30, "") + "\nabc" + ResponseEnd + "\n", nil},
		{"payloads cut off emit nothing", ResponseStart + "\n" + header(10, "") + "\nabc", nil},
		{"end delimiter without a newline is not yet an end", ResponseStart + "\n" + header(0, "") + "\n" + ResponseEnd, nil},
		{"an over-long line outside a frame is skipped", strings.Repeat("x", maxHeader+1) + "\n" + frame("", "ok"), []event{ok("", "ok")}},
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
				p := NewParser(maxHeader, maxBinary)
				got := feedAll(t, p, rd.wrap(strings.NewReader(tt.stream)))
				checkEvents(t, got, tt.want)
			})
		}
	}
}

// TestParserSplitEverywhere feeds a stream in two pieces cut at every possible
// offset, so that each delimiter, header and payload is split at every one of its
// bytes.
func TestParserSplitEverywhere(t *testing.T) {
	stream := "junk\n" + frame(`"a":1`, "pay\nload") + frame(`"b":"c"`, "")
	want := []event{ok(`"a":1`, "pay\nload"), ok(`"b":"c"`, "")}
	for i := 0; i <= len(stream); i++ {
		p := NewParser(1024, 1024)
		var got []event
		p.Feed([]byte(stream[:i]), collect(&got))
		p.Feed([]byte(stream[i:]), collect(&got))
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("split at %d: got %v, want %v", i, got, want)
		}
	}
}

// TestParserHandsFramesOver checks that a frame's slices are the callee's: feeding
// the next frame does not change the one already emitted.
func TestParserHandsFramesOver(t *testing.T) {
	p := NewParser(1024, 1024)
	var kept []Frame
	emit := func(f Frame, err error) {
		if err != nil {
			t.Fatalf("got error %v, want none", err)
		}
		kept = append(kept, f)
	}
	p.Feed([]byte(frame(`"n":"first"`, "11111")), emit)
	p.Feed([]byte(frame(`"n":"2nd"`, "22")), emit)
	if len(kept) != 2 || string(kept[0].Header) != header(5, `"n":"first"`) || string(kept[0].Binary) != "11111" ||
		string(kept[1].Binary) != "22" {
		t.Fatalf("got %q, want the two frames unchanged", kept)
	}
}

// TestParserBoundedMemory feeds a 10 MB line without a newline, outside a frame and
// where a header is due, and checks that the parser neither keeps it nor lets it leak
// into the next frame; its line buffer never grows past the limit. A count over the
// limit allocates nothing.
func TestParserBoundedMemory(t *testing.T) {
	const max = 1024
	garbage := bytes.Repeat([]byte("g"), 10<<20)
	for _, inFrame := range []bool{false, true} {
		t.Run(fmt.Sprintf("in frame %v", inFrame), func(t *testing.T) {
			p := NewParser(max, max)
			var got []event
			if inFrame {
				p.Feed([]byte(ResponseStart+"\n"), collect(&got))
			}
			for off := 0; off < len(garbage); off += 64 << 10 {
				p.Feed(garbage[off:off+64<<10], collect(&got))
			}
			if cap(p.line) > 2*max {
				t.Errorf("got a line buffer of %d bytes, want at most %d", cap(p.line), 2*max)
			}
			p.Feed([]byte("\n"+frame("", "ok")), collect(&got))
			want := []event{ok("", "ok")}
			if inFrame {
				want = []event{{err: ErrFrameTooLarge}, ok("", "ok")}
			}
			checkEvents(t, got, want)
		})
	}
	p := NewParser(max, max)
	var got []event
	p.Feed([]byte(ResponseStart+"\n"+header(1<<40, "")+"\n"), collect(&got))
	if cap(p.binary) != 0 || len(got) != 1 || !errors.Is(got[0].err, ErrFrameTooLarge) {
		t.Errorf("a count of 1 TiB: got %v and a buffer of %d bytes, want ErrFrameTooLarge and none", got, cap(p.binary))
	}
}

// TestEncodeRequestFrame checks the bytes of a request frame: the count first in the
// header, then the state and the files raw, in order, then the end delimiter.
func TestEncodeRequestFrame(t *testing.T) {
	state := []byte("STATE")
	bufs, err := EncodeRequest(&Request{
		ID: "r", Op: OpExec, Lang: "python", Code: "1+1", State: state, CaptureState: true,
		Files: []File{{Path: "a.txt", Content: []byte("AA")}, {Path: "empty", Content: nil}, {Path: "b", Content: []byte("B\n")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := string(bytes.Join(bufs, nil))
	wantHeader := `{"binary":9,"id":"r","op":"exec","lang":"python","code":"1+1","state":{"size":5},"capture_state":true,` +
		`"files":[{"path":"a.txt","size":2},{"path":"empty","size":0},{"path":"b","size":2}],` +
		`"limits":{"max_output_bytes":0,"max_file_bytes":0,"max_files":0,"max_state_bytes":0}}`
	want := RequestStart + "\n" + wantHeader + "\nSTATEAAB\n" + RequestEnd + "\n"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	// The payloads go out as the caller's own slices, not copies.
	if len(bufs) != 5 || &bufs[1][0] != &state[0] {
		t.Fatalf("got %d buffers, want the header, the caller's state slice, two files, the end", len(bufs))
	}

	// A cell in plain Python, and kiln's own read of a namespace, say so; the default says nothing.
	bufs, err = EncodeRequest(&Request{ID: "s", Op: OpExec, Lang: "python", Code: "x", PlainPython: true, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(bytes.Join(bufs, nil)); !strings.Contains(got, `"plain_python":true,"read_only":true}`) {
		t.Errorf("got %q, want plain_python and read_only at the header's end", got)
	}
	head := strings.TrimPrefix(string(bufs[0]), RequestStart+"\n")
	back, err := DecodeRequest(Frame{Header: []byte(strings.TrimSuffix(head, "\n"))})
	if err != nil || !back.PlainPython || !back.ReadOnly {
		t.Errorf("decoded %+v, %v; want both read back", back, err)
	}

	bufs, err = EncodeRequest(&Request{ID: "p", Op: OpPing})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(bytes.Join(bufs, nil)); !strings.Contains(got, `{"binary":0,"id":"p","op":"ping","state":null`) {
		t.Errorf("got %q, want a count of 0 and state null", got)
	}
}
