package egress

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/net/http/httpguts"
)

// tlsHandshake is the first byte of a TLS record that starts a handshake.
const tlsHandshake = 0x16

// plainInTunnel carries plain HTTP/1.1 inside a CONNECT tunnel, which is how undici
// (Node's fetch) sends http:// URLs through a proxy. The upstream is the one the
// CONNECT checked and dialled; each request must name it in its Host, as a plain
// request through the proxy is checked by its own, or the tunnel ends with a 403 and
// nothing of that request goes up. Requests go up one at a time, each answered before
// the next is read. It returns nil when the client or the upstream ends the tunnel.
func plainInTunnel(h Host, port uint16, client net.Conn, fromClient *bufio.Reader, up net.Conn, upMeter, downMeter *meter, rec *Record) error {
	fromUp := bufio.NewReader(meteredReader{r: up, m: downMeter})
	toUp := meteredWriter{w: up, m: upMeter}
	for {
		req, err := http.ReadRequest(fromClient)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if d := checkRequestHost(h, port, req); !d.Allowed() {
			rec.Decision = d
			w := bufio.NewWriter(client)
			_ = client.SetWriteDeadline(time.Now().Add(5 * time.Second))
			writeRefusal(w, statusOf(d.Code), printable(d.Reason))
			return nil
		}
		if err := req.Write(toUp); err != nil {
			return err
		}
		resp, err := http.ReadResponse(fromUp, req)
		if err != nil {
			return err
		}
		err = resp.Write(client)
		resp.Body.Close()
		if err != nil || resp.Close || req.Close {
			return err
		}
	}
}

// checkRequestHost allows a request in a plain tunnel when its Host names the tunnel's
// host and port, and it asks for no protocol upgrade.
func checkRequestHost(h Host, port uint16, req *http.Request) Decision {
	if httpguts.HeaderValuesContainsToken(req.Header["Connection"], "upgrade") {
		return Decision{CodeMalformed, "egress: protocol upgrades need TLS in the tunnel (use wss://)"}
	}
	authority := req.Host
	if _, _, err := net.SplitHostPort(authority); err != nil {
		authority = net.JoinHostPort(authority, strconv.Itoa(80))
	}
	got, gotPort, err := splitHostPort(authority)
	if err != nil || got != h || gotPort != port {
		return denied(CodeHost, "the request in the tunnel to %s names %q", net.JoinHostPort(h.String(), strconv.Itoa(int(port))), req.Host)
	}
	return allowed
}

// meteredWriter writes through a meter: past the scope's byte cap it writes what the
// cap still allowed and fails with errBytesCap.
type meteredWriter struct {
	w io.Writer
	m *meter
}

func (mw meteredWriter) Write(p []byte) (int, error) {
	mw.m.idle.touch()
	ok, within := mw.m.scope.spend(len(p))
	mw.m.n.Add(int64(ok))
	n, err := mw.w.Write(p[:ok])
	if err == nil && !within {
		mw.m.capped.Store(true)
		err = errBytesCap
	}
	return n, err
}
