"""The REPL's own diagnostics: lines on a private copy of stderr, which the host logs."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Logger:
    """Writes one line per message to fd; a failed write is dropped, never raised.

    The server logs to a private copy of the original stderr, taken before user code owns
    fds 1 and 2, so that nothing user code writes can land in the host's log as the REPL's.
    """

    fd: int = 2

    def log(self, message: str) -> None:
        try:
            os.write(self.fd, f"kiln-repl: {message}\n".encode("utf-8", "replace"))
        except OSError:
            pass
