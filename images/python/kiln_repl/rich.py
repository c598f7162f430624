"""Rich outputs: what code displays, and a cell's last value, as the MIME bundles a notebook shows
(docs/protocol.md, Outputs).

A bundle maps MIME types to content: text for text types, base64 for images, an object for JSON,
as Jupyter's messages carry them. An object's bundle comes from its `_repr_mimebundle_` and its
`_repr_*_` methods (pandas' `_repr_html_`, IPython.display's HTML, Markdown, Image, JSON...), and
always has `text/plain`. A figure the run showed is an output too: its PNG travels as the file the
run saved (the host puts it in the bundle), and the bundle names that file.

`display` is a builtin, as in a notebook, and IPython.display's `display` is this one when IPython
is installed (it prints otherwise, having no kernel to publish to).
"""

from __future__ import annotations

import base64
import builtins
import importlib.abc
import importlib.machinery
import json
import sys
import threading
from types import ModuleType
from typing import Any, Callable, Sequence

# The formatters a notebook asks an object for, in the order it prefers them.
METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("text/latex", "_repr_latex_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
)
BINARY = {"image/png", "image/jpeg", "image/gif", "application/pdf"}
MAX_BUNDLE = 8 << 20  # the most one bundle may take as JSON (protocol.MaxBundleBytes on the host)
MAX_RUN = 16 << 20  # the most all of a run's bundles may take (protocol.MaxOutputsBytes)

Publish = Callable[[dict[str, Any]], None]


class Outputs:
    """A run's outputs, in the order shown; each also goes to publish (the run's events) at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self._size = 0
        self._publish: Publish | None = None
        self._on = False

    def begin(self, publish: Publish | None) -> None:
        with self._lock:
            self.items, self.notes, self._size, self._publish, self._on = [], [], 0, publish, True

    def end(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The run's outputs and the notes on those cut; outputs are off until the next begin."""
        with self._lock:
            self._on, self._publish = False, None
            return self.items, self.notes

    @property
    def on(self) -> bool:
        return self._on

    def add(self, kind: str, data: dict[str, Any], metadata: dict[str, Any], figure: str = "") -> None:
        size = bundle_size(data)
        with self._lock:
            if not self._on:
                return
            if size > MAX_BUNDLE or self._size + size > MAX_RUN:
                dropped = sorted(mime for mime in data if mime != "text/plain")
                data = {"text/plain": data.get("text/plain", "")}
                self.notes.append(f"a {kind} output's {', '.join(dropped)} left out: "
                                  f"{size} bytes, past the {MAX_BUNDLE}-byte bundle or {MAX_RUN}-byte run limit")
                size = bundle_size(data)
            self._size += size
            item: dict[str, Any] = {"type": kind, "data": data, "metadata": metadata}
            if figure:
                item["figure"] = figure
            self.items.append(item)
            publish = self._publish
        if publish is not None:
            publish(item)


OUTPUTS = Outputs()


def encode_outputs(outputs: Any) -> bytes:
    """An output, or a run's list of them, as the protocol carries it: JSON in UTF-8."""
    return json.dumps(outputs, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8", "replace")


def bundle_size(data: dict[str, Any]) -> int:
    """The bytes a bundle's content takes as JSON."""
    return len(encode_outputs(data))


def formatter(obj: Any, name: str) -> Callable[..., Any] | None:
    """obj's formatter method of that name, if it has one: not a class's (unbound), and not what
    a catch-all __getattr__ makes up."""
    if isinstance(obj, type):
        return None
    try:
        method = getattr(obj, name, None)
    except Exception:
        return None
    if not callable(method) or getattr(type(obj), name, None) is None:
        return None
    found: Callable[..., Any] = method
    return found


def encode(mime: str, value: Any) -> Any:
    """A formatter's value as a bundle carries it: base64 for binary types, the object for JSON."""
    if mime in BINARY:
        if isinstance(value, str):
            return value  # already base64, as IPython's Image gives it
        return base64.b64encode(bytes(value)).decode("ascii")
    if mime == "application/json" or mime.endswith("+json"):
        if isinstance(value, str):
            return json.loads(value)
        return json.loads(json.dumps(value, default=str))  # only what JSON can carry
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def bundle(obj: Any, text: str | None = None, include: Sequence[str] | None = None,
           exclude: Sequence[str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """obj's MIME bundle and metadata. text, when given, is its text/plain (the repr the caller made
    already). A formatter that fails is left out, as a notebook leaves it."""
    data: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    method = formatter(obj, "_repr_mimebundle_")
    if method is not None:
        try:
            found = method(include=include, exclude=exclude)
            if isinstance(found, tuple):
                found, extra = found
                metadata.update(extra or {})
            for mime, value in (found or {}).items():
                data[mime] = encode(mime, value)
        except Exception:
            pass
    for mime, name in METHODS:
        if mime in data or (include and mime not in include) or (exclude and mime in exclude):
            continue
        method = formatter(obj, name)
        if method is None:
            continue
        try:
            value = method()
            if isinstance(value, tuple):
                value, extra = value
                metadata[mime] = extra
            if value is not None:
                data[mime] = encode(mime, value)
        except Exception:
            continue
    if "text/plain" not in data:
        if text is None:
            try:
                text = repr(obj)
            except Exception as exc:
                text = f"<{type(obj).__name__} object: repr failed: {exc!r}>"
        data["text/plain"] = text
    return data, metadata


def display(*objs: Any, include: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
            metadata: dict[str, Any] | None = None, raw: bool = False, **_: Any) -> None:
    """Shows each object as a notebook does: its bundle becomes a display_data output. raw objects
    are bundles already. Outside a run (no outputs to add to) it prints, as IPython does."""
    for obj in objs:
        if not OUTPUTS.on:
            print(obj if raw else repr(obj))
            continue
        if raw:
            data = {mime: encode(mime, value) for mime, value in dict(obj).items()}
            meta: dict[str, Any] = {}
        else:
            data, meta = bundle(obj, include=include, exclude=exclude)
        if metadata:
            meta.update(metadata)
        flush = getattr(sys.stdout, "flush", None)
        if flush is not None:
            flush()  # what was printed before it shows before it
        OUTPUTS.add("display_data", data, meta)


class _IPythonDisplay(importlib.abc.MetaPathFinder):
    """Makes IPython's display functions this module's when IPython is imported: without a kernel
    they only print."""

    TARGET = "IPython.core.display_functions"

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def patched(module: ModuleType) -> None:
            exec_module(module)
            module.display = display  # type: ignore[attr-defined]

        setattr(loader, "exec_module", patched)
        return spec


def no_input(prompt: object = "") -> str:
    """input(), as a kernel without stdin answers it: the code reads nothing, and says why."""
    raise EOFError("input() is not available: kiln runs code without standard input")


def install() -> None:
    """Puts display in the builtins, input as a kernel without stdin has it, and hooks
    IPython's display; idempotent."""
    builtins.display = display  # type: ignore[attr-defined]
    builtins.input = no_input
    if not any(isinstance(finder, _IPythonDisplay) for finder in sys.meta_path):
        sys.meta_path.insert(0, _IPythonDisplay())
