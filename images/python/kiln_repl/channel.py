"""The protocol channel: requests read on a thread of their own, frames written from any thread.

Reading on a thread lets an interrupt frame be seen while the main thread runs code; the other
requests go to the main thread through a queue, in order. Frames are written whole under one
lock, since the result (main thread) and events (the sender thread) share the channel.
"""

from __future__ import annotations

import functools
import os
import queue
import threading
from typing import Any, Callable, Collection, Sequence

from kiln_repl.framing import FdSource, FrameReader, Refused, read_request, write_frame
from kiln_repl.interrupts import Interrupter
from kiln_repl.log import Logger
from kiln_repl.protocol import NATIVE_LANGUAGES, Request
from kiln_repl.running import block_run_signals


class Channel:
    """Owns the private protocol fds: proto_in is read by the reader thread, proto_out written
    by send."""

    def __init__(self, proto_in: int, proto_out: int, interrupter: Interrupter, logger: Logger,
                 languages: Collection[str] = NATIVE_LANGUAGES) -> None:
        self._proto_in = proto_in
        self._languages = frozenset(languages)
        self._writev = functools.partial(os.writev, proto_out)
        self._write_lock = threading.Lock()
        self._interrupter = interrupter
        self._logger = logger
        self._requests: queue.SimpleQueue[Request | Refused | None] = queue.SimpleQueue()
        # Tool results, for the run waiting on them (tools).
        self.tool_results: queue.SimpleQueue[Request] = queue.SimpleQueue()
        # Where net frames go: the egress forwarder, when the host turned egress on.
        self.net: Callable[[int, str, int, memoryview], None] | None = None
        # Where agent calls go (kiln_repl.agent): they run beside the cells, never queued.
        self.agent: Callable[[int, str, dict[str, Any], memoryview], None] | None = None

    def start(self) -> None:
        """Starts the reader thread. It ends at end of file, which next_request then returns as
        None; the process does not wait for it."""
        threading.Thread(target=self._read, name="channel-reader", daemon=True).start()

    def next_request(self) -> Request | Refused | None:
        """The next request, or what refused it; None once the channel is closed."""
        return self._requests.get()

    def send(self, message: dict[str, Any], payloads: Sequence[bytes] = ()) -> None:
        with self._write_lock:
            write_frame(self._writev, message, payloads)

    def _read(self) -> None:
        block_run_signals()
        reader = FrameReader(FdSource(self._proto_in))
        try:
            while (request := read_request(reader, self._languages)) is not None:
                if isinstance(request, Request) and request.op == "interrupt":
                    self._interrupter.interrupt(request.id)
                    continue  # never answered
                if isinstance(request, Request) and request.op == "net":
                    if self.net is not None:
                        self.net(request.conn, request.net, request.n, request.data)
                    continue  # carried, never answered
                if isinstance(request, Request) and request.op == "agent":
                    if self.agent is not None:
                        self.agent(request.call, request.method, request.params, request.data)
                    continue  # answered by the agent, on frames of its own
                if isinstance(request, Request) and request.op == "tool_results":
                    self.tool_results.put(request)
                    continue  # never answered either
                if isinstance(request, Request) and request.op == "exec":
                    self._interrupter.accept(request.id, request.lang)
                self._requests.put(request)
        except Exception as exc:  # user code may have closed the fd, for one
            self._logger.log(f"the protocol channel could not be read: {exc!r}")
        finally:
            self._requests.put(None)
