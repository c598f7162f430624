package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"
)

// maxHello bounds the bytes read for a ClientHello. A hello with post-quantum key
// shares is under 2 KB; a TLS record is at most 16 KB, and a hello may span a few.
const maxHello = 64 << 10

// errHelloRead stops the TLS server once it has parsed the ClientHello.
var errHelloRead = errors.New("client hello read")

// peekClientHello reads the client's TLS ClientHello from r without terminating TLS,
// and returns every byte it read (to be sent upstream first) and the server name the
// hello asks for. crypto/tls parses the hello: a server is started on a connection
// that only records what it reads, and stopped from GetConfigForClient, which runs
// once the hello is parsed and before anything is answered.
func peekClientHello(r io.Reader) (raw []byte, serverName string, err error) {
	var seen bytes.Buffer
	conn := &recordingConn{r: io.TeeReader(io.LimitReader(r, maxHello), &seen)}
	var hello *tls.ClientHelloInfo
	server := tls.Server(conn, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			hello = h
			return nil, errHelloRead
		},
	})
	err = server.Handshake()
	if hello == nil {
		if err == nil {
			err = errors.New("no ClientHello")
		}
		return seen.Bytes(), "", err
	}
	return seen.Bytes(), hello.ServerName, nil
}

// recordingConn is the connection peekClientHello's TLS server reads from: reads go
// to the client, writes (an alert, when the handshake is stopped) go nowhere.
type recordingConn struct{ r io.Reader }

func (c *recordingConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *recordingConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *recordingConn) Close() error                     { return nil }
func (c *recordingConn) LocalAddr() net.Addr              { return helloAddr{} }
func (c *recordingConn) RemoteAddr() net.Addr             { return helloAddr{} }
func (c *recordingConn) SetDeadline(time.Time) error      { return nil }
func (c *recordingConn) SetReadDeadline(time.Time) error  { return nil }
func (c *recordingConn) SetWriteDeadline(time.Time) error { return nil }

type helloAddr struct{}

func (helloAddr) Network() string { return "tunnel" }
func (helloAddr) String() string  { return "tunnel" }

// checkServerName decides whether a ClientHello's server name may open a tunnel to
// host: it must name the CONNECT host itself, or a client could ask for an allowed
// host and reach another behind the same front (domain fronting). A tunnel to an
// address carries no name, as clients send none for addresses.
func checkServerName(host Host, serverName string) Decision {
	if host.Addr.IsValid() {
		if serverName == "" {
			return allowed
		}
		if h, err := ParseHost(serverName); err == nil && h.Addr == host.Addr {
			return allowed
		}
		return denied(CodeSNI, "the TLS server name %q is not %s, the CONNECT host", serverName, host)
	}
	if serverName == "" {
		return denied(CodeSNI, "the TLS ClientHello for %s names no server", host)
	}
	if h, err := ParseHost(serverName); err == nil && h == host {
		return allowed
	}
	return denied(CodeSNI, "the TLS server name %q is not %s, the CONNECT host", serverName, host)
}

// alertAccessDenied is a fatal TLS access_denied alert in a plaintext record, which a
// client reads during its handshake and reports ("tls: access denied",
// "TLSV1_ALERT_ACCESS_DENIED").
var alertAccessDenied = []byte{21, 3, 3, 0, 2, 2, 49}
