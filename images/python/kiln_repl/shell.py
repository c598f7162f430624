"""IPython's language in a session: magics, shell escapes, help, and a kernel's completion.

A Python cell goes through IPython's input transformations (`%magic`, `%%cell magic`, `!cmd`,
`x = !cmd`, `obj?`, `obj??`) before the REPL compiles it; what they become calls get_ipython(),
an InteractiveShell bound to the session's namespace. The REPL still runs the cell itself, with
its own capture, limits, outputs and error semantics: the shell serves the magics, the shell
escapes, help, completion and the history names (`_N`, `_iN`, `In`, `Out`), nothing else. Its
own objects are marked as the session's untouched names, so none of them enters the state.

IPython is imported when the shell is first made (the warm-up's prime does it, in the image).
"""

from __future__ import annotations

import builtins
import re
import subprocess
import sys
import types
from typing import Any, Callable

# IPython's input history in the namespace (_i, _ii, _iii, _i00 and _iN): kept only while the
# session is live, never in its state, where every cell would change it.
INPUT_HISTORY = re.compile(r"_i(i{0,2}|\d+|00)")


def is_input_history(name: str) -> bool:
    return INPUT_HISTORY.fullmatch(name) is not None


_MISSING = object()

# The results kept as _N and Out[N], as IPython's cache_size, and the inputs kept in In.
OUTPUT_CACHE = 1000
KEPT_INPUTS = 1000

# Magics that need a terminal, a GUI or standard input, none of which a sandbox has.
NO_TERMINAL = ("debug", "pdb", "gui", "qtconsole", "edit", "ed", "notebook", "less", "more", "page",
               "killbgscripts", "autocall", "doctest_mode", "colors", "logstart", "logon")

# The ways IPython shows figures that are not inline: kiln shows every figure inline.
INLINE = (None, "", "inline", "auto")


def make_shell_class() -> type:
    """InteractiveShell with what a sandbox can do: a shell escape's output goes where the
    run's output is captured, figures stay kiln's, help is printed, and what needs a terminal
    says so."""
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.text import LSString, SList

    class KilnShell(InteractiveShell):
        def init_user_ns(self) -> None:
            super().init_user_ns()
            # exit(), quit() and open() stay Python's: SystemExit ends a run, as without IPython.
            for name in ("exit", "quit", "open"):
                self.user_ns.pop(name, None)
                self.user_ns_hidden.pop(name, None)

        def system(self, cmd: str) -> None:
            """!cmd: bash, its output into the run's, its exit status in _exit_code."""
            expanded = self.var_expand(cmd, depth=1)
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            done = subprocess.run(expanded, shell=True, executable="/bin/bash", stdin=subprocess.DEVNULL)
            self.user_ns["_exit_code"] = done.returncode

        system_piped = system
        system_raw = system

        def getoutput(self, cmd: str, split: bool = True, depth: int = 0) -> Any:
            """x = !cmd: bash's output, as IPython's SList (split) or LSString."""
            expanded = self.var_expand(cmd, depth=depth + 1)
            done = subprocess.run(expanded, shell=True, executable="/bin/bash", stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            out = done.stdout.decode("utf-8", "replace")
            return SList(out.splitlines()) if split else LSString(out)

        def enable_matplotlib(self, gui: str | None = None) -> tuple[str, str]:
            """%matplotlib: kiln draws every figure inline already."""
            if gui not in INLINE:
                raise UsageError(f"kiln shows figures inline only: %matplotlib {gui} is not available")
            return "inline", "inline"

        def enable_gui(self, gui: str | None = None) -> None:
            if gui not in INLINE:
                raise UsageError(f"kiln has no GUI event loop: %gui {gui} is not available")

        def debugger(self, force: bool = False) -> None:
            raise UsageError("the debugger needs standard input, which kiln's sandboxes do not have")

        def ask_yes_no(self, prompt: str, default: Any = None, interrupt: Any = None) -> bool:
            raise UsageError(f"{prompt!r} needs an answer on standard input, which kiln's sandboxes do not have; "
                             "use the magic's -f option")

    return KilnShell


class Shell:
    """The session's IPython, made on first use. The REPL calls transform on each cell's source,
    then begin, result (for a cell's final value) and end around the run."""

    def __init__(self, namespace: dict[str, Any], module: types.ModuleType,
                 on_made: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.namespace, self.module = namespace, module
        self.on_made = on_made  # hears the names the shell put in the namespace, once made
        self._shell: Any = None
        self._own: set[str] = set()  # the names the shell itself puts in the namespace
        self._transformer: Any = None
        self.xmode_set = False  # %xmode was used: tracebacks are IPython's, in its mode

    @property
    def shell(self) -> Any:
        if self._shell is None:
            self._shell = self._make()
            if self.on_made is not None:
                self.on_made(self.owned())
        return self._shell

    @property
    def made(self) -> bool:
        return self._shell is not None

    def _make(self) -> Any:
        from traitlets.config import Config

        config = Config()
        config.HistoryManager.enabled = False  # no history database in the sandbox
        config.HistoryManager.hist_file = ":memory:"
        config.InteractiveShell.colors = "NoColor"
        config.InteractiveShell.autocall = 0
        config.InteractiveShell.xmode = "Context"
        config.Completer.use_jedi = True
        before = {name: self.namespace[name] for name in ("_", "__", "___") if name in self.namespace}
        shell = make_shell_class()(config=config, user_module=self.module, user_ns=self.namespace)
        self._own = set(shell.user_ns_hidden)
        for name in ("_", "__", "___"):  # the display hook's empty ones: the REPL keeps these
            self.namespace.pop(name, None)
        self.namespace.update(before)
        shell.set_hook("show_in_pager", show_in_pager)
        for name in NO_TERMINAL:
            shell.register_magic_function(no_terminal(name), magic_kind="line", magic_name=name)
        xmode = shell.find_line_magic("xmode")

        def tracked_xmode(line: str) -> Any:
            self.xmode_set = True
            return xmode(line)

        shell.register_magic_function(tracked_xmode, magic_kind="line", magic_name="xmode")
        # Loaded now, so that %config InlineBackend.* finds the configurable a notebook's
        # cells set; kiln's own backend draws the figures.
        try:
            import matplotlib_inline.backend_inline  # noqa: F401
        except ImportError:
            pass
        return shell

    def owned(self) -> dict[str, Any]:
        """The names the shell put in the namespace that still hold its objects: the session's
        untouched names (not the pre-imports hide added, nor a name the user bound anew)."""
        shell = self.shell
        return {name: value for name, value in shell.user_ns_hidden.items()
                if name in self._own and self.namespace.get(name, _MISSING) is value}


    def hide(self, names: dict[str, Any]) -> None:
        """Keeps names (the pre-imports) out of %who, as a kernel keeps its own."""
        self.shell.user_ns_hidden.update(names)

    def transform(self, code: str) -> str:
        """The cell's source as IPython runs it: magics and escapes become calls of the shell."""
        if self._transformer is None:
            from IPython.core.inputtransformer2 import TransformerManager

            self._transformer = TransformerManager()
        return str(self._transformer.transform_cell(code))

    def begin(self, raw: str, source: str) -> None:
        """A cell starts: its input goes into In and _iN, and the shell's events fire."""
        shell = self.shell
        history = shell.history_manager
        history.store_inputs(shell.execution_count, source, raw)
        history.db_input_cache.clear()  # there is no history database to write it to
        old = shell.execution_count - KEPT_INPUTS
        if old > 0:  # the oldest inputs go, their places kept: In[N] is still cell N's
            history.input_hist_parsed[old] = history.input_hist_raw[old] = ""
            self.namespace.pop(f"_i{old}", None)
        shell.events.trigger("pre_execute")
        shell.events.trigger("pre_run_cell", execution_info(raw))

    def result(self, value: Any) -> None:
        """A cell's final value as _N and Out[N] (the REPL moves _, __ and ___ itself); past
        OUTPUT_CACHE values the oldest goes, from both."""
        shell = self.shell
        count = shell.execution_count
        outputs = shell.history_manager.output_hist
        outputs[count] = value
        self.namespace[f"_{count}"] = value
        while len(outputs) > OUTPUT_CACHE:
            oldest = min(outputs)
            del outputs[oldest]
            self.namespace.pop(f"_{oldest}", None)

    def end(self, raw: str, error: BaseException | None) -> None:
        """A cell ended: the shell's events fire, and the count moves on."""
        shell = self.shell
        shell.events.trigger("post_execute")
        shell.events.trigger("post_run_cell", execution_result(raw, error))
        shell.execution_count += 1
        if self.on_made is not None:
            self.on_made(self.owned())  # %reset makes them anew

    def forget(self) -> None:
        """Forgets the cells run so far (the warm-up's): the next one is cell 1."""
        shell = self.shell
        history = shell.history_manager
        for name in [name for name in self.namespace if is_input_history(name) or RESULT.fullmatch(name)]:
            del self.namespace[name]
        del history.input_hist_parsed[1:], history.input_hist_raw[1:]
        history.output_hist.clear()
        history._i00 = history._i = history._ii = history._iii = ""
        shell.execution_count = 1

    def format_error(self, exc: BaseException) -> str | None:
        """The traceback as IPython writes it in the mode %xmode set; None when the cell never
        set one (kiln's own format then)."""
        if not self.xmode_set:
            return None
        try:
            lines = self.shell.InteractiveTB.structured_traceback(type(exc), exc, exc.__traceback__)
            return "\n".join(lines) + "\n"
        except Exception:
            return None

    def complete(self, code: str, cursor_pos: int) -> dict[str, Any]:
        """A complete_request's reply, as ipykernel makes it: IPython's completer (with jedi)."""
        from IPython.core.completer import provisionalcompleter, rectify_completions

        cursor_pos = max(0, min(cursor_pos, len(code)))
        with provisionalcompleter():
            found = list(rectify_completions(code, self.shell.Completer.completions(code, cursor_pos)))
        start = found[0].start if found else cursor_pos
        end = found[0].end if found else cursor_pos
        types_ = [{"start": c.start, "end": c.end, "text": c.text, "type": c.type, "signature": c.signature}
                  for c in found]
        return {"status": "ok", "matches": [c.text for c in found], "cursor_start": start, "cursor_end": end,
                "metadata": {"_jupyter_types_experimental": types_}}

    def inspect(self, code: str, cursor_pos: int, detail_level: int = 0) -> dict[str, Any]:
        """An inspect_request's reply: IPython's inspector on the name at the cursor."""
        from IPython.utils.tokenutil import token_at_cursor

        name = token_at_cursor(code, max(0, min(cursor_pos, len(code))))
        try:
            data = self.shell.object_inspect_mime(name, detail_level=detail_level)
        except KeyError:  # nothing by that name
            data = {}
        if not self.shell.enable_html_pager:
            data.pop("text/html", None)
        return {"status": "ok", "found": bool(data), "data": data, "metadata": {}}

    def is_complete(self, code: str) -> dict[str, Any]:
        """An is_complete_request's reply, by IPython's own reading of the cell."""
        status, indent = self.shell.input_transformer_manager.check_complete(code)
        reply: dict[str, Any] = {"status": status}
        if status == "incomplete":
            reply["indent"] = " " * (indent or 0)
        return reply

    @property
    def execution_count(self) -> int:
        return int(self.shell.execution_count) if self._shell is not None else 1

    @execution_count.setter
    def execution_count(self, count: int) -> None:
        """Goes on from count (a restored session): In holds an empty input for each cell it
        did not see, so that In[N] is still cell N's."""
        shell = self.shell
        shell.execution_count = count
        for history in (shell.history_manager.input_hist_parsed, shell.history_manager.input_hist_raw):
            history.extend([""] * max(0, count - len(history)))


# The session's shell, for get_ipython() before the shell is made, for the state's settings
# and for the host's completions (kiln_repl.introspect).
CURRENT: Shell | None = None


def install(shell: Shell) -> None:
    """Makes shell the session's: get_ipython() reaches it (made on first call) until the
    shell puts its own in the namespace."""
    global CURRENT
    CURRENT = shell
    builtins.get_ipython = lambda: shell.shell.get_ipython()  # type: ignore[attr-defined]


def count() -> int | None:
    """The session's next execution count, None while its shell is not made (a setting)."""
    return CURRENT.execution_count if CURRENT is not None and CURRENT.made else None


def set_count(value: int) -> None:
    """Goes on from a restored count, or past the results the state holds when that count is
    older (a state stored unchanged keeps the count it was written with)."""
    if CURRENT is None:
        return
    results = [int(name[1:]) for name in CURRENT.namespace if RESULT.fullmatch(name)]
    CURRENT.execution_count = max(int(value), max(results, default=0) + 1)


RESULT = re.compile(r"_\d+")


def no_terminal(name: str) -> Any:
    def refuse(line: str = "") -> None:
        from IPython.core.error import UsageError

        raise UsageError(f"%{name} needs a terminal or standard input, which kiln's sandboxes do not have")

    return refuse


def show_in_pager(shell: Any, data: Any, start: int = 0, screen_lines: int = 0) -> None:
    """Help (obj?, obj??) and other paged text: printed, as there is no pager to page it in."""
    text = data.get("text/plain", "") if isinstance(data, dict) else str(data)
    lines = text.splitlines()[start:]
    sys.stdout.write("\n".join(lines) + "\n")


def execution_info(raw: str) -> Any:
    from IPython.core.interactiveshell import ExecutionInfo

    return ExecutionInfo(raw, store_history=True, silent=False, shell_futures=True, cell_id=None)


def execution_result(raw: str, error: BaseException | None) -> Any:
    from IPython.core.interactiveshell import ExecutionResult

    result = ExecutionResult(execution_info(raw))
    result.error_in_exec = error
    return result
