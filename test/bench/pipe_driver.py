"""Time the first request to fresh REPLs over plain pipes, inside a sandbox container.

The kiln benchmark runs this as a container's command (python3 -c, since /tmp is
noexec and the root filesystem is read-only). For each REPL it starts
repl_server.py as a subprocess with pipes, waits for the ready frame, lets it idle
for a moment as a pooled sandbox would, then times one request and its response.
It prints one line per measurement, which the benchmark parses:

    first <op> <milliseconds>

Usage: python3 -c "$SOURCE" PRINTS PINGS
"""

import json
import subprocess
import sys
import tempfile
import time
from typing import IO, Any

REPL = ["python3", "/opt/kiln/repl_server.py"]
REQUEST_START = b">>> REQUEST_START <<<\n"
REQUEST_END = b">>> REQUEST_END <<<\n"
RESPONSE_START = b">>> RESPONSE_START <<<\n"
IDLE_SECONDS = 1.0

PRINT_REQUEST = {"id": "p1", "op": "exec", "lang": "python", "code": "print(1)",
                 "capture_state": False, "timeout_ms": 30000}
PING_REQUEST = {"id": "p1", "op": "ping"}


def frame(header: dict[str, Any]) -> bytes:
    """Return a request frame without payloads: "binary" first, as protocol 2 wants."""
    body = json.dumps({"binary": 0, **header}, separators=(",", ":")).encode()
    return REQUEST_START + body + b"\n" + REQUEST_END


def read_frame(out: IO[bytes]) -> dict[str, Any]:
    """Read the next response frame from out and return its header."""
    line = out.readline()
    while line and line != RESPONSE_START:
        line = out.readline()
    if not line:
        raise EOFError("the REPL closed its stdout")
    header: dict[str, Any] = json.loads(out.readline())
    payload = int(header.get("binary", 0))
    if payload:
        out.read(payload)
    out.readline()  # the end delimiter
    return header


def first_request(request: dict[str, Any]) -> float:
    """Start a fresh REPL, time its first request, and return milliseconds."""
    with tempfile.TemporaryDirectory(dir="/mnt/data") as data:
        proc = subprocess.Popen(REPL + ["--data-dir", data],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            ready = read_frame(proc.stdout)
            if ready.get("type") != "ready":
                raise RuntimeError(f"expected a ready frame, got {ready}")
            time.sleep(IDLE_SECONDS)
            message = frame(request)
            start = time.perf_counter()
            proc.stdin.write(message)
            proc.stdin.flush()
            answer = read_frame(proc.stdout)
            took = time.perf_counter() - start
        finally:
            proc.stdin.close()
            proc.wait(timeout=30)
    want = "pong" if request["op"] == "ping" else "result"
    if answer.get("type") != want or (want == "result" and answer.get("stdout") != "1\n"):
        raise RuntimeError(f"unexpected answer {answer}")
    return took * 1000


def main() -> None:
    prints, pings = int(sys.argv[1]), int(sys.argv[2])
    for op, request, count in (("exec", PRINT_REQUEST, prints), ("ping", PING_REQUEST, pings)):
        for _ in range(count):
            print(f"first {op} {first_request(request):.3f}", flush=True)


if __name__ == "__main__":
    main()
