"""The state blob: an LZ4 frame of a cloudpickle of a dict of names, sent as raw bytes.

cloudpickle and lz4 are imported when first needed: the pre-imports load them at warm-up, and
a server started without pre-imports (one request, then exit) may never need them.
"""

from __future__ import annotations

import builtins
import types
from typing import Any

from kiln_repl.running import describe_exception

_MISSING = object()


# UNCHANGED is what capture_state returns for a state that pickles exactly as the one
# restored: the host keeps the blob it sent, and nothing is compressed or sent back.
UNCHANGED = b""


def restore_state(blob: bytes | memoryview) -> tuple[dict[str, Any], bytes]:
    """Decodes a state blob into the names it holds, and returns them with their pickle (for
    capture_state to tell an unchanged state); raises if it does not decode."""
    import cloudpickle
    import lz4.frame

    pickled: bytes = lz4.frame.decompress(blob)
    names = cloudpickle.loads(pickled)
    if not isinstance(names, dict) or not all(isinstance(name, str) for name in names):
        raise ValueError("the blob does not hold a dict of names")
    return names, pickled


class TooLarge(Exception):
    """The pickle grew past its cap."""


class BoundedBuffer:
    """A file for the pickler that refuses to grow past cap bytes, so that a state too large
    to keep is never held whole."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()

    def write(self, chunk: bytes | memoryview) -> int:
        if len(self.data) + len(chunk) > self.cap:
            raise TooLarge
        self.data += chunk
        return len(chunk)


def pickle_bounded(value: Any, cap: int) -> bytearray:
    """The pickle of value, as cloudpickle.dumps makes it; raises TooLarge past cap bytes."""
    import cloudpickle

    out = BoundedBuffer(cap)
    cloudpickle.CloudPickler(out).dump(value)
    return out.data


def capture_state(namespace: dict[str, Any], untouched: dict[str, Any], max_bytes: int,
                  restored: bytes | None = None,
                  max_raw: int = 256 << 20) -> tuple[bytes | None, list[str]]:
    """Returns the state blob (None when there is none, UNCHANGED when it pickles exactly as
    restored, the pickle of the state the run began with) and notes on what was left out.
    max_bytes caps the blob, max_raw the pickle before compression."""
    import lz4.frame

    names = {name: value for name, value in namespace.items() if is_kept(name, value, untouched)}
    if not names:
        return None, []  # nothing to keep: no state, and no note (the host reads it so)
    notes = []
    too_large = f"state dropped: over the limit of {max_raw} bytes before compression"
    try:
        pickled = pickle_bounded(names, max_raw)
    except TooLarge:
        return None, [too_large]
    except Exception:
        left_out = drop_unpicklable(names, max_raw)
        notes.append("not kept (unpicklable): " + ", ".join(left_out))
        try:
            pickled = pickle_bounded(names, max_raw)
        except TooLarge:
            return None, notes + [too_large]
        except Exception as exc:
            return None, notes + [f"state could not be saved: {describe_exception(exc)}"]
    if restored is not None and pickled == restored:
        return UNCHANGED, notes  # compressing it again would only make the same blob
    compressed: bytes = lz4.frame.compress(pickled)
    if len(compressed) > max_bytes:
        too_big = f"state dropped: {len(compressed)} bytes compressed, over the limit of {max_bytes}"
        return None, notes + [too_big]
    return compressed, notes


def drop_unpicklable(names: dict[str, Any], max_raw: int = 256 << 20) -> list[str]:
    """Removes the names that do not pickle on their own; returns them as "name (type)". A
    name whose pickle alone is over max_raw stays: the whole state is then too large."""
    left_out = []
    for name, value in list(names.items()):
        try:
            pickle_bounded(value, max_raw)
        except TooLarge:
            pass
        except Exception:
            left_out.append(f"{name} ({type(value).__name__})")
            del names[name]
    return left_out


def is_kept(name: str, value: Any, untouched: dict[str, Any]) -> bool:
    """Whether a name belongs in the state: not private, not a module, not a pre-imported
    alias the user left alone, not a builtin under its own name."""
    if name.startswith("_") or isinstance(value, types.ModuleType):
        return False
    if untouched.get(name, _MISSING) is value:
        return False
    return getattr(builtins, name, _MISSING) is not value
