"""What one state capture costs the REPL in time and memory, run in the image:

    docker run --rm --cpus 1 -v $PWD/test/bench/capture_memory.py:/c.py:ro \
        [-v OTHER/kiln_repl:/opt/kiln/kiln_repl:ro] --entrypoint python3 kiln-python /c.py LABEL

A 1M-row DataFrame with a string column and 32 MB of floats (47 MB of pickle): a first
capture, then one of the unchanged namespace, each timed, and how much the process's peak
RSS grew during the first. Run a fresh container per figure (the peak is the process's)."""

import resource
import sys
import time

import numpy as np
import pandas as pd

import kiln_repl.state as state

rng = np.random.default_rng(0)
names = {"df": pd.DataFrame({"a": np.arange(1_000_000), "b": rng.random(1_000_000),
                             "c": rng.choice(["x", "y", "z"], 1_000_000)}),
         "arr": rng.random(4_000_000)}
state.capture_state({}, {}, 1 << 20)  # imports cloudpickle and lz4 before the peak is read
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
blob, notes, captured = state.capture_state(names, {}, 64 << 20, max_raw=256 << 20, live=True)
first = time.perf_counter()
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
again, _, _ = state.capture_state(names, {}, 64 << 20, captured, max_raw=256 << 20, live=True)
second = time.perf_counter()
assert blob and again is state.UNCHANGED, notes
print(f"{sys.argv[1] if len(sys.argv) > 1 else 'capture'}: capture {1e3 * (first - started):.0f} ms, "
      f"unchanged {1e3 * (second - first):.0f} ms, peak RSS grew {grown / 1024:.0f} MB, "
      f"blob {len(blob) / (1 << 20):.0f} MB")
