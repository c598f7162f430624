package docker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Stream ids in the header of Docker's multiplexed attach format.
const (
	streamStdin  = 0
	streamStdout = 1
	streamStderr = 2
	streamSystem = 3
)

// Errors of the demultiplexer. Each means the stream can no longer be trusted.
var (
	ErrTruncatedFrame = errors.New("docker stream: frame cut off")
	ErrOversizedFrame = errors.New("docker stream: frame too large")
	ErrBadHeader      = errors.New("docker stream: bad frame header")
)

// Demux copies Docker's multiplexed stream from r until it ends: each frame is an
// 8-byte header (stream id, three zero bytes, big-endian length) and its payload.
// Stdout payloads go to stdout; stderr and the daemon's own error stream go to stderr.
// A frame longer than maxFrame, a bad header or a stream cut inside a frame ends the
// copy with an error. A clean end between frames returns nil. Memory use is one
// fixed buffer, whatever the frame sizes.
func Demux(r io.Reader, stdout, stderr io.Writer, maxFrame int) error {
	var hdr [8]byte
	buf := make([]byte, 32*1024)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			if err == io.ErrUnexpectedEOF {
				return fmt.Errorf("%w: in a header", ErrTruncatedFrame)
			}
			return err
		}
		var dst io.Writer
		switch hdr[0] {
		case streamStdout:
			dst = stdout
		case streamStderr, streamSystem:
			dst = stderr
		default:
			return fmt.Errorf("%w: stream id %d", ErrBadHeader, hdr[0])
		}
		if hdr[1] != 0 || hdr[2] != 0 || hdr[3] != 0 {
			return fmt.Errorf("%w: % x", ErrBadHeader, hdr)
		}
		size := int64(binary.BigEndian.Uint32(hdr[4:]))
		if size > int64(maxFrame) {
			return fmt.Errorf("%w: %d bytes, limit %d", ErrOversizedFrame, size, maxFrame)
		}
		for size > 0 {
			n := min(size, int64(len(buf)))
			if _, err := io.ReadFull(r, buf[:n]); err != nil {
				if err == io.EOF || err == io.ErrUnexpectedEOF {
					return fmt.Errorf("%w: %d bytes missing", ErrTruncatedFrame, size)
				}
				return err
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return err
			}
			size -= n
		}
	}
}
