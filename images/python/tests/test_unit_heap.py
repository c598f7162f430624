"""Tests of the warm heap: KILN_WARM_HEAP_MB's reading, and that a warmed process's big buffers
take no new pages. mallopt changes the whole process, so each measurement runs in a child."""

import os
import subprocess
import sys
import textwrap
import unittest

import inprocess
from kiln_repl.heap import warm_size

# Allocates a 16 MB buffer (bytearray writes its zeros) after the warm-up, if any, and prints
# the minor page faults that took.
CHILD = textwrap.dedent("""
    import resource, sys
    from kiln_repl.heap import configure, warm
    from kiln_repl.log import Logger
    size = int(sys.argv[1])
    if size and configure(size, Logger(2)):
        warm(size)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    buffer = bytearray(16 << 20)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def faults_for_16mb(warm_bytes: int) -> int:
    env = dict(os.environ, PYTHONPATH=inprocess.SERVER_HOME)
    out = subprocess.run([sys.executable, "-c", CHILD, str(warm_bytes)], env=env, check=True,
                         capture_output=True, text=True, timeout=60)
    return int(out.stdout)


class WarmSizeTest(unittest.TestCase):
    def test_cases(self) -> None:
        for value, want in [(None, 0), ("", 0), ("0", 0), ("-5", 0), ("x", 0), ("32", 32 << 20), (" 8 ", 8 << 20)]:
            with self.subTest(value=value):
                self.assertEqual(warm_size(value), want)


class WarmHeapTest(unittest.TestCase):
    def test_a_warmed_heap_serves_a_big_buffer_without_new_pages(self) -> None:
        cold = faults_for_16mb(0)
        warmed = faults_for_16mb(32 << 20)
        # 16 MB is 4096 pages of 4 KB: a cold process faults on nearly each of them.
        self.assertGreater(cold, 2000, "the cold buffer should fault its pages in")
        self.assertLess(warmed, cold // 10, f"warmed: {warmed} faults, cold: {cold}")


if __name__ == "__main__":
    unittest.main()
