"""What a notebook asks of a kernel between cells: completions, an object's help, and whether a
cell is complete (Jupyter's complete, inspect and is_complete requests). The host runs
`answer(globals(), kind, code, cursor_pos)` as a cell of the session; the answer is one line of JSON
on stdout, the reply's content. Nothing is bound: the namespace is read, never written.

Names are resolved, never evaluated: a dotted name is looked up attribute by attribute (which may
run a property, as IPython's completer does), and nothing is called.
"""

from __future__ import annotations

import builtins
import codeop
import inspect
import json
import keyword
import re
import sys
from typing import Any

MAX_MATCHES = 1000
MAX_REPR = 2000
TOKEN = re.compile(r"[A-Za-z_][\w.]*$")
NAME_CHARS = re.compile(r"[\w.]")


def answer(namespace: dict[str, Any], kind: str, code: str, cursor_pos: int) -> None:
    if kind == "complete":
        content = complete(namespace, code, cursor_pos)
    elif kind == "inspect":
        content = describe(namespace, code, cursor_pos)
    else:
        content = is_complete(code)
    sys.stdout.write(json.dumps(content) + "\n")


def resolve(namespace: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    """The object a dotted name names in namespace (then the builtins), and whether it does."""
    first, *rest = dotted.split(".")
    if first in namespace:
        obj = namespace[first]
    elif hasattr(builtins, first):
        obj = getattr(builtins, first)
    else:
        return False, None
    for part in rest:
        try:
            obj = getattr(obj, part)
        except Exception:
            return False, None
    return True, obj


def complete(namespace: dict[str, Any], code: str, cursor_pos: int) -> dict[str, Any]:
    cursor_pos = max(0, min(cursor_pos, len(code)))
    found = TOKEN.search(code[:cursor_pos])
    token = found.group(0) if found else ""
    matches: list[str] = []
    if "." in token:
        expr, _, attr = token.rpartition(".")
        ok, obj = resolve(namespace, expr)
        if ok:
            try:
                names = dir(obj)
            except Exception:
                names = []
            matches = [f"{expr}.{name}" for name in names
                       if name.startswith(attr) and (attr.startswith("_") or not name.startswith("_"))]
    else:
        known = set(namespace) | set(dir(builtins)) | set(keyword.kwlist)
        matches = [name for name in known if name.startswith(token) and (token.startswith("_") or not name.startswith("_"))]
    return {"status": "ok", "matches": sorted(set(matches))[:MAX_MATCHES], "cursor_start": cursor_pos - len(token),
            "cursor_end": cursor_pos, "metadata": {}}


def name_at(code: str, cursor_pos: int) -> str:
    """The dotted name around the cursor; right after an opening parenthesis, the name before it."""
    cursor_pos = max(0, min(cursor_pos, len(code)))
    start = end = cursor_pos
    if start > 0 and code[start - 1] == "(":
        start = end = start - 1
    while start > 0 and NAME_CHARS.match(code[start - 1]):
        start -= 1
    while end < len(code) and NAME_CHARS.match(code[end]):
        end += 1
    return code[start:end].strip(".")


def describe(namespace: dict[str, Any], code: str, cursor_pos: int) -> dict[str, Any]:
    name = name_at(code, cursor_pos)
    ok, obj = resolve(namespace, name) if name else (False, None)
    if not ok:
        return {"status": "ok", "found": False, "data": {}, "metadata": {}}
    lines = [f"Type:      {type(obj).__name__}"]
    if callable(obj):
        try:
            lines.append(f"Signature: {name}{inspect.signature(obj)}")
        except (TypeError, ValueError):
            pass
    else:
        try:
            text = repr(obj)
        except Exception as exc:
            text = f"<repr failed: {exc!r}>"
        lines.append(f"Value:     {text[:MAX_REPR]}")
    doc = inspect.getdoc(obj)
    if doc:
        lines.append(f"Docstring:\n{doc}")
    return {"status": "ok", "found": True, "data": {"text/plain": "\n".join(lines)}, "metadata": {}}


def is_complete(code: str) -> dict[str, Any]:
    try:
        compiled = codeop.compile_command(code, "<cell>", "exec")
    except (SyntaxError, OverflowError, ValueError):
        return {"status": "invalid"}
    if compiled is None:
        last = code.rstrip("\n").split("\n")[-1]
        indent = re.match(r"\s*", last).group(0)  # type: ignore[union-attr]
        if last.rstrip().endswith(":"):
            indent += "    "
        return {"status": "incomplete", "indent": indent}
    return {"status": "complete"}
