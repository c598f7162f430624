"""A small client that drives repl_server.py through its real stdin and stdout."""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from typing import Any

SERVER = os.environ.get("KILN_REPL_SERVER", "/opt/kiln/repl_server.py")
REQUEST_START = b">>> REQUEST_START <<<\n"
REQUEST_END = b"\n>>> REQUEST_END <<<\n"
RESPONSE_START = b">>> RESPONSE_START <<<\n"
RESPONSE_END = b"\n>>> RESPONSE_END <<<\n"
RESULT_KEYS = {"id", "type", "status", "exit_code", "stdout", "stderr", "error", "result", "state",
               "state_error", "files", "files_error", "truncated", "duration_ms"}


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode("ascii")


def encode_request(message: dict[str, Any]) -> bytes:
    return REQUEST_START + json.dumps(message).encode() + REQUEST_END


class Repl:
    """One REPL server process with its own data directory."""

    def __init__(self, *flags: str, preload: bool = False, data_dir: str | None = None,
                 timeout: float = 60.0, env: dict[str, str] | None = None) -> None:
        self.own_data_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="kiln-test-")
        self.log = tempfile.TemporaryFile()
        args = [sys.executable, SERVER, "--data-dir", self.data_dir, *flags]
        if not preload:
            args.append("--no-preload")
        self.process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                        env={**os.environ, **(env or {})})
        self._buffer = b""
        self._count = 0
        self.ready = self.read_frame(timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.log.close()
        if self.own_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def log_text(self) -> str:
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def send_raw(self, data: bytes) -> None:
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def read_frame(self, timeout: float = 30.0) -> dict[str, Any]:
        """Reads one response frame; the channel must hold nothing but whole frames."""
        deadline = time.monotonic() + timeout
        fd = self.process.stdout.fileno()
        while RESPONSE_END not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no response frame within {timeout}s; log:\n{self.log_text()}")
            readable, _, _ = select.select([fd], [], [], remaining)
            if readable:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise EOFError(f"server closed its stdout; log:\n{self.log_text()}")
                self._buffer += chunk
        frame, self._buffer = self._buffer.split(RESPONSE_END, 1)
        if not frame.startswith(RESPONSE_START):
            raise AssertionError(f"bytes outside a frame: {frame[:200]!r}")
        payload = frame[len(RESPONSE_START):]
        if b"\n" in payload or not payload.isascii():
            raise AssertionError("the payload is not one line of ASCII")
        return json.loads(payload)

    def request(self, timeout: float = 30.0, **fields: Any) -> dict[str, Any]:
        self._count += 1
        message = {"id": f"req-{self._count}", "op": "exec", "lang": "python", **fields}
        self.send_raw(encode_request(message))
        response = self.read_frame(timeout)
        if response.get("type") == "result":
            missing = RESULT_KEYS - set(response)
            if missing:
                raise AssertionError(f"result lacks keys {sorted(missing)}")
            if response["id"] != message["id"]:
                raise AssertionError(f"id {response['id']!r}, want {message['id']!r}")
        return response

    def run(self, code: str, **fields: Any) -> dict[str, Any]:
        return self.request(code=code, **fields)


class ReplTestCase(unittest.TestCase):
    """Starts REPL processes on demand and stops them after the test."""

    def start(self, *flags: str, preload: bool = False, data_dir: str | None = None,
              env: dict[str, str] | None = None) -> Repl:
        repl = Repl(*flags, preload=preload, data_dir=data_dir, env=env)
        self.addCleanup(repl.close)
        return repl

    def assertOk(self, response: dict[str, Any]) -> None:
        self.assertEqual(response["status"], "ok", f"error={response.get('error')!r} stderr={response.get('stderr')!r}")
