"""In-process tests of the egress forwarder: a client's connection to the proxy port becomes net
frames, the host's frames come back to the client in order, and the window holds."""

import os
import queue
import socket
import tempfile
import threading
import time
import unittest
from typing import Any, Sequence
from unittest import mock

import inprocess  # noqa: F401  (the server's package, by path)
from kiln_repl.egress import WINDOW, Forwarder, RelayProcess, start_egress
from kiln_repl.log import Logger
from kiln_repl.protocol import BadRequest, parse_request


class Host:
    """The host's side: the frames the forwarder sends, in a queue."""

    def __init__(self) -> None:
        self.frames: queue.Queue[tuple[dict[str, Any], bytes]] = queue.Queue()

    def send(self, message: dict[str, Any], payloads: Sequence[bytes] = ()) -> None:
        self.frames.put((message, b"".join(payloads)))

    def next(self, op: str | None = None) -> tuple[dict[str, Any], bytes]:
        while True:
            message, data = self.frames.get(timeout=10)
            if op is None or message["net"] == op:
                return message, data


class ForwarderTest(unittest.TestCase):
    def setUp(self) -> None:
        self.host = Host()
        self.forwarder = Forwarder(self.host.send, Logger(2))
        self.forwarder.start()

    def connect(self) -> tuple[socket.socket, int]:
        client = socket.create_connection(("127.0.0.1", self.forwarder.port), timeout=10)
        self.addCleanup(client.close)
        message, _ = self.host.next("open")
        self.assertEqual(message["type"], "net")
        return client, message["conn"]

    def test_the_environment_points_clients_at_the_port(self) -> None:
        env = self.forwarder.environment()
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            self.assertEqual(env[name], f"http://127.0.0.1:{self.forwarder.port}")
        self.assertIn("127.0.0.1", env["NO_PROXY"])

    def test_bytes_go_both_ways_and_a_close_comes_after_the_data(self) -> None:
        client, conn = self.connect()
        client.sendall(b"GET http://allowed.test/ HTTP/1.1\r\n\r\n")
        received = b""
        while len(received) < 37:
            _, data = self.host.next("data")
            received += data
        self.assertEqual(received, b"GET http://allowed.test/ HTTP/1.1\r\n\r\n")
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
        self.forwarder.deliver(conn, "data", 0, memoryview(answer))
        self.forwarder.deliver(conn, "close", 0, memoryview(b""))  # at once: the data still goes first
        got = b""
        while chunk := client.recv(4096):
            got += chunk
        self.assertEqual(got, answer)
        message, _ = self.host.next("ack")
        self.assertEqual(message["n"], len(answer))

    def test_the_client_waits_for_the_window(self) -> None:
        client, conn = self.connect()
        big = b"x" * (3 * WINDOW)
        threading.Thread(target=client.sendall, args=(big,), daemon=True).start()
        sent = 0
        deadline = time.monotonic() + 10
        while sent < WINDOW and time.monotonic() < deadline:
            _, data = self.host.next("data")
            sent += len(data)
        self.assertEqual(sent, WINDOW)
        with self.assertRaises(queue.Empty):  # nothing past the window until an ack
            self.host.frames.get(timeout=0.3)
        self.forwarder.deliver(conn, "ack", WINDOW, memoryview(b""))
        while sent < 2 * WINDOW:
            _, data = self.host.next("data")
            sent += len(data)
        self.assertEqual(sent, 2 * WINDOW)

    def test_a_client_that_closes_is_told_to_the_host(self) -> None:
        client, conn = self.connect()
        client.shutdown(socket.SHUT_WR)
        message, _ = self.host.next("eof")
        self.assertEqual(message["conn"], conn)
        self.forwarder.deliver(conn, "eof", 0, memoryview(b""))
        message, _ = self.host.next("close")
        self.assertEqual(message["conn"], conn)


class SocketTest(unittest.TestCase):
    """With the sandbox's socket (KILN_EGRESS_SOCKET) reachable, a relay process carries the
    connections over it; without, the forwarder carries them as frames."""

    def setUp(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.path = os.path.join(self.dir.name, "egress.sock")

    def test_the_relay_process_carries_a_connection_both_ways(self) -> None:
        kiln = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        kiln.bind(self.path)
        kiln.listen()
        self.addCleanup(kiln.close)
        relay = RelayProcess(self.path, Logger(2))
        self.assertTrue(relay.start())
        self.addCleanup(relay.stop)
        self.assertNotEqual(relay.pid, os.getpid())
        client = socket.create_connection(("127.0.0.1", relay.port), timeout=10)
        self.addCleanup(client.close)
        served, _ = kiln.accept()
        self.addCleanup(served.close)
        big = bytes(range(256)) * 4096  # 1 MiB

        def upload() -> None:
            client.sendall(big)
            client.shutdown(socket.SHUT_WR)

        threading.Thread(target=upload, daemon=True).start()
        got = b""
        while chunk := served.recv(1 << 16):
            got += chunk
        self.assertEqual(got, big)
        served.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
        served.close()  # kiln ends it: the client reads what came, then its end of file
        answer = b""
        while chunk := client.recv(4096):
            answer += chunk
        self.assertEqual(answer, b"HTTP/1.1 200 OK\r\n\r\n")
        self.assertIsNone(relay.ensure(), "a running relay is not started again")

    def test_a_socket_not_there_means_the_forwarder(self) -> None:
        host = Host()
        with mock.patch.dict(os.environ, {"KILN_EGRESS": "1", "KILN_EGRESS_SOCKET": self.path}):
            way = start_egress(host.send, Logger(2), self.dir.name)
            self.assertTrue(way.on)
            self.assertIsNone(way.relay)
            forwarder = way.forwarder
            assert forwarder is not None
            self.assertEqual(os.environ["HTTPS_PROXY"], f"http://127.0.0.1:{forwarder.port}")
            self.assertNotIn("KILN_EGRESS_SOCKET", os.environ)

    def test_kilns_own_port_needs_no_relay_and_no_forwarder(self) -> None:
        host = Host()
        with mock.patch.dict(os.environ, {"KILN_EGRESS": "1", "KILN_EGRESS_PORT": "3128",
                                          "KILN_EGRESS_SOCKET": self.path}):
            way = start_egress(host.send, Logger(2), self.dir.name)
            self.assertTrue(way.on)
            self.assertIsNone(way.relay)
            self.assertIsNone(way.forwarder)
            self.assertEqual(os.environ["HTTPS_PROXY"], "http://127.0.0.1:3128")
            self.assertEqual(os.environ["http_proxy"], "http://127.0.0.1:3128")
            self.assertNotIn("KILN_EGRESS_PORT", os.environ)
            self.assertTrue(host.frames.empty(), "nothing goes over the channel")

    def test_egress_off_is_no_way(self) -> None:
        with mock.patch.dict(os.environ, {"KILN_EGRESS_PORT": "3128"}):
            self.assertFalse(start_egress(Host().send, Logger(2), self.dir.name).on)


class NetRequestTest(unittest.TestCase):
    def test_net_frames_parse_and_bad_ones_are_refused(self) -> None:
        request = parse_request(b'{"binary":3,"op":"net","conn":7,"net":"data"}')
        self.assertEqual((request.op, request.conn, request.net), ("net", 7, "data"))
        ack = parse_request(b'{"binary":0,"op":"net","conn":7,"net":"ack","n":5}')
        self.assertEqual(ack.n, 5)
        for header in (b'{"binary":0,"op":"net","conn":7,"net":"data"}',
                       b'{"binary":2,"op":"net","conn":7,"net":"eof"}',
                       b'{"binary":0,"op":"net","conn":7,"net":"open"}',
                       b'{"binary":0,"op":"net","conn":-1,"net":"eof"}'):
            with self.subTest(header=header), self.assertRaises(BadRequest):
                parse_request(header)


if __name__ == "__main__":
    unittest.main()
