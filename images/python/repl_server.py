"""kiln's in-container REPL server.

It runs as the sandbox container's main process: it pre-imports the data stack once, sends one
ready frame, then serves framed JSON requests on a private copy of stdin and answers on a
private copy of stdout. User code never sees those two channels: its fd 0 reads /dev/null and
its fds 1 and 2 are capture pipes whose contents become the response's stdout and stderr.
The REPL's own diagnostics go to a private copy of stderr, which the host logs.

The wire format is described in docs/protocol.md of the kiln repository.
"""

from __future__ import annotations

import argparse
import ast
import base64
import binascii
import builtins
import codecs
import importlib
import io
import json
import linecache
import os
import platform
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

PROTOCOL_VERSION = 1
REQUEST_START = b">>> REQUEST_START <<<"
REQUEST_END = b">>> REQUEST_END <<<"
RESPONSE_START = b">>> RESPONSE_START <<<\n"
RESPONSE_END = b"\n>>> RESPONSE_END <<<\n"

USER_FILENAME = "<string>"
REPL_FILE = os.path.abspath(__file__)
READ_CHUNK = 1 << 16
TIMEOUT_EXIT_CODE = 124
ERROR_LINE_MAX = 1000
NAMES_LISTED_MAX = 20  # file names listed per kind of skip; the rest are counted

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_LIMITS = {
    "max_output_bytes": 1 << 20,
    "max_file_bytes": 10 << 20,
    "max_files": 50,
    "max_state_bytes": 64 << 20,
}

# Pre-imports by group, each group named after its distribution: (name in the user namespace,
# module). matplotlib comes before seaborn so that the Agg backend from MPLBACKEND is in place
# when seaborn loads pyplot. The standard library modules are cheap and always bound.
PRELOAD_GROUPS: dict[str, list[tuple[str, str]]] = {
    "numpy": [("np", "numpy")],
    "pandas": [("pd", "pandas")],
    "scipy": [("scipy", "scipy"), ("stats", "scipy.stats"), ("optimize", "scipy.optimize"),
              ("interpolate", "scipy.interpolate")],
    "sklearn": [("linear_model", "sklearn.linear_model"), ("tree", "sklearn.tree"),
                ("ensemble", "sklearn.ensemble"), ("cluster", "sklearn.cluster"),
                ("preprocessing", "sklearn.preprocessing"), ("model_selection", "sklearn.model_selection"),
                ("metrics", "sklearn.metrics")],
    "statsmodels": [("sm", "statsmodels.api")],
    "matplotlib": [("matplotlib", "matplotlib"), ("plt", "matplotlib.pyplot")],
    "seaborn": [("sns", "seaborn")],
}
STDLIB_PRELOADS = [(name, name) for name in "json csv datetime collections itertools functools math random re os sys".split()]
PRELOADS = [pair for group in PRELOAD_GROUPS.values() for pair in group] + STDLIB_PRELOADS
VERSIONED = list(PRELOAD_GROUPS)
# The host chooses the groups with this variable: a comma-separated list of group names, or
# "none". Unset means every group. The host validates the names; unknown ones are logged here.
PRELOAD_ENV = "KILN_PRELOAD"
STATE_CODECS = ["cloudpickle", "lz4.frame"]

_log_fd = 2  # a private duplicate of the original stderr once main() has run


def log(message: str) -> None:
    """Writes a line to the REPL's own stderr, which ends up in the host's log."""
    try:
        os.write(_log_fd, f"kiln-repl: {message}\n".encode("utf-8", "replace"))
    except OSError:
        pass


# ---------------------------------------------------------------------------------------------
# Framing


def read_frames(fd: int) -> Iterator[bytes]:
    """Yields the payload of each request frame read from fd, until end of file.

    It works on lines, whatever the reads return, so a delimiter split across reads or a frame
    sent one byte at a time is put back together. Lines outside a frame are ignored; a start
    delimiter inside a frame starts the frame over.
    """
    line = bytearray()
    skipping = False  # the current line, outside a frame, is too long to be a delimiter
    in_frame = False
    lines: list[bytes] = []
    while chunk := os.read(fd, READ_CHUNK):
        pieces = chunk.split(b"\n")
        for piece in pieces[:-1]:
            if skipping:  # the end of a long line that was dropped
                skipping = False
                continue
            complete = bytes(line + piece)
            line = bytearray()
            if complete == REQUEST_START:
                in_frame, lines = True, []
            elif in_frame and complete == REQUEST_END:
                in_frame = False
                yield b"\n".join(lines)
            elif in_frame:
                lines.append(complete)
        if not skipping:
            line += pieces[-1]
        if not in_frame and len(line) > len(REQUEST_START):
            line, skipping = bytearray(), True


def write_frame(fd: int, message: dict[str, Any], base64_state: str | None = None) -> None:
    """Writes one response frame; ensure_ascii keeps the JSON on one line of plain ASCII.

    base64_state, when given, becomes the "state" member without passing through json.dumps:
    base64 needs no escaping, and for a state of megabytes the encoder's scan and copies cost
    more than the rest of the request. Only a string this process produced with b64encode may
    be passed here.
    """
    payload = json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    if base64_state is None:
        write_all(fd, [RESPONSE_START, payload, RESPONSE_END])
        return
    state = base64_state.encode("ascii")
    write_all(fd, [RESPONSE_START, payload[:-1], b',"state":"', state, b'"}', RESPONSE_END])


def write_all(fd: int, parts: list[bytes]) -> None:
    """Writes the parts in order with as few system calls as the pipe allows."""
    views = [memoryview(part) for part in parts if part]
    while views:
        written = os.writev(fd, views)
        while views and written >= len(views[0]):
            written -= len(views.pop(0))
        if written:
            views[0] = views[0][written:]


STATE_MEMBER = b'"state":"'


def lift_state(payload: bytes) -> tuple[bytes, str | None]:
    """Cuts a base64 state string out of a request payload before json.loads sees it.

    Returns the payload with the state replaced by null, and the state; or the payload as it
    was and None when the state is not there in the host's compact form. In valid JSON the
    bytes '"state":"' can only be that member: a quote inside a string is always escaped.
    """
    start = payload.find(STATE_MEMBER)
    if start < 0 or payload.find(STATE_MEMBER, start + 1) >= 0:
        return payload, None
    first = start + len(STATE_MEMBER)
    end = payload.find(b'"', first)
    blob = payload[first:end]
    if end < 0 or b"\\" in blob or not blob.isascii():
        return payload, None
    return payload[:start] + b'"state":null' + payload[end + 1:], blob.decode("ascii")


# ---------------------------------------------------------------------------------------------
# Output capture


class Capture:
    """Drains one pipe (behind fd 1 or 2) into a bounded buffer for the run in progress.

    The reader thread never stops draining: past the cap it only counts what it drops, so a
    flood can neither block the writer nor grow memory. Output arriving between runs belongs
    to no run and is dropped.
    """

    def __init__(self, target_fd: int) -> None:
        self.target_fd = target_fd
        self._read_fd, self._write_fd = os.pipe()
        self._lock = threading.Lock()
        self._buffer = bytearray()
        self._cap = 0
        self._dropped = 0
        self._active = False
        self._marker: bytes | None = None
        self._carry = b""
        self._synced = threading.Event()
        threading.Thread(target=self._pump, name=f"capture-fd{target_fd}", daemon=True).start()

    def attach(self) -> None:
        """Points target_fd at the pipe, again: user code may have closed or replaced it."""
        os.dup2(self._write_fd, self.target_fd)

    def begin(self, cap: int) -> None:
        with self._lock:
            self._buffer, self._dropped, self._cap = bytearray(), 0, cap
            self._marker, self._carry, self._active = None, b"", True

    def end(self, wait_seconds: float = 5.0) -> tuple[bytes, int]:
        """Ends the run's capture once all that was written before the call has been read.

        A random marker written behind the run's output shows the reader thread where the run
        ends. Returns the bytes kept and the number of bytes dropped.
        """
        marker = os.urandom(16)
        with self._lock:
            self._marker = marker
            self._synced.clear()
        os.write(self._write_fd, marker)
        if not self._synced.wait(wait_seconds):
            log(f"capture of fd {self.target_fd} did not sync within {wait_seconds}s")
        with self._lock:
            self._active, self._marker, self._carry = False, None, b""
            return bytes(self._buffer), self._dropped

    def _pump(self) -> None:
        # The deadline's SIGALRM must interrupt the main thread, not this one.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGINT, signal.SIGTERM})
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
        self._active, self._marker, self._carry = False, None, b""
        self._synced.set()

    def _keep(self, data: bytes) -> None:
        if not self._active:
            return
        room = max(0, self._cap - len(self._buffer))
        self._buffer += data[:room]
        self._dropped += max(0, len(data) - room)


def decode_output(data: bytes, dropped: int) -> tuple[str, bool]:
    """Decodes captured bytes as UTF-8 and marks a cut. Returns (text, truncated)."""
    if not dropped:
        return data.decode("utf-8", "replace"), False
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(data, final=False)  # holds back a character cut in half
    dropped += len(decoder.getstate()[0])
    return text + f"\n[kiln: output truncated, {dropped} bytes dropped]\n", True


# ---------------------------------------------------------------------------------------------
# Requests and responses


class BadRequest(Exception):
    """The frame does not hold a valid request; the host gets a frame of type "error"."""


@dataclass
class InputFile:
    path: str
    content: bytes


@dataclass
class Request:
    id: str
    op: str
    lang: str = "python"
    code: str = ""
    args: list[str] = field(default_factory=list)
    state: str | None = None
    capture_state: bool = False
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    files: list[InputFile] = field(default_factory=list)
    limits: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_LIMITS))


def expect(value: Any, kind: type | tuple[type, ...], name: str) -> Any:
    """Returns value if it has the JSON type wanted (a bool does not count as an int)."""
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise BadRequest(f"{name} has the wrong type")
    return value


def parse_request(payload: bytes) -> Request:
    """Decodes and validates a request; missing or null fields get their defaults."""
    payload, lifted_state = lift_state(payload)
    try:
        message = json.loads(payload)
    except Exception as exc:  # ValueError, and RecursionError for absurd nesting
        raise BadRequest(f"request is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise BadRequest("request is not a JSON object")
    request = Request(id=expect(message.get("id", ""), str, "id"), op=message.get("op", "exec"))
    if request.op not in ("exec", "ping"):
        raise BadRequest(f"unknown op {request.op!r}")
    request.lang = message.get("lang") or "python"
    if request.lang not in ("python", "bash"):
        raise BadRequest(f"unknown lang {request.lang!r}")
    request.code = expect(message.get("code") or "", str, "code")
    request.args = [expect(a, str, "args[]") for a in expect(message.get("args") or [], list, "args")]
    request.state = lifted_state or expect(message.get("state") or None, (str, type(None)), "state")
    request.capture_state = expect(message.get("capture_state") or False, bool, "capture_state")
    timeout_ms = message.get("timeout_ms")
    if timeout_ms is not None and expect(timeout_ms, int, "timeout_ms") > 0:
        request.timeout_ms = timeout_ms
    request.files = [parse_file(item) for item in expect(message.get("files") or [], list, "files")]
    for name, value in expect(message.get("limits") or {}, dict, "limits").items():
        if name in DEFAULT_LIMITS and value is not None and expect(value, int, f"limits.{name}") > 0:
            request.limits[name] = value
    return request


def parse_file(item: Any) -> InputFile:
    expect(item, dict, "files[]")
    path = expect(item.get("path"), str, "files[].path")
    try:
        content = base64.b64decode(expect(item.get("content") or "", str, "files[].content"), validate=True)
    except binascii.Error as exc:
        raise BadRequest(f"content of file {path!r} is not base64: {exc}") from None
    return InputFile(path, content)


def request_id_of(payload: bytes) -> str:
    """The id of a request, as far as it can be read; "" when it cannot."""
    try:
        message = json.loads(payload)
    except Exception:
        return ""
    if isinstance(message, dict) and isinstance(message.get("id"), str):
        return message["id"]
    return ""


@dataclass
class Result:
    """The exec response. Every field is always sent."""

    id: str
    status: str = "ok"
    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    result: str | None = None
    state: str | None = None
    state_error: str | None = None
    files: list[dict[str, Any]] = field(default_factory=list)
    files_error: str | None = None
    truncated: bool = False
    duration_ms: int = 0

    def to_message(self) -> dict[str, Any]:
        return {"id": self.id, "type": "result"} | {k: v for k, v in vars(self).items() if k != "id"}


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


# ---------------------------------------------------------------------------------------------
# Soft deadline


class TimeLimitExceeded(BaseException):
    """Raised in the main thread when the soft deadline fires.

    A BaseException, so that an `except Exception` in user code does not swallow it.
    """


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

    def _on_alarm(self, signum: int, frame: types.FrameType | None) -> None:
        if self.armed:
            self.armed = False
            raise TimeLimitExceeded()


# ---------------------------------------------------------------------------------------------
# Files


class PathRefused(Exception):
    """An input file that cannot be written without leaving the data directory."""


def relative_parts(path: str) -> list[str]:
    parts = [part for part in PurePosixPath(path).parts if part != "."]
    if not parts or path.startswith("/") or "\0" in path:
        raise PathRefused("not a relative path")
    if ".." in parts:
        raise PathRefused("the path leaves the data directory")
    return parts


def write_input_file(data_dir: str, item: InputFile) -> None:
    """Writes one input file, walking down with directory fds so that no symlink is followed."""
    parts = relative_parts(item.path)
    dir_fd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            try:
                os.mkdir(part, 0o755, dir_fd=dir_fd)
            except FileExistsError:
                pass
            try:
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
            except OSError:
                raise PathRefused(f"{part!r} is a symlink or not a directory") from None
            os.close(dir_fd)
            dir_fd = next_fd
        # O_NONBLOCK: a FIFO left in the way must fail, not hang.
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(parts[-1], flags, 0o644, dir_fd=dir_fd)
        except OSError as exc:
            raise PathRefused(f"cannot be written ({exc.strerror}; a symlink is refused)") from None
        with open(fd, "wb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise PathRefused("not a regular file")
            handle.truncate(0)
            handle.write(item.content)
    finally:
        os.close(dir_fd)


def walk_regular_files(data_dir: str) -> Iterator[tuple[str, str, int, os.stat_result]]:
    """Yields (relative path, name, dir fd, lstat) of the regular files under data_dir.

    Symlinks are never followed. The order is stable: a directory's files sorted by name,
    then its subdirectories sorted by name.
    """
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(data_dir, follow_symlinks=False):
        dirnames.sort()
        prefix = os.path.relpath(dirpath, data_dir)
        for name in sorted(filenames):
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                yield (name if prefix == "." else f"{prefix}/{name}"), name, dir_fd, info


Snapshot = dict[str, tuple[int, int, int]]


def snapshot(data_dir: str) -> Snapshot:
    return {path: fingerprint(info) for path, _, _, info in walk_regular_files(data_dir)}


def fingerprint(info: os.stat_result) -> tuple[int, int, int]:
    return info.st_size, info.st_mtime_ns, info.st_ino


def read_regular_file(name: str, dir_fd: int, limit: int) -> bytes | None:
    """Reads a file that is still a regular file; None if it holds more than limit bytes."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    with open(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("no longer a regular file")
        data = handle.read(limit + 1)
    return data if len(data) <= limit else None


def collect_files(data_dir: str, before: Snapshot,
                  limits: dict[str, int]) -> tuple[list[dict[str, Any]], list[str]]:
    """Returns the regular files that are new or changed since before, within the caps, and
    one line for each kind of file left out."""
    files: list[dict[str, Any]] = []
    too_big, too_many, unreadable = [], [], []
    for path, name, dir_fd, info in walk_regular_files(data_dir):
        if before.get(path) == fingerprint(info):
            continue
        if info.st_size > limits["max_file_bytes"]:
            too_big.append(f"{path} ({info.st_size} bytes)")
            continue
        if len(files) >= limits["max_files"]:
            too_many.append(path)
            continue
        try:
            data = read_regular_file(name, dir_fd, limits["max_file_bytes"])
        except OSError as exc:
            unreadable.append(f"{path} ({exc.strerror or exc})")
            continue
        if data is None:
            too_big.append(f"{path} (grew past the limit while read)")
            continue
        files.append({"path": path, "size": len(data), "content": base64.b64encode(data).decode("ascii")})
    problems = []
    if too_big:
        problems.append(f"files not returned (over {limits['max_file_bytes']} bytes): {list_names(too_big)}")
    if too_many:
        problems.append(f"files not returned (over {limits['max_files']} files): {list_names(too_many)}")
    if unreadable:
        problems.append(f"files not returned (unreadable): {list_names(unreadable)}")
    return files, problems


def list_names(names: list[str]) -> str:
    listed = ", ".join(names[:NAMES_LISTED_MAX])
    more = len(names) - NAMES_LISTED_MAX
    return f"{listed} and {more} more" if more > 0 else listed


# ---------------------------------------------------------------------------------------------
# State


def restore_state(blob: str) -> dict[str, Any]:
    """Decodes a state blob: base64, then an LZ4 frame, then a cloudpickle of a dict of names."""
    import cloudpickle
    import lz4.frame

    names = cloudpickle.loads(lz4.frame.decompress(base64.b64decode(blob, validate=True)))
    if not isinstance(names, dict) or not all(isinstance(name, str) for name in names):
        raise ValueError("the blob does not hold a dict of names")
    return names


def capture_state(namespace: dict[str, Any], untouched: dict[str, Any],
                  max_bytes: int) -> tuple[str | None, list[str]]:
    """Returns the state blob (None when there is none) and notes on what was left out."""
    import cloudpickle
    import lz4.frame

    names = {name: value for name, value in namespace.items() if is_kept(name, value, untouched)}
    if not names:
        return None, []  # nothing to keep: no state, and no note (the host reads it so)
    notes = []
    try:
        pickled = cloudpickle.dumps(names)
    except Exception:
        left_out = drop_unpicklable(names)
        notes.append("not kept (unpicklable): " + ", ".join(left_out))
        try:
            pickled = cloudpickle.dumps(names)
        except Exception as exc:
            return None, notes + [f"state could not be saved: {describe_exception(exc)}"]
    compressed = lz4.frame.compress(pickled)
    if len(compressed) > max_bytes:
        too_big = f"state dropped: {len(compressed)} bytes compressed, over the limit of {max_bytes}"
        return None, notes + [too_big]
    return base64.b64encode(compressed).decode("ascii"), notes


def drop_unpicklable(names: dict[str, Any]) -> list[str]:
    """Removes the names that do not pickle on their own; returns them as "name (type)"."""
    import cloudpickle

    left_out = []
    for name, value in list(names.items()):
        try:
            cloudpickle.dumps(value)
        except Exception:
            left_out.append(f"{name} ({type(value).__name__})")
            del names[name]
    return left_out


_MISSING = object()


def is_kept(name: str, value: Any, untouched: dict[str, Any]) -> bool:
    """Whether a name belongs in the state: not private, not a module, not a pre-imported
    alias the user left alone, not a builtin under its own name."""
    if name.startswith("_") or isinstance(value, types.ModuleType):
        return False
    if untouched.get(name, _MISSING) is value:
        return False
    return getattr(builtins, name, _MISSING) is not value


# ---------------------------------------------------------------------------------------------
# Leftover processes


def process_ids(pid: int) -> tuple[int, int, int] | None:
    """Reads (ppid, process group, session) from /proc; None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), int(fields[2]), int(fields[3])
    except (OSError, IndexError, ValueError):
        return None


def leftover_processes(leaders: set[int]) -> set[int]:
    """The processes descended from this one, or in a process group or session led by one of
    leaders. Groups and sessions also catch orphans, which init has adopted."""
    me = os.getpid()
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in (1, me):
            if ids := process_ids(int(entry)):
                table[int(entry)] = ids
    found = {pid for pid, (_, group, session) in table.items() if group in leaders or session in leaders}
    frontier = {me} | found
    while frontier:
        children = {pid for pid, (ppid, _, _) in table.items() if ppid in frontier} - found
        found |= children
        frontier = children
    return found


def kill_leftovers(leaders: set[int]) -> None:
    """SIGKILLs what a run left running and reaps those that were this process's children."""
    for _ in range(20):
        pids = leftover_processes(leaders)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in pids:
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass  # not our child: init reaps it
        time.sleep(0.001)
    log("leftover processes survived SIGKILL")


# ---------------------------------------------------------------------------------------------
# Running code


def compile_cell(code: str) -> tuple[types.CodeType, types.CodeType | None]:
    """Compiles a cell; a final expression statement is compiled apart so its value is seen."""
    tree = ast.parse(code, USER_FILENAME, "exec")
    final = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        final = compile(ast.Expression(tree.body.pop().value), USER_FILENAME, "eval")
    return compile(tree, USER_FILENAME, "exec"), final


def register_source(code: str) -> None:
    """Lets tracebacks show the user's lines for USER_FILENAME."""
    linecache.cache[USER_FILENAME] = (len(code), None, code.splitlines(True), USER_FILENAME)


def user_traceback(exc: BaseException) -> str:
    """Formats a traceback without the REPL's own frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == REPL_FILE:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


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


class StdStreams:
    """Python's text streams on fds 0, 1 and 2, rebuilt when user code has closed them."""

    def __init__(self) -> None:
        self.streams = self._open()

    def fresh(self) -> tuple[io.TextIOWrapper, io.TextIOWrapper, io.TextIOWrapper]:
        if any(stream.closed for stream in self.streams):
            self.streams = self._open()
        return self.streams

    @staticmethod
    def _open() -> tuple[io.TextIOWrapper, io.TextIOWrapper, io.TextIOWrapper]:
        def writer(fd: int) -> io.TextIOWrapper:
            # Line buffered and write-through, so print() and os.write(1, ...) keep their order.
            return io.TextIOWrapper(open(fd, "wb", closefd=False), encoding="utf-8",
                                    errors="backslashreplace", line_buffering=True, write_through=True)

        reader = io.TextIOWrapper(open(0, "rb", closefd=False), encoding="utf-8", errors="replace")
        return reader, writer(1), writer(2)


def preload_plan(groups: str | None) -> list[tuple[str, str]]:
    """The (alias, module) pairs to pre-import for the value of KILN_PRELOAD.

    None (unset) means every group; "none" or "" means none of the groups. The standard
    library modules are bound in every case.
    """
    if groups is None:
        return PRELOADS
    chosen = []
    for name in (part.strip().lower() for part in groups.split(",")):
        if name in ("", "none"):
            continue
        if name == "all":
            return PRELOADS
        if name not in PRELOAD_GROUPS:
            log(f"unknown pre-import group {name!r} in {PRELOAD_ENV}; ignored")
            continue
        chosen.append(name)
    # The table's order, whatever the variable's: matplotlib before seaborn.
    pairs = [pair for name, group in PRELOAD_GROUPS.items() if name in chosen for pair in group]
    return pairs + STDLIB_PRELOADS


class Server:
    """Holds the user namespace and serves requests on the private protocol fds."""

    def __init__(self, data_dir: str, preload: bool, once: bool, proto_in: int, proto_out: int) -> None:
        self.data_dir = data_dir
        self.once = once
        self.proto_in = proto_in
        self.proto_out = proto_out
        self.pid = os.getpid()
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__doc__": None, "__builtins__": builtins}
        self.preloaded: dict[str, str] = {}
        self.untouched: dict[str, Any] = {}
        seed_matplotlib_cache()
        if preload:
            self.preload()
        sys.path[0] = data_dir  # as with `python3 -c`: the working directory comes first
        self.stdout = Capture(1)
        self.stderr = Capture(2)
        self.stdout.attach()
        self.stderr.attach()
        self.streams = StdStreams()

    def preload(self) -> None:
        for alias, module_name in preload_plan(os.environ.get(PRELOAD_ENV)):
            try:
                self.namespace[alias] = importlib.import_module(module_name)
            except Exception as exc:
                log(f"pre-import of {module_name} failed: {describe_exception(exc)}")
        # The state codecs too: every exec that captures state needs them, and importing
        # cloudpickle costs more than a small run (this process serves one request).
        for module_name in STATE_CODECS:
            try:
                importlib.import_module(module_name)
            except Exception as exc:
                log(f"pre-import of {module_name} failed: {describe_exception(exc)}")
        for module_name in VERSIONED:
            if module := sys.modules.get(module_name):
                self.preloaded[module_name] = str(getattr(module, "__version__", "unknown"))
        self.untouched = {name: value for name, value in self.namespace.items() if not name.startswith("_")}

    def prime(self) -> None:
        """Runs one empty cell through the whole exec path before saying ready.

        A fresh interpreter's first run pays for code paths nothing has used yet (compile,
        capture hand-offs, the state codecs); this way the warm-up pays, not the request.
        """
        self.execute(Request(id="", op="exec", code="pass", capture_state=True))
        self.namespace.pop("_", None)

    def serve(self) -> None:
        self.prime()
        write_frame(self.proto_out, {
            "type": "ready",
            "protocol": PROTOCOL_VERSION,
            "python": platform.python_version(),
            "preloaded": self.preloaded,
            "capabilities": {"languages": ["python", "bash"], "state": True, "files": True},
        })
        for payload in read_frames(self.proto_in):
            try:
                request = parse_request(payload)
            except BadRequest as exc:
                error = {"id": request_id_of(payload), "type": "error", "error": f"bad request: {exc}"}
                write_frame(self.proto_out, error)
                continue
            if request.op == "ping":
                write_frame(self.proto_out, {"id": request.id, "type": "pong"})
                continue
            message = self.execute(request).to_message()
            if request.lang == "python" and message["state"] is not None:
                # The state came from capture_state's b64encode: safe to splice.
                write_frame(self.proto_out, message, base64_state=message.pop("state"))
            else:
                write_frame(self.proto_out, message)
            if self.once:
                return

    def execute(self, request: Request) -> Result:
        result = Result(id=request.id)
        limits = request.limits
        input_notes = self.write_inputs(request.files)
        before = snapshot(self.data_dir)
        if request.lang == "bash":
            result.state = request.state  # bash does not touch the state: hand it back as is
        elif request.state:
            try:
                self.namespace.update(restore_state(request.state))
            except Exception as exc:
                result.state_error = f"state could not be restored: {describe_exception(exc)}"

        self.prepare_process(request)
        self.stdout.begin(limits["max_output_bytes"])
        self.stderr.begin(limits["max_output_bytes"])
        started = time.monotonic()
        outcome = self.run_python(request) if request.lang == "python" else self.run_bash(request)
        result.duration_ms = int((time.monotonic() - started) * 1000)
        if os.getpid() != self.pid:
            os._exit(0)  # a child forked by user code fell through into the REPL
        self.end_run()
        out, out_dropped = self.stdout.end()
        err, err_dropped = self.stderr.end()

        result.status, result.exit_code, result.error = outcome.status, outcome.exit_code, outcome.error
        result.result = outcome.result
        result.stdout, stdout_cut = decode_output(out, out_dropped)
        result.stderr, stderr_cut = decode_output(err, err_dropped)
        result.truncated = stdout_cut or stderr_cut or outcome.result_truncated
        if request.lang == "python" and request.capture_state:
            result.state, notes = capture_state(self.namespace, self.untouched, limits["max_state_bytes"])
            result.state_error = "; ".join(filter(None, [result.state_error, *notes])) or None
        try:
            result.files, problems = collect_files(self.data_dir, before, limits)
        except OSError as exc:
            problems = [f"files could not be collected: {exc}"]
        result.files_error = "; ".join(problems) or None
        result.stderr = "".join(f"{note}\n" for note in input_notes) + result.stderr
        result.stderr += "".join(f"kiln: {problem}\n" for problem in problems)
        return result

    def write_inputs(self, files: list[InputFile]) -> list[str]:
        notes = []
        for item in files:
            try:
                write_input_file(self.data_dir, item)
            except (PathRefused, OSError) as exc:
                notes.append(f"kiln: input file {item.path!r} refused: {exc}")
        return notes

    def prepare_process(self, request: Request) -> None:
        """Puts the process back into the shape a run expects, whatever the last run did."""
        os.chdir(self.data_dir)
        null_fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null_fd, 0)
        os.close(null_fd)
        self.stdout.attach()
        self.stderr.attach()
        sys.stdin, sys.stdout, sys.stderr = self.streams.fresh()
        sys.argv = [USER_FILENAME, *request.args]
        # Files written since the last run can be imported. Only the data dir changes: the rest
        # of sys.path is the read-only image, and refreshing its hundreds of finders costs more
        # than the whole of a small run.
        for path, finder in list(sys.path_importer_cache.items()):
            if finder is not None and is_within(path, self.data_dir):
                finder.invalidate_caches()

    def end_run(self) -> None:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except Exception:
                pass
        kill_leftovers({self.pid})

    def run_python(self, request: Request) -> Outcome:
        register_source(request.code)
        try:
            body, final = compile_cell(request.code)
        except Exception as exc:  # SyntaxError, and RecursionError or MemoryError on absurd code
            sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))
            return Outcome("error", 1, describe_exception(exc))
        outcome = Outcome()
        try:
            with Deadline(request.timeout_ms / 1000):
                exec(body, self.namespace)
                if final is not None:
                    value = eval(final, self.namespace)
                    if value is not None:
                        self.namespace["_"] = value
                        limit = request.limits["max_output_bytes"]
                        outcome.result, outcome.result_truncated = cap_text(repr(value), limit)
        except TimeLimitExceeded:
            return Outcome("timeout", TIMEOUT_EXIT_CODE, "Time limit exceeded")
        except SystemExit as exc:
            return exit_outcome(exc)
        except BaseException as exc:  # whatever user code raises is data, KeyboardInterrupt too
            sys.stderr.write(user_traceback(exc))
            return Outcome("error", 1, describe_exception(exc))
        return outcome

    def run_bash(self, request: Request) -> Outcome:
        try:
            child = subprocess.Popen(["bash", "-c", request.code, "bash", *request.args],
                                     cwd=self.data_dir, stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            return Outcome("error", 127, describe_exception(exc))
        try:
            returncode = child.wait(timeout=request.timeout_ms / 1000)
        except subprocess.TimeoutExpired:
            return Outcome("timeout", TIMEOUT_EXIT_CODE, "Time limit exceeded")
        finally:
            kill_leftovers({self.pid, child.pid})
        return Outcome() if returncode == 0 else signal_outcome(returncode)


def is_within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def seed_matplotlib_cache() -> None:
    """Copies the font cache built into the image into the writable MPLCONFIGDIR.

    The root filesystem is read-only and MPLCONFIGDIR lives on a fresh tmpfs, so without this
    matplotlib would rebuild its font list on every container start.
    """
    baked = Path(REPL_FILE).parent / "matplotlib"
    target = os.environ.setdefault("MPLCONFIGDIR", os.path.join(tempfile.gettempdir(), "matplotlib"))
    os.environ.setdefault("MPLBACKEND", "Agg")
    if not baked.is_dir():
        return
    try:
        os.makedirs(target, exist_ok=True)
        for source in baked.iterdir():
            destination = os.path.join(target, source.name)
            if source.is_file() and not os.path.exists(destination):
                shutil.copyfile(source, destination)  # a copy, so matplotlib may rewrite it
    except OSError as exc:
        log(f"matplotlib font cache not copied: {exc}")


def take_over_fds() -> tuple[int, int]:
    """Keeps private copies of stdin and stdout for the protocol and of stderr for the log.

    Until the captures are attached, fd 1 points at the log, so that output during the
    pre-imports cannot reach the protocol channel.
    """
    global _log_fd
    proto_in, proto_out, _log_fd = os.dup(0), os.dup(1), os.dup(2)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_fd, 0)
    os.close(null_fd)
    os.dup2(2, 1)
    return proto_in, proto_out


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="kiln sandbox REPL server")
    parser.add_argument("--no-preload", action="store_true", help="skip the pre-imports")
    parser.add_argument("--once", action="store_true", help="serve one exec request, then exit")
    parser.add_argument("--data-dir", default="/mnt/data", help="working directory of user code")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    sys.dont_write_bytecode = True
    data_dir = os.path.realpath(options.data_dir)
    os.makedirs(data_dir, exist_ok=True)
    os.chdir(data_dir)
    try:
        os.setsid()  # so that what user code starts shares our session, even once orphaned
    except OSError:
        pass  # already a process group leader (under Docker's init): the group does the same
    proto_in, proto_out = take_over_fds()
    server = Server(data_dir, not options.no_preload, options.once, proto_in, proto_out)
    try:
        server.serve()
    except BrokenPipeError:
        log("the protocol channel was closed")
    return 0


if __name__ == "__main__":
    # os._exit: user threads and atexit hooks must not keep the sandbox alive.
    os._exit(main(sys.argv[1:]))
