package docker

import (
	"errors"
	"io"
	"net"

	"github.com/moby/moby/client"
)

// maxStreamFrame bounds one frame of Docker's multiplexed stream. The daemon copies
// container output in pieces of 32 KiB; anything far larger is not Docker talking.
const maxStreamFrame = 1 << 20

// attachStreams are a hijacked attach connection (a container's own, or a docker exec's)
// as the byte streams of a REPL: frames go into the connection as they are, and what
// comes out is Docker's multiplexed stream, demultiplexed into stdout and stderr.
type attachStreams struct{ h client.HijackedResponse }

func attached(h client.HijackedResponse) attachStreams { return attachStreams{h: h} }

// Stdin returns the connection itself, so that a frame goes out in one vectored write.
func (a attachStreams) Stdin() io.Writer { return a.h.Conn }

func (a attachStreams) Copy(stdout, stderr io.Writer) error {
	err := Demux(a.h.Reader, stdout, stderr, maxStreamFrame)
	if errors.Is(err, net.ErrClosed) {
		return nil // the connection was closed on our side
	}
	return err
}

func (a attachStreams) Close() error { return a.h.Conn.Close() }
