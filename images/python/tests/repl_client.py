"""A small client that drives repl_server.py through its real stdin and stdout (protocol 2)."""

from __future__ import annotations

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
REQUEST_END = b">>> REQUEST_END <<<\n"
RESPONSE_START = b">>> RESPONSE_START <<<\n"
RESPONSE_END = b">>> RESPONSE_END <<<\n"
RESULT_KEYS = {"binary", "id", "type", "status", "exit_code", "stdout", "stderr", "error", "result", "state",
               "state_unchanged", "state_error", "state_token", "files", "files_error", "deleted_files", "truncated",
               "duration_ms", "memory_bytes"}


def as_bytes(data: bytes | str) -> bytes:
    return data.encode() if isinstance(data, str) else data


def encode_request(message: dict[str, Any], state: bytes | None = None,
                   files: dict[str, bytes | str] | None = None) -> bytes:
    """One request frame: the header with "binary" first and the payloads' sizes, then the
    state blob and the files' contents as raw bytes."""
    contents = {path: as_bytes(content) for path, content in (files or {}).items()}
    payloads = ([] if state is None else [state]) + list(contents.values())
    header: dict[str, Any] = {"binary": sum(len(payload) for payload in payloads), **message}
    if state is not None:
        header["state"] = {"size": len(state)}
    if files is not None:
        header["files"] = [{"path": path, "size": len(content)} for path, content in contents.items()]
    line = json.dumps(header, separators=(",", ":")).encode()
    return REQUEST_START + line + b"\n" + b"".join(payloads) + REQUEST_END


def decode_payloads(header: dict[str, Any], payload: bytes) -> dict[str, Any]:
    """The header of a response, with the payloads it names added for the tests' convenience:
    "state_blob" (bytes or None) for a result, "content" in each file, and "content" of a
    display event (its one payload)."""
    if header.get("type") == "display":
        header["content"] = payload
        return header
    if header.get("type") == "tool_calls":
        header["calls"] = json.loads(payload)
        return header
    if header.get("type") == "agent":
        header["data"] = payload
        return header
    if header.get("type") == "bundle":
        header["output"] = json.loads(payload)
        return header
    if header.get("type") != "result":
        if payload:
            raise AssertionError(f"a {header.get('type')} frame with {len(payload)} bytes of binary")
        return header
    offset = 0
    header["state_blob"] = None
    if header["state"] is not None:
        offset = header["state"]["size"]
        header["state_blob"] = payload[:offset]
    for item in header["files"]:
        if set(item) != {"path", "size"}:
            raise AssertionError(f"file entry {item}")
        item["content"] = payload[offset:offset + item["size"]]
        offset += item["size"]
    outputs = header.get("outputs")
    header["outputs"] = []
    if outputs is not None:
        header["outputs"] = json.loads(payload[offset:offset + outputs["size"]])
        offset += outputs["size"]
    if offset != len(payload):
        raise AssertionError(f"the sizes add up to {offset}, binary is {len(payload)}")
    return header


class Repl:
    """One REPL server process with its own data directory."""

    def __init__(self, *flags: str, preload: bool = False, data_dir: str | None = None,
                 timeout: float = 60.0, env: dict[str, str] | None = None, hello: str | None = None) -> None:
        """hello: start the server with --await-hello and greet it with a hello of this id."""
        self.own_data_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="kiln-test-")
        self.log = tempfile.TemporaryFile()
        args = [sys.executable, SERVER, "--data-dir", self.data_dir, *flags]
        if hello is not None:
            args.append("--await-hello")
        if not preload:
            args.append("--no-preload")
        self.process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                        env={**os.environ, **(env or {})})
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        self._buffer = bytearray()
        self._count = 0
        try:
            if hello is not None:
                self.send_raw(encode_request({"id": hello, "op": "hello"}))
            self.ready = self.read_frame(timeout)
        except BaseException:
            self.close()  # no test holds it yet to close it: its data directory goes now
            raise

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.stdin, self.stdout):
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
        self.stdin.write(data)
        self.stdin.flush()

    def fill(self, enough: int, deadline: float) -> None:
        """Reads until the buffer holds at least enough bytes."""
        fd = self.stdout.fileno()
        while len(self._buffer) < enough:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no whole response frame in time; log:\n{self.log_text()}")
            readable, _, _ = select.select([fd], [], [], remaining)
            if readable:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise EOFError(f"server closed its stdout; log:\n{self.log_text()}")
                self._buffer += chunk

    def read_frame(self, timeout: float = 30.0) -> dict[str, Any]:
        """Reads one response frame; the channel must hold nothing but whole frames."""
        deadline = time.monotonic() + timeout
        start = len(RESPONSE_START)
        while (newline := self._buffer.find(b"\n", start)) < 0:
            self.fill(len(self._buffer) + 1, deadline)
        if not self._buffer.startswith(RESPONSE_START):
            raise AssertionError(f"bytes outside a frame: {bytes(self._buffer[:200])!r}")
        line = bytes(self._buffer[start:newline])
        if not line.isascii() or not line.startswith(b'{"binary":'):
            raise AssertionError(f"a header that is not ASCII or does not start with binary: {line[:200]!r}")
        header: dict[str, Any] = json.loads(line)
        payload_end = newline + 1 + header["binary"]
        self.fill(payload_end + len(RESPONSE_END), deadline)
        if self._buffer[payload_end:payload_end + len(RESPONSE_END)] != RESPONSE_END:
            raise AssertionError(f"no end delimiter after the binary: {bytes(self._buffer[payload_end:][:200])!r}")
        payload = bytes(self._buffer[newline + 1:payload_end])
        del self._buffer[:payload_end + len(RESPONSE_END)]
        return decode_payloads(header, payload)

    def request(self, timeout: float = 30.0, state: bytes | None = None,
                files: dict[str, bytes | str] | None = None, **fields: Any) -> dict[str, Any]:
        self._count += 1
        message = {"id": f"req-{self._count}", "op": "exec", "lang": "python", **fields}
        self.send_raw(encode_request(message, state, files))
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

    def start_run(self, code: str, files: dict[str, bytes | str] | None = None, **fields: Any) -> str:
        """Sends an exec request without waiting for its answer; returns its id."""
        self._count += 1
        request_id = f"req-{self._count}"
        self.send_raw(encode_request({"id": request_id, "op": "exec", "code": code, **fields}, files=files))
        return request_id

    def interrupt(self, request_id: str) -> None:
        self.send_raw(encode_request({"id": request_id, "op": "interrupt"}))

    def tool_results(self, request_id: str, results: list[dict[str, Any]]) -> None:
        """Answers a run's tool calls: the results' JSON is the frame's one payload."""
        payload = json.dumps(results).encode()
        header = json.dumps({"binary": len(payload), "id": request_id, "op": "tool_results"}, separators=(",", ":")).encode()
        self.send_raw(REQUEST_START + header + b"\n" + payload + REQUEST_END)

    def next_tool_calls(self, request_id: str, timeout: float = 30.0) -> dict[str, Any]:
        """Reads frames until the run asks for tools (returns that frame) or ends (returns its
        result); output events are dropped."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.read_frame(max(0.0, deadline - time.monotonic()))
            if frame.get("id") != request_id:
                raise AssertionError(f"a frame for {frame.get('id')!r} while {request_id!r} runs: {frame}")
            if frame["type"] in ("tool_calls", "result"):
                return frame

    def collect(self, request_id: str, timeout: float = 30.0) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Reads the events of a run, then its result. Each frame gets "arrived", the
        monotonic time it was read."""
        deadline = time.monotonic() + timeout
        events: list[dict[str, Any]] = []
        while True:
            frame = self.read_frame(max(0.0, deadline - time.monotonic()))
            frame["arrived"] = time.monotonic()
            if frame.get("id") != request_id:
                raise AssertionError(f"a frame for {frame.get('id')!r} while {request_id!r} runs: {frame}")
            if frame["type"] == "result":
                return events, frame
            if frame["type"] not in ("output", "display", "bundle"):
                raise AssertionError(f"an event of type {frame['type']!r}")
            events.append(frame)


class ReplTestCase(unittest.TestCase):
    """Starts REPL processes on demand and stops them after the test."""

    def start(self, *flags: str, preload: bool = False, data_dir: str | None = None,
              env: dict[str, str] | None = None) -> Repl:
        repl = Repl(*flags, preload=preload, data_dir=data_dir, env=env)
        self.addCleanup(repl.close)
        return repl

    def assertOk(self, response: dict[str, Any]) -> None:
        self.assertEqual(response["status"], "ok", f"error={response.get('error')!r} stderr={response.get('stderr')!r}")
