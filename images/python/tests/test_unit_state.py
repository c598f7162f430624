"""In-process tests of the state: which names are kept, and the blob's round trip."""

import builtins
import json
import threading
import unittest
from typing import Any

import cloudpickle
import lz4.frame

import inprocess  # noqa: F401  (the server's package, by path)
from kiln_repl.state import UNCHANGED, TooLarge, capture_state, is_kept, pickle_bounded, restore_state


class IsKeptTest(unittest.TestCase):
    def test_cases(self) -> None:
        alias = object()
        untouched = {"np": alias}
        cases = [
            ("x", 1, True),
            ("_private", 1, False),
            ("__name__", "__main__", False),
            ("json", json, False),  # a module, whatever its name
            ("np", alias, False),  # a pre-imported alias left alone
            ("np", 5, True),  # rebound by the user
            ("print", builtins.print, False),  # a builtin under its own name
            ("show", builtins.print, True),  # under another name
            ("print", 5, True),  # a builtin's name rebound
            ("f", lambda: 1, True),
        ]
        for name, value, want in cases:
            with self.subTest(name=name, value=value):
                self.assertEqual(is_kept(name, value, untouched), want)


def decode(blob: bytes) -> Any:
    return cloudpickle.loads(lz4.frame.decompress(blob))


class CaptureStateTest(unittest.TestCase):
    def test_what_is_captured(self) -> None:
        alias = object()
        namespace = {"__name__": "__main__", "__builtins__": builtins, "_": 3, "np": alias, "json": json,
                     "keep": [1, 2], "lock": threading.Lock(), "gen": (i for i in range(2)), "text": "t"}
        blob, notes = capture_state(namespace, {"np": alias}, 1 << 20)
        self.assertIsNotNone(blob)
        assert blob is not None
        self.assertEqual(blob[:4], b"\x04\x22\x4d\x18")  # LZ4 frame magic
        self.assertEqual(decode(blob), {"keep": [1, 2], "text": "t"})
        self.assertEqual(notes, ["not kept (unpicklable): lock (lock), gen (generator)"])
        self.assertIn("lock", namespace, "the namespace itself is left as it was")

    def test_nothing_to_keep_is_no_state_and_no_note(self) -> None:
        self.assertEqual(capture_state({"_x": 1, "json": json}, {}, 1 << 20), (None, []))

    def test_over_the_limit_is_dropped(self) -> None:
        blob, notes = capture_state({"noise": bytes(range(256)) * 400}, {}, 100)
        self.assertIsNone(blob)
        self.assertEqual(len(notes), 1)
        self.assertRegex(notes[0], r"^state dropped: \d+ bytes compressed, over the limit of 100$")

    def test_over_the_raw_limit_is_dropped_before_it_is_held(self) -> None:
        big = bytes(200_000)  # compresses to almost nothing: only the raw cap can stop it
        blob, notes = capture_state({"big": big, "small": 1}, {}, 1 << 20, max_raw=100_000)
        self.assertIsNone(blob)
        self.assertEqual(notes, ["state dropped: over the limit of 100000 bytes before compression"])
        with self.assertRaises(TooLarge):
            pickle_bounded(big, 100_000)

    def test_unpicklable_names_and_the_raw_limit(self) -> None:
        # gen comes first, so the first pickle fails on it rather than on the size.
        blob, notes = capture_state({"gen": (i for i in range(0)), "big": bytes(200_000)}, {}, 1 << 20,
                                    max_raw=100_000)
        self.assertIsNone(blob)
        self.assertEqual(notes, ["not kept (unpicklable): gen (generator)",
                                 "state dropped: over the limit of 100000 bytes before compression"])

    def test_bounded_pickle_is_cloudpickles(self) -> None:
        # restored pickles are compared byte for byte with captured ones: both must be
        # cloudpickle.dumps's bytes exactly.
        value = {"x": [1.5, "s", b"b" * 100_000], "f": lambda v: v + 1}
        self.assertEqual(bytes(pickle_bounded(value, 1 << 20)), cloudpickle.dumps(value))

    def test_round_trip(self) -> None:
        namespace = {"x": {"a": [1.5, None]}, "f": lambda v: v * 2}
        blob, _ = capture_state(namespace, {}, 1 << 20)
        assert blob is not None
        restored, pickled = restore_state(memoryview(bytearray(blob)))  # as a slice of the request's payloads
        self.assertEqual(lz4.frame.compress(pickled), blob)
        self.assertEqual(sorted(restored), ["f", "x"])
        self.assertEqual(restored["x"], {"a": [1.5, None]})
        self.assertEqual(restored["f"](4), 8)

    def test_restored_names_capture_to_the_same_blob(self) -> None:
        # What lets a run that only reads its names send no state back. Pickling shares an
        # object met twice (a DataFrame's object dtype, a class's name); unpickling can make two
        # of it, so such values give the same blob only from their first restore on.
        import numpy as np
        import pandas as pd

        class Point:
            def __init__(self, x: int) -> None:
                self.x = x

        at_once = {"arr": np.arange(12.0).reshape(3, 4), "numbers": pd.DataFrame({"a": [1, 2], "c": [0.5, None]}),
                   "series": pd.Series([1.0, 2.0], name="s"), "words": {"k": ["v", 1, ("t", None)]},
                   "tags": {1, 2, 3}}  # ints: a set of strings may iterate in another order once rebuilt
        after_a_restore = {"df": pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]}), "Point": Point,
                           "p": Point(3), "scale": lambda v, k=3: v * k}
        for names, first_equal in ((at_once, True), (after_a_restore, False)):
            with self.subTest(names=sorted(names)):
                blob, notes = capture_state(names, {}, 1 << 26)
                assert blob is not None
                self.assertEqual(notes, [])
                again, _ = capture_state(restore_state(blob)[0], {}, 1 << 26)
                assert again is not None
                self.assertEqual(again == blob, first_equal)
                third, _ = capture_state(restore_state(again)[0], {}, 1 << 26)
                self.assertEqual(third, again)
                # Told what it restored, capture_state knows an unchanged state without
                # compressing it again.
                names_again, pickled = restore_state(again)
                self.assertIs(capture_state(names_again, {}, 1 << 26, pickled)[0], UNCHANGED)
                names_again["extra"] = 1
                changed, _ = capture_state(names_again, {}, 1 << 26, pickled)
                self.assertNotIn(changed, (None, UNCHANGED))

    def test_blobs_that_do_not_decode_raise(self) -> None:
        blobs = [b"", b"not lz4", lz4.frame.compress(b"not a pickle"), lz4.frame.compress(cloudpickle.dumps([1, 2])),
                 lz4.frame.compress(cloudpickle.dumps({1: 2}))]
        for blob in blobs:
            with self.subTest(blob=blob):
                with self.assertRaises(Exception):
                    restore_state(blob)


if __name__ == "__main__":
    unittest.main()
