"""The state blob: an LZ4 frame of two cloudpickles, a header and a dict of names, sent as raw
bytes (docs/protocol.md, State).

The header says what is not a value: the modules bound to names (imported again by name), the
process settings that differ from a fresh process's (kiln_repl.settings), the pre-imported
names the user deleted, and the names the second pickle holds, so that a state that no longer
loads can say what was lost. A blob of one pickle (a dict of names) is the format before the
header; it still restores.

Functions and classes defined in the session are pickled so that, restored, they look their
globals up in the session's live namespace, as they did where they were defined: a
restored function sees the values its globals have now, not copies taken when it was pickled.

cloudpickle and lz4 are imported when first needed: the pre-imports load them at warm-up, and
a server started without pre-imports (one request, then exit) may never need them.
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import importlib
import pickle
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable

from kiln_repl.running import describe_exception
from kiln_repl.shell import is_input_history
from kiln_repl.packages import Packages
from kiln_repl.settings import Settings

_MISSING = object()
HEADER_KEY = "kiln-state"  # no Python name can be this: the header is told from an old blob's names
FORMAT = 2
HISTORY = ("_", "__", "___")  # the last three results, kept like any name
CGROUP = "/sys/fs/cgroup"  # the sandbox's own cgroup (a private cgroup namespace)
# What a capture leaves the sandbox beside the state it keeps: the compressor's and the
# pickler's own working memory, and the REPL's answer.
MEMORY_RESERVE = 48 << 20

# UNCHANGED is what capture_state returns for a state that pickles exactly as the one
# restored: the host keeps the blob it sent, and nothing is compressed or sent back.
UNCHANGED = b""

_live: dict[str, Any] | None = None
_own_main: types.ModuleType | None = None


def bind_namespace(namespace: dict[str, Any], own_main: types.ModuleType | None = None) -> None:
    """Names the dict that restored functions take as their globals, and the REPL's own
    __main__ module, put back while pickling (see main_module_hidden)."""
    global _live, _own_main
    _live, _own_main = namespace, own_main


def live_namespace() -> dict[str, Any]:
    """The session's namespace, which a pickled session function's globals unpickle as."""
    if _live is None:
        raise RuntimeError("no session namespace to restore into")
    return _live


class NamespaceRef:
    """Stands for the session's namespace in a pickle: it unpickles as the live one."""

    def __reduce__(self) -> tuple[Callable[[], dict[str, Any]], tuple[()]]:
        return live_namespace, ()


NAMESPACE_REF = NamespaceRef()


def rewrap_lru_cache(function: Callable[..., Any], maxsize: int | None, typed: bool) -> Any:
    """A functools.lru_cache wrapper made again (empty) around its restored function."""
    return functools.lru_cache(maxsize=maxsize, typed=typed)(function)


@functools.cache
def pickler_class() -> type:
    """cloudpickle's Pickler, with the session's functions tied to the live namespace."""
    import cloudpickle
    from cloudpickle import cloudpickle as impl

    class StatePickler(cloudpickle.Pickler):  # type: ignore[misc]
        def __init__(self, file: Any, namespace: dict[str, Any]) -> None:
            super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
            self.namespace = namespace

        def reducer_override(self, obj: Any) -> Any:
            if type(obj) is functools._lru_cache_wrapper:
                # Its own reduce names it by module and name, which a session's function
                # cannot be found by: rebuild it around the function instead.
                parameters = getattr(obj, "cache_parameters")()
                return rewrap_lru_cache, (obj.__wrapped__, parameters["maxsize"], parameters["typed"])
            return super().reducer_override(obj)

        def _dynamic_function_reduce(self, func: types.FunctionType) -> Any:
            if func.__globals__ is not self.namespace:
                return super()._dynamic_function_reduce(func)
            # The globals are the live namespace when restored: none of them is copied in,
            # and no module is imported for them (the header's modules are).
            state, slotstate = impl._function_getstate(func)
            slotstate["__globals__"] = {}
            slotstate["_cloudpickle_submodules"] = []
            closure = None
            if func.__closure__ is not None:
                closure = tuple(impl._make_empty_cell() for _ in func.__closure__)
            newargs = (func.__code__, NAMESPACE_REF, None, None, closure)
            return impl._make_function, newargs, (state, slotstate), None, None, impl._function_setstate

    return StatePickler


class TooLarge(Exception):
    """The state grew past a cap: its pickle (max_raw) or, compressed, its frame (max_bytes)."""

    def __init__(self, compressed: bool = False) -> None:
        super().__init__("compressed" if compressed else "before compression")
        self.compressed = compressed


class StateWriter:
    """The file the pickler writes a state into. It never holds the pickle: each chunk is
    counted against max_raw, added to the digest once the names begin (start_names), and fed
    to an LZ4 frame compressor whose output is kept, up to max_bytes. So a capture holds the
    compressed state and the chunk in hand, never the pickle beside it, and stops as soon as
    either cap is passed. keep=False counts and compresses without keeping (a size only).
    Pickle protocol 5 hands it buffers of 64 KiB and more as PickleBuffer objects, which have
    a size but no len()."""

    SLICE = 1 << 20  # what the compressor takes at a time: its output is never a whole array

    def __init__(self, max_raw: int, max_bytes: int | None = None, compress: bool = True,
                 keep: bool = True) -> None:
        import lz4.frame

        self.max_raw, self.max_bytes, self.keep = max_raw, max_bytes, keep
        self.raw = 0  # bytes of pickle written
        self.size = 0  # bytes of compressed frame made
        self.digest: hashlib._Hash | None = None
        self.out = bytearray()
        self.compressor = lz4.frame.LZ4FrameCompressor() if compress else None
        if self.compressor is not None:
            self._add(self.compressor.begin())

    def start_names(self) -> None:
        self.digest = hashlib.sha256()

    def write(self, chunk: Any) -> int:
        with memoryview(chunk) as view:
            size = view.nbytes
            self.raw += size
            if self.raw > self.max_raw:
                raise TooLarge
            if self.digest is not None:
                self.digest.update(view)
            if self.compressor is not None:
                with view.cast("B") as flat:
                    for at in range(0, size, self.SLICE):
                        self._add(self.compressor.compress(flat[at:at + self.SLICE]))
        return size

    def finish(self) -> bytes:
        """Ends the frame; returns the names' digest."""
        if self.compressor is not None:
            self._add(self.compressor.flush())
        return b"" if self.digest is None else self.digest.digest()

    def _add(self, data: bytes) -> None:
        self.size += len(data)
        if self.max_bytes is not None and self.size > self.max_bytes:
            raise TooLarge(compressed=True)
        if self.keep:
            self.out += data


def pickle_into(value: Any, out: Any, namespace: dict[str, Any]) -> None:
    """Pickles value into the file out as a session keeps it (functions tied to namespace)."""
    with main_module_hidden():
        pickler_class()(out, namespace).dump(value)


class main_module_hidden:
    """Puts the REPL's own module back as __main__ while pickling: an object that can only be
    found by name in __main__ must fail to pickle now rather than fail to restore later, since
    the session's names are not there yet when a state is loaded."""

    def __enter__(self) -> None:
        self.session_main = sys.modules.get("__main__")
        if _own_main is not None:
            sys.modules["__main__"] = _own_main

    def __exit__(self, *exc_info: object) -> None:
        if self.session_main is not None:
            sys.modules["__main__"] = self.session_main


@dataclass
class Loaded:
    """A state as it was loaded or captured, for capture_state to tell an unchanged one: its
    header, and the SHA-256 of its names' pickle (the pickle itself is not kept: in a live
    session it would double what the state costs in memory). The header is compared by
    value: its pickle depends on which equal strings happen to be one object, which differs
    from one process to the next."""

    header: dict[str, Any]
    digest: bytes


@dataclass
class Restored:
    """What restore_state did: the state it loaded (None when it did not load whole, or is in
    the format before the header), notes on what could not be restored, and the dotted imports
    the state carries."""

    snapshot: Loaded | None
    notes: list[str]
    imports: set[str] = field(default_factory=set)


def restore_state(blob: bytes | memoryview, namespace: dict[str, Any], settings: Settings,
                  packages: Packages | None = None) -> Restored:
    """Puts a state back into namespace: its settings, the packages the session installed (with
    packages, the session's place for them), its modules and names."""
    try:
        stream = FrameReader(blob)
        first = pickle.load(stream)
    except Exception as exc:
        return Restored(None, [f"state could not be restored: {describe_exception(exc)}"])
    if isinstance(first, dict) and first.get(HEADER_KEY) == FORMAT:
        header, names = first, None
    elif isinstance(first, dict) and all(isinstance(name, str) for name in first):
        header, names = {}, first  # the format before the header: the names alone
    else:
        return Restored(None, ["state could not be restored: the blob does not hold a dict of names"])
    # The settings first (sys.path decides where modules are found), but the late ones last.
    saved = header.get("settings", {})
    notes = settings.apply(saved)
    archive = header.get("packages")
    if archive is not None and packages is not None:
        if note := packages.restore(archive):
            notes.append(note)
    notes += import_modules(header.get("modules", {}), namespace)
    imports = set(header.get("imports", []))
    for name in sorted(imports):
        try:
            importlib.import_module(name)
        except BaseException:
            pass  # a submodule that no longer imports: what uses it will say so
    snapshot = None
    if names is None:
        stream.start_names()
        try:
            names = pickle.load(stream)
            if not isinstance(names, dict):
                raise ValueError("the names are not a dict")
        except Exception as exc:
            lost = ", ".join(header.get("names", [])) or "every name"
            namespace["__builtins__"] = builtins
            return Restored(None, notes + [f"state could not be restored: {describe_exception(exc)}; lost: {lost}"],
                            imports)
        snapshot = Loaded(steady(header, settings), stream.digest.digest() if stream.digest is not None else b"")
    namespace.update(names)
    namespace["__builtins__"] = builtins  # a restored function sets it to the builtins' dict
    for name in header.get("deleted", []):
        namespace.pop(name, None)
    return Restored(snapshot, notes + settings.apply(saved, late=True), imports)


class FrameReader:
    """A state's LZ4 frame as a file the unpickler reads, decompressed as it is read: a
    restore holds the blob, what is being unpickled and a chunk, never the whole pickle. Once
    the names begin (start_names), what is read is digested, as the capture digested it."""

    CHUNK = 1 << 20

    def __init__(self, blob: bytes | memoryview) -> None:
        import lz4.frame

        self.blob = memoryview(blob)
        self.at = 0
        self.buffer = bytearray()
        self.decompressor = lz4.frame.LZ4FrameDecompressor()
        self.digest: hashlib._Hash | None = None

    def start_names(self) -> None:
        self.digest = hashlib.sha256()

    def _fill(self, size: int) -> None:
        while len(self.buffer) < size and not self.decompressor.eof:
            if self.decompressor.needs_input:
                if self.at >= len(self.blob):
                    raise EOFError("the state's frame ends early")
                chunk, self.at = self.blob[self.at:self.at + self.CHUNK], self.at + self.CHUNK
                self.buffer += self.decompressor.decompress(chunk, max_length=self.CHUNK)
            else:
                self.buffer += self.decompressor.decompress(b"", max_length=self.CHUNK)

    def read(self, size: int = -1) -> bytes:
        self._fill(size if size >= 0 else sys.maxsize)
        with memoryview(self.buffer) as held:
            data = bytes(held[:size] if size >= 0 else held)
        del self.buffer[:len(data)]
        if self.digest is not None:
            self.digest.update(data)
        return data

    def readinto(self, target: Any) -> int:
        """Fills target a chunk at a time: a large array's bytes are never held twice."""
        done = 0
        with memoryview(target) as whole, whole.cast("B") as view:
            while done < len(view):
                self._fill(min(len(view) - done, self.CHUNK))
                size = min(len(view) - done, len(self.buffer))
                if size == 0:
                    break
                with memoryview(self.buffer) as held:
                    view[done:done + size] = held[:size]
                if self.digest is not None:
                    self.digest.update(view[done:done + size])
                del self.buffer[:size]
                done += size
        return done

    def readline(self) -> bytes:
        while b"\n" not in self.buffer and not self.decompressor.eof:
            self._fill(len(self.buffer) + 1)
        end = self.buffer.find(b"\n") + 1 or len(self.buffer)
        return self.read(end)


def import_modules(modules: dict[str, str], namespace: dict[str, Any]) -> list[str]:
    """Binds each name to its module, imported again; a note for each that does not import."""
    failed = []
    for name, module_name in modules.items():
        try:
            namespace[name] = importlib.import_module(module_name)
        except BaseException as exc:  # an import runs module code: anything can come out
            namespace.pop(name, None)
            failed.append(f"{name} (module {module_name}: {describe_exception(exc)})")
    return [f"not restored (module no longer imports): {', '.join(failed)}"] if failed else []


def capture_state(namespace: dict[str, Any], untouched: dict[str, Any], max_bytes: int,
                  restored: Loaded | None = None, max_raw: int = 256 << 20,
                  settings: Settings | None = None, imports: set[str] | frozenset[str] = frozenset(),
                  live: bool = False, installed: Packages | None = None) -> tuple[bytes | None, list[str], Loaded | None]:
    """Returns the state blob (None when there is none, UNCHANGED when it is restored, the
    state the run began with), notes on what was left out, and the state captured as a later
    capture compares with it (None with no blob).
    max_bytes caps the blob, max_raw the pickle before compression: names are dropped, the
    largest first, until the rest fits. imports are the dotted modules the session's
    `import a.b` statements named: those under a bound module are imported again on restore.
    live says the namespace goes on serving its session: what is left out stays there, and
    the notes say "kept only while the session is live" rather than "not kept". installed, when
    the session may install packages, adds what it installed to the header.
    A capture holds at most the compressed state (max_bytes) beside the namespace: the pickle is
    compressed and digested as it is written (StateWriter), and sizes are measured the same way.
    It never holds more than the sandbox's memory has room for (memory_room): past that, names
    are dropped as past max_bytes, and the note says it was the memory."""
    left_out = "kept only while the session is live" if live else "not kept"
    limit = f"the state limit of {human_size(max_bytes)} compressed"
    room = memory_room()
    if room is not None and room < max_bytes:
        max_bytes = room
        limit = f"the memory left in the sandbox, {human_size(room)}"
    names, modules, notes = split_namespace(namespace, untouched, left_out)
    packages = {module_name.partition(".")[0] for module_name in modules.values()}
    captured = {} if settings is None else settings.capture()
    header: dict[str, Any] = {HEADER_KEY: FORMAT, "modules": modules,
                              "imports": sorted(name for name in imports if name.partition(".")[0] in packages),
                              "settings": captured,
                              "deleted": sorted(name for name in untouched if name not in namespace)}
    header = steady(header, settings)  # what tells one state from another; the blob has it all
    if installed is not None:
        archive, note = installed.archive()
        if archive is not None:
            header["packages"] = archive
        if note:
            notes.append(note)
    if not (names or modules or header["settings"] or header["deleted"] or "packages" in header):
        return None, notes, None  # nothing to keep: no state (the host drops the session's)
    written = {**header, "settings": captured}
    try:
        blob, digest = encode(written, names, namespace, max_raw, max_bytes)
    except Exception as first:  # too large, or a name that does not pickle: each name on its own tells
        compressed = isinstance(first, TooLarge) and first.compressed
        sizes, unpicklable = measure(names, namespace, max_raw, compressed)
        if unpicklable:
            notes.append(f"{left_out} (unpicklable): " + ", ".join(unpicklable))
        try:
            try:
                blob, digest = encode(written, names, namespace, max_raw, max_bytes)
            except TooLarge as exc:
                if exc.compressed and not compressed:  # under the raw cap, over the compressed one
                    sizes, compressed = measure(names, namespace, max_raw, True)[0], True
                (blob, digest), dropped = shrink(written, names, namespace, max_raw, max_bytes, sizes, left_out,
                                                 compressed, limit)
                notes.append(dropped)
        except Exception as exc:
            return None, notes + [f"state could not be saved: {describe_exception(exc)}"], None
    full_header = {**header, "names": sorted(names)}
    if restored is not None and restored.digest == digest and restored.header == full_header:
        return UNCHANGED, notes, restored  # the host holds this state already
    return blob, notes, Loaded(full_header, digest)


def steady(header: dict[str, Any], settings: Settings | None) -> dict[str, Any]:
    """The header without the volatile settings: what tells one state from another."""
    saved = header.get("settings")
    if settings is None or not saved:
        return header
    volatile = settings.volatile()
    if not volatile & saved.keys():
        return header
    return {**header, "settings": {name: value for name, value in saved.items() if name not in volatile}}


def encode(header: dict[str, Any], names: dict[str, Any], namespace: dict[str, Any],
           max_raw: int, max_bytes: int) -> tuple[bytes, bytes]:
    """The state's LZ4 frame (the header's pickle, then the names' pickle), made as the pickles
    are written, and the digest of the names' pickle. Raises TooLarge past max_raw bytes of
    pickle or max_bytes of frame, having held at most max_bytes."""
    out = StateWriter(max_raw, max_bytes)
    pickle_into({**header, "names": sorted(names)}, out, namespace)
    out.start_names()
    pickle_into(names, out, namespace)
    digest = out.finish()
    return out.out, digest  # bytes, as far as any reader of it is concerned


def shrink(header: dict[str, Any], names: dict[str, Any], namespace: dict[str, Any], max_raw: int,
           max_bytes: int, sizes: dict[str, int], left_out: str,
           compressed: bool = False, limit: str = "") -> tuple[tuple[bytes, bytes], str]:
    """Drops names from names, the largest first (by sizes: of their pickle, or compressed of
    their frame), until the state fits both caps; returns what encode returns and a note that
    names each dropped one with its size, and the limit (compressed) it was over."""
    cap = max_bytes if compressed else max_raw
    # The history goes before a user's name of the same size: it is often the same object.
    order = sorted(names, key=lambda name: (sizes.get(name, 0), name in HISTORY), reverse=True)
    total = sum(sizes.get(name, 0) for name in names)
    dropped = []
    while True:
        if total <= cap or not order:
            try:
                encoded = encode(header, names, namespace, max_raw, max_bytes)
                break
            except TooLarge:
                if not order:
                    raise
        name = order.pop(0)
        total -= sizes.get(name, 0)
        del names[name]
        dropped.append(name)
    shown = ", ".join(f"{name} ({human_size(sizes.get(name, 0), max_raw)})" for name in dropped)
    over = (limit or f"the state limit of {human_size(cap)} compressed") if compressed else \
        f"the state limit of {human_size(cap)} before compression"
    return encoded, f"{left_out} (over {over}): {shown}"


def memory_room(root: str = CGROUP) -> int | None:
    """Bytes the sandbox may still take for a capture: its cgroup's memory limit less what it
    uses (page cache it could drop not counted, as `docker stats` counts) and MEMORY_RESERVE;
    None when there is no limit or no cgroup to read it from. cgroup v2 (memory.max) first,
    then v1 (memory/memory.limit_in_bytes), as the host mounts one or the other."""
    for limit_file, used_file, stat_file, inactive in (
            ("memory.max", "memory.current", "memory.stat", "inactive_file"),
            ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat",
             "total_inactive_file")):
        try:
            with open(f"{root}/{limit_file}") as handle:
                limit = handle.read().strip()
            if limit == "max" or int(limit) >= 1 << 60:  # v1's "no limit" is a page-rounded 2**63
                return None
            with open(f"{root}/{used_file}") as handle:
                used = int(handle.read())
            with open(f"{root}/{stat_file}") as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == inactive:
                        used -= int(value)
                        break
            return max(0, int(limit) - used - MEMORY_RESERVE)
        except (OSError, ValueError):
            continue
    return None


def measure(names: dict[str, Any], namespace: dict[str, Any], max_raw: int,
            compressed: bool = False) -> tuple[dict[str, int], list[str]]:
    """Pickles each name on its own, keeping nothing: returns the sizes (of the pickle, or
    compressed of its LZ4 frame; max_raw + 1 for one over it alone) and removes from names
    those that do not pickle, returned as "name (type)"."""
    sizes: dict[str, int] = {}
    unpicklable = []
    for name, value in list(names.items()):
        out = StateWriter(max_raw, None, compress=compressed, keep=False)
        try:
            pickle_into(value, out, namespace)
            out.finish()
            sizes[name] = out.size if compressed else out.raw
        except TooLarge:
            sizes[name] = max_raw + 1
        except Exception:
            unpicklable.append(f"{name} ({type(value).__name__})")
            del names[name]
    return sizes, unpicklable


def human_size(size: int, over: int | None = None) -> str:
    if over is not None and size > over:
        return f"over {human_size(over)}"
    if size >= 1 << 20:
        return f"{size / (1 << 20):.1f} MB"
    if size >= 1 << 10:
        return f"{size / (1 << 10):.1f} KB"
    return f"{size} bytes"


def split_namespace(namespace: dict[str, Any], untouched: dict[str, Any],
                    left_out: str = "not kept") -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """The session's names to pickle, its modules by name, and notes on modules that cannot be
    imported by name (made at run time)."""
    names: dict[str, Any] = {}
    modules: dict[str, str] = {}
    odd = []
    for name, value in namespace.items():
        if not is_user_name(name) or untouched.get(name, _MISSING) is value:
            continue
        if isinstance(value, types.ModuleType):
            if sys.modules.get(value.__name__) is value:
                modules[name] = value.__name__
            else:
                odd.append(f"{name} (module {value.__name__})")
        elif is_kept(name, value, namespace):
            names[name] = value
    return names, modules, [f"{left_out} (module not importable by name): {', '.join(odd)}"] if odd else []


def is_user_name(name: str) -> bool:
    """Whether a name is the user's: any but the dunders (__name__, __builtins__, ...) and
    IPython's input history (_i, _iN: every cell changes it); _, __, ___ and _N are the history
    of results."""
    return not (name.startswith("__") and name.endswith("__") and name.strip("_")) and not is_input_history(name)


def is_kept(name: str, value: Any, namespace: dict[str, Any]) -> bool:
    """Whether a user's name that is not a module belongs in the state: not a builtin under
    its own name, not the namespace itself (globals() bound to a name)."""
    return value is not namespace and getattr(builtins, name, _MISSING) is not value
