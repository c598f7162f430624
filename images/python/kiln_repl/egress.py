"""The way out of the sandbox: a proxy port on loopback whose connections travel to kiln.

The sandbox has no network. When the host turns egress on (KILN_EGRESS=1), the REPL listens on
127.0.0.1 and points HTTP_PROXY and HTTPS_PROXY (and their lower-case forms) at that port, so
that pip, curl, requests, urllib and the rest send their requests there. Each connection a
client opens becomes net frames on the protocol channel: "open", then "data" both ways, "eof"
for a half close and "close" at the end. kiln's proxy on the other side checks each request
against the operator's policy and dials the host itself; the REPL only carries bytes.

Each way, a side sends at most WINDOW bytes of a connection that the other has not acknowledged
("ack" after delivering them), so that neither holds more than that per connection.

Where kiln listens on a port in the sandbox's own network namespace (Docker with runc:
KILN_EGRESS_PORT), the proxy variables name that port and the REPL carries nothing: the code's
connections reach kiln directly. Else, where the runtime mounts a Unix socket of the sandbox's own that kiln listens on (Docker:
KILN_EGRESS_SOCKET), the proxy port is a relay process's instead (kiln_repl.relay), which carries
each connection over a connection to that socket: no frames on the channel, and no wait on the
interpreter the code runs in. kiln's proxy serves both alike. When the socket cannot be reached
(gVisor without host sockets allowed, say), the frames carry every connection.
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from kiln_repl import relay
from kiln_repl.log import Logger
from kiln_repl.running import block_run_signals

EGRESS_ENV = "KILN_EGRESS"
SOCKET_ENV = "KILN_EGRESS_SOCKET"  # sandbox.EgressSocketVar
PORT_ENV = "KILN_EGRESS_PORT"  # sandbox.EgressPortVar
RELAY_SCRIPT = relay.__file__  # run as a script of its own, loaded here as the server's modules all are
CA_ENV = "KILN_EGRESS_CA"  # PEM: the operator's CAs, trusted beside the system's
SYSTEM_CA = "/etc/ssl/certs/ca-certificates.crt"
CA_BUNDLE = "/tmp/kiln-ca.pem"
CA_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO")
# pip installs into the session's own place under the working directory (the image is
# read-only), which the REPL puts on sys.path and never returns as output files.
PACKAGES_BASE = ".kiln/python"
PIP_SETTINGS = {"PIP_USER": "1", "PIP_BREAK_SYSTEM_PACKAGES": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                "PIP_NO_CACHE_DIR": "1", "PIP_NO_WARN_SCRIPT_LOCATION": "1", "PIP_PROGRESS_BAR": "off"}
WINDOW = 1 << 20  # protocol.NetWindow on the host's side
CHUNK = 256 << 10  # protocol.NetChunk: the most data one frame carries
MAX_CONNECTIONS = 32  # sandbox.MaxTunnels: the host refuses more
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "npm_config_proxy",
                   "npm_config_https_proxy")
NO_PROXY = "localhost,127.0.0.1,::1"

Send = Callable[[dict[str, Any], Sequence[bytes]], None]


class Forwarder:
    """Accepts the code's connections on the proxy port and carries them over the channel."""

    def __init__(self, send: Send, logger: Logger) -> None:
        self._send = send
        self._logger = logger
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=MAX_CONNECTIONS)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._tunnels: dict[int, Tunnel] = {}
        self._next = 0

    def environment(self) -> dict[str, str]:
        """The variables that send HTTP clients to the proxy port."""
        return proxy_environment(self.port)

    def start(self) -> None:
        threading.Thread(target=self._accept, name="egress-accept", daemon=True).start()

    def deliver(self, conn: int, op: str, n: int, data: memoryview) -> None:
        """Takes a net frame from the host, on the channel's reader thread: never blocks."""
        with self._lock:
            tunnel = self._tunnels.get(conn)
        if tunnel is None:
            return  # cut here already: the host's last frames cross our close
        if op == "data":
            tunnel.inbound.put(data)  # a buffer of its own: the channel reads each payload into a new one
        elif op == "eof":
            tunnel.inbound.put(EOF)
        elif op == "ack":
            tunnel.credit(n)
        elif op == "close":
            tunnel.host_closed()

    def forget(self, tunnel: Tunnel) -> None:
        with self._lock:
            if self._tunnels.get(tunnel.id) is tunnel:
                del self._tunnels[tunnel.id]

    def _accept(self) -> None:
        block_run_signals()
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError as exc:
                self._logger.log(f"the egress port stopped accepting: {exc!r}")
                return
            # Small writes (a CONNECT's answer, TLS handshake records) go at once: Nagle's
            # wait for an acknowledgement would add a delayed ACK's 40 ms to a round trip.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if len(self._tunnels) >= MAX_CONNECTIONS:
                    sock.close()
                    continue
                while self._next in self._tunnels:
                    self._next = (self._next + 1) % (1 << 32)
                tunnel = Tunnel(self, self._next, sock)
                self._tunnels[tunnel.id] = tunnel
                self._next = (self._next + 1) % (1 << 32)
            tunnel.start()

    def send(self, conn: int, op: str, data: bytes = b"", n: int = 0) -> None:
        message: dict[str, Any] = {"type": "net", "conn": conn, "net": op, "n": n}
        self._send(message, [data] if data else [])


class Marker:
    """An entry of a tunnel's inbound queue that is not data."""


EOF = Marker()  # the host will send no more
CLOSE = Marker()  # the host closed the connection
LINGER = 30.0  # seconds a client may keep its end open once the host closed


class Tunnel:
    """One connection of the code's. A thread reads the client and sends its bytes within
    the window; another writes what the host sent to the client, in order, and acknowledges
    it. A close from the host comes after its data: the data is written first.

    The socket is closed once both ways are over: the client's end of file (or an error) one
    way, the host's end of file or close the other.
    """

    def __init__(self, forwarder: Forwarder, conn: int, sock: socket.socket) -> None:
        self.id = conn
        self._forwarder = forwarder
        self._sock = sock
        self.inbound: queue.SimpleQueue[memoryview | Marker] = queue.SimpleQueue()
        self._window = threading.Condition()
        self._credit = WINDOW
        self._linger: threading.Timer | None = None
        self._lock = threading.Lock()
        self._client_done = False  # nothing more is read from the client
        self._host_done = False  # nothing more is written to the client
        self._host_closed = False  # the host closed: it reads nothing more of ours
        self._closed = False

    def start(self) -> None:
        self._forwarder.send(self.id, "open")
        threading.Thread(target=self._upstream, name=f"egress-{self.id}-up", daemon=True).start()
        threading.Thread(target=self._downstream, name=f"egress-{self.id}-down", daemon=True).start()

    def credit(self, n: int) -> None:
        with self._window:
            self._credit = min(self._credit + n, WINDOW)
            self._window.notify_all()

    def host_closed(self) -> None:
        """The host closed the connection: what it sent before is still written."""
        with self._window:
            self._host_closed = True
            self._window.notify_all()
        self.inbound.put(CLOSE)

    def _upstream(self) -> None:
        """Client to host, until the client's end of file."""
        block_run_signals()
        try:
            while data := self._sock.recv(CHUNK):
                view = memoryview(data)
                while view:
                    with self._window:
                        while self._credit == 0 and not self._host_closed:
                            self._window.wait()
                        if self._host_closed:
                            break  # nobody reads it any more: drained until the client ends
                        n = min(len(view), self._credit)
                        self._credit -= n
                    self._forwarder.send(self.id, "data", bytes(view[:n]))
                    view = view[n:]
            if not self._host_closed:
                self._forwarder.send(self.id, "eof")
        except OSError:
            self._abort()
            return
        self._over(client=True)

    def _downstream(self) -> None:
        """Host to client, until the host's end of file or close."""
        block_run_signals()
        try:
            while (data := self.inbound.get()) is not CLOSE:
                if isinstance(data, Marker):  # EOF
                    self._sock.shutdown(socket.SHUT_WR)
                    break
                self._sock.sendall(data)
                self._forwarder.send(self.id, "ack", n=len(data))
            else:
                self._sock.shutdown(socket.SHUT_WR)
                # A client that keeps its end open is cut after a while.
                self._linger = threading.Timer(LINGER, self._abort)
                self._linger.daemon = True
                self._linger.start()
        except OSError:
            self._abort()
            return
        self._over(client=False)

    def _over(self, client: bool) -> None:
        """One way is over; when both are, the connection is closed."""
        with self._lock:
            if client:
                self._client_done = True
            else:
                self._host_done = True
            both = self._client_done and self._host_done
        if both:
            self._close()

    def _abort(self) -> None:
        """The client's socket failed, or lingered: both ways end now."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked reading it
        except OSError:
            pass
        self.inbound.put(CLOSE)  # and the one waiting for the host
        self._close()

    def _close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._linger is not None:
            self._linger.cancel()
        with self._window:
            tell = not self._host_closed
            self._host_closed = True  # nothing more goes to the host
            self._window.notify_all()
        self._sock.close()
        self._forwarder.forget(self)
        if tell:
            try:
                self._forwarder.send(self.id, "close")
            except OSError:
                pass


def proxy_environment(port: int) -> dict[str, str]:
    """The variables that send HTTP clients to a proxy port on loopback."""
    url = f"http://127.0.0.1:{port}"
    env = {name: url for name in PROXY_VARIABLES}
    env["NO_PROXY"] = env["no_proxy"] = NO_PROXY
    return env


class RelayProcess:
    """The relay process (kiln_repl.relay) of a sandbox whose socket the REPL can reach."""

    def __init__(self, socket_path: str, logger: Logger) -> None:
        self._path = socket_path
        self._logger = logger
        self._process: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def pid(self) -> int:
        return 0 if self._process is None else self._process.pid

    def start(self) -> bool:
        """Starts the relay and learns its port; False when it did not come up."""
        try:
            process = subprocess.Popen([sys.executable, "-I", "-S", RELAY_SCRIPT, self._path, str(self.port)],
                                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        except OSError as exc:
            self._logger.log(f"the egress relay could not start: {exc!r}")
            return False
        assert process.stdout is not None
        line = process.stdout.readline()
        process.stdout.close()
        if not line.strip().isdigit():
            self._logger.log(f"the egress relay did not start: {line!r}")
            process.kill()
            process.wait()
            return False
        self._process, self.port = process, int(line)
        return True

    def ensure(self) -> dict[str, str] | None:
        """Starts the relay again, on its port if it can, if the code ended it; the environment
        then, else None."""
        if self._process is not None and self._process.poll() is None:
            return None
        if self._process is not None:
            self._logger.log("the egress relay ended: started again")
        if not self.start():
            return None
        return proxy_environment(self.port)

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()


def reachable(socket_path: str, logger: Logger) -> bool:
    """Whether the sandbox's socket takes a connection (kiln closes one made between calls)."""
    if not socket_path:
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(socket_path)
        return True
    except OSError as exc:
        logger.log(f"the egress socket cannot be reached, the channel carries the connections: {exc!r}")
        return False
    finally:
        probe.close()


@dataclass
class Way:
    """How the code's proxy connections leave the sandbox. Egress is on with neither a
    forwarder nor a relay when kiln listens on the proxy port itself (KILN_EGRESS_PORT)."""

    on: bool = False
    forwarder: Forwarder | None = None
    relay: RelayProcess | None = None


def start_egress(send: Send, logger: Logger, data_dir: str) -> Way:
    """The way out when the host turned egress on: kiln's own port in the sandbox's namespace
    when the host opened one, else the relay process over the sandbox's socket when it can be
    reached, else the forwarder over the channel; started and in the environment."""
    ca = os.environ.pop(CA_ENV, "")
    socket_path = os.environ.pop(SOCKET_ENV, "")
    port = os.environ.pop(PORT_ENV, "")
    if os.environ.pop(EGRESS_ENV, "") != "1":
        return Way()
    way = Way(on=True)
    if port.isdigit():
        # kiln listens there before any code runs: nothing in the sandbox relays.
        os.environ.update(proxy_environment(int(port)))
    elif reachable(socket_path, logger):
        relay = RelayProcess(socket_path, logger)
        if relay.start():
            os.environ.update(proxy_environment(relay.port))
            way.relay = relay
    if not port.isdigit() and way.relay is None:
        try:
            way.forwarder = Forwarder(send, logger)
        except OSError as exc:
            logger.log(f"no egress: the proxy port could not be opened: {exc!r}")
            return Way()
        os.environ.update(way.forwarder.environment())
        way.forwarder.start()
    if ca:
        trust(ca, logger)
    base = os.path.join(data_dir, PACKAGES_BASE)
    os.environ["PYTHONUSERBASE"] = base
    os.environ.update(PIP_SETTINGS)
    return way


def site_packages(data_dir: str) -> str:
    """Where pip installs a session's packages: the user site under PYTHONUSERBASE."""
    return os.path.join(data_dir, PACKAGES_BASE, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}",
                        "site-packages")


def trust(ca: str, logger: Logger) -> None:
    """Writes the system's CAs and the operator's to one bundle and points the clients at it."""
    try:
        with open(SYSTEM_CA, "rb") as handle:
            system = handle.read()
    except OSError:
        system = b""
    try:
        with open(CA_BUNDLE, "wb") as handle:
            handle.write(system + b"\n" + ca.encode())
    except OSError as exc:
        logger.log(f"the operator's CAs could not be written: {exc!r}")
        return
    os.environ.update({name: CA_BUNDLE for name in CA_VARIABLES})
    os.environ["NODE_EXTRA_CA_CERTS"] = CA_BUNDLE
