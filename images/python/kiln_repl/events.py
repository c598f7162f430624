"""Events: what a run writes and shows, sent as frames while it runs (docs/protocol.md, Events).

Output is coalesced per stream, so that a tight print loop makes a few frames a second, not
thousands. Frames are written by a sender thread of the run's own, so that a host slow to read
holds up the events, never the code or the REPL's control of it.
"""

from __future__ import annotations

import codecs
import threading
import time
from typing import Any, Callable, Sequence

from kiln_repl.log import Logger
from kiln_repl.rich import encode_outputs
from kiln_repl.running import block_run_signals

COALESCE_BYTES = 16 << 10  # waiting bytes that make a stream send at once
COALESCE_SECONDS = 0.05  # how long the first waiting byte of a stream may wait
STREAMS = ("stdout", "stderr")

Send = Callable[[dict[str, Any], Sequence[bytes]], None]
Frame = tuple[dict[str, Any], Sequence[bytes]]


class Waiting:
    """One stream's bytes not yet sent, and when the first of them arrived."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.since = 0.0
        # Incremental, so that a character split between two chunks is decoded whole: the
        # texts sent add up to the decoding of all the bytes, as the result's text is made.
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")


class EventStream:
    """The events of one run, from its start until close, which sends what is left."""

    def __init__(self, request_id: str, send: Send, logger: Logger) -> None:
        self._id = request_id
        self._send = send
        self._logger = logger
        self._cond = threading.Condition()
        self._waiting = {stream: Waiting() for stream in STREAMS}
        self._outbox: list[Frame] = []  # frames in the order they go out
        self._closing = False
        self._cut: set[str] = set()
        self._notes = ""
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()

    def sink(self, stream: str) -> Callable[[bytes], None]:
        """What a capture gives the bytes it keeps to."""
        return lambda data: self.output(stream, data)

    def output(self, stream: str, data: bytes) -> None:
        """Takes bytes the run wrote, only those the final output keeps (capture threads)."""
        with self._cond:
            waiting = self._waiting[stream]
            if not waiting.data:
                waiting.since = time.monotonic()
                self._cond.notify()  # the sender now has a time to wake at
            waiting.data += data
            if len(waiting.data) >= COALESCE_BYTES:
                self._cond.notify()

    def display(self, name: str, png: bytes) -> None:
        """Queues a figure, behind all the output given so far."""
        with self._cond:
            for stream in STREAMS:
                self._take_output(stream, final=False)
            message = {"id": self._id, "type": "display", "name": name, "mime": "image/png"}
            self._outbox.append((message, [png]))
            self._cond.notify()

    def bundle(self, output: dict[str, Any]) -> None:
        """Queues a rich output (display_data, execute_result), behind all the output given so far."""
        with self._cond:
            for stream in STREAMS:
                self._take_output(stream, final=False)
            self._outbox.append(({"id": self._id, "type": "bundle"}, [encode_outputs(output)]))
            self._cond.notify()

    def close(self, cut: set[str], notes: str = "") -> None:
        """Sends what is left and waits until it is written. cut names the streams the result
        truncated: their text ends where the kept bytes end. notes are the REPL's own lines at
        the end of stderr, sent when stderr was not cut."""
        with self._cond:
            self._closing, self._cut, self._notes = True, cut, notes
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        block_run_signals()
        done = False
        while not done:
            with self._cond:
                while not self._take_due() and not self._closing:
                    self._cond.wait(self._next_due())
                done = self._closing
                if done:
                    self._take_rest()
                frames, self._outbox = self._outbox, []
            try:
                for message, payloads in frames:
                    self._send(message, payloads)
            except OSError as exc:
                self._logger.log(f"events not sent: {exc}")
                return  # the result's write will fail too, and end the server

    def _take_due(self) -> bool:
        """Moves the output that is due into the outbox; whether the outbox has frames."""
        now = time.monotonic()
        for stream, waiting in self._waiting.items():
            if len(waiting.data) >= COALESCE_BYTES or (waiting.data and now - waiting.since >= COALESCE_SECONDS):
                self._take_output(stream, final=False)
        return bool(self._outbox)

    def _next_due(self) -> float | None:
        """Seconds until the first waiting byte is due; None when nothing waits."""
        starts = [waiting.since for waiting in self._waiting.values() if waiting.data]
        if not starts:
            return None
        return max(0.0, min(starts) + COALESCE_SECONDS - time.monotonic())

    def _take_rest(self) -> None:
        for stream in STREAMS:
            self._take_output(stream, final=stream not in self._cut)
        if self._notes and "stderr" not in self._cut:
            self._outbox.append((self._output_message("stderr", self._notes), []))

    def _take_output(self, stream: str, final: bool) -> None:
        """Moves a stream's waiting bytes into the outbox, decoded. A character cut in half
        waits for the rest, or becomes U+FFFD when final."""
        waiting = self._waiting[stream]
        text = waiting.decoder.decode(bytes(waiting.data), final)
        waiting.data.clear()
        if text:
            self._outbox.append((self._output_message(stream, text), []))

    def _output_message(self, stream: str, text: str) -> dict[str, Any]:
        return {"id": self._id, "type": "output", "stream": stream, "text": text}
