"""What user code writes to fds 1 and 2: the pipes behind them, and decoding what they caught."""

from __future__ import annotations

import codecs
import io
import os
import threading
from typing import Callable

from kiln_repl.log import Logger
from kiln_repl.protocol import READ_CHUNK
from kiln_repl.running import block_run_signals

Sink = Callable[[bytes], None]


class Capture:
    """Drains one pipe (behind fd 1 or 2) into a bounded buffer for the run in progress.

    The reader thread never stops draining: past the cap it only counts what it drops, so a
    flood can neither block the writer nor grow memory. Output arriving between runs belongs
    to no run and is dropped.
    """

    def __init__(self, target_fd: int, logger: Logger) -> None:
        self.target_fd = target_fd
        self._logger = logger
        self._read_fd, self._write_fd = os.pipe()
        self._lock = threading.Lock()
        self._buffer = bytearray()
        self._cap = 0
        self._dropped = 0
        self._active = False
        self._marker: bytes | None = None
        self._ending = False  # the marker ends the run's capture
        self._carry = b""
        self._synced = threading.Event()
        self._sync_lock = threading.Lock()  # one marker at a time
        self._sink: Sink | None = None
        threading.Thread(target=self._pump, name=f"capture-fd{target_fd}", daemon=True).start()

    def attach(self) -> None:
        """Points target_fd at the pipe, again: user code may have closed or replaced it."""
        os.dup2(self._write_fd, self.target_fd)

    def begin(self, cap: int, sink: Sink | None = None) -> None:
        """Starts a run's capture; sink, when given, also gets every byte kept, as it comes."""
        with self._lock:
            self._buffer, self._dropped, self._cap, self._sink = bytearray(), 0, cap, sink
            self._marker, self._carry, self._active = None, b"", True

    def sync(self, wait_seconds: float = 5.0) -> None:
        """Returns once all that was written before the call has been taken (and given to the
        sink); the capture goes on."""
        self._wait_for_marker(wait_seconds, ending=False)

    def kept(self, wait_seconds: float = 5.0) -> bytes:
        """The bytes kept so far in the run, once all that was written before the call has been
        taken; the capture goes on."""
        self.sync(wait_seconds)
        with self._lock:
            return bytes(self._buffer)

    def end(self, wait_seconds: float = 5.0) -> tuple[bytes, int]:
        """Ends the run's capture once all that was written before the call has been read.

        Returns the bytes kept and the number of bytes dropped.
        """
        self._wait_for_marker(wait_seconds, ending=True)
        with self._lock:
            self._active, self._marker, self._carry, self._sink = False, None, b"", None
            return bytes(self._buffer), self._dropped

    def _wait_for_marker(self, wait_seconds: float, ending: bool) -> None:
        """Writes a random marker behind what was written so far and waits until the reader
        thread reaches it: there, the run ends (ending) or the waiting does."""
        marker = os.urandom(16)
        with self._sync_lock:
            with self._lock:
                self._marker, self._ending = marker, ending
                self._synced.clear()
            os.write(self._write_fd, marker)
            if not self._synced.wait(wait_seconds):
                self._logger.log(f"capture of fd {self.target_fd} did not sync within {wait_seconds}s")
                with self._lock:
                    carry, self._marker, self._carry = self._carry, None, b""
                    self._keep(carry)

    def _pump(self) -> None:
        block_run_signals()
        while chunk := os.read(self._read_fd, READ_CHUNK):
            with self._lock:
                self._take(chunk)

    def _take(self, chunk: bytes) -> None:
        if self._marker is None:
            self._keep(chunk)
            return
        data = self._carry + chunk
        at = data.find(self._marker)
        if at < 0:
            # Hold back a tail that could be the first part of a split marker.
            split = max(0, len(data) - len(self._marker) + 1)
            self._keep(data[:split])
            self._carry = data[split:]
            return
        self._keep(data[:at])
        rest = data[at + len(self._marker):]
        self._marker, self._carry = None, b""
        if self._ending:
            self._active = False  # what follows belongs to no run
        else:
            self._keep(rest)
        self._synced.set()

    def _keep(self, data: bytes) -> None:
        if not self._active:
            return
        room = max(0, self._cap - len(self._buffer))
        kept = data[:room]
        self._buffer += kept
        self._dropped += len(data) - len(kept)
        if kept and self._sink is not None:
            self._sink(kept)


def decode_output(data: bytes, dropped: int) -> tuple[str, bool]:
    """Decodes captured bytes as UTF-8 and marks a cut. Returns (text, truncated)."""
    if not dropped:
        return data.decode("utf-8", "replace"), False
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(data, final=False)  # holds back a character cut in half
    dropped += len(decoder.getstate()[0])
    return text + f"\n[kiln: output truncated, {dropped} bytes dropped]\n", True


TextStreams = tuple[io.TextIOWrapper, io.TextIOWrapper, io.TextIOWrapper]


class StdStreams:
    """Python's text streams on fds 0, 1 and 2, rebuilt when user code has closed them."""

    def __init__(self) -> None:
        self.streams = self._open()

    def fresh(self) -> TextStreams:
        if any(stream.closed for stream in self.streams):
            self.streams = self._open()
        return self.streams

    @staticmethod
    def _open() -> TextStreams:
        def writer(fd: int) -> io.TextIOWrapper:
            # Line buffered and write-through, so print() and os.write(1, ...) keep their order.
            return io.TextIOWrapper(open(fd, "wb", closefd=False), encoding="utf-8",
                                    errors="backslashreplace", line_buffering=True, write_through=True)

        reader = io.TextIOWrapper(open(0, "rb", closefd=False), encoding="utf-8", errors="replace")
        return reader, writer(1), writer(2)
