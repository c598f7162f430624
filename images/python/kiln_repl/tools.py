"""Tools: code that calls the tools of the host's client while it runs (docs/protocol.md, Tools).

A run that brings tools gets one stub per tool: an async function in Python, a shell function in
bash. Each call becomes an entry of a tool_calls frame; the calls made together (asyncio.gather,
background jobs in bash) leave in one frame. The run then waits, its soft deadline stopped, for
the host's tool_results frame, and each call returns its result or raises its error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, ContextManager, Sequence

from kiln_repl.log import Logger
from kiln_repl.protocol import Request, Tool
from kiln_repl.running import SERVER_HOME, block_run_signals

Send = Callable[[dict[str, Any], Sequence[bytes]], None]
SHELL_CLIENT = os.path.join(SERVER_HOME, "kiln_tool.py")
# How long the first call of a bash batch waits for others: background jobs started together
# reach the REPL a few milliseconds apart.
SHELL_BATCH_SECONDS = 0.02


class ToolError(RuntimeError):
    """A tool call failed: the client's tool reported an error, or the call could not be made.
    Raised in the user's code at the call."""


@dataclass(frozen=True)
class Outcome:
    """What the host said of one call."""

    ok: bool
    value: Any = None
    message: str = ""


class Broker:
    """Makes calls into entries of a tool_calls frame, and trades a batch of them for results.

    exchange runs on the main thread; new_call may run on any.
    """

    def __init__(self, request: Request, send: Send, inbox: queue.SimpleQueue[Request],
                 stopped: Callable[[], ContextManager[None]]) -> None:
        self._id = request.id
        self._names = {tool.name for tool in request.tools}
        self.max_input = request.limits.max_tool_call_bytes
        self._send = send
        self._inbox = inbox
        self._stopped = stopped
        self._lock = threading.Lock()
        self._count = 0

    def new_call(self, name: str, value: Any) -> dict[str, Any]:
        """The entry of a call; ToolError when its input is not JSON or over the limit."""
        if name not in self._names:
            raise ToolError(f"no tool named {name!r}")
        try:
            size = len(json.dumps(value, ensure_ascii=False, allow_nan=False).encode())
        except (TypeError, ValueError) as exc:
            raise ToolError(f"the input of {name} is not JSON: {exc}") from None
        if size > self.max_input:
            raise ToolError(f"the input of {name} is {size} bytes; the limit is {self.max_input}")
        with self._lock:
            self._count += 1
            call_id = f"call_{self._count:03d}"
        return {"id": call_id, "name": name, "input": value}

    def exchange(self, calls: list[dict[str, Any]]) -> dict[str, Outcome]:
        """Sends the calls and waits for the results, the run's clock stopped. A result the
        host did not send is missing from the map."""
        payload = json.dumps(calls, ensure_ascii=False, allow_nan=False).encode()
        self._send({"id": self._id, "type": "tool_calls"}, [payload])
        with self._stopped():
            while (answer := self._inbox.get()).id != self._id:
                pass  # results meant for an earlier run
        return parse_results(answer.results)


def parse_results(payload: memoryview) -> dict[str, Outcome]:
    """The results by call id; nothing when the host sent something unreadable."""
    try:
        items = json.loads(bytes(payload))
    except ValueError:
        return {}
    outcomes = {}
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("call_id"), str):
            continue
        if item.get("is_error"):
            message = item.get("error_message")
            outcomes[item["call_id"]] = Outcome(False, message=message if isinstance(message, str) else "")
        else:
            outcomes[item["call_id"]] = Outcome(True, value=item.get("result"))
    return outcomes


def settle(call: dict[str, Any], outcome: Outcome | None) -> tuple[bool, Any]:
    """(True, the value) or (False, the ToolError) for a call."""
    if outcome is None:
        return False, ToolError(f"the host sent no result for {call['name']} ({call['id']})")
    if not outcome.ok:
        return False, ToolError(outcome.message or f"{call['name']} failed")
    return True, outcome.value


class AsyncTools:
    """The Python stubs. Calls made before the event loop next has nothing to do go out as one
    batch: asyncio.gather starts its calls within one turn of the loop."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._batch: list[tuple[dict[str, Any], asyncio.Future[Any]]] = []

    def stub(self, tool: Tool) -> Callable[..., Awaitable[Any]]:
        async def call(**kwargs: Any) -> Any:
            return await self._call(tool.name, kwargs)

        call.__name__ = call.__qualname__ = tool.function
        call.__doc__ = f"Calls the tool {tool.name!r} with keyword arguments; returns its result."
        return call

    async def _call(self, name: str, kwargs: dict[str, Any]) -> Any:
        entry = self._broker.new_call(name, kwargs)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._batch.append((entry, future))
        if len(self._batch) == 1:
            # Two turns of the loop: the tasks started beside this one make their calls first.
            loop.call_soon(loop.call_soon, self._flush)
        return await future

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        outcomes = self._broker.exchange([entry for entry, _ in batch])
        for entry, future in batch:
            if future.done():
                continue
            ok, value = settle(entry, outcomes.get(entry["id"]))
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)


async def evaluate(body: types.CodeType, final: types.CodeType | None, namespace: dict[str, Any]) -> Any:
    """Runs a cell compiled with top-level await: its body, then the value of its final
    expression, if any, awaited when it is a coroutine."""
    value = eval(body, namespace)
    if asyncio.iscoroutine(value):
        await value
    if final is None:
        return None
    value = eval(final, namespace)
    return await value if asyncio.iscoroutine(value) else value


def run_coroutine(value: Any) -> Any:
    """Runs the coroutine a top-level-await cell returned, on a loop of its own; anything else
    is returned as it is."""
    if not asyncio.iscoroutine(value):
        return value
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(value)
    finally:
        asyncio.set_event_loop(None)
        with contextlib.suppress(Exception):
            loop.close()


class ShellTools:
    """The bash stubs: shell functions, defined through BASH_ENV, that run kiln_tool.py, which
    hands the call to this object over a Unix socket and prints the result."""

    def __init__(self, broker: Broker, tools: list[Tool], logger: Logger) -> None:
        self._broker = broker
        self._logger = logger
        self._dir = tempfile.mkdtemp(prefix="kiln-tools-")
        self.socket_path = os.path.join(self._dir, "socket")
        self.rc_path = os.path.join(self._dir, "tools.sh")
        with open(self.rc_path, "w") as rc:
            for tool in tools:
                rc.write(f"{tool.function}() {{ {shlex.quote(sys.executable)} -S {shlex.quote(SHELL_CLIENT)} "
                         f"{shlex.quote(tool.name)} \"$@\"; }}\nexport -f {tool.function}\n")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.socket_path)
        self._server.listen(64)
        self._cond = threading.Condition()
        self._waiting: list[tuple[dict[str, Any], socket.socket, float]] = []
        self._closed = False
        threading.Thread(target=self._accept, name="tool-accept", daemon=True).start()

    def env(self) -> dict[str, str]:
        return {**os.environ, "BASH_ENV": self.rc_path, "KILN_TOOL_SOCKET": self.socket_path}

    def wait(self, child: subprocess.Popen[bytes], timeout: float) -> int:
        """Serves tool calls until bash ends; its return code. Time spent waiting for results
        does not count against timeout; subprocess.TimeoutExpired when the rest runs out."""
        ended = threading.Event()

        def watch() -> None:
            child.wait()
            ended.set()
            with self._cond:
                self._cond.notify()

        threading.Thread(target=watch, name="bash-wait", daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                while not ended.is_set() and not self._waiting:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise subprocess.TimeoutExpired(child.args, timeout)
                    self._cond.wait(left)
                first = self._waiting[0][2] if self._waiting else None
            if ended.is_set():
                return child.returncode
            assert first is not None
            time.sleep(max(0.0, first + SHELL_BATCH_SECONDS - time.monotonic()))
            with self._cond:
                batch, self._waiting = self._waiting, []
            started = time.monotonic()
            outcomes = self._broker.exchange([entry for entry, _, _ in batch])
            deadline += time.monotonic() - started  # the clock stops while the client works
            for entry, conn, _ in batch:
                ok, value = settle(entry, outcomes.get(entry["id"]))
                reply(conn, {"ok": True, "result": value} if ok else {"ok": False, "error": str(value)})

    def close(self) -> None:
        with self._cond:
            self._closed = True
            waiting, self._waiting = self._waiting, []
        for _, conn, _ in waiting:
            reply(conn, {"ok": False, "error": "the run has ended"})
        with contextlib.suppress(OSError):
            self._server.close()
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)
            os.unlink(self.rc_path)
            os.rmdir(self._dir)

    def _accept(self) -> None:
        block_run_signals()
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed at the end of the run
            threading.Thread(target=self._take, args=(conn,), name="tool-call", daemon=True).start()

    def _take(self, conn: socket.socket) -> None:
        block_run_signals()
        try:
            data = read_bounded(conn, self._broker_limit())
            message = json.loads(data)
            entry = self._broker.new_call(str(message["name"]), message.get("input"))
        except ToolError as exc:
            reply(conn, {"ok": False, "error": str(exc)})
            return
        except Exception as exc:
            reply(conn, {"ok": False, "error": f"the tool call could not be read: {exc}"})
            return
        with self._cond:
            if self._closed:
                reply(conn, {"ok": False, "error": "the run has ended"})
                return
            self._waiting.append((entry, conn, time.monotonic()))
            self._cond.notify()

    def _broker_limit(self) -> int:
        return self._broker.max_input + 4096  # the input, and the name around it


def read_bounded(conn: socket.socket, limit: int) -> bytes:
    """Reads until the peer stops writing; ToolError past limit bytes."""
    data = bytearray()
    while chunk := conn.recv(65536):
        data += chunk
        if len(data) > limit:
            raise ToolError(f"the tool call is over {limit} bytes")
    return bytes(data)


def reply(conn: socket.socket, message: dict[str, Any]) -> None:
    try:
        conn.sendall(json.dumps(message, ensure_ascii=False).encode())
    except (OSError, TypeError, ValueError):
        pass  # the caller is gone, or the result cannot be written back
    finally:
        conn.close()
