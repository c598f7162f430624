package docker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// FuzzDemux demultiplexes any stream read in one piece, a byte at a time, in the
// short reads cuts describes, and with the last data arriving with io.EOF. Every way
// must write the same bytes and end with the same error; that must be what a plain
// reading of the format gives; no write may be longer than maxFrame or the output
// longer than the input; and Demux must not read a byte of a frame it refuses.
func FuzzDemux(f *testing.F) {
	seeds := []struct {
		stream   string
		cuts     []byte
		maxFrame int
	}{
		{mux(1, "out") + mux(2, "err") + mux(3, "daemon"), []byte{3, 5}, 64},
		{mux(1, ""), nil, 64},
		{mux(1, "exactly the limit"), []byte{1}, len("exactly the limit")},
		{mux(1, "one over the limit"), nil, len("one over the limit") - 1},
		{mux(1, "a") + mux(0, "stdin"), nil, 64},                           // a stream id kiln never gets
		{mux(1, "a") + "\x01\x00\x01\x00\x00\x00\x00\x01b", nil, 64},       // padding that is not zero
		{mux(2, "abc")[:5], []byte{2}, 64},                                 // cut in a header
		{mux(2, "abcdef")[:11], []byte{4}, 64},                             // cut in a payload
		{"\x01\x00\x00\x00\xff\xff\xff\xff", nil, 64},                      // a length that lies
		{mux(1, strings.Repeat("z", 40<<10)), []byte{255, 0, 7}, 64 << 10}, // more than Demux's buffer
		{mux(1, "x"), nil, 0},
		{mux(1, "x"), nil, -1},
	}
	for _, s := range seeds {
		f.Add([]byte(s.stream), s.cuts, s.maxFrame)
	}
	f.Fuzz(func(t *testing.T, stream, cuts []byte, maxFrame int) {
		want := demuxModel(stream, maxFrame)
		first := runDemux(t, "one read", bytes.NewReader(stream), stream, maxFrame, want)
		readers := map[string]func(io.Reader) io.Reader{
			"a byte at a time":  iotest.OneByteReader,
			"short reads":       func(r io.Reader) io.Reader { return &shortReader{r: r, cuts: cuts} },
			"data with the EOF": func(r io.Reader) io.Reader { return iotest.DataErrReader(&shortReader{r: r, cuts: cuts}) },
		}
		for name, wrap := range readers {
			got := runDemux(t, name, wrap(bytes.NewReader(stream)), stream, maxFrame, want)
			if got.stdout != first.stdout || got.stderr != first.stderr || !sameError(got.err, first.err) {
				t.Fatalf("%s: got %q %q %v, want as in one read: %q %q %v", name,
					got.stdout, got.stderr, got.err, first.stdout, first.stderr, first.err)
			}
		}
	})
}

// demuxRun is what one call of Demux did.
type demuxRun struct {
	stdout, stderr string
	err            error
	read           int // bytes taken from the stream
}

// runDemux runs Demux over r, which reads stream, and checks it against want.
func runDemux(t *testing.T, name string, r io.Reader, stream []byte, maxFrame int, want demuxRun) demuxRun {
	t.Helper()
	counted := &countingReader{r: r}
	stdout := &boundedWriter{t: t, max: maxFrame}
	stderr := &boundedWriter{t: t, max: maxFrame}
	err := Demux(counted, stdout, stderr, maxFrame)
	got := demuxRun{stdout: stdout.String(), stderr: stderr.String(), err: err, read: counted.n}
	if len(got.stdout)+len(got.stderr) > len(stream) {
		t.Fatalf("%s: wrote %d bytes from a stream of %d", name, len(got.stdout)+len(got.stderr), len(stream))
	}
	if !sameError(err, want.err) {
		t.Fatalf("%s: got error %v, want %v", name, err, want.err)
	}
	if errors.Is(want.err, ErrTruncatedFrame) {
		// What of the cut frame's payload was written depends on Demux's buffer; all
		// of it was read.
		if !strings.HasPrefix(want.stdout, got.stdout) || !strings.HasPrefix(want.stderr, got.stderr) {
			t.Fatalf("%s: got %q %q, want prefixes of %q %q", name, got.stdout, got.stderr, want.stdout, want.stderr)
		}
		want.stdout, want.stderr = got.stdout, got.stderr
	}
	if got.stdout != want.stdout || got.stderr != want.stderr || got.read != want.read {
		t.Fatalf("%s: got %q %q after reading %d bytes, want %q %q after %d", name,
			got.stdout, got.stderr, got.read, want.stdout, want.stderr, want.read)
	}
	return got
}

// demuxModel reads Docker's format plainly: the output of the frames before the
// first bad one, the error that one gives, and how many bytes Demux may read. For a
// cut frame the output holds all of its payload that there is.
func demuxModel(stream []byte, maxFrame int) demuxRun {
	var out, errOut strings.Builder
	i := 0
	for {
		rest := stream[i:]
		switch {
		case len(rest) == 0:
			return demuxRun{stdout: out.String(), stderr: errOut.String(), read: i}
		case len(rest) < 8:
			return demuxRun{stdout: out.String(), stderr: errOut.String(), err: ErrTruncatedFrame, read: len(stream)}
		}
		id, size := rest[0], int64(binary.BigEndian.Uint32(rest[4:8]))
		if id < 1 || id > 3 || rest[1] != 0 || rest[2] != 0 || rest[3] != 0 {
			return demuxRun{stdout: out.String(), stderr: errOut.String(), err: ErrBadHeader, read: i + 8}
		}
		if size > int64(maxFrame) {
			return demuxRun{stdout: out.String(), stderr: errOut.String(), err: ErrOversizedFrame, read: i + 8}
		}
		dst := &errOut
		if id == 1 {
			dst = &out
		}
		payload := rest[8:]
		if int64(len(payload)) < size {
			dst.Write(payload)
			return demuxRun{stdout: out.String(), stderr: errOut.String(), err: ErrTruncatedFrame, read: len(stream)}
		}
		dst.Write(payload[:size])
		i += 8 + int(size)
	}
}

// sameError reports whether two errors are both nil or wrap the same sentinel.
func sameError(a, b error) bool {
	for _, sentinel := range []error{ErrTruncatedFrame, ErrOversizedFrame, ErrBadHeader} {
		if errors.Is(a, sentinel) || errors.Is(b, sentinel) {
			return errors.Is(a, sentinel) && errors.Is(b, sentinel)
		}
	}
	return a == nil && b == nil
}

// shortReader returns reads whose lengths cycle through cuts (at least one byte each).
type shortReader struct {
	r    io.Reader
	cuts []byte
	i    int
}

func (s *shortReader) Read(p []byte) (int, error) {
	if len(s.cuts) > 0 && len(p) > 0 {
		n := max(1, int(s.cuts[s.i%len(s.cuts)]))
		s.i++
		p = p[:min(len(p), n)]
	}
	return s.r.Read(p)
}

// boundedWriter keeps what it is given and fails the test on a write longer than one
// frame may be.
type boundedWriter struct {
	bytes.Buffer
	t   *testing.T
	max int
}

func (w *boundedWriter) Write(p []byte) (int, error) {
	if len(p) > w.max {
		w.t.Fatalf("got a write of %d bytes, over maxFrame %d", len(p), w.max)
	}
	return w.Buffer.Write(p)
}
