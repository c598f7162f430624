"""A warm heap: memory the warm-up touches, so that the request's big buffers find their pages.

A sandbox's REPL is a fresh process that serves one request. Every large buffer of that
request (the state payload, its decompressed pickle, the unpickled objects, the pickle of the
capture, a file's bytes) would otherwise be new memory, and the kernel hands new memory over a
page at a time on first touch: for a 10 MB state that was about 30 of the 35 ms the REPL
spent on it (docs/performance.md). The warm-up has time to spare, so it touches the memory
once and hands it back to malloc, which keeps it: glibc's main arena for every thread, large
blocks carved from that heap rather than mapped one by one, and no trimming below the warm
size.

The price is memory: the warm size stays resident while the sandbox waits in the pool. kiln
adds it to the container's memory limit, so that user code keeps the memory it was promised.
Large allocations (malloc, which numpy and bytes use) reuse it; Python's small objects have
their own arenas and do not. A process that forks would also share it copy-on-write with every
child, and each page the parent then writes would be charged again: so the first fork of user
code hands the unused part back to the kernel and puts malloc's defaults back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

from kiln_repl.log import Logger

# The variable kiln sets: megabytes to warm, 0 or unset for none.
WARM_HEAP_ENV = "KILN_WARM_HEAP_MB"

# mallopt parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
# glibc's largest mmap threshold on 64-bit (HEAP_MAX_SIZE / 2): blocks up to this size come
# from the heap, so from the warm memory.
MMAP_THRESHOLD_MAX = 32 << 20
# Blocks of the warm-up: under the mmap threshold, so they come from the heap, and freed
# together they merge into one free top of the heap.
CHUNK = 4 << 20
# glibc's defaults for the two thresholds, put back by release().
DEFAULT_THRESHOLD = 128 << 10

_libc: ctypes.CDLL | None = None  # set by configure() once malloc is tuned


def warm_size(value: str | None) -> int:
    """The bytes to warm for the variable's value: 0 when unset, empty, invalid or not positive."""
    try:
        mb = int(value or "0")
    except ValueError:
        return 0
    return max(mb, 0) << 20


def configure(size: int, logger: Logger) -> bool:
    """Tunes malloc to keep what warm() touches; call before the process starts threads.

    Returns False (and changes nothing that matters) when malloc is not glibc's.
    """
    global _libc
    if size <= 0:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError) as exc:
        logger.log(f"warm heap: no glibc mallopt ({exc}); skipped")
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # One arena: the reader thread's payload buffers come from the same warm heap. Large
    # blocks from the heap, and the heap kept up to the warm size when they are freed.
    ok = all(mallopt(param, value) == 1 for param, value in (
        (M_ARENA_MAX, 1),
        (M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX),
        (M_TRIM_THRESHOLD, size + CHUNK),
    ))
    if not ok:
        logger.log("warm heap: mallopt refused a setting; skipped")
        return False
    _libc = libc
    os.register_at_fork(before=release)
    return True


def release() -> None:
    """Puts malloc's thresholds back and hands the free heap to the kernel, once: before the
    first fork, so that children do not share the warm pages (see the module's doc)."""
    global _libc
    libc, _libc = _libc, None
    if libc is None:
        return
    libc.mallopt(M_MMAP_THRESHOLD, DEFAULT_THRESHOLD)
    libc.mallopt(M_TRIM_THRESHOLD, DEFAULT_THRESHOLD)
    libc.malloc_trim(0)


def warm(size: int) -> None:
    """Touches size bytes of heap and frees them: malloc keeps them for the request."""
    chunks = [bytearray(CHUNK) for _ in range(size // CHUNK)]  # bytearray(n) writes its zeros
    del chunks
