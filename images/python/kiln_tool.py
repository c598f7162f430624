"""Calls a tool of the host's client from bash: kiln_tool.py NAME [INPUT].

The shell functions of a bash run with tools call this script (docs/protocol.md, Tools). INPUT is
a JSON value, or else taken as a string; "{}" when left out. The REPL, reached over the Unix
socket named by KILN_TOOL_SOCKET, sends the call to the host and answers with its outcome. The
result is printed on stdout, a string as it is and anything else as compact JSON; an error is
printed on stderr, with exit code 1.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any


def main(argv: list[str]) -> int:
    if len(argv) < 2 or len(argv) > 3:
        sys.stderr.write("usage: kiln_tool.py NAME [INPUT]\n")
        return 2
    name = argv[1]
    raw = argv[2] if len(argv) == 3 else "{}"
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    path = os.environ.get("KILN_TOOL_SOCKET", "")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            conn.sendall(json.dumps({"name": name, "input": value}, ensure_ascii=False).encode())
            conn.shutdown(socket.SHUT_WR)
            data = bytearray()
            while chunk := conn.recv(65536):
                data += chunk
        answer = json.loads(data)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"{name}: the tool could not be called: {exc}\n")
        return 1
    if not answer.get("ok"):
        sys.stderr.write(f"{name}: {answer.get('error')}\n")
        return 1
    result = answer.get("result")
    out = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, separators=(",", ":"))
    sys.stdout.write(out + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
