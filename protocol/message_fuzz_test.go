package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"reflect"
	"testing"
)

// FuzzDecode hands any header and payloads to every decoder. None may panic, every
// refusal is ErrMalformed, what Decode accepts keeps the limits it was given, and what
// any decoder accepts survives its encoder and the parser unchanged.
func FuzzDecode(f *testing.F) {
	str := func(s string) *string { return &s }
	lim := Limits{MaxOutputBytes: 64, MaxFileBytes: 32, MaxFiles: 2, MaxStateBytes: 32, MaxToolCallBytes: 16}
	var seeds []Frame
	add := func(bufs net.Buffers, err error) {
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, parseFrame(f, bufs))
	}
	add(EncodeResponse(&Response{ID: "req1", Status: StatusOK, Stdout: "hi\n", Result: str("2"), DurationMS: 3}))
	add(EncodeResponse(&Response{ID: "req1", Status: StatusError, Stderr: "Traceback", Error: str("ZeroDivisionError"),
		State: []byte("\x04\x22\x4d\x18state"), Files: []File{{Path: "out/a.csv", Content: []byte("a,b")}, {Path: "b", Content: nil}}}))
	add(EncodeResponse(&Response{ID: "req1", Status: StatusTimeout, StateUnchanged: true, StateError: str("too big")}))
	add(EncodeEvent("req1", &Event{Type: EventOutput, Stream: "stderr", Text: "warn\n"}))
	add(EncodeEvent("req1", &Event{Type: EventDisplay, Name: "figure-1.png", MIME: "image/png", Data: []byte("\x89PNG")}))
	add(EncodeEvent("req1", &Event{Type: EventToolCalls, Calls: []ToolCall{{ID: "c1", Name: "search", Input: json.RawMessage(`{"q":"x"}`)}}}))
	add(EncodeRequest(&Request{ID: "req1", Op: OpExec, Lang: "python", Code: "1+1", Args: []string{"-v"}, State: []byte("s"),
		CaptureState: true, TimeoutMS: 100, Files: []File{{Path: "in.txt", Content: []byte("in")}}, Limits: lim,
		Events: true, Tools: []Tool{{Name: "search", Function: "search"}}}))
	seeds = append(seeds, parseFrame(f, EncodeInterrupt("req1")))
	add(EncodeToolResults("req1", []ToolResult{{CallID: "c1", Result: json.RawMessage(`[1, 2]`)}, {CallID: "c2", IsError: true, ErrorMessage: "no"}}))
	seeds = append(seeds,
		Frame{Header: []byte(`{"binary":0,"type":"ready","protocol":2,"python":"3.13","capabilities":{"languages":["python"],"state":true}}`)},
		Frame{Header: []byte(`{"binary":4,"id":"req1","type":"result","status":"ok","state":{"size":5}}`), Binary: []byte("abcd")},             // a size past the payloads
		Frame{Header: []byte(`{"binary":4,"id":"req1","type":"result","status":"ok","state":{"size":-1}}`), Binary: []byte("abcd")},            // a negative size
		Frame{Header: []byte(`{"binary":3,"id":"req1","type":"result","status":"ok","files":[{"path":"a","size":2}]}`), Binary: []byte("abc")}, // bytes named by nothing
		Frame{Header: []byte(`{"binary":0,"id":"req1","type":"result","status":"ok","stdout":"` + string(bytes.Repeat([]byte("x"), 600)) + `"}`)},
		Frame{Header: []byte(`{"binary":0,"id":"req1","type":"result","status":"ok","files":[{"path":"a","size":0},{"path":"b","size":0},{"path":"c","size":0}]}`)},
		Frame{Header: []byte(`{"binary":2,"id":"req1","type":"tool_calls"}`), Binary: []byte("[]")},
		Frame{Header: []byte(`{"binary":0,"id":"other","type":"result","status":"ok"}`)},
		Frame{Header: []byte(`{"binary":0,"id":"req1","type":"result","status":"fine"}`)},
		Frame{Header: []byte(`{"binary":0,"id":"req1","type":"result","status":"ok","exit_code":1e400}`)},
		Frame{Header: []byte(`not json`)},
	)
	for _, s := range seeds {
		f.Add(s.Header, s.Binary, "req1", uint16(lim.MaxOutputBytes), uint16(lim.MaxFileBytes), uint8(lim.MaxFiles), uint16(lim.MaxStateBytes), uint16(lim.MaxToolCallBytes))
	}
	f.Fuzz(func(t *testing.T, hdr, bin []byte, id string, maxOut, maxFile uint16, maxFiles uint8, maxState, maxTool uint16) {
		// A parser never hands over nil payloads; the decoders may tell nil from empty.
		fr := Frame{Header: hdr, Binary: append([]byte{}, bin...)}
		lim := Limits{MaxOutputBytes: int64(maxOut), MaxFileBytes: int64(maxFile), MaxFiles: int(maxFiles),
			MaxStateBytes: int64(maxState), MaxToolCallBytes: int64(maxTool)}
		checkDecode(t, fr, id, lim)
		checkDecodeRequest(t, fr)
		checkDecodeToolResults(t, fr)
		if r, err := DecodeReady(fr); err != nil {
			checkMalformed(t, "DecodeReady", err)
		} else if r.Type != "ready" || r.Protocol != Version {
			t.Fatalf("DecodeReady accepted type %q protocol %d", r.Type, r.Protocol)
		}
	})
}

func checkMalformed(t *testing.T, name string, err error) {
	t.Helper()
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("%s: got error %v, want ErrMalformed", name, err)
	}
}

// checkDecode checks Decode and DecodeResponse on one frame.
func checkDecode(t *testing.T, fr Frame, id string, lim Limits) {
	t.Helper()
	ev, resp, err := Decode(fr, id, lim)
	only, rerr := DecodeResponse(fr, id, lim)
	switch {
	case err != nil:
		checkMalformed(t, "Decode", err)
		checkMalformed(t, "DecodeResponse", rerr)
		if ev != nil || resp != nil || only != nil {
			t.Fatalf("got an error %v with an event %v or a result %v", err, ev, resp)
		}
	case (ev == nil) == (resp == nil):
		t.Fatalf("got event %v and result %v, want exactly one", ev, resp)
	case ev != nil:
		checkMalformed(t, "DecodeResponse of an event", rerr)
		checkEvent(t, fr, ev, lim)
		checkEventRoundTrip(t, ev, id)
	default:
		if rerr != nil || !reflect.DeepEqual(only, resp) {
			t.Fatalf("DecodeResponse got %+v, %v; Decode got %+v", only, rerr, resp)
		}
		checkResponse(t, fr, resp, id, lim)
		bufs, err := EncodeResponse(resp)
		if err != nil {
			t.Fatalf("encode an accepted response: %v", err)
		}
		again, err := DecodeResponse(parseFrame(t, bufs), id, lim)
		if err != nil || !reflect.DeepEqual(again, resp) {
			t.Fatalf("response round trip: got %+v, %v; want %+v", again, err, resp)
		}
	}
}

// checkResponse checks an accepted result against the limits it was decoded with.
func checkResponse(t *testing.T, fr Frame, r *Response, id string, lim Limits) {
	t.Helper()
	const slack = 256 // the REPL's truncation marker
	switch {
	case r.ID != id:
		t.Fatalf("got id %q, want %q", r.ID, id)
	case r.Status != StatusOK && r.Status != StatusError && r.Status != StatusTimeout && r.Status != StatusCancelled:
		t.Fatalf("got status %q", r.Status)
	case lim.MaxOutputBytes > 0 && (int64(len(r.Stdout)) > 4*lim.MaxOutputBytes+slack || int64(len(r.Stderr)) > 4*lim.MaxOutputBytes+slack):
		t.Fatalf("got %d + %d bytes of output over the limit %d", len(r.Stdout), len(r.Stderr), lim.MaxOutputBytes)
	case lim.MaxStateBytes > 0 && int64(len(r.State)) > lim.MaxStateBytes:
		t.Fatalf("got a state of %d bytes over the limit %d", len(r.State), lim.MaxStateBytes)
	case r.StateUnchanged && r.State != nil:
		t.Fatal("got a state sent back as unchanged")
	case lim.MaxFiles > 0 && len(r.Files) > lim.MaxFiles:
		t.Fatalf("got %d files over the limit %d", len(r.Files), lim.MaxFiles)
	}
	total := len(r.State)
	for _, file := range r.Files {
		if file.Path == "" || lim.MaxFileBytes > 0 && int64(len(file.Content)) > lim.MaxFileBytes {
			t.Fatalf("got file %q of %d bytes, limit %d", file.Path, len(file.Content), lim.MaxFileBytes)
		}
		total += len(file.Content)
	}
	if total != len(fr.Binary) {
		t.Fatalf("state and files hold %d bytes, the frame %d", total, len(fr.Binary))
	}
}

// checkEvent checks an accepted event against the limits it was decoded with.
func checkEvent(t *testing.T, fr Frame, ev *Event, lim Limits) {
	t.Helper()
	switch ev.Type {
	case EventOutput:
		if ev.Stream != "stdout" && ev.Stream != "stderr" || lim.MaxOutputBytes > 0 && int64(len(ev.Text)) > 4*lim.MaxOutputBytes {
			t.Fatalf("got output of %d bytes on %q, limit %d", len(ev.Text), ev.Stream, lim.MaxOutputBytes)
		}
	case EventDisplay:
		if ev.Name == "" || lim.MaxFileBytes > 0 && int64(len(ev.Data)) > lim.MaxFileBytes || !bytes.Equal(ev.Data, fr.Binary) {
			t.Fatalf("got display %q of %d bytes from %d, limit %d", ev.Name, len(ev.Data), len(fr.Binary), lim.MaxFileBytes)
		}
	case EventToolCalls:
		if len(ev.Calls) == 0 || len(ev.Calls) > maxCallsPerEvent {
			t.Fatalf("got %d tool calls", len(ev.Calls))
		}
		for _, c := range ev.Calls {
			if c.ID == "" || c.Name == "" || !json.Valid(c.Input) ||
				lim.MaxToolCallBytes > 0 && int64(len(c.Input)) > 2*lim.MaxToolCallBytes+1024 {
				t.Fatalf("got tool call %q to %q with %d bytes of input, limit %d", c.ID, c.Name, len(c.Input), lim.MaxToolCallBytes)
			}
		}
	default:
		t.Fatalf("got an event of type %q", ev.Type)
	}
}

// checkEventRoundTrip encodes an accepted event and decodes it again, without limits:
// the encoder may escape a tool call's JSON into more bytes. The JSON must mean the
// same; everything else must be equal.
func checkEventRoundTrip(t *testing.T, ev *Event, id string) {
	t.Helper()
	bufs, err := EncodeEvent(id, ev)
	if err != nil {
		t.Fatalf("encode an accepted event: %v", err)
	}
	again, _, err := Decode(parseFrame(t, bufs), id, Limits{})
	if err != nil || again == nil {
		t.Fatalf("event round trip: %v", err)
	}
	want := *ev
	if ev.Type == EventToolCalls {
		if len(again.Calls) != len(ev.Calls) {
			t.Fatalf("got %d calls back, want %d", len(again.Calls), len(ev.Calls))
		}
		for i := range ev.Calls {
			if !sameJSON(again.Calls[i].Input, ev.Calls[i].Input) {
				t.Fatalf("call %d: got input %s back, want %s", i, again.Calls[i].Input, ev.Calls[i].Input)
			}
		}
		want.Calls, again.Calls = nil, nil
	}
	if ev.Type == EventOutput {
		want.Data = nil // an output event's payloads, if any, are not kept
	}
	if len(want.Data) == 0 && len(again.Data) == 0 {
		want.Data, again.Data = nil, nil
	}
	if !reflect.DeepEqual(*again, want) {
		t.Fatalf("event round trip: got %+v, want %+v", *again, want)
	}
}

// checkDecodeRequest checks that an accepted request accounts for every payload byte
// and comes back unchanged from EncodeRequest.
func checkDecodeRequest(t *testing.T, fr Frame) {
	t.Helper()
	r, err := DecodeRequest(fr)
	if err != nil {
		checkMalformed(t, "DecodeRequest", err)
		return
	}
	total := len(r.State)
	for _, file := range r.Files {
		total += len(file.Content)
	}
	if total != len(fr.Binary) {
		t.Fatalf("request's state and files hold %d bytes, the frame %d", total, len(fr.Binary))
	}
	bufs, err := EncodeRequest(r)
	if err != nil {
		t.Fatalf("encode an accepted request: %v", err)
	}
	again, err := DecodeRequest(parseFrame(t, bufs))
	if err != nil {
		t.Fatalf("request round trip: %v", err)
	}
	// Empty lists are left out of the header, so they come back as nil.
	if len(r.Args) == 0 {
		r.Args = nil
	}
	if len(r.Tools) == 0 {
		r.Tools = nil
	}
	if !reflect.DeepEqual(again, r) {
		t.Fatalf("request round trip: got %+v, want %+v", again, r)
	}
}

// checkDecodeToolResults checks that accepted tool results come back from
// EncodeToolResults meaning the same.
func checkDecodeToolResults(t *testing.T, fr Frame) {
	t.Helper()
	id, results, err := DecodeToolResults(fr)
	if err != nil {
		checkMalformed(t, "DecodeToolResults", err)
		return
	}
	bufs, err := EncodeToolResults(id, results)
	if err != nil {
		t.Fatalf("encode accepted tool results: %v", err)
	}
	id2, again, err := DecodeToolResults(parseFrame(t, bufs))
	if err != nil || id2 != id || len(again) != len(results) {
		t.Fatalf("tool results round trip: got %s %d results, %v; want %s %d", id2, len(again), err, id, len(results))
	}
	for i, r := range results {
		g := again[i]
		if g.CallID != r.CallID || g.IsError != r.IsError || g.ErrorMessage != r.ErrorMessage || !sameJSON(g.Result, r.Result) {
			t.Fatalf("result %d: got %+v, want %+v", i, g, r)
		}
	}
}

// sameJSON reports whether two JSON texts mean the same; an empty one means null.
func sameJSON(a, b json.RawMessage) bool {
	var va, vb any
	if len(a) > 0 && json.Unmarshal(a, &va) != nil || len(b) > 0 && json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// parseFrame parses exactly one frame out of an encoder's buffers, piece by piece as
// they would be written; parseOne, for a testing.TB.
func parseFrame(tb testing.TB, bufs net.Buffers) Frame {
	tb.Helper()
	p := NewParser(1<<30, 1<<30)
	if len(bufs) > 0 && bytes.HasPrefix(bufs[0], []byte(RequestStart)) {
		p = NewRequestParser(1<<30, 1<<30)
	}
	var frames []Frame
	for _, b := range bufs {
		p.Feed(b, func(f Frame, err error) {
			if err != nil {
				tb.Fatalf("parse an encoded frame: %v", err)
			}
			frames = append(frames, f)
		})
	}
	if len(frames) != 1 {
		tb.Fatalf("got %d frames from one encoded frame, want 1", len(frames))
	}
	return frames[0]
}
