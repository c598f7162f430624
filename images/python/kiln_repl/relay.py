"""The egress relay: a process of its own that carries the code's proxy connections to kiln over the
sandbox's Unix socket (kiln_repl.egress).

It listens on 127.0.0.1, prints its port on stdout, and relays each connection it accepts to a
new connection to the socket, byte for byte, a thread each way. It runs apart from the REPL so
that relaying never waits for the interpreter the code runs in (its GIL): a download moves while
the code parses it. Started with `python3 -I -S relay.py SOCKET [PORT]`, it needs the standard
library only; PORT is the one to listen on when it can (a relay started again keeps the port the
code's clients already know).
"""

from __future__ import annotations

import signal
import socket
import sys
import threading

# bytes read at once. splice(2) through a pipe was tried: under gVisor (runsc 2022-12) it
# delivered a 50 MB download reordered, so the bytes go through a buffer.
CHUNK = 256 << 10
LINGER = 30.0  # seconds a client may keep its end open once kiln closed
BACKLOG = 64


class Relay:
    """One connection: a thread each way copies until its end of file, then half-closes the other
    side; both sockets are closed once both ways are over, or at once when one fails."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self._client = client
        self._upstream = upstream
        self._lock = threading.Lock()
        self._ways = 2
        self._linger: threading.Timer | None = None

    def start(self) -> None:
        for src, dst, name in ((self._client, self._upstream, "up"), (self._upstream, self._client, "down")):
            threading.Thread(target=self._copy, args=(src, dst), name=f"relay-{name}", daemon=True).start()

    def _copy(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            copy(src, dst)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            self.abort()
        with self._lock:
            self._ways -= 1
            over = self._ways == 0
            if not over and src is self._upstream:
                # kiln ended the connection: a client that keeps its end open is cut after a while.
                self._linger = threading.Timer(LINGER, self.abort)
                self._linger.daemon = True
                self._linger.start()
        if over:
            if self._linger is not None:
                self._linger.cancel()
            self._client.close()
            self._upstream.close()

    def abort(self) -> None:
        for sock in (self._client, self._upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the threads blocked on them
            except OSError:
                pass


def copy(src: socket.socket, dst: socket.socket) -> None:
    """Moves src's bytes to dst through a buffer, until src's end of file."""
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    while n := src.recv_into(buffer):
        dst.sendall(view[:n])


def serve(listener: socket.socket, path: str) -> None:
    """Relays every connection listener accepts to the socket at path; a connection the socket
    refuses is closed, which the client sees as the proxy hanging up."""
    while True:
        client, _ = listener.accept()
        # Small writes (a CONNECT's answer, TLS handshake records) go at once.
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            upstream.close()
            client.close()
            continue
        Relay(client, upstream).start()


def main() -> None:
    # The REPL's interrupts are for the code, not for this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    path = sys.argv[1]
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    try:
        listener = socket.create_server(("127.0.0.1", port), backlog=BACKLOG)
    except OSError:  # the port of a relay before this one, taken since
        listener = socket.create_server(("127.0.0.1", 0), backlog=BACKLOG)
    sys.stdout.write(f"{listener.getsockname()[1]}\n")
    sys.stdout.flush()
    serve(listener, path)


if __name__ == "__main__":
    main()
