"""State capture and restore across server processes."""

import io
import pickle
import unittest
from typing import Any

import cloudpickle
import lz4.frame

import inprocess  # noqa: F401  (the server's package, by path)
from kiln_repl.state import bind_namespace
from repl_client import ReplTestCase

SETUP = """
import numpy as np
import pandas as pd

df = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
arr = np.arange(12).reshape(3, 4)

def scale(v, k=3):
    return v * k

class Counter:
    def __init__(self):
        self.n = 0
    def add(self, k):
        self.n += k
        return self.n

counter = Counter()
counter.add(5)
_private = 1
"""

CHECK = """
(df["a"].sum(), df["b"].tolist(), arr.shape, int(arr.sum()), scale(2), counter.add(1),
 type(counter).__name__, "_private" in globals())
"""


def decode_state(blob: bytes) -> Any:
    """The names a blob holds (its second pickle, after the header)."""
    bind_namespace({})  # what the session's functions take as their globals here
    stream = io.BytesIO(lz4.frame.decompress(blob))
    pickle.load(stream)
    return cloudpickle.load(stream)


def user_names(names: Any) -> list[str]:
    return sorted(names)


class StateTest(ReplTestCase):
    def test_round_trip_between_processes(self) -> None:
        first = self.start()
        captured = first.run(SETUP, capture_state=True)
        self.assertOk(captured)
        self.assertIsNone(captured["state_error"])
        self.assertEqual(captured["state"], {"size": len(captured["state_blob"])})
        self.assertFalse(captured["state_unchanged"])
        self.assertEqual(captured["state_blob"][:4], b"\x04\x22\x4d\x18")  # LZ4 frame magic
        self.assertEqual(sorted(decode_state(captured["state_blob"])), ["Counter", "_private", "arr", "counter", "df", "scale"])

        second = self.start()
        restored = second.run(CHECK, state=captured["state_blob"])
        self.assertOk(restored)
        self.assertEqual(restored["result"], "(np.int64(6), ['x', 'y', 'z'], (3, 4), 66, 6, 6, 'Counter', True)")
        self.assertEqual((restored["state"], restored["state_unchanged"]), (None, False), "no capture was asked for")

    def test_unpicklable_names_are_reported_and_the_rest_kept(self) -> None:
        repl = self.start()
        code = "import threading\ngen = (i for i in range(3))\nf = open('x.txt', 'w')\nlock = threading.Lock()\nkeep = [1, 2]"
        response = repl.run(code, capture_state=True)
        self.assertOk(response)
        self.assertEqual(response["state_error"],
                         "not kept (unpicklable): gen (generator), f (TextIOWrapper), lock (lock)")
        self.assertEqual(decode_state(response["state_blob"]), {"keep": [1, 2]})

    def test_corrupt_blobs_give_state_error_and_a_clean_run(self) -> None:
        not_pickle = lz4.frame.compress(b"garbage")
        not_a_dict = lz4.frame.compress(cloudpickle.dumps([1, 2]))
        for blob in (b"", b"hello there", not_pickle, not_a_dict):
            repl = self.start()
            response = repl.run("x = 1\n'leaked' in globals()", state=blob, capture_state=True)
            self.assertOk(response)
            self.assertEqual(response["result"], "False")
            self.assertTrue(response["state_error"].startswith("state could not be restored: "), response["state_error"])
            self.assertEqual(decode_state(response["state_blob"]), {"x": 1, "_": False})

    def test_untouched_preloads_are_not_kept_and_modules_by_name(self) -> None:
        repl = self.start(preload=True)
        response = repl.run("import statistics\nnp = 5\ny = pd.Series([1])", capture_state=True)
        self.assertOk(response)
        state = decode_state(response["state_blob"])
        self.assertEqual(sorted(state), ["np", "y"])
        self.assertEqual(state["np"], 5)
        restored = self.start(preload=True).run("statistics.mean([1, 3]), np", state=response["state_blob"])
        self.assertOk(restored)
        self.assertEqual(restored["result"], "(2, 5)")

    def test_state_over_the_limit_keeps_what_fits(self) -> None:
        repl = self.start()
        response = repl.run("import os\nblob = os.urandom(100_000)\nkeep = [1, 2]", capture_state=True,
                            limits={"max_state_bytes": 50_000})
        self.assertOk(response)
        self.assertEqual(decode_state(response["state_blob"]), {"keep": [1, 2]})
        self.assertRegex(response["state_error"],
                         r"^not kept \(over the state limit of 48\.8 KB compressed\): blob \(9\d\.\d KB\)$")

    def test_state_over_the_raw_limit_keeps_what_fits(self) -> None:
        # Zeros compress to nothing: only the cap on the pickle stops them, before the
        # sandbox has to hold a second copy.
        repl = self.start()
        response = repl.run("big = bytes(3_000_000)\nsmall = 'kept'\nprint(len(big))", capture_state=True,
                            limits={"max_state_raw_bytes": 1_000_000})
        self.assertOk(response)
        self.assertEqual(response["stdout"], "3000000\n")
        self.assertEqual(decode_state(response["state_blob"]), {"small": "kept"})
        self.assertEqual(response["state_error"],
                         "not kept (over the state limit of 976.6 KB before compression): big (over 976.6 KB)")

    def test_an_empty_namespace_is_no_state_and_no_note(self) -> None:
        repl = self.start(preload=True)
        response = repl.run("import json\nprint(1)", capture_state=True)
        self.assertOk(response)
        self.assertIsNone(response["state"], "untouched pre-imports are not state")
        self.assertIsNone(response["state_error"])

    def test_a_run_that_only_reads_sends_no_state_back(self) -> None:
        first = self.start()
        blob = first.run("x = [1, 2]", capture_state=True)["state_blob"]
        repl = self.start()
        # A final expression's value is the new _: that run changes the state.
        read = repl.run("print(x)", state=blob, capture_state=True)
        self.assertOk(read)
        self.assertEqual(read["stdout"], "[1, 2]\n")
        self.assertEqual((read["binary"], read["state"], read["state_unchanged"], read["state_error"]), (0, None, True, None))
        written = repl.run("y = 1", state=blob, capture_state=True)
        self.assertOk(written)
        self.assertFalse(written["state_unchanged"])
        self.assertEqual(decode_state(written["state_blob"]), {"x": [1, 2], "y": 1})
        same_process = repl.run("print(len(x))", state=written["state_blob"], capture_state=True)
        self.assertEqual((same_process["state"], same_process["state_unchanged"]), (None, True))

    def test_unchanged_data_frames_and_arrays_are_unchanged(self) -> None:
        # Numbers pickle to the same bytes after a restore, in another process too.
        captured = self.start().run("import numpy as np, pandas as pd\n"
                                    "df = pd.DataFrame({'a': [1, 2, 3], 'c': [0.5, None, 2.0]})\n"
                                    "arr = np.arange(12).reshape(3, 4)", capture_state=True)
        self.assertOk(captured)
        repl = self.start()
        for code in ("print(df.describe())", "print(arr.sum())", "print(df, arr)"):
            with self.subTest(code=code):
                response = repl.run(code, state=captured["state_blob"], capture_state=True)
                self.assertOk(response)
                self.assertEqual((response["state"], response["state_unchanged"]), (None, True))
        changed = repl.run("df['a'] += 1", state=captured["state_blob"], capture_state=True)
        self.assertFalse(changed["state_unchanged"])
        self.assertIsNotNone(changed["state_blob"])

    def test_shared_objects_are_unchanged_from_the_first_restore_on(self) -> None:
        # Strings in a DataFrame, a class and a function of the session: pickling the live
        # values shares objects that unpickling makes two of, so the first read-only run sends
        # the state back once; from that blob on, reads send nothing.
        captured = self.start().run(SETUP, capture_state=True)
        self.assertOk(captured)
        first_read = self.start().run("print(df.shape)", state=captured["state_blob"], capture_state=True)
        self.assertOk(first_read)
        self.assertFalse(first_read["state_unchanged"])
        for code in ("print(df.describe())", "print(scale(2))", "print(df, arr)"):
            with self.subTest(code=code):
                response = self.start().run(code, state=first_read["state_blob"], capture_state=True)
                self.assertOk(response)
                self.assertEqual((response["state"], response["state_unchanged"]), (None, True))

    def test_a_failed_run_captures_what_it_bound_before_the_error(self) -> None:
        # The host decides what to keep (on_error); the REPL always says.
        response = self.start().run("a = 1\nb = [a] * 3\n1 / 0\nc = 2", capture_state=True)
        self.assertEqual(response["status"], "error")
        self.assertEqual(decode_state(response["state_blob"]), {"a": 1, "b": [1, 1, 1]})

    def test_no_capture_means_no_state(self) -> None:
        repl = self.start()
        response = repl.run("x = 1", state=lz4.frame.compress(cloudpickle.dumps({"x": 1})))
        self.assertEqual((response["state"], response["state_unchanged"], response["state_error"]), (None, False, None))


if __name__ == "__main__":
    unittest.main()
