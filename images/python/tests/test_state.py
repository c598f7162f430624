"""State capture and restore across server processes."""

import base64
import unittest

import cloudpickle
import lz4.frame

from repl_client import ReplTestCase, b64

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


def decode_state(blob):
    return cloudpickle.loads(lz4.frame.decompress(base64.b64decode(blob)))


class StateTest(ReplTestCase):
    def test_round_trip_between_processes(self):
        first = self.start()
        captured = first.run(SETUP, capture_state=True)
        self.assertOk(captured)
        self.assertIsNone(captured["state_error"])
        self.assertEqual(base64.b64decode(captured["state"])[:4], b"\x04\x22\x4d\x18")  # LZ4 frame magic
        self.assertEqual(sorted(decode_state(captured["state"])), ["Counter", "arr", "counter", "df", "scale"])

        second = self.start()
        restored = second.run(CHECK, state=captured["state"])
        self.assertOk(restored)
        self.assertEqual(restored["result"], "(np.int64(6), ['x', 'y', 'z'], (3, 4), 66, 6, 6, 'Counter', False)")
        self.assertIsNone(restored["state"], "no capture was asked for")

    def test_unpicklable_names_are_reported_and_the_rest_kept(self):
        repl = self.start()
        code = "import threading\ngen = (i for i in range(3))\nf = open('x.txt', 'w')\nlock = threading.Lock()\nkeep = [1, 2]"
        response = repl.run(code, capture_state=True)
        self.assertOk(response)
        self.assertEqual(response["state_error"],
                         "not kept (unpicklable): gen (generator), f (TextIOWrapper), lock (lock)")
        self.assertEqual(decode_state(response["state"]), {"keep": [1, 2]})

    def test_corrupt_blobs_give_state_error_and_a_clean_run(self):
        not_lz4 = b64(b"hello there")
        not_pickle = b64(lz4.frame.compress(b"garbage"))
        not_a_dict = b64(lz4.frame.compress(cloudpickle.dumps([1, 2])))
        for blob in ("%%% not base64", not_lz4, not_pickle, not_a_dict):
            repl = self.start()
            response = repl.run("x = 1\n'leaked' in globals()", state=blob, capture_state=True)
            self.assertOk(response)
            self.assertEqual(response["result"], "False")
            self.assertTrue(response["state_error"].startswith("state could not be restored: "), response["state_error"])
            self.assertEqual(decode_state(response["state"]), {"x": 1})

    def test_untouched_preloads_and_modules_are_not_kept(self):
        repl = self.start(preload=True)
        response = repl.run("import statistics\nnp = 5\ny = pd.Series([1])", capture_state=True)
        self.assertOk(response)
        state = decode_state(response["state"])
        self.assertEqual(sorted(state), ["np", "y"])
        self.assertEqual(state["np"], 5)

    def test_state_over_the_limit_is_dropped(self):
        repl = self.start()
        response = repl.run("import os\nblob = os.urandom(100_000)", capture_state=True,
                            limits={"max_state_bytes": 50_000})
        self.assertIsNone(response["state"])
        self.assertRegex(response["state_error"], r"^state dropped: \d+ bytes compressed, over the limit of 50000$")

    def test_an_empty_namespace_is_no_state_and_no_note(self):
        repl = self.start(preload=True)
        response = repl.run("import math\nprint(1)", capture_state=True)
        self.assertOk(response)
        self.assertIsNone(response["state"], "modules and untouched pre-imports are not state")
        self.assertIsNone(response["state_error"])

    def test_no_capture_means_no_state(self):
        repl = self.start()
        response = repl.run("x = 1")
        self.assertIsNone(response["state"])
        self.assertIsNone(response["state_error"])


if __name__ == "__main__":
    unittest.main()
