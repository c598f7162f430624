"""In-process tests of the state: which names are kept, the blob's round trip with real data,
functions tied to the live namespace, modules, settings, and the caps."""

import builtins
import io
import json
import os
import pickle
import tempfile
import tracemalloc
import types
import unittest
from typing import Any
from unittest import mock

import cloudpickle
import lz4.frame
import numpy as np
import pandas as pd

import inprocess  # noqa: F401  (the server's package, by path)
from kiln_repl.settings import Settings
from kiln_repl import state
from kiln_repl.state import (FORMAT, HEADER_KEY, MEMORY_RESERVE, UNCHANGED, StateWriter, TooLarge, bind_namespace,
                             capture_state, is_kept, is_user_name, memory_room, pickle_into, restore_state)

MB = 1 << 20


def fresh_namespace() -> dict[str, Any]:
    """A session namespace as the server makes it: a module's dict, bound for restores."""
    namespace = types.ModuleType("__main__").__dict__
    namespace["__builtins__"] = builtins
    bind_namespace(namespace)
    return namespace


def session(code: str) -> dict[str, Any]:
    """A namespace in which code ran, as a cell runs in the server."""
    namespace = fresh_namespace()
    exec(code, namespace)
    return namespace


def decode(blob: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and the names of a blob; the names load into a fresh namespace."""
    stream = io.BytesIO(lz4.frame.decompress(blob))
    header = pickle.load(stream)
    fresh_namespace()
    return header, pickle.load(stream)


def round_trip(namespace: dict[str, Any], settings: Settings | None = None,
               **limits: int) -> tuple[dict[str, Any], list[str], list[str]]:
    """Captures namespace and restores it into a fresh one: returns that one, the capture's
    notes and the restore's."""
    blob, notes, _ = capture_state(namespace, {}, limits.get("max_bytes", 64 * MB),
                                   max_raw=limits.get("max_raw", 64 * MB), settings=settings)
    assert blob is not None and blob is not UNCHANGED, notes
    restored = fresh_namespace()
    loaded = restore_state(memoryview(bytearray(blob)), restored, settings or Settings([]))
    return restored, notes, loaded.notes


class NamesTest(unittest.TestCase):
    def test_user_names(self) -> None:
        for name, want in [("x", True), ("_", True), ("__", True), ("___", True), ("_private", True),
                           ("__mangled", True), ("__name__", False), ("__builtins__", False), ("__doc__", False)]:
            with self.subTest(name=name):
                self.assertEqual(is_user_name(name), want)

    def test_kept(self) -> None:
        namespace: dict[str, Any] = {}
        for name, value, want in [("x", 1, True), ("print", builtins.print, False), ("show", builtins.print, True),
                                  ("print", 5, True), ("g", namespace, False)]:
            with self.subTest(name=name):
                self.assertEqual(is_kept(name, value, namespace), want)

    def test_what_is_captured(self) -> None:
        alias = object()
        namespace = session("import json as j, threading\n_ = 3\n_hidden = 'h'\nkeep = [1, 2]\n"
                            "lock = threading.Lock()\ngen = (i for i in range(2))\ng = globals()")
        namespace["np"] = alias
        blob, notes, _ = capture_state(namespace, {"np": alias, "json": json}, MB)
        assert blob is not None
        self.assertEqual(blob[:4], b"\x04\x22\x4d\x18")  # LZ4 frame magic
        header, names = decode(blob)
        self.assertEqual(names, {"_": 3, "_hidden": "h", "keep": [1, 2]})
        self.assertEqual((header[HEADER_KEY], header["modules"], header["deleted"]),
                         (FORMAT, {"j": "json", "threading": "threading"}, ["json"]))
        self.assertEqual(notes, ["not kept (unpicklable): lock (lock), gen (generator)"])
        self.assertIn("lock", namespace, "the namespace itself is left as it was")

    def test_nothing_to_keep_is_no_state_and_no_note(self) -> None:
        self.assertEqual(capture_state(session("print(1)"), {}, MB), (None, [], None))


class RealDataTest(unittest.TestCase):
    """Pickle protocol 5 hands buffers of 64 KiB and more to the file as PickleBuffers."""

    def test_the_state_writer_takes_pickle_buffers(self) -> None:
        out = StateWriter(MB, MB)
        self.assertEqual(out.write(pickle.PickleBuffer(bytearray(100_000))), 100_000)
        out.finish()
        self.assertEqual(lz4.frame.decompress(out.out), bytes(100_000))
        with self.assertRaises(TooLarge) as raised:
            StateWriter(MB, MB).write(pickle.PickleBuffer(bytearray(MB + 1)))
        self.assertFalse(raised.exception.compressed)
        with self.assertRaises(TooLarge) as raised:
            StateWriter(4 * MB, MB).write(pickle.PickleBuffer(np.random.default_rng(0).bytes(2 * MB)))
        self.assertTrue(raised.exception.compressed)

    def test_a_capture_never_holds_the_pickle(self) -> None:
        """48 MB of floats and a 1M-row frame: the capture's peak is about its compressed
        state, not the pickle beside it (about twice the state before)."""
        rng = np.random.default_rng(2)
        namespace = fresh_namespace()
        namespace.update(floats=rng.random(4_000_000),
                         frame=pd.DataFrame({"id": np.arange(1_000_000), "price": rng.normal(size=1_000_000)}))
        raw = len(pickle.dumps((namespace["floats"], namespace["frame"]), protocol=5))
        tracemalloc.start()
        try:
            blob, notes, captured = capture_state(namespace, {}, 256 * MB, max_raw=256 * MB)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert blob is not None and captured is not None
        self.assertEqual(notes, [])
        self.assertLess(peak, len(blob) + raw // 4, f"peak {peak} for a blob of {len(blob)} from {raw} of pickle")
        self.assertEqual(len(captured.digest), 32, "what is kept of the capture is its digest")
        again, _, _ = capture_state(namespace, {}, 256 * MB, captured, max_raw=256 * MB)
        self.assertIs(again, UNCHANGED)
        namespace["frame"].loc[0, "price"] = 1e9  # in place: the same objects, a new state
        changed, _, _ = capture_state(namespace, {}, 256 * MB, captured, max_raw=256 * MB)
        assert changed is not None and changed is not UNCHANGED
        self.assertEqual(decode(changed)[1]["frame"].loc[0, "price"], 1e9)

    def test_a_restore_never_holds_the_pickle(self) -> None:
        rng = np.random.default_rng(4)
        namespace = fresh_namespace()
        namespace.update(floats=rng.random(4_000_000), labels=[f"row {i}" for i in range(100_000)])
        blob, _, captured = capture_state(namespace, {}, 256 * MB, max_raw=256 * MB)
        assert blob is not None and captured is not None
        restored = fresh_namespace()
        tracemalloc.start()
        try:
            loaded = restore_state(blob, restored, Settings([]))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        self.assertEqual(loaded.notes, [])
        self.assertTrue(np.array_equal(restored["floats"], namespace["floats"]))
        self.assertEqual(restored["labels"][-1], "row 99999")
        self.assertLess(peak, 32 * MB + 16 * MB, f"peak {peak}: the names (about 40 MB) and chunks, not the pickle too")
        assert loaded.snapshot is not None
        self.assertEqual(loaded.snapshot.digest, captured.digest, "a restored state is known unchanged")
        again, _, _ = capture_state(restored, {}, 256 * MB, loaded.snapshot, max_raw=256 * MB)
        self.assertIs(again, UNCHANGED)

    def test_over_the_compressed_cap_the_largest_goes_without_holding_it(self) -> None:
        rng = np.random.default_rng(3)
        namespace = fresh_namespace()
        namespace.update(noise=rng.random(2_000_000), small=list(range(1000)))  # 16 MB, incompressible
        tracemalloc.start()
        try:
            blob, notes, _ = capture_state(namespace, {}, 4 * MB, max_raw=256 * MB, live=True)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert blob is not None
        self.assertEqual(len(notes), 1)
        self.assertRegex(notes[0], r"^kept only while the session is live \(over the state limit of 4\.0 MB "
                                   r"compressed\): noise \(15\.\d MB\)$")
        self.assertEqual(decode(blob)[1]["small"], list(range(1000)))
        self.assertLess(peak, 12 * MB, "the frame stops at its cap: never the 16 MB pickle")

    def test_large_objects_round_trip(self) -> None:
        from sklearn.datasets import load_digits
        from sklearn.manifold import Isomap

        digits = load_digits()
        rng = np.random.default_rng(1)
        frame = pd.DataFrame({"id": np.arange(50_000), "price": rng.normal(size=50_000),
                              "city": pd.Categorical(rng.choice(["Lyon", "Oslo", "Kyiv"], 50_000)),
                              "day": pd.date_range("2024-01-01", periods=50_000, freq="min"),
                              "note": [f"n{i}" for i in range(50_000)]})
        namespace = fresh_namespace()
        namespace.update(edge=np.zeros(8191), past=np.zeros(8192), series=pd.Series(np.arange(8192.0)), frame=frame,
                         digits=digits, iso=Isomap(n_components=2).fit(digits.data[:300]))
        restored, notes, restore_notes = round_trip(namespace)
        self.assertEqual((notes, restore_notes), ([], []))
        self.assertEqual(restored["past"].shape, (8192,))
        pd.testing.assert_series_equal(restored["series"], namespace["series"])
        pd.testing.assert_frame_equal(restored["frame"], frame)
        self.assertTrue(np.array_equal(restored["digits"].data, digits.data))
        self.assertTrue(np.allclose(restored["iso"].transform(digits.data[:5]), namespace["iso"].transform(digits.data[:5])))

    def test_pickle_is_bounded_before_it_is_held(self) -> None:
        with self.assertRaises(TooLarge):
            pickle_into(np.zeros(200_000), StateWriter(100_000, keep=False), {})


class LiveGlobalsTest(unittest.TestCase):
    """Restored functions and classes look their globals up in the live namespace."""

    def test_functions_see_the_globals_of_now(self) -> None:
        namespace = session("""
import functools
x = 1
def f():
    return x
g = lambda: x * 2
def make():
    k = 10
    def inner():
        return x + k
    return inner
inner = make()
def deco(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args) + x
    return wrapper
@deco
def decorated():
    return 100
@functools.lru_cache(maxsize=8)
def cached(n):
    return n + x
class Reader:
    def get(self, name):
        return eval(name)
    def now(self):
        return x
reader = Reader()
""")
        restored, notes, _ = round_trip(namespace)
        self.assertEqual(notes, [])
        restored["x"] = 5
        got = (restored["f"](), restored["g"](), restored["inner"](), restored["decorated"](), restored["cached"](1),
               restored["reader"].get("x"), restored["reader"].now(), restored["Reader"]().now())
        self.assertEqual(got, (5, 10, 15, 105, 6, 5, 5, 5))
        self.assertIs(restored["f"].__globals__, restored)
        self.assertIs(restored["__builtins__"], builtins, "builtins stay a module, as in __main__")

    def test_a_global_dropped_is_absent_not_frozen(self) -> None:
        namespace = session("import threading\nlock = threading.Lock()\ndef f():\n    return lock")
        restored, notes, _ = round_trip(namespace)
        self.assertEqual(notes, ["not kept (unpicklable): lock (lock)"])
        with self.assertRaises(NameError):
            restored["f"]()

    def test_names_stay_one_object(self) -> None:
        namespace = session("a = [1]\nb = a\nclass P:\n    pass\np = P()")
        restored, _, _ = round_trip(namespace)
        self.assertIs(restored["a"], restored["b"])
        self.assertIs(type(restored["p"]), restored["P"])


class ModulesTest(unittest.TestCase):
    def test_modules_are_bound_again(self) -> None:
        namespace = session("import scipy.linalg as sla\nfrom scipy import signal\nimport xml.dom\nv = 1")
        restored, _, restore_notes = round_trip(namespace)
        self.assertEqual(restore_notes, [])
        self.assertIs(restored["sla"], namespace["sla"])
        self.assertIs(restored["signal"], namespace["signal"])
        self.assertIs(restored["xml"], namespace["xml"])
        # import xml.dom binds xml, and xml.dom must be imported again too; an import of a
        # package the session no longer binds is not carried.
        blob, _, _ = capture_state(namespace, {}, MB, imports={"xml.dom", "email.mime"})
        assert blob is not None
        loaded = restore_state(blob, fresh_namespace(), Settings([]))
        self.assertEqual(loaded.imports, {"xml.dom"})

    def test_a_module_that_no_longer_imports_is_a_note(self) -> None:
        namespace = session("import json as j\nv = 1")
        blob, _, _ = capture_state(namespace, {}, MB)
        assert blob is not None
        header, names = decode(blob)
        header["modules"]["gone"] = "kiln_no_such_module"
        raw = pickle.dumps(header) + cloudpickle.dumps(names)
        restored = fresh_namespace()
        notes = restore_state(lz4.frame.compress(raw), restored, Settings([])).notes
        self.assertEqual(notes, ["not restored (module no longer imports): gone (module kiln_no_such_module: "
                                 "ModuleNotFoundError: No module named 'kiln_no_such_module')"])
        self.assertEqual((restored["v"], restored["j"]), (1, json))
        self.assertNotIn("gone", restored)

    def test_deleted_pre_imports_stay_deleted(self) -> None:
        namespace = session("v = 1")
        blob, _, _ = capture_state(namespace, {"json": json}, MB)
        assert blob is not None
        restored = fresh_namespace()
        restored["json"] = json  # the new process pre-imported it
        restore_state(blob, restored, Settings([]))
        self.assertNotIn("json", restored)


class SettingsTest(unittest.TestCase):
    def test_changed_settings_carry_over(self) -> None:
        import matplotlib
        import random

        settings = Settings()
        settings.mark_baseline()
        self.addCleanup(settings.apply, {"pandas.options": {"display.max_columns": 0, "display.precision": 6}})
        self.assertEqual(settings.capture(), {}, "a process that changed nothing carries nothing")
        matplotlib.rcParams["lines.linewidth"] = 3.5
        pd.set_option("display.precision", 2)
        pd.set_option("display.max_columns", 3)
        np.set_printoptions(precision=2)
        np.random.seed(42)
        random.seed(7)
        saved = settings.capture()
        want_next = (np.random.rand(), random.random())
        matplotlib.rcdefaults()
        pd.reset_option("display")
        np.set_printoptions(precision=8)
        np.random.seed(1)
        random.seed(1)
        self.assertEqual(settings.apply(saved), [])
        self.assertEqual(matplotlib.rcParams["lines.linewidth"], 3.5)
        self.assertEqual((pd.get_option("display.precision"), pd.get_option("display.max_columns")), (2, 3))
        self.assertEqual(np.get_printoptions()["precision"], 2)
        self.assertEqual((np.random.rand(), random.random()), want_next, "the generators go on where they were")
        self.assertEqual(sorted(saved), ["matplotlib.rcParams", "numpy.printoptions", "numpy.random", "pandas.options",
                                         "random"])
        self.assertEqual(saved["matplotlib.rcParams"], {"lines.linewidth": 3.5}, "only what differs is kept")
        matplotlib.rcdefaults()
        np.set_printoptions(precision=8)

    def test_a_setting_that_cannot_be_applied_is_a_note(self) -> None:
        notes = Settings().apply({"pandas.options": {"display.no_such_option": 1}, "a.future.setting": 1})
        self.assertEqual(len(notes), 1)
        self.assertTrue(notes[0].startswith("setting pandas.options not restored: OptionError"), notes)


class CapsTest(unittest.TestCase):
    def test_over_the_raw_cap_drops_the_largest_first(self) -> None:
        namespace = session("a = bytes(60_000)\nb = bytes(50_000)\nc = 'small'")
        restored, notes, _ = round_trip(namespace, max_raw=100_000)
        self.assertEqual(sorted(name for name in restored if is_user_name(name)), ["b", "c"])
        self.assertEqual(notes, ["not kept (over the state limit of 97.7 KB before compression): a (58.6 KB)"])

    def test_one_name_over_the_cap_alone(self) -> None:
        namespace = session("big = bytes(300_000)\nsmall = 1")
        restored, notes, _ = round_trip(namespace, max_raw=100_000)
        self.assertEqual(sorted(name for name in restored if is_user_name(name)), ["small"])
        self.assertEqual(notes, ["not kept (over the state limit of 97.7 KB before compression): big (over 97.7 KB)"])

    def test_over_the_compressed_cap(self) -> None:
        namespace = session("import os\nnoise = os.urandom(80_000)\nword = 'w' * 10")
        del namespace["os"]
        restored, notes, _ = round_trip(namespace, max_bytes=50_000)
        self.assertEqual(sorted(name for name in restored if is_user_name(name)), ["word"])
        self.assertEqual(len(notes), 1)
        self.assertRegex(notes[0], r"^not kept \(over the state limit of 48\.8 KB compressed\): noise \(78\.\d KB\)$")

    def test_over_the_memory_left_in_the_sandbox(self) -> None:
        # The sandbox has 60 KB of room left: the capture keeps what fits in it and says why.
        namespace = session("import os\nnoise = os.urandom(80_000)\nword = 'w' * 10")
        del namespace["os"]
        with mock.patch.object(state, "memory_room", return_value=60_000):
            restored, notes, _ = round_trip(namespace, max_bytes=64 * MB)
        self.assertEqual(sorted(name for name in restored if is_user_name(name)), ["word"])
        self.assertEqual(len(notes), 1)
        self.assertRegex(notes[0], r"^not kept \(over the memory left in the sandbox, 58\.6 KB\): noise \(78\.\d KB\)$")
        with mock.patch.object(state, "memory_room", return_value=None):  # no limit known: the cap alone
            restored, notes, _ = round_trip(namespace, max_bytes=64 * MB)
        self.assertEqual((sorted(name for name in restored if is_user_name(name)), notes), (["noise", "word"], []))

    def test_memory_room_reads_the_cgroup(self) -> None:
        with tempfile.TemporaryDirectory() as root:
            def write(name: str, text: str) -> None:
                os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
                with open(os.path.join(root, name), "w") as handle:
                    handle.write(text + "\n")

            def v2(limit: str, current: int, inactive_file: int) -> int | None:
                write("memory.max", limit)
                write("memory.current", str(current))
                write("memory.stat", f"anon {current}\nfile 9\ninactive_file {inactive_file}\nactive_file 1")
                return memory_room(root)
            # 512 MB, 300 used of which 100 is page cache it may drop: 312 left, less the reserve.
            self.assertEqual(v2(str(512 * MB), 300 * MB, 100 * MB), 312 * MB - MEMORY_RESERVE)
            self.assertEqual(v2(str(512 * MB), 500 * MB, 0), 0)  # nothing left: never below 0
            self.assertIsNone(v2("max", 300 * MB, 0))  # no limit
        with tempfile.TemporaryDirectory() as root:  # cgroup v1, as Debian 12's Docker here mounts it
            write("memory/memory.limit_in_bytes", str(1024 * MB))
            write("memory/memory.usage_in_bytes", str(600 * MB))
            write("memory/memory.stat", f"cache 9\ninactive_file 7\ntotal_inactive_file {200 * MB}")
            self.assertEqual(memory_room(root), 624 * MB - MEMORY_RESERVE)
            write("memory/memory.limit_in_bytes", "9223372036854771712")  # v1's no limit
            self.assertIsNone(memory_room(root))
        self.assertIsNone(memory_room(os.path.join(root, "missing")))  # no cgroup files at all

    def test_history_goes_before_a_name_of_its_size(self) -> None:
        namespace = session("df = bytes(80_000)\n_ = bytes(80_000)")
        restored, notes, _ = round_trip(namespace, max_raw=100_000)
        self.assertEqual(sorted(name for name in restored if is_user_name(name)), ["df"])
        self.assertTrue(notes[0].endswith(": _ (78.1 KB)"), notes)

    def test_one_object_under_two_names_counts_once(self) -> None:
        namespace = session("df = bytes(80_000)\n_ = df")
        restored, notes, _ = round_trip(namespace, max_raw=100_000)
        self.assertEqual(notes, [])
        self.assertIs(restored["_"], restored["df"])

    def test_unpicklable_and_too_large(self) -> None:
        namespace = session("gen = (i for i in range(0))\nbig = bytes(200_000)\nsmall = 2")
        restored, notes, _ = round_trip(namespace, max_raw=100_000)
        self.assertEqual(restored["small"], 2)
        self.assertEqual(notes, ["not kept (unpicklable): gen (generator)",
                                 "not kept (over the state limit of 97.7 KB before compression): big (over 97.7 KB)"])


class BlobTest(unittest.TestCase):
    def test_the_format_before_the_header_restores(self) -> None:
        blob = lz4.frame.compress(cloudpickle.dumps({"x": [1, 2], "f": lambda v: v + 1}))
        restored = fresh_namespace()
        loaded = restore_state(blob, restored, Settings([]))
        self.assertEqual(loaded.notes, [])
        self.assertIsNone(loaded.snapshot, "an old blob is never unchanged: its first capture is the new format")
        self.assertEqual((restored["x"], restored["f"](1)), ([1, 2], 2))

    def test_blobs_that_do_not_decode_are_notes(self) -> None:
        blobs = [b"", b"not lz4", lz4.frame.compress(b"not a pickle"), lz4.frame.compress(cloudpickle.dumps([1, 2])),
                 lz4.frame.compress(cloudpickle.dumps({1: 2}))]
        for blob in blobs:
            with self.subTest(blob=blob):
                restored = fresh_namespace()
                loaded = restore_state(blob, restored, Settings([]))
                self.assertIsNone(loaded.snapshot)
                self.assertEqual(len(loaded.notes), 1)
                self.assertTrue(loaded.notes[0].startswith("state could not be restored: "), loaded.notes)

    def test_names_that_do_not_load_are_named(self) -> None:
        header = {HEADER_KEY: FORMAT, "names": ["a", "b"]}
        blob = lz4.frame.compress(pickle.dumps(header) + b"garbage")
        notes = restore_state(blob, fresh_namespace(), Settings([])).notes
        self.assertEqual(len(notes), 1)
        self.assertTrue(notes[0].endswith("; lost: a, b"), notes)

    def test_restored_names_capture_to_the_same_blob(self) -> None:
        # What lets a run that only reads its names send no state back. Pickling shares an
        # object met twice (a DataFrame's object dtype, a class's name); unpickling can make two
        # of it, so such values give the same blob only from their first restore on.
        first = session("import numpy as np, pandas as pd\n"
                        "arr = np.arange(12.0).reshape(3, 4)\nbig = np.arange(100_000.0)\n"
                        "numbers = pd.DataFrame({'a': [1, 2], 'c': [0.5, None]})\ntags = {1, 2, 3}")
        second = session("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', 'z']})\n"
                         "class Point:\n    def __init__(self, x):\n        self.x = x\np = Point(3)\n"
                         "scale = lambda v, k=3: v * k")
        for namespace, first_equal in ((first, True), (second, False)):
            with self.subTest(names=sorted(namespace)):
                blob, notes, _ = capture_state(namespace, {}, 1 << 26)
                assert blob is not None
                self.assertEqual(notes, [])
                again_ns = fresh_namespace()
                restore_state(blob, again_ns, Settings([]))
                again, _, _ = capture_state(again_ns, {}, 1 << 26)
                assert again is not None
                self.assertEqual(again == blob, first_equal)
                third_ns = fresh_namespace()
                restore_state(again, third_ns, Settings([]))
                self.assertEqual(capture_state(third_ns, {}, 1 << 26)[0], again)
                # Told what it restored, capture_state knows an unchanged state without
                # compressing it again.
                names_again = fresh_namespace()
                pickled = restore_state(again, names_again, Settings([])).snapshot
                self.assertIs(capture_state(names_again, {}, 1 << 26, pickled)[0], UNCHANGED)
                names_again["extra"] = 1
                changed, _, _ = capture_state(names_again, {}, 1 << 26, pickled)
                self.assertNotIn(changed, (None, UNCHANGED))


class ThreadSafetyNoteTest(unittest.TestCase):
    def test_a_lock_in_a_closure_is_unpicklable(self) -> None:
        namespace = session("import threading\ndef make():\n    lock = threading.Lock()\n    return lambda: lock\n"
                            "get = make()\nv = 1")
        _, notes, _ = capture_state(namespace, {}, MB)
        self.assertEqual(notes, ["not kept (unpicklable): get (function)"])


if __name__ == "__main__":
    unittest.main()
