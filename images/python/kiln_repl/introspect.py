"""What a notebook asks of a kernel between cells: completions, an object's help, and whether a
cell is complete (Jupyter's complete, inspect and is_complete requests), answered by IPython's
completer (with jedi) and inspector as ipykernel answers them (kiln_repl.shell). The host runs
`answer(globals(), kind, code, cursor_pos, detail_level)` as a read-only cell of the session; the
answer is one line of JSON on stdout, the reply's content. Nothing is bound.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from kiln_repl import shell


def answer(namespace: dict[str, Any], kind: str, code: str, cursor_pos: int, detail_level: int = 0) -> None:
    session = shell.CURRENT
    if session is None:
        session = shell.Shell(namespace, sys.modules["__main__"])
        shell.install(session)
    if kind == "complete":
        content = session.complete(code, cursor_pos)
    elif kind == "inspect":
        content = session.inspect(code, cursor_pos, detail_level)
    else:
        content = session.is_complete(code)
    sys.stdout.write(json.dumps(content, default=str) + "\n")
