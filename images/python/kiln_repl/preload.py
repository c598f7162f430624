"""What is imported before the first request: the data stack by group, and the state codecs."""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from kiln_repl.log import Logger
from kiln_repl.running import SERVER_HOME

# Pre-imports by group, each group named after its distribution: (name in the user namespace,
# module). matplotlib comes before seaborn so that the backend from MPLBACKEND is in place when
# seaborn loads pyplot. The standard library modules are cheap and always bound.
PRELOAD_GROUPS: dict[str, list[tuple[str, str]]] = {
    "numpy": [("np", "numpy")],
    "pandas": [("pd", "pandas")],
    "scipy": [("scipy", "scipy"), ("stats", "scipy.stats"), ("optimize", "scipy.optimize"),
              ("interpolate", "scipy.interpolate")],
    "sklearn": [("linear_model", "sklearn.linear_model"), ("tree", "sklearn.tree"),
                ("ensemble", "sklearn.ensemble"), ("cluster", "sklearn.cluster"),
                ("preprocessing", "sklearn.preprocessing"), ("model_selection", "sklearn.model_selection"),
                ("metrics", "sklearn.metrics")],
    "statsmodels": [("sm", "statsmodels.api")],
    "matplotlib": [("matplotlib", "matplotlib"), ("plt", "matplotlib.pyplot")],
    "seaborn": [("sns", "seaborn")],
}
STDLIB_PRELOADS = [(name, name) for name in "json csv datetime collections itertools functools math random re os sys".split()]
PRELOADS = [pair for group in PRELOAD_GROUPS.values() for pair in group] + STDLIB_PRELOADS
VERSIONED = list(PRELOAD_GROUPS)
# The host chooses the groups with this variable: a comma-separated list of group names, or
# "none". Unset means every group. The host validates the names; unknown ones are logged here.
PRELOAD_ENV = "KILN_PRELOAD"
STATE_CODECS = ["cloudpickle", "lz4.frame"]
# matplotlib's backend: the image names it in MPLBACKEND, as module://MPL_BACKEND.
MPL_BACKEND = "kiln_repl.mplbackend"
BAKED_FONT_CACHE = os.path.join(SERVER_HOME, "matplotlib")


def preload_plan(groups: str | None) -> tuple[list[tuple[str, str]], list[str]]:
    """The (alias, module) pairs to pre-import for the value of KILN_PRELOAD, and the unknown
    group names in it.

    None (unset) means every group; "none" or "" means none of the groups. The standard
    library modules are bound in every case.
    """
    if groups is None:
        return PRELOADS, []
    chosen: list[str] = []
    unknown: list[str] = []
    for name in (part.strip().lower() for part in groups.split(",")):
        if name in ("", "none"):
            continue
        if name == "all":
            return PRELOADS, unknown
        if name not in PRELOAD_GROUPS:
            unknown.append(name)
            continue
        chosen.append(name)
    # The table's order, whatever the variable's: matplotlib before seaborn.
    pairs = [pair for name, group in PRELOAD_GROUPS.items() if name in chosen for pair in group]
    return pairs + STDLIB_PRELOADS, unknown


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Keeps the cyclic garbage collector off while the body runs, then freezes what it made.

    The pre-imports create a few hundred thousand long-lived objects and almost no garbage,
    so the collections they would trigger are wasted work: about a sixth of the import
    CPU (docs/performance.md). Frozen, those objects also stay out of every later collection
    of user code. The price is the little cyclic garbage the imports leave (a few thousand
    objects), which is kept for the life of this single-use process.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def seed_matplotlib_cache(logger: Logger) -> None:
    """Copies the font cache built into the image into the writable MPLCONFIGDIR.

    The root filesystem is read-only and MPLCONFIGDIR lives on a fresh tmpfs, so without this
    matplotlib would rebuild its font list on every container start.
    """
    target = os.environ.setdefault("MPLCONFIGDIR", os.path.join(tempfile.gettempdir(), "matplotlib"))
    os.environ.setdefault("MPLBACKEND", f"module://{MPL_BACKEND}")
    baked = Path(BAKED_FONT_CACHE)
    if not baked.is_dir():
        return
    try:
        os.makedirs(target, exist_ok=True)
        for source in baked.iterdir():
            destination = os.path.join(target, source.name)
            if source.is_file() and not os.path.exists(destination):
                shutil.copyfile(source, destination)  # a copy, so matplotlib may rewrite it
    except OSError as exc:
        logger.log(f"matplotlib font cache not copied: {exc}")
