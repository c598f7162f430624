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

// mux encodes payload as one frame of Docker's multiplexed stream.
func mux(stream byte, payload string) string {
	var hdr [8]byte
	hdr[0] = stream
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(payload)))
	return string(hdr[:]) + payload
}

func TestDemux(t *testing.T) {
	big := strings.Repeat("z", 100<<10) // several times Demux's copy buffer
	tests := []struct {
		name       string
		stream     string
		maxFrame   int
		wantOut    string
		wantErr    string
		wantErrIs  error
		wantNilErr bool
	}{
		{
			name:       "clean EOF on an empty stream",
			stream:     "",
			maxFrame:   1024,
			wantNilErr: true,
		},
		{
			name:       "stdout, stderr and system streams",
			stream:     mux(1, "out1 ") + mux(2, "err1 ") + mux(3, "daemon says no") + mux(1, "out2"),
			maxFrame:   1024,
			wantOut:    "out1 out2",
			wantErr:    "err1 daemon says no",
			wantNilErr: true,
		},
		{
			name:       "empty frame",
			stream:     mux(1, "") + mux(1, "x"),
			maxFrame:   1024,
			wantOut:    "x",
			wantNilErr: true,
		},
		{
			name:       "frame larger than the copy buffer",
			stream:     mux(1, big) + mux(2, "e"),
			maxFrame:   len(big),
			wantOut:    big,
			wantErr:    "e",
			wantNilErr: true,
		},
		{
			name:      "truncated header",
			stream:    mux(1, "ok") + "\x01\x00\x00",
			maxFrame:  1024,
			wantOut:   "ok",
			wantErrIs: ErrTruncatedFrame,
		},
		{
			name:      "truncated payload",
			stream:    mux(1, "ok") + mux(1, "abcdef")[:8+3],
			maxFrame:  1024,
			wantOut:   "ok", // a cut-off payload is not passed on
			wantErrIs: ErrTruncatedFrame,
		},
		{
			name:      "header only, payload missing",
			stream:    mux(1, "abcdef")[:8],
			maxFrame:  1024,
			wantErrIs: ErrTruncatedFrame,
		},
		{
			name:      "oversized frame",
			stream:    mux(1, "ok") + mux(1, strings.Repeat("a", 11)),
			maxFrame:  10,
			wantOut:   "ok",
			wantErrIs: ErrOversizedFrame,
		},
		{
			name:       "frame at exactly the limit",
			stream:     mux(1, strings.Repeat("a", 10)),
			maxFrame:   10,
			wantOut:    strings.Repeat("a", 10),
			wantNilErr: true,
		},
		{
			name:      "stdin stream id",
			stream:    mux(0, "x"),
			maxFrame:  1024,
			wantErrIs: ErrBadHeader,
		},
		{
			name:      "unknown stream id",
			stream:    mux(4, "x"),
			maxFrame:  1024,
			wantErrIs: ErrBadHeader,
		},
		{
			name:      "non-zero padding bytes",
			stream:    "\x01\x00\x01\x00\x00\x00\x00\x01x",
			maxFrame:  1024,
			wantErrIs: ErrBadHeader,
		},
		{
			name:      "raw text instead of a multiplexed stream",
			stream:    ">>> RESPONSE_START <<<\n",
			maxFrame:  1 << 20,
			wantErrIs: ErrBadHeader,
		},
	}
	readers := []struct {
		name string
		wrap func(io.Reader) io.Reader
	}{
		{"whole", func(r io.Reader) io.Reader { return r }},
		{"byte at a time", iotest.OneByteReader},
		{"data with EOF", iotest.DataErrReader},
	}
	for _, tt := range tests {
		for _, rd := range readers {
			t.Run(tt.name+"/"+rd.name, func(t *testing.T) {
				var out, errOut bytes.Buffer
				err := Demux(rd.wrap(strings.NewReader(tt.stream)), &out, &errOut, tt.maxFrame)
				switch {
				case tt.wantNilErr && err != nil:
					t.Errorf("got error %v, want none", err)
				case tt.wantErrIs != nil && !errors.Is(err, tt.wantErrIs):
					t.Errorf("got error %v, want %v", err, tt.wantErrIs)
				}
				if out.String() != tt.wantOut {
					t.Errorf("got stdout %.40q (%d bytes), want %.40q (%d bytes)", out.String(), out.Len(), tt.wantOut, len(tt.wantOut))
				}
				if errOut.String() != tt.wantErr {
					t.Errorf("got stderr %q, want %q", errOut.String(), tt.wantErr)
				}
			})
		}
	}
}

// TestDemuxReadError checks that a reader's own error comes back as is, not as a
// truncated frame.
func TestDemuxReadError(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name   string
		prefix string
	}{
		{"between frames", mux(1, "ok")},
		{"inside a payload", mux(1, "okay")[:9]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := io.MultiReader(strings.NewReader(tt.prefix), iotest.ErrReader(boom))
			err := Demux(r, io.Discard, io.Discard, 1024)
			if !errors.Is(err, boom) {
				t.Errorf("got error %v, want %v", err, boom)
			}
			if errors.Is(err, ErrTruncatedFrame) {
				t.Errorf("got %v, want the reader's error only", err)
			}
		})
	}
}

// TestDemuxWriteError checks that a failing destination stops the copy with its error.
func TestDemuxWriteError(t *testing.T) {
	boom := errors.New("disk full")
	err := Demux(strings.NewReader(mux(2, "x")), io.Discard, failWriter{boom}, 1024)
	if !errors.Is(err, boom) {
		t.Errorf("got error %v, want %v", err, boom)
	}
}

type failWriter struct{ err error }

func (w failWriter) Write([]byte) (int, error) { return 0, w.err }

// TestDemuxOversizedNotRead checks that an oversized frame is refused from its header,
// before its payload is read: a hostile length costs nothing.
func TestDemuxOversizedNotRead(t *testing.T) {
	var hdr [8]byte
	hdr[0] = 1
	binary.BigEndian.PutUint32(hdr[4:], 0xFFFFFFFF)
	r := &countingReader{r: io.MultiReader(bytes.NewReader(hdr[:]), endless{})}
	err := Demux(r, io.Discard, io.Discard, 1<<20)
	if !errors.Is(err, ErrOversizedFrame) {
		t.Fatalf("got error %v, want ErrOversizedFrame", err)
	}
	if r.n != 8 {
		t.Errorf("got %d bytes read, want only the 8-byte header", r.n)
	}
}

type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
