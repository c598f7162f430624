"""Egress through the REPL as the host drives it: with the sandbox's socket reachable, the code's
HTTP clients go through the relay process to it, and the relay outlives the runs (it is not one of
the leftovers a run's end kills); with egress off, there is no proxy at all."""

import os
import socket
import tempfile
import threading
import unittest

from repl_client import ReplTestCase

FETCH = ("import urllib.request\n"
         "print(urllib.request.urlopen('http://allowed.test/hello', timeout=10).read().decode())")


class FakeKiln:
    """The host's end of the socket: answers each request with the request line it got."""

    def __init__(self, path: str) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head and (chunk := conn.recv(4096)):
                    head += chunk
                if not head:
                    continue  # the REPL's probe at start
                line = head.split(b"\r\n", 1)[0]
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(line), line))


class EgressTest(ReplTestCase):
    def test_clients_go_through_the_relay_which_outlives_runs(self) -> None:
        directory = tempfile.mkdtemp(prefix="kiln-egress-test-")
        path = os.path.join(directory, "egress.sock")
        kiln = FakeKiln(path)
        self.addCleanup(kiln.listener.close)
        repl = self.start(env={"KILN_EGRESS": "1", "KILN_EGRESS_SOCKET": path})
        for _ in range(2):  # the second run finds the relay the first run's end left alone
            result = repl.run(FETCH)
            self.assertOk(result)
            self.assertEqual(result["stdout"], "GET http://allowed.test/hello HTTP/1.1\n")
        # Code that ends the relay gets a new one on its next run.
        # The kill is waited out: a SIGKILL is delivered, not done, when os.kill returns, and the
        # relay is dead once it is a zombie (the REPL, its parent, reaps it).
        result = repl.run("import os, signal, subprocess, time\n"
                          "pids = subprocess.run(['pgrep', '-f', 'relay.py'], capture_output=True, text=True).stdout.split()\n"
                          "def alive(pid):\n"
                          "    try:\n        return open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0] != 'Z'\n"
                          "    except FileNotFoundError:\n        return False\n"
                          "for pid in pids:\n    os.kill(int(pid), signal.SIGKILL)\n"
                          "deadline = time.monotonic() + 10\n"
                          "while any(alive(pid) for pid in pids) and time.monotonic() < deadline:\n    time.sleep(0.01)\n"
                          "print(len(pids), any(alive(pid) for pid in pids))")
        self.assertEqual(result["stdout"], "1 False\n")
        result = repl.run(FETCH)
        self.assertOk(result)
        self.assertEqual(result["stdout"], "GET http://allowed.test/hello HTTP/1.1\n")

    def test_without_egress_there_is_no_proxy(self) -> None:
        repl = self.start()
        result = repl.run("import os\nprint(sorted(k for k in os.environ if 'proxy' in k.lower() or k.startswith('KILN_EGRESS')))")
        self.assertEqual(result["stdout"], "[]\n")


if __name__ == "__main__":
    unittest.main()
