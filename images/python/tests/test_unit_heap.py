"""Tests of the warm heap: KILN_WARM_HEAP_MB's reading, and that a warmed process's big buffers
take no new pages. mallopt changes the whole process, so each measurement runs in a child."""

import os
import subprocess
import sys
import textwrap
import unittest

import inprocess
from kiln_repl.heap import warm_size

# Warms the heap (when asked), forks (when asked), then allocates a 16 MB buffer (bytearray
# writes its zeros); prints the minor page faults that took and the resident memory before.
CHILD = textwrap.dedent("""
    import os, resource, sys
    from kiln_repl.heap import configure, warm
    from kiln_repl.log import Logger
    size = int(sys.argv[1])
    if size and configure(size, Logger(2)):
        warm(size)
    if sys.argv[2] == "fork":
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    rss_kb = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    buffer = bytearray(16 << 20)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, rss_kb)
""")


def child(warm_bytes: int, fork: bool = False) -> tuple[int, int]:
    """(page faults of the 16 MB buffer, resident KB before it) in a fresh process."""
    env = dict(os.environ, PYTHONPATH=inprocess.SERVER_HOME)
    out = subprocess.run([sys.executable, "-c", CHILD, str(warm_bytes), "fork" if fork else "-"], env=env, check=True,
                         capture_output=True, text=True, timeout=60)
    faults, rss_kb = out.stdout.split()
    return int(faults), int(rss_kb)


class WarmSizeTest(unittest.TestCase):
    def test_cases(self) -> None:
        for value, want in [(None, 0), ("", 0), ("0", 0), ("-5", 0), ("x", 0), ("32", 32 << 20), (" 8 ", 8 << 20)]:
            with self.subTest(value=value):
                self.assertEqual(warm_size(value), want)


class WarmHeapTest(unittest.TestCase):
    def test_a_warmed_heap_serves_a_big_buffer_without_new_pages(self) -> None:
        cold, _ = child(0)
        warmed, _ = child(32 << 20)
        # 16 MB is 4096 pages of 4 KB: a cold process faults on nearly each of them.
        self.assertGreater(cold, 2000, "the cold buffer should fault its pages in")
        self.assertLess(warmed, cold // 10, f"warmed: {warmed} faults, cold: {cold}")

    def test_a_fork_hands_the_warm_heap_back(self) -> None:
        # Children would share the warm pages copy-on-write: the first fork releases them.
        _, kept = child(32 << 20)
        _, released = child(32 << 20, fork=True)
        self.assertLess(released, kept - (24 << 10), f"resident after a fork: {released} KB, without: {kept} KB")


if __name__ == "__main__":
    unittest.main()
