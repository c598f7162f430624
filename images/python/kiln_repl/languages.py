"""Languages run as programs: bash, which the REPL knows, and those of a table in the image.

Python runs in the REPL's own process (server, running). Every other language is programs the
REPL starts, each in a session (so a process group) of its own, as bash always was: interrupts
go to that group, the deadline and the end of the run kill it. bash gets the code on its command
line. The languages of the image's table (languages.json beside the server, /opt/kiln in the
polyglot image; its format is below) get it in a source file in a private build
directory under /tmp, never in the data directory, so that neither the source nor what the
compiler leaves comes back as a file of the run. Their compile commands run there, in order;
the first that fails ends the run as a compile error. The run command then runs in the data
directory with the request's args.

/tmp is mounted noexec in the sandbox, so a program built there cannot be started from its file:
it is copied into a memfd and started from that.

The table is one JSON object; each key is a language name as the host sends it in "lang", each
value an object of:

  file           the source file's name ("main.c"): the code is written there
  compile        optional: a list of commands, run in order in the build directory, their stdout
                 and stderr both going to the run's stderr; the first that fails ends the run
                 as a compile error: status error, the compiler's exit code, and the first line
                 of its output that matches "error" as the one-line error
  run            the command that runs the program, in the data directory, with stdin empty
  env            optional: variables added to the environment of all of them
  error          optional: a regular expression that finds the one-line error in a compiler's
                 output (default: a line that says "error")
  compile_error  optional: for a language that compiles as it runs (java's source launcher, php),
                 a regular expression that, found in a failed run's stderr, makes the failure a
                 compile error as above rather than "Exit code N"

A command is a list of strings, the program first. In commands and env values, {src} is the
source file's path, {file} its name, {build} the build directory and {code} the code itself; in
run, an element "{args}" stands for the request's args, each its own argument. A program in the
build directory ({build}/main) is one the compile commands built. A language whose programs are
not installed, or whose row is not valid, is left out (and logged): the ready frame lists what
the REPL found.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

from kiln_repl.files import is_within
from kiln_repl.interrupts import CANCELLED_EXIT_CODE, Interrupter
from kiln_repl.log import Logger
from kiln_repl.processes import kill_leftovers
from kiln_repl.protocol import NATIVE_LANGUAGES, Request
from kiln_repl.running import SERVER_HOME, TIMEOUT_EXIT_CODE, Outcome, describe_exception, one_line, signal_outcome

TABLE_PATH = os.path.join(SERVER_HOME, "languages.json")
NAME = re.compile(r"[a-z][a-z0-9_+-]{0,31}")
FIELDS = frozenset({"file", "compile", "run", "env", "error", "compile_error"})
PLACEHOLDER = re.compile(r"\{(src|file|build|code)\}")
ARGS = "{args}"  # alone as an element of run: the request's args, each its own element
# The one-line error of a failed compile: the first line of its output that matches the
# language's "error" expression, or this one; failing both, the first line that says anything.
DEFAULT_ERROR = r"(?i)\berror\b"
ERROR_SCAN_BYTES = 1 << 20  # how much of a compiler's output is searched for that line

# What a run's stderr held so far, once everything written before the call has been read.
StderrKept = Callable[[], bytes]
# Waits for a started program: its return code, subprocess.TimeoutExpired past the seconds.
Wait = Callable[["subprocess.Popen[bytes]", float], int]


@dataclass(frozen=True)
class Language:
    """How one language runs: a row of the table, or bash."""

    name: str
    run: tuple[str, ...]
    file: str | None = None
    compile: tuple[tuple[str, ...], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    error: str = DEFAULT_ERROR
    compile_error: str | None = None

    def tools(self) -> list[str]:
        """The programs the language needs, the first word of each command that is not a
        program the run builds."""
        return [command[0] for command in (*self.compile, self.run) if not PLACEHOLDER.search(command[0])]


BASH = Language("bash", run=("bash", "-c", "{code}", "bash", ARGS))


class TableError(ValueError):
    """A row of the table that cannot be used; the REPL logs it and goes on without it."""


def load_table(path: str, logger: Logger) -> list[Language]:
    """The languages of the table at path whose programs are installed, in the table's order.

    No table is no language. A table that does not parse, a row that is not valid and a row
    whose programs are missing are logged and left out: the REPL serves what it can.
    """
    try:
        with open(path, "rb") as handle:
            table = json.load(handle)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        logger.log(f"the language table {path} cannot be read: {exc}")
        return []
    if not isinstance(table, dict):
        logger.log(f"the language table {path} is not a JSON object")
        return []
    languages = []
    for name, row in table.items():
        try:
            language = parse_language(name, row)
        except TableError as exc:
            logger.log(f"language {name!r} of {path} left out: {exc}")
            continue
        missing = [tool for tool in language.tools() if shutil.which(tool) is None]
        if missing:
            logger.log(f"language {name!r} left out: {', '.join(missing)} not installed")
            continue
        languages.append(language)
    return languages


def parse_language(name: str, row: Any) -> Language:
    """One row of the table; TableError says what is wrong with it."""
    if not NAME.fullmatch(name) or name in NATIVE_LANGUAGES:
        raise TableError("not a name the table may define")
    if not isinstance(row, dict):
        raise TableError("not a JSON object")
    unknown = sorted(set(row) - FIELDS)
    if unknown:
        raise TableError(f"unknown fields {', '.join(unknown)}")
    file = row.get("file")
    if file is not None and (not isinstance(file, str) or not file or "/" in file or file in (".", "..")):
        raise TableError("file must be a plain file name")
    compile_ = row.get("compile") or []
    if not isinstance(compile_, list):
        raise TableError("compile must be a list of commands")
    commands = tuple(command_of(command, "compile", args_allowed=False) for command in compile_)
    run = command_of(row.get("run"), "run", args_allowed=True)
    env = row.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(key, str) and key and "=" not in key and isinstance(value, str)
                                            for key, value in env.items()):
        raise TableError("env must map names to strings")
    uses_code = any("{code}" in word for command in (*commands, run) for word in command)
    if file is None and not uses_code:
        raise TableError("the code goes nowhere: give file, or {code} in a command")
    if file is None and any("{src}" in word or "{file}" in word for command in (*commands, run) for word in command):
        raise TableError("{src} and {file} need file")
    error = row.get("error") or DEFAULT_ERROR
    compile_error = row.get("compile_error")
    for field, pattern in (("error", error), ("compile_error", compile_error)):
        if pattern is None:
            continue
        if not isinstance(pattern, str):
            raise TableError(f"{field} must be a regular expression")
        try:
            re.compile(pattern, re.MULTILINE)
        except re.error as exc:
            raise TableError(f"{field} is not a valid regular expression: {exc}") from None
    return Language(name, run, file, commands, tuple(env.items()), error, compile_error)


def command_of(value: Any, field: str, args_allowed: bool) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(word, str) for word in value):
        raise TableError(f"{field} must be a command: a list of strings, the program first")
    if value[0] == ARGS or (ARGS in value and not args_allowed):
        raise TableError(f"{ARGS} can only be an argument of run")
    return tuple(value)


class ProgramRun:
    """One run of a language other than Python: its private build directory, its compile
    commands and its program, all within the request's one deadline."""

    def __init__(self, language: Language, request: Request, data_dir: str, interrupter: Interrupter,
                 logger: Logger, stderr_kept: StderrKept, env: dict[str, str] | None = None,
                 wait: Wait | None = None) -> None:
        self.language = language
        self.request = request
        self.data_dir = data_dir
        self.interrupter = interrupter
        self.logger = logger
        self.stderr_kept = stderr_kept
        self.base_env = dict(os.environ) if env is None else env
        self.wait: Wait = wait or (lambda child, seconds: child.wait(timeout=seconds))
        self.deadline = 0.0
        self.values: dict[str, str] = {}

    def run(self) -> Outcome:
        self.deadline = time.monotonic() + self.request.timeout_ms / 1000
        build = tempfile.mkdtemp(prefix="kiln-run-")
        try:
            return self._run_in(build)
        finally:
            shutil.rmtree(build, ignore_errors=True)

    def _run_in(self, build: str) -> Outcome:
        language = self.language
        self.values = {"build": build, "code": self.request.code}
        if language.file is not None:
            source = os.path.join(build, language.file)
            try:
                # A lone surrogate, which JSON allows, becomes U+FFFD (the compiler says the rest).
                with open(source, "x", encoding="utf-8", errors="replace") as handle:
                    handle.write(self.request.code)
            except OSError as exc:
                return Outcome("error", 1, f"the source file could not be written: {describe_exception(exc)}")
            self.values.update(src=source, file=language.file)
        env = {**self.base_env, **{key: self.expand(value) for key, value in language.env}}
        for command in language.compile:
            outcome = self.step([self.expand(word) for word in command], build, env, compiling=True)
            if outcome is not None:
                return outcome
        argv: list[str] = []
        for word in language.run:
            argv.extend(self.request.args if word == ARGS else [self.expand(word)])
        outcome = self.step(argv, self.data_dir, env, compiling=False)
        assert outcome is not None
        return outcome

    def expand(self, word: str) -> str:
        return PLACEHOLDER.sub(lambda match: self.values.get(match.group(1), match.group(0)), word)

    def step(self, argv: list[str], cwd: str, env: dict[str, str], compiling: bool) -> Outcome | None:
        """Runs one command in a session of its own, within what is left of the deadline.

        A compile command's output, stdout and stderr both, goes to the run's stderr; it
        returns None when it succeeds. The run command writes to the run's stdout and stderr.
        """
        if self.interrupter.pending:
            return Outcome("cancelled", CANCELLED_EXIT_CODE, "Interrupted")
        watch_stderr = compiling or self.language.compile_error is not None
        offset = len(self.stderr_kept()) if watch_stderr else 0
        try:
            child = start(argv, cwd, env, self.values.get("build", ""), stdout=2 if compiling else None)
        except (OSError, ValueError) as exc:  # ValueError: a NUL or a lone surrogate in code or args
            return Outcome("error", 127, describe_exception(exc))
        self.interrupter.program_started(child.pid)  # its own session, so its own process group
        try:
            returncode = self.wait(child, max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return Outcome("timeout", TIMEOUT_EXIT_CODE, "Time limit exceeded")
        finally:
            self.interrupter.program_ended()
            kill_leftovers({os.getpid(), child.pid}, self.logger)
        if returncode == 0:
            return None if compiling else Outcome()
        if compiling and returncode < 0:
            return signal_outcome(returncode)  # the compiler was killed: no error of the code's
        if compiling or (returncode > 0 and self.failed_to_compile(offset)):
            output = self.stderr_kept()[offset:][:ERROR_SCAN_BYTES].decode("utf-8", "replace")
            return Outcome("error", returncode, error_line(output, self.language.error, returncode))
        return signal_outcome(returncode)

    def failed_to_compile(self, offset: int) -> bool:
        """Whether a failed run's stderr says that its code did not compile (java)."""
        if self.language.compile_error is None:
            return False
        output = self.stderr_kept()[offset:].decode("utf-8", "replace")
        return re.search(self.language.compile_error, output, re.MULTILINE) is not None


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def error_line(output: str, pattern: str, returncode: int) -> str:
    """The one-line error of a failed compile: the first line of the compiler's output that
    matches pattern (or DEFAULT_ERROR), else its first line that says anything."""
    lines = [ANSI_ESCAPE.sub("", line).strip() for line in output.splitlines()]
    lines = [line for line in lines if line]
    for expression in dict.fromkeys((pattern, DEFAULT_ERROR)):
        compiled = re.compile(expression)
        for line in lines:
            if compiled.search(line):
                return one_line(line)
    return one_line(lines[0]) if lines else f"Compile error (exit code {returncode})"


def start(argv: list[str], cwd: str, env: dict[str, str], build: str, stdout: int | None) -> subprocess.Popen[bytes]:
    """Starts argv in a new session with stdin on /dev/null. A program that the run built
    (argv[0] in the build directory, on the noexec /tmp) is started from a memfd copy."""
    executable: str | None = None
    memfd = -1
    try:
        if build and is_within(os.path.abspath(argv[0]), build) and os.path.isfile(argv[0]):
            memfd = os.memfd_create(os.path.basename(argv[0]))
            with open(argv[0], "rb") as source, open(memfd, "wb", closefd=False) as copy:
                shutil.copyfileobj(source, copy, 1 << 20)
            os.fchmod(memfd, 0o755)
            executable = f"/proc/self/fd/{memfd}"  # the child's own descriptor, passed below
        return subprocess.Popen(argv, executable=executable, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=stdout, start_new_session=True, pass_fds=() if memfd < 0 else (memfd,))
    finally:
        if memfd >= 0:
            os.close(memfd)

