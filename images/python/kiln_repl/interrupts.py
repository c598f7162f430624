"""Interrupting a run: an interrupt frame, read on the channel's thread, stops the running code.

Python code gets KeyboardInterrupt from this module's SIGINT handler, which Python runs in the
main thread between bytecodes. Every other language (bash, and those of the image's table) runs
as programs, one at a time, each leading a process group of its own: the one running gets
SIGINT in its group. The REPL's own work is never interrupted: the handler raises only while the
running cell is on the main thread's stack and no shielded REPL code (figure saving called from
the cell) runs. An interrupt that lands elsewhere waits: until the shield ends, or until the
cell starts when it came while the REPL prepared the run; one that comes after the cell is
dropped when the run ends. A run of programs that gets one between two programs (a compiler and
what it built) starts no more.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import types
from typing import Iterator, NoReturn

CANCELLED_EXIT_CODE = 130
RESIGNAL_AFTER = 0.2  # seconds before an interrupt sent as a program started is sent again


class Interrupter:
    """The interrupt state of the run in progress, shared by the reader thread and the main one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # between the reader thread's calls and the main thread's
        self._main_thread = threading.main_thread().ident or 0
        self._run_id: str | None = None  # the exec request read and not yet answered
        self._lang = "python"
        self._wanted = False  # an interrupt came for the run and was not delivered yet
        self._group: int | None = None  # the process group of the program that runs, if any
        self._cell: tuple[types.CodeType, ...] = ()
        # From enter_cell until leave_cell the cell counts as running, its code on the stack
        # yet or not: an interrupt that lands between the two is the cell's.
        self._armed = False
        self._shields = 0
        self.interrupted = False  # the run's code was interrupted: the run ends as cancelled
        self.resignal_after = RESIGNAL_AFTER

    def install(self) -> None:
        """Installs the SIGINT handler, again before every run: user code may have replaced it
        or blocked the signal. Main thread only."""
        signal.signal(signal.SIGINT, self._on_sigint)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    # --- the channel's reader thread

    def accept(self, request_id: str, lang: str) -> None:
        """Makes request_id the run that interrupts are for, from the moment it is read: an
        interrupt may arrive before the main thread has started it."""
        with self._lock:
            self._run_id, self._lang, self._group = request_id, lang, None
            self._wanted = self.interrupted = False

    def interrupt(self, request_id: str) -> None:
        """Interrupts the run if request_id is its id; any other id is ignored."""
        with self._lock:
            if request_id != self._run_id:
                return
            self._wanted = True
            if self._lang == "python":
                signal.pthread_kill(self._main_thread, signal.SIGINT)
            elif self._group is not None:
                self._signal_group()

    # --- the main thread

    def finish(self) -> None:
        """Ends the run: an interrupt still waiting is dropped, later ones are ignored."""
        with self._lock:
            self._run_id, self._group, self._cell, self._armed = None, None, (), False
            self._wanted = self.interrupted = False

    def enter_cell(self, body: types.CodeType, final: types.CodeType | None) -> None:
        """Marks the cell's code objects (its body, and its final expression if any) as the
        user's. Call it where KeyboardInterrupt is handled: it raises at once when an interrupt
        is already waiting."""
        self._cell = (body,) if final is None else (body, final)
        self._armed = True
        if self._wanted:
            self._deliver()

    def leave_cell(self) -> None:
        """Marks the end of the cell's code: an interrupt after it waits, as one before
        enter_cell does."""
        self._armed = False

    @contextlib.contextmanager
    def shielded(self) -> Iterator[None]:
        """Holds interrupts while REPL code called from the cell runs; one that came meanwhile
        is delivered when the shield ends. Off the main thread it does nothing."""
        if threading.get_ident() != self._main_thread:
            yield
            return
        self._shields += 1
        try:
            yield
        finally:
            self._shields -= 1
        if self._wanted and not self._shields:
            signal.raise_signal(signal.SIGINT)  # the handler decides, as for any other

    @property
    def pending(self) -> bool:
        """Whether an interrupt came for the run and was not delivered yet: a run of programs
        checks it before it starts the next one."""
        return self._wanted

    def program_started(self, pid: int) -> None:
        """The program pid (bash, a compiler, a built program) leads its own process group;
        an interrupt that came before is sent now."""
        with self._lock:
            self._group = pid
            if self._wanted:
                self._signal_group()
                # A program that is just starting can lose the signal (bash forking its first
                # command): the group gets it once more if it still runs a moment later.
                again = threading.Timer(self.resignal_after, self._signal_again, [pid])
                again.daemon = True
                again.start()

    def _signal_again(self, pid: int) -> None:
        with self._lock:
            if self._group == pid:
                self._signal_group()

    def program_ended(self) -> None:
        """Stops signalling the group, before its id can be used again."""
        with self._lock:
            self._group = None

    def _signal_group(self) -> None:
        assert self._group is not None
        try:
            os.killpg(self._group, signal.SIGINT)
        except OSError:
            return  # the program has already ended
        self.interrupted = True

    def _on_sigint(self, signum: int, frame: types.FrameType | None) -> None:
        # No lock here: the handler runs in the main thread, which may hold it.
        if self._wanted and not self._shields and (self._armed or self._in_cell(frame)):
            self._deliver()

    def _in_cell(self, frame: types.FrameType | None) -> bool:
        """Whether the cell's code is on the stack: the stack, unlike a flag, cannot be left
        stale by an exception."""
        while frame is not None:
            if any(frame.f_code is code for code in self._cell):
                return True
            frame = frame.f_back
        return False

    def _deliver(self) -> NoReturn:
        self._wanted = False
        self.interrupted = True
        raise KeyboardInterrupt
