package egress

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// Record is the audit of one CONNECT tunnel or one plain HTTP request, allowed or
// refused, handed to Options.Audit once it is over. Decision.Code is the label a
// metrics decorator counts by; the labels, host and reason are for logs.
type Record struct {
	Caller, Session string // the scope's labels
	Method          string // CONNECT, or the method of a plain HTTP request
	Host            string // as the request named it, normalised; empty when it named none kiln reads
	Port            uint16
	Addr            netip.AddrPort // the address dialled; invalid when none was
	Decision        Decision       // why the connection was let through or refused
	Status          int            // the status the client was answered: 200 for a tunnel, the upstream's for a request
	// BytesUp and BytesDown are the payload carried from the sandbox and to it: what a
	// tunnel carried after its 200, the ClientHello included, or the bodies of a request
	// and its response.
	BytesUp, BytesDown int64
	Start              time.Time
	Duration           time.Duration
	// Err says how an allowed connection ended early: "idle timeout", "call ended",
	// the byte cap's reason, or an I/O error. Empty when it ended cleanly.
	Err string
}

// statusOf maps a refusal's code to the status the client is answered.
func statusOf(c Code) int {
	switch c {
	case CodeMalformed:
		return http.StatusBadRequest
	case CodeResolve, CodeDial:
		return http.StatusBadGateway
	case CodeTimeout:
		return http.StatusGatewayTimeout
	}
	return http.StatusForbidden
}

// maxDrain bounds the request body read before a refusal closes the connection, so
// the client gets to read the answer rather than a reset.
const maxDrain = 256 << 10

// refuse answers a request with d's status and reason, the reason both in the status
// line, where HTTP libraries show it (Go: "egress denied: ..."; Python:
// "Tunnel connection failed: 403 egress denied: ..."), and as the body. net/http
// cannot write a reason phrase of its own, so the answer is written on the hijacked
// connection, which is then closed.
func refuse(w http.ResponseWriter, r *http.Request, d Decision) int {
	status := statusOf(d.Code)
	reason := printable(d.Reason)
	if r.Body != nil && r.Method != http.MethodConnect && r.Header.Get("Expect") == "" {
		_, _ = io.CopyN(io.Discard, r.Body, maxDrain)
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, reason, status)
		return status
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		http.Error(w, reason, status)
		return status
	}
	defer conn.Close()
	_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	writeRefusal(rw.Writer, status, reason)
	return status
}

func writeRefusal(w *bufio.Writer, status int, reason string) {
	body := reason + "\n"
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, reason, len(body), body)
	_ = w.Flush()
}

// printable keeps a reason on one line of printable ASCII, as a status line needs.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}
