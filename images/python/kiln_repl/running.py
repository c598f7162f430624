"""Running a Python cell: compiling it, the soft deadline, and how a run ended.

What the user's code did (an exception, an exit, a timeout) is an Outcome, never an exception
of the server's.
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import os
import signal
import sys
import traceback
import types
from dataclasses import dataclass
from typing import Iterator

from kiln_repl.files import is_within

USER_FILENAME = "<string>"
# A cell in IPython's language is compiled as "<cell N>" (N its execution count), each kept in
# linecache: the source of what an earlier cell defined is still shown (obj??, tracebacks).
CELL_PREFIX = "<cell "


def cell_filename(count: int) -> str:
    return f"{CELL_PREFIX}{count}>"


def is_user_file(filename: str) -> bool:
    return filename == USER_FILENAME or filename.startswith(CELL_PREFIX)
TIMEOUT_EXIT_CODE = 124
ERROR_LINE_MAX = 1000

# The REPL's own code: the modules of this package, and the entry point beside it in
# SERVER_HOME (/opt/kiln in the image).
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
SERVER_HOME = os.path.dirname(PACKAGE_DIR)
ENTRY_POINT = os.path.join(SERVER_HOME, "repl_server.py")


@dataclass
class Outcome:
    """How the user's code ended."""

    status: str = "ok"
    exit_code: int = 0
    error: str | None = None
    result: str | None = None
    result_truncated: bool = False


def one_line(text: str) -> str:
    text = " ".join(text.splitlines()).strip()
    return text if len(text) <= ERROR_LINE_MAX else text[: ERROR_LINE_MAX - 3] + "..."


def describe_exception(exc: BaseException) -> str:
    """The one-line error: "Type: message", or just "Type" when there is no message."""
    name = type(exc).__name__
    if isinstance(exc, SyntaxError):
        where = f" (line {exc.lineno})" if exc.lineno else ""
        return one_line(f"{name}: {exc.msg}{where}")
    message = str(exc)
    return one_line(f"{name}: {message}" if message else name)


class TimeLimitExceeded(BaseException):
    """Raised in the main thread when the soft deadline fires.

    A BaseException, so that an `except Exception` in user code does not swallow it.
    """


def block_run_signals() -> None:
    """Blocks, in the calling helper thread, the signals meant for the main thread: the
    deadline's SIGALRM and an interrupt's SIGINT must land where the user's code runs."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGINT, signal.SIGTERM})


class Deadline:
    """Arms SIGALRM for the length of a with block; the handler raises only while armed."""

    def __init__(self, seconds: float) -> None:
        self.seconds = max(seconds, 0.001)
        self.armed = False

    def __enter__(self) -> Deadline:
        signal.signal(signal.SIGALRM, self._on_alarm)
        self.armed = True
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """Stops the clock for the length of a with block: time spent waiting for the host's
        tool results does not count against the run."""
        left, _ = signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            yield
        finally:
            if self.armed:
                signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))

    def _on_alarm(self, signum: int, frame: types.FrameType | None) -> None:
        if self.armed:
            self.armed = False
            raise TimeLimitExceeded()


@dataclass
class Cell:
    """A compiled cell: its body, its final expression apart (None when it has none), and the
    dotted modules its top-level `import a.b` statements name."""

    body: types.CodeType
    final: types.CodeType | None
    imports: set[str]
    defines: bool = False  # it defines a function or a class, whose code outlives the cell


def compile_cell(code: str, top_level_await: bool = False, filename: str = USER_FILENAME) -> Cell:
    """Compiles a cell; a final expression statement is compiled apart so its value is seen.
    With top_level_await, await may appear outside functions: evaluating such a code object
    returns a coroutine, which runs in the namespace it was given."""
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if top_level_await else 0
    tree = ast.parse(code, filename, "exec")
    imports = dotted_imports(tree.body)
    defines = any(isinstance(node, DEFINITIONS) for node in ast.walk(tree))
    final = None
    last = tree.body[-1] if tree.body else None
    if isinstance(last, ast.Expr):
        tree.body.pop()
        final = compile(ast.Expression(last.value), filename, "eval", flags=flags)
    return Cell(compile(tree, filename, "exec", flags=flags), final, imports, defines)


DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def dotted_imports(statements: list[ast.stmt]) -> set[str]:
    """The dotted names of `import a.b` statements that bind the top-level name a, outside
    functions and classes: a.b must be imported again where the session is restored."""
    found: set[str] = set()
    for statement in statements:
        if isinstance(statement, ast.Import):
            found.update(alias.name for alias in statement.names if alias.asname is None and "." in alias.name)
        elif not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody"):
                found |= dotted_imports(getattr(statement, field, []))
            for handler in getattr(statement, "handlers", []):
                found |= dotted_imports(handler.body)
            for case in getattr(statement, "cases", []):
                found |= dotted_imports(case.body)
    return found


def register_source(code: str, filename: str = USER_FILENAME) -> None:
    """Lets tracebacks show the user's lines for filename."""
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)


class Sources:
    """The source of the cells that defined functions or classes, by their file name: a
    session keeps them with its state (a setting), so that what an earlier cell defined
    still shows its lines in a restored process (obj??, tracebacks). At most MAX_CELLS of
    them, and MAX_BYTES, the newest kept."""

    MAX_CELLS = 200
    MAX_BYTES = 2 << 20

    def __init__(self) -> None:
        self.cells: dict[str, str] = {}

    def keep(self, filename: str, code: str) -> None:
        self.cells.pop(filename, None)
        self.cells[filename] = code
        while len(self.cells) > self.MAX_CELLS or sum(map(len, self.cells.values())) > self.MAX_BYTES:
            del self.cells[next(iter(self.cells))]

    def read(self) -> dict[str, str]:
        return self.cells

    def apply(self, cells: dict[str, str]) -> None:
        self.cells = dict(cells)
        for filename, code in cells.items():
            register_source(code, filename)


SOURCES = Sources()


def is_server_file(filename: str) -> bool:
    return filename == ENTRY_POINT or is_within(filename, PACKAGE_DIR)


def user_traceback(exc: BaseException) -> str:
    """Formats a traceback without the frames before the user's: the REPL's own, and those of
    the event loop a cell with tools runs on."""
    tb = exc.__traceback__
    first = tb
    while first is not None and not is_user_file(first.tb_frame.f_code.co_filename):
        first = first.tb_next
    if first is not None:
        tb = first
    while tb is not None and is_server_file(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    try:
        return "".join(traceback.format_exception(type(exc), exc, tb))
    except Exception:
        # Formatting runs library code too: Python 3.13 lists a frame's locals for its "Did you
        # mean" hint, and patsy's formula namespace raises there (for any exception in the
        # chain). The frames alone, and the error's line, need none of that.
        frames = "".join(traceback.format_tb(tb))
        return f"Traceback (most recent call last):\n{frames}{type(exc).__name__}: {exc}\n"


def cap_text(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[:limit] + f"...[kiln: result truncated, {len(text) - limit} characters dropped]", True


def exit_outcome(exc: SystemExit) -> Outcome:
    """sys.exit() and sys.exit(0) end a run normally; any other code is an error, as in python3."""
    code = exc.code
    if code is None or code == 0:
        return Outcome()
    if isinstance(code, int):
        return Outcome("error", (code & 0xFF) or 1, f"SystemExit: {code}")
    sys.stderr.write(f"{code}\n")  # what python3 prints for sys.exit("message")
    return Outcome("error", 1, describe_exception(exc))


def signal_outcome(returncode: int) -> Outcome:
    """The outcome of a bash run that ended with a nonzero code or a signal."""
    if returncode > 0:
        return Outcome("error", returncode, f"Exit code {returncode}")
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return Outcome("error", 128 - returncode, f"Exit code {128 - returncode} (killed by {name})")
