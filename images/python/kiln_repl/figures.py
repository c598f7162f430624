"""Figures as files: matplotlib figures saved as PNGs in the data directory, as a notebook shows
them (docs/protocol.md, Figures).

The matplotlib side is kiln_repl.mplbackend, which matplotlib itself loads (MPLBACKEND) when it
first needs a backend. This module holds the rest, which needs no matplotlib, so that the server
loads it at start whether or not matplotlib is ever imported.
"""

from __future__ import annotations

import contextlib
import io
import os
import weakref
from typing import Any, Callable, ContextManager, Protocol

Display = Callable[[str, bytes], None]


class Figure(Protocol):
    """What is used of a matplotlib Figure."""

    def savefig(self, fname: Any, **kwargs: Any) -> None: ...


class Figures:
    """What a run asked of its figures. With figures off, the backend behaves as Agg does."""

    def __init__(self) -> None:
        self.enabled = False
        self.data_dir = ""
        self.display: Display | None = None
        # The interrupt shield: saving a figure is the REPL's work, even when the code asked.
        self.guard: Callable[[], ContextManager[None]] = contextlib.nullcontext
        # Set by the backend when matplotlib loads it: saves and closes the open figures,
        # returns a note for each one that could not be saved.
        self.save_open: Callable[[], list[str]] | None = None
        self._saved_by_code: weakref.WeakSet[Any] = weakref.WeakSet()

    def begin(self, data_dir: str, display: Display | None, guard: Callable[[], ContextManager[None]]) -> None:
        """Turns figures on for a run; display, when given, hears of each figure saved."""
        self.enabled, self.data_dir, self.display, self.guard = True, data_dir, display, guard

    def end(self) -> list[str]:
        """Saves the figures the run left open, then turns figures off; returns the notes."""
        notes = self.save_open() if self.enabled and self.save_open is not None else []
        self.enabled, self.display, self.guard = False, None, contextlib.nullcontext
        return notes

    def saved_by_code(self, figure: Figure) -> None:
        """Notes that the code saved the figure itself: it is then closed, not saved again."""
        self._saved_by_code.add(figure)

    def show(self, figure: Figure) -> str | None:
        """Saves the figure as the next free figure-N.png, unless the code saved it itself;
        returns the file's name, or None."""
        if figure in self._saved_by_code:
            return None
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", bbox_inches="tight")  # as a notebook shows it
        self._saved_by_code.discard(figure)  # that was not the code's savefig
        png = buffer.getvalue()
        name = write_new_figure(self.data_dir, png)
        if self.display is not None:
            self.display(name, png)
        return name


def write_new_figure(data_dir: str, png: bytes) -> str:
    """Writes png as figure-N.png in data_dir, N the first number whose name is free; returns
    the name. O_EXCL also refuses a symlink or a directory of that name."""
    dir_fd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        number = 1
        while True:
            name = f"figure-{number}.png"
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
            except FileExistsError:
                number += 1
                continue
            with open(fd, "wb") as handle:
                handle.write(png)
            return name
    finally:
        os.close(dir_fd)


FIGURES = Figures()  # one per process, as matplotlib's backend is
