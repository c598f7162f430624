"""The Server: it owns the user namespace and the process, and answers requests one at a time.

It runs as the sandbox container's main process: it pre-imports the data stack once, sends one
ready frame, then serves framed requests (a JSON header, then raw state and file bytes) on a
private copy of stdin and answers on a private copy of stdout. User code never sees those two
channels: its fd 0 reads /dev/null and its fds 1 and 2 are capture pipes whose contents become
the response's stdout and stderr.
The REPL's own diagnostics go to a private copy of stderr, which the host logs.

User code runs in the main thread. Requests are read on a thread of their own (channel), so that
an interrupt is seen while code runs; events are written by a thread of the run's (events).
"""

from __future__ import annotations

import argparse
import asyncio
import builtins
import contextlib
import fcntl
import importlib
import linecache
import os
import platform
import sys
import threading
import time
import traceback
import types
from typing import Any, Callable

from kiln_repl.agent import Agent
from kiln_repl.capture import Capture, StdStreams, decode_output
from kiln_repl.channel import Channel
from kiln_repl.egress import PACKAGES_BASE, site_packages, start_egress
from kiln_repl.events import EventStream
from kiln_repl.figures import FIGURES
from kiln_repl.files import (PathRefused, Snapshot, collect_files, is_within, remove_file, snapshot,
                             write_input_file)
from kiln_repl.framing import Refused
from kiln_repl.heap import WARM_HEAP_ENV, configure, warm, warm_size
from kiln_repl.interrupts import CANCELLED_EXIT_CODE, Interrupter
from kiln_repl.languages import BASH, TABLE_PATH, Language, ProgramRun, load_table
from kiln_repl.log import Logger
from kiln_repl.packages import Packages
from kiln_repl.preload import (MPL_BACKEND, PRELOAD_ENV, STATE_CODECS, VERSIONED, collector_paused, preload_plan,
                               seed_matplotlib_cache)
from kiln_repl.processes import RLIMITS_ENV, apply_rlimits, kill_leftovers
from kiln_repl.protocol import InputFile, Limits, Request, Result, ready_message
from kiln_repl import introspect  # noqa: F401  (run by the host between cells: loaded before user code)
from kiln_repl.rich import OUTPUTS, bundle, encode_outputs
from kiln_repl.rich import install as install_rich
from kiln_repl.running import (SERVER_HOME, SOURCES, TIMEOUT_EXIT_CODE, USER_FILENAME, Deadline, Outcome,
                               TimeLimitExceeded, cap_text, cell_filename, compile_cell, describe_exception,
                               exit_outcome, one_line, register_source, user_traceback)
from kiln_repl.settings import Settings
from kiln_repl import shell as ipython
from kiln_repl.state import HISTORY, UNCHANGED, Loaded, bind_namespace, capture_state, restore_state
from kiln_repl.tools import AsyncTools, Broker, ShellTools, evaluate, run_coroutine


# The text/plain of a figure's output, as a notebook shows a figure it drew.
FIGURE_TEXT = "<Figure>"
# The cells whose source stays in linecache, for the tracebacks and help of what they defined.
KEPT_SOURCES = 1000


class Server:
    """Holds the user namespace and serves requests on the private protocol fds."""

    def __init__(self, data_dir: str, preload: bool, once: bool, proto_in: int, proto_out: int,
                 logger: Logger, languages_table: str = TABLE_PATH, await_hello: bool = False) -> None:
        self.data_dir = data_dir
        self.once = once
        # Where the host attaches only once the process runs (a Kubernetes Pod), what the REPL
        # writes before then is lost: it stays silent until the host's hello.
        self.await_hello = await_hello
        self.logger = logger
        self.warm_heap = 0  # bytes the warm-up touches for the request (kiln_repl.heap)
        self.interrupter = Interrupter()
        self.interrupter.install()  # from now on a stray SIGINT cannot stop the REPL
        # Every language but Python runs as programs: bash, and those of the image's table.
        self.programs: dict[str, Language] = {BASH.name: BASH}
        self.programs.update((language.name, language) for language in load_table(languages_table, logger))
        self.languages = ["python", *self.programs]
        self.channel = Channel(proto_in, proto_out, self.interrupter, logger, self.languages)
        # Before the pre-imports, so that what they start sees the proxy's variables.
        way = start_egress(self.channel.send, logger, data_dir)
        self.forwarder, self.relay, self.egress = way.forwarder, way.relay, way.on
        self.relay_lock = threading.Lock()  # the agent's threads start it too
        self.packages: Packages | None = None  # what pip installs in the session, with egress on
        if self.forwarder is not None:
            self.channel.net = self.forwarder.deliver
        self.agent = Agent(self.channel.send, logger, self.proxy_env)
        self.channel.agent = self.agent.handle
        self.pid = os.getpid()
        # The user's namespace is a module's, installed as __main__ (as IPython does): what
        # pickles or looks up by module name (pickle, unittest.main, dataclasses) finds the
        # session's classes and functions there.
        main_module = types.ModuleType("__main__")
        self.namespace: dict[str, Any] = main_module.__dict__
        self.namespace["__builtins__"] = builtins
        own_main = sys.modules.get("__main__")
        sys.modules["__main__"] = main_module
        bind_namespace(self.namespace, own_main)
        self.settings = Settings()
        self.imports: set[str] = set()  # the dotted modules of the session's import statements
        # The last state captured and its token: a live session's next run is compared with
        # it when the host says (state_base) that it stored that one.
        self.captured: Loaded | None = None
        self.captured_token = ""
        self.captures = 0
        self.preloaded: dict[str, str] = {}
        self.untouched: dict[str, Any] = {}
        seed_matplotlib_cache(logger)
        if preload:
            with collector_paused():
                self.preload()
        # As with `python3 -c`, the working directory comes first. The server's home, there for
        # other processes through PYTHONPATH (see the Dockerfile), goes: the package is loaded,
        # and its modules are found through its own __path__ from now on.
        sys.path[:] = [data_dir, *(path for path in sys.path[1:] if path != SERVER_HOME)]
        if self.egress:
            # What pip installs in the session comes before the image's packages, as a user
            # site does; the directory exists from the start so that imports look there.
            packages = site_packages(data_dir)
            os.makedirs(packages, exist_ok=True)
            sys.path.insert(1, packages)
            self.packages = Packages(os.path.join(data_dir, PACKAGES_BASE))
        install_rich()
        # IPython's language (kiln_repl.shell): made at warm-up with the pre-imports, after the
        # display hook, whose display its magics then use; on first use without them.
        self.shell = ipython.Shell(self.namespace, main_module, on_made=lambda owned: self.untouched.update(owned))
        ipython.install(self.shell)
        if preload:
            with collector_paused():  # IPython's objects live as long as the pre-imports
                self.adopt_shell()
        self.stdout = Capture(1, logger)
        self.stderr = Capture(2, logger)
        self.stdout.attach()
        self.stderr.attach()
        self.streams = StdStreams()

    def preload(self) -> None:
        pairs, unknown = preload_plan(os.environ.get(PRELOAD_ENV))
        for name in unknown:
            self.logger.log(f"unknown pre-import group {name!r} in {PRELOAD_ENV}; ignored")
        for alias, module_name in pairs:
            try:
                self.namespace[alias] = importlib.import_module(module_name)
            except Exception as exc:
                self.logger.log(f"pre-import of {module_name} failed: {describe_exception(exc)}")
        if "matplotlib" in sys.modules:
            # matplotlib loads its backend when the first figure is made; loaded now, that
            # first figure costs no more than the next.
            try:
                importlib.import_module(MPL_BACKEND)
            except Exception as exc:
                self.logger.log(f"pre-import of {MPL_BACKEND} failed: {describe_exception(exc)}")
        # The state codecs too: every exec that captures state needs them, and importing
        # cloudpickle costs more than a small run (this process serves one request).
        for module_name in STATE_CODECS:
            try:
                importlib.import_module(module_name)
            except Exception as exc:
                self.logger.log(f"pre-import of {module_name} failed: {describe_exception(exc)}")
        for module_name in VERSIONED:
            if module := sys.modules.get(module_name):
                self.preloaded[module_name] = str(getattr(module, "__version__", "unknown"))
        self.untouched = {name: value for name, value in self.namespace.items() if not name.startswith("_")}

    def adopt_shell(self) -> None:
        """Makes the session's IPython (its own names become untouched: never in the state),
        the pre-imports out of %who."""
        preloaded = dict(self.untouched)
        try:
            self.shell.hide(preloaded)
        except Exception as exc:
            self.logger.log(f"IPython could not be started: {describe_exception(exc)}")

    def prime(self) -> None:
        """Runs one empty cell through the whole exec path before saying ready.

        A fresh interpreter's first run pays for code paths nothing has used yet (compile,
        capture hand-offs, the state codecs); this way the warm-up pays, not the request.
        """
        if self.shell.made:
            # A cell of IPython's history too, forgotten after: the first request's own is cell 1.
            self.execute(Request(id="", op="exec", code="pass", capture_state=True))
            self.shell.transform("%time pass")  # IPython's transformations, compiled once
            self.shell.forget()
        else:
            self.execute(Request(id="", op="exec", code="pass", capture_state=True, read_only=True))
        self.namespace.pop("_", None)

    def serve(self) -> None:
        self.prime()
        self.settings.mark_baseline()
        if self.warm_heap:
            warm(self.warm_heap)
        ready = ready_message(platform.python_version(), self.preloaded, self.languages)
        if not self.await_hello:
            self.channel.send(ready)
        self.channel.start()
        while (request := self.channel.next_request()) is not None:
            if isinstance(request, Refused):
                self.channel.send(request.message())
            elif request.op == "ping":
                self.channel.send({"id": request.id, "type": "pong"})
            elif request.op == "hello":
                self.channel.send({"id": request.id, **ready})
            else:
                result = self.execute(request)
                self.interrupter.finish()  # before the answer: the host may send the next one
                self.channel.send(result.to_message(), result.payloads())
                if self.once:
                    return

    def execute(self, request: Request) -> Result:
        result = Result(id=request.id)
        notes = self.remove_files(request.delete_files) + self.write_inputs(request.files)
        input_notes = "".join(f"{note}\n" for note in notes)
        before = snapshot(self.data_dir)
        restored: Loaded | None = None  # the state the run begins with, as the host holds it
        if request.lang != "python":
            result.state_unchanged = request.state is not None  # other languages never touch the state
        elif request.state is not None:
            loaded = restore_state(request.state, self.namespace, self.settings, self.packages)
            restored, self.imports = loaded.snapshot, self.imports | loaded.imports
            result.state_error = "; ".join(loaded.notes) or None
        elif request.state_base and request.state_base == self.captured_token:
            restored = self.captured  # a live session: the namespace is here, and the host holds its capture

        events = EventStream(request.id, self.channel.send, self.logger) if request.events else None
        if events is not None and input_notes:
            events.output("stderr", input_notes.encode())  # they start the result's stderr
        self.prepare_process(request, events)
        started = time.monotonic()
        outcome = self.run_python(request) if request.lang == "python" else self.run_program(request)
        result.duration_ms = int((time.monotonic() - started) * 1000)
        if os.getpid() != self.pid:
            os._exit(0)  # a child forked by user code fell through into the REPL
        if self.interrupter.interrupted:
            outcome = Outcome("cancelled", CANCELLED_EXIT_CODE, "Interrupted")
        if request.lang == "python" and request.figures:
            self.save_open_figures()
        outputs, output_notes = OUTPUTS.end()
        if outputs:
            result.outputs = encode_outputs(outputs)
        for note in output_notes:
            sys.stderr.write(f"kiln: {note}\n")
        self.end_run()

        cut = self.take_output(result, outcome)
        problems = self.take_files(result, before, request.limits)
        result.stderr = input_notes + result.stderr + problems
        if events is not None:
            events.close(cut, problems)  # all of them go out before the result
        if request.lang == "python" and request.capture_state:
            self.take_state(result, request, restored)
        if request.live:
            result.memory_bytes = resident_bytes()
        return result

    def take_output(self, result: Result, outcome: Outcome) -> set[str]:
        """Ends the output's capture and puts it and the outcome in result; returns the names
        of the streams that were cut."""
        out, out_dropped = self.stdout.end()
        err, err_dropped = self.stderr.end()
        result.status, result.exit_code, result.error = outcome.status, outcome.exit_code, outcome.error
        result.result = outcome.result
        result.stdout, stdout_cut = decode_output(out, out_dropped)
        result.stderr, stderr_cut = decode_output(err, err_dropped)
        result.truncated = stdout_cut or stderr_cut or outcome.result_truncated
        return {stream for stream, was_cut in (("stdout", stdout_cut), ("stderr", stderr_cut)) if was_cut}

    def take_files(self, result: Result, before: Snapshot, limits: Limits) -> str:
        """Puts the files the run wrote in result; returns the lines for stderr on those left out."""
        try:
            result.files, problems, result.deleted_files = collect_files(self.data_dir, before, limits)
        except OSError as exc:
            problems = [f"files could not be collected: {exc}"]
        result.files_error = "; ".join(problems) or None
        return "".join(f"kiln: {problem}\n" for problem in problems)

    def take_state(self, result: Result, request: Request, restored: Loaded | None) -> None:
        limits = request.limits
        result.state, notes, self.captured = capture_state(
            self.namespace, self.untouched, limits.max_state_bytes, restored, limits.max_state_raw_bytes,
            self.settings, self.imports, request.live, self.packages)
        self.captures += 1
        self.captured_token = result.state_token = f"{self.pid}-{self.captures}"
        result.state_error = "; ".join(filter(None, [result.state_error, *notes])) or None
        if result.state is UNCHANGED or (result.state is not None and result.state == request.state):
            # The host keeps the blob it sent: a run that only read its names sends none back.
            result.state, result.state_unchanged = None, True

    def remove_files(self, paths: list[str]) -> list[str]:
        notes = []
        for path in paths:
            try:
                remove_file(self.data_dir, path)
            except (PathRefused, OSError) as exc:
                notes.append(f"kiln: file {path!r} not removed: {exc}")
        return notes

    def write_inputs(self, files: list[InputFile]) -> list[str]:
        notes = []
        for item in files:
            try:
                write_input_file(self.data_dir, item)
            except (PathRefused, OSError) as exc:
                notes.append(f"kiln: input file {item.path!r} refused: {exc}")
        return notes

    def proxy_env(self) -> dict[str, str]:
        """The egress proxy's variables for a process the agent starts, or none."""
        with self.relay_lock:
            return (self.relay.ensure() if self.relay is not None else None) or {}

    def prepare_process(self, request: Request, events: EventStream | None) -> None:
        """Puts the process back into the shape a run expects, whatever the last run did, and
        starts capturing the run's output. The working directory stays where the code left
        it, as in a notebook, unless it is gone."""
        if (env := self.proxy_env()):
            os.environ.update(env)
        try:
            os.getcwd()
        except OSError:
            os.chdir(self.data_dir)
        null_fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null_fd, 0)
        os.close(null_fd)
        self.stdout.attach()
        self.stderr.attach()
        sys.stdin, sys.stdout, sys.stderr = self.streams.fresh()
        sys.argv = [USER_FILENAME, *request.args]
        self.interrupter.install()
        if request.lang == "python":
            OUTPUTS.begin(None if events is None else self.publisher(events))
        if request.lang == "python" and request.figures:
            FIGURES.begin(self.data_dir, lambda name, png: self.display(events, name, png), self.interrupter.shielded)
        # Files written since the last run can be imported. Only the data dir changes: the rest
        # of sys.path is the read-only image, and refreshing its hundreds of finders costs more
        # than the whole of a small run.
        for path, finder in list(sys.path_importer_cache.items()):
            if finder is not None and is_within(path, self.data_dir):
                finder.invalidate_caches()
        limit = request.limits.max_output_bytes
        self.stdout.begin(limit, None if events is None else events.sink("stdout"))
        self.stderr.begin(limit, None if events is None else events.sink("stderr"))

    def display(self, events: EventStream | None, name: str, png: bytes) -> None:
        """A saved figure: an output naming its file, and when the run streams, a display event
        with its PNG behind the output written before it."""
        if events is not None:
            self.sync_output()
            events.display(name, png)
        OUTPUTS.add("display_data", {"text/plain": FIGURE_TEXT}, {}, figure=name)

    def publisher(self, events: EventStream) -> Callable[[dict[str, Any]], None]:
        """What sends an output as an event, behind the output written before it."""
        def publish(item: dict[str, Any]) -> None:
            self.sync_output()
            events.bundle(item)
        return publish

    def sync_output(self) -> None:
        flush_std_streams()
        self.stdout.sync()
        self.stderr.sync()

    def save_open_figures(self) -> None:
        """Saves the figures the code left open, while its output is still captured: a note on
        a figure that could not be saved goes to its stderr."""
        try:
            notes = FIGURES.end()
        except Exception as exc:
            notes = [f"figures not saved: {describe_exception(exc)}"]
        for note in notes:
            sys.stderr.write(f"kiln: {note}\n")

    def end_run(self) -> None:
        flush_std_streams()
        keep = self.agent.pids() | ({self.relay.pid} if self.relay is not None else set())
        kill_leftovers({self.pid}, self.logger, keep=keep)

    def run_python(self, request: Request) -> Outcome:
        # A cell in IPython's language (the default) goes through its transformations and its
        # history; kiln's own reads of the namespace, and plain_python requests, do not.
        ipython = not (request.plain_python or request.read_only) and bool(request.code.strip()) and (
            self.shell.made or ipython_syntax(request.code))
        # A cell with none of IPython's forms reads the same after its transformations: they are
        # skipped, and the cell still counts in the history.
        # The history (In, _N, the execution count) is the shell's, once it is made: at warm-up,
        # or by the first cell that needs it.
        history = ipython and self.shell.made
        source = request.code
        if ipython and ipython_syntax(request.code):
            try:
                source = self.shell.transform(request.code)
            except Exception as exc:  # a cell IPython cannot read: Python's compiler says why
                self.logger.log(f"IPython's transformations failed: {describe_exception(exc)}")
                source = request.code
        # Tracebacks show the user's own lines where the transformations kept them in place.
        filename = USER_FILENAME
        if history:
            filename = cell_filename(self.shell.execution_count)
            linecache.cache.pop(cell_filename(self.shell.execution_count - KEPT_SOURCES), None)
        shown = request.code if source.count("\n") <= request.code.count("\n") + 1 else source
        register_source(shown, filename)
        try:
            cell = compile_cell(source, top_level_await=bool(request.tools), filename=filename)
        except Exception as exc:  # SyntaxError, and RecursionError or MemoryError on absurd code
            sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))
            return Outcome("error", 1, describe_exception(exc))
        if history and cell.defines:
            SOURCES.keep(filename, shown)
        outcome = Outcome()
        stubs: dict[str, Any] = {}
        raised: BaseException | None = None
        if history:
            self.shell.begin(request.code, source)
        try:
            with Deadline(request.timeout_ms / 1000) as deadline:
                if request.tools:
                    stubs = self.install_stubs(request, deadline)
                self.imports |= cell.imports
                self.interrupter.enter_cell(cell.body, cell.final)
                if request.tools:
                    value = run_coroutine(evaluate(cell.body, cell.final, self.namespace))
                else:
                    exec(cell.body, self.namespace)
                    value = None if cell.final is None else eval(cell.final, self.namespace)
                self.interrupter.leave_cell()
                if value is not None:
                    self.remember(value)
                    if history:
                        self.shell.result(value)
                    limit = request.limits.max_output_bytes
                    outcome.result, outcome.result_truncated = cap_text(repr(value), limit)
                    OUTPUTS.add("execute_result", *bundle(value, text=outcome.result))
        except TimeLimitExceeded as exc:
            outcome, raised = Outcome("timeout", TIMEOUT_EXIT_CODE, "Time limit exceeded"), exc
        except SystemExit as exc:
            outcome = exit_outcome(exc)
        except BaseException as exc:  # whatever user code raises is data, KeyboardInterrupt too
            raised = exc
            if ipython_usage(exc):
                # A magic's misuse, as IPython shows it: the message, no traceback.
                sys.stderr.write(f"UsageError: {exc}\n")
                outcome = Outcome("error", 1, one_line(f"UsageError: {exc}"))
            else:
                if not self.interrupter.interrupted:  # an interrupt's result says so, as a timeout's
                    sys.stderr.write((self.shell.format_error(exc) if ipython else None) or user_traceback(exc))
                outcome = Outcome("error", 1, describe_exception(exc))
        finally:
            self.interrupter.leave_cell()
            if history:
                self.shell.end(request.code, raised)
            for name, stub in stubs.items():  # the stubs are the run's, not the session's
                if self.namespace.get(name) is stub:
                    del self.namespace[name]
        self.interrupter.install()  # at once, in case the code replaced the handler
        return outcome

    def remember(self, value: Any) -> None:
        """Makes value the last result, _, and moves the two before it to __ and ___."""
        last, second, third = HISTORY
        for newer, older in ((second, third), (last, second)):
            if newer in self.namespace:
                self.namespace[older] = self.namespace[newer]
        self.namespace[last] = value

    def install_stubs(self, request: Request, deadline: Deadline) -> dict[str, Any]:
        """Puts an async function per tool, and asyncio, in the namespace; returns the stubs."""
        broker = Broker(request, self.channel.send, self.channel.tool_results, deadline.stopped)
        tools = AsyncTools(broker)
        stubs = {tool.function: tools.stub(tool) for tool in request.tools}
        self.namespace.update(stubs)
        self.namespace.setdefault("asyncio", asyncio)
        return stubs

    def run_program(self, request: Request) -> Outcome:
        """Runs bash, or a language of the table: its compile commands, then its program
        (languages). Only bash gets tools (parse_request refuses them elsewhere)."""
        tools = None
        try:
            if request.tools:
                broker = Broker(request, self.channel.send, self.channel.tool_results, contextlib.nullcontext)
                tools = ShellTools(broker, request.tools, self.logger)
        except OSError as exc:
            return Outcome("error", 127, describe_exception(exc))
        try:
            run = ProgramRun(self.programs[request.lang], request, self.data_dir, self.interrupter, self.logger,
                             self.stderr.kept, env=None if tools is None else tools.env(),
                             wait=None if tools is None else tools.wait)
            return run.run()
        finally:
            if tools is not None:
                tools.close()


def ipython_syntax(code: str) -> bool:
    """Whether code may hold IPython's syntax: each of its forms (%magic, !cmd, obj?, a pasted
    prompt, a first line indented) needs one of these signs. A REPL without the pre-imports
    imports IPython only for such a cell."""
    return ("%" in code or "!" in code or "?" in code or ">>>" in code or "In [" in code
            or code[:1].isspace())


def ipython_usage(exc: BaseException) -> bool:
    """Whether exc is IPython's UsageError: a magic that does not exist, or misused."""
    return any(cls.__name__ == "UsageError" and cls.__module__ == "IPython.core.error" for cls in type(exc).__mro__)


def resident_bytes() -> int:
    """The process's resident memory, from /proc; 0 when it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def flush_std_streams() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass


def take_over_fds() -> tuple[int, int, int]:
    """Keeps private copies of stdin and stdout for the protocol and of stderr for the log.

    Returns (protocol in, protocol out, log). Until the captures are attached, fd 1 points at
    the log, so that output during the pre-imports cannot reach the protocol channel.
    """
    proto_in, proto_out, log_fd = os.dup(0), os.dup(1), os.dup(2)
    for fd in (proto_in, proto_out):
        widen_pipe(fd)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_fd, 0)
    os.close(null_fd)
    os.dup2(2, 1)
    return proto_in, proto_out, log_fd


PIPE_BYTES = 1 << 20  # Linux's default pipe-max-size: what an unprivileged process may ask for


def widen_pipe(fd: int) -> None:
    """Asks for a 1 MiB pipe where the channel is a pipe (Docker's attach, an exec), so that
    a state, a file or the code's downloads cross it in fewer reads and writes than with the
    64 KiB default. Anything else (a socket, a terminal), or a refusal, leaves it as it is."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (OSError, AttributeError):
        pass


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="kiln sandbox REPL server")
    parser.add_argument("--no-preload", action="store_true", help="skip the pre-imports")
    parser.add_argument("--once", action="store_true", help="serve one exec request, then exit")
    parser.add_argument("--data-dir", default="/mnt/data", help="working directory of user code")
    parser.add_argument("--await-hello", action="store_true",
                        help="send the ready frame only in answer to a hello request, not at start")
    parser.add_argument("--languages", default=TABLE_PATH, metavar="FILE",
                        help="the table of languages run as programs (default: languages.json beside the server)")
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
    proto_in, proto_out, log_fd = take_over_fds()
    logger = Logger(log_fd)
    apply_rlimits(os.environ.pop(RLIMITS_ENV, None), logger)
    # Before the server starts its threads: malloc's arenas are chosen as threads first use it.
    heap = warm_size(os.environ.get(WARM_HEAP_ENV))
    heap_ready = configure(heap, logger)
    server = Server(data_dir, not options.no_preload, options.once, proto_in, proto_out, logger, options.languages,
                    options.await_hello)
    if heap_ready:
        server.warm_heap = heap
    try:
        server.serve()
    except BrokenPipeError:
        logger.log("the protocol channel was closed")
    except BaseException:
        # fd 2 is a capture pipe by now: the interpreter's own report would be lost.
        logger.log("the server failed: " + traceback.format_exc().replace("\n", " | "))
        raise
    return 0
