"""Process-wide settings a notebook keeps from one cell to the next, outside its names.

A live interpreter keeps more than its variables: the style matplotlib draws with and the
colormaps registered with it, pandas' display options, numpy's print options and floating-point
error handling, scikit-learn's configuration, the position of the global random generators,
the warning filters, the environment, the working directory, sys.path, the recursion limit. A session restored into a
fresh process gets them back from its state: each Setting reads its current value, and the
state keeps only those that differ from what this process had when it became ready (its
baseline), so a session that never touched them carries nothing.

A library the process has not imported is not read: its settings cannot have changed.
"""

from __future__ import annotations

import contextvars
import copy
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from kiln_repl import shell
from kiln_repl.running import SOURCES

_MISSING = object()

# matplotlib's keys that name the REPL's own backend, never the user's style.
MPL_OWN_KEYS = frozenset({"backend", "backend_fallback"})


def copied(current: Any, baseline: Any) -> Any:
    """What a setting without a diff keeps: a copy of the whole of it (a list the process
    goes on changing, such as sys.path, must not change the copy)."""
    return copy.copy(current)


@dataclass(frozen=True)
class Setting:
    """One setting. read returns its value as the process holds it, without copying (None
    when there is nothing to read), equal compares it with the baseline, a copy taken once
    (snapshot); diff is what to keep of it, made anew, and apply puts that back. Every
    capture reads every setting, so reading and comparing must cost microseconds."""

    name: str
    read: Callable[[], Any]
    apply: Callable[[Any], None]
    diff: Callable[[Any, Any], Any] = copied
    equal: Callable[[Any, Any], bool] = lambda current, baseline: bool(current == baseline)
    snapshot: Callable[[Any], Any] = copy.deepcopy
    # A late setting is put back after the names: the working directory, so that modules
    # are imported again from where the code imported them.
    late: bool = False
    # default gives the library's own defaults, the baseline of a library that this process
    # imported only after it became ready.
    default: Callable[[], Any] | None = None
    # A volatile setting changes with every cell (IPython's execution count): it goes into a
    # state written for another reason, and is never itself a reason to write one.
    volatile: bool = False


def loaded(name: str) -> Any:
    """The module if this process imported it, else None."""
    return sys.modules.get(name)


# matplotlib: rcParams holds every style setting (plt.style.use, sns.set_theme, rc(...)).
# dict's own methods read the stored values without RcParams' per-key validation.

def read_rc() -> Any:
    mpl = loaded("matplotlib")
    return None if mpl is None else mpl.rcParams


def snapshot_rc(rc: Any) -> dict[str, Any]:
    return copy.deepcopy(dict(dict.items(rc)))


def equal_rc(rc: Any, baseline: dict[str, Any] | None) -> bool:
    return baseline is not None and dict.__eq__(rc, baseline) is True


def diff_rc(current: Any, baseline: dict[str, Any] | None) -> dict[str, Any]:
    base = baseline or {}
    return {key: copy.deepcopy(value) for key, value in dict.items(current)
            if key not in MPL_OWN_KEYS and base.get(key, _MISSING) != value}


def default_rc() -> dict[str, Any]:
    import matplotlib

    return dict(dict.items(matplotlib.rcParamsDefault))


def apply_rc(diff: dict[str, Any]) -> None:
    import matplotlib

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a deprecated key warns when set; it was set once already
        matplotlib.rcParams.update(diff)


# Colormaps registered by name (matplotlib.colormaps.register): the names are compared, the
# new ones kept with their maps.

def read_colormap_names() -> tuple[str, ...] | None:
    mpl = loaded("matplotlib")
    return None if mpl is None else tuple(sorted(mpl.colormaps))


def default_colormap_names() -> tuple[str, ...]:
    from matplotlib import cm

    return tuple(sorted(cm._gen_cmap_registry()))


def diff_colormaps(current: tuple[str, ...], baseline: tuple[str, ...] | None) -> dict[str, Any]:
    import matplotlib

    known = set(baseline or ())
    return {name: matplotlib.colormaps[name] for name in current if name not in known}


def apply_colormaps(maps: dict[str, Any]) -> None:
    import matplotlib

    for name, colormap in maps.items():
        matplotlib.colormaps.register(colormap, name=name, force=True)


# pandas: its options live in one nested dict; set_option takes dotted keys.

def read_pandas() -> dict[str, Any] | None:
    if loaded("pandas") is None:
        return None
    from pandas._config import config

    options: dict[str, Any] = config._global_config
    return options


def default_pandas() -> dict[str, Any]:
    from pandas._config import config

    return {key: option.defval for key, option in config._registered_options.items()}


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def diff_pandas(current: dict[str, Any], baseline: dict[str, Any] | None) -> dict[str, Any]:
    base = flatten(baseline or {})  # the defaults are flat already
    return {key: value for key, value in flatten(current).items() if base.get(key, _MISSING) != value}


def apply_pandas(diff: dict[str, Any]) -> None:
    import pandas

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for key, value in diff.items():
            pandas.set_option(key, value)


def read_printoptions() -> dict[str, Any] | None:
    numpy = loaded("numpy")
    return None if numpy is None else numpy.get_printoptions()  # a new dict each time


def diff_dict(current: dict[str, Any], baseline: dict[str, Any] | None) -> dict[str, Any]:
    base = baseline or {}
    return {key: copy.deepcopy(value) for key, value in current.items() if base.get(key, _MISSING) != value}


def default_printoptions() -> dict[str, Any]:
    import numpy

    # numpy keeps its print options in a context variable: an empty context holds the defaults.
    options: Any = contextvars.Context().run(numpy.get_printoptions)
    return dict(options)


def apply_printoptions(diff: dict[str, Any]) -> None:
    import numpy

    numpy.set_printoptions(**diff)


def read_errstate() -> dict[str, str] | None:
    numpy = loaded("numpy")
    return None if numpy is None else dict(numpy.geterr())


def default_errstate() -> dict[str, str]:
    import numpy

    errstate: Any = contextvars.Context().run(numpy.geterr)
    return {str(key): str(value) for key, value in errstate.items()}


def apply_errstate(diff: dict[str, str]) -> None:
    import numpy

    seterr: Any = numpy.seterr  # numpy's stubs want literals; the keys and values are geterr's own
    seterr(**diff)


def read_sklearn() -> dict[str, Any] | None:
    sklearn = loaded("sklearn")
    return None if sklearn is None else dict(sklearn.get_config())


def default_sklearn() -> dict[str, Any]:
    from sklearn import _config

    defaults: dict[str, Any] = dict(_config._global_config)
    return defaults


def apply_sklearn(diff: dict[str, Any]) -> None:
    import sklearn

    sklearn.set_config(**diff)


# The global generators: random's, and numpy's legacy one behind np.random.seed and
# np.random.rand. A notebook that seeds one cell and draws in the next expects the sequence
# to go on, and so does one that never names them: an estimator without a random_state
# draws from numpy's. Both are read at every capture, with their cached gaussians (tens of
# microseconds, after a live call's answer).

def read_numpy_random() -> dict[str, Any] | None:
    """The legacy generator's state, its key as bytes: a state of plain values compares with =="""
    numpy = loaded("numpy")
    if numpy is None:
        return None
    state: dict[str, Any] = numpy.random.get_state(legacy=False)
    state["state"]["key"] = state["state"]["key"].tobytes()
    return state


def apply_numpy_random(state: dict[str, Any]) -> None:
    import numpy

    key = numpy.frombuffer(state["state"]["key"], dtype=numpy.uint32)
    numpy.random.set_state({**state, "state": {**state["state"], "key": key}})


def read_random() -> Any:
    import random

    return random.getstate()


def apply_random(state: Any) -> None:
    import random

    random.setstate(state)


def apply_warning_filters(filters: list[Any]) -> None:
    current: list[Any] = warnings.filters  # type: ignore[assignment]
    current[:] = filters  # the list itself, which the warnings module holds (typed as a sequence)
    mutated = getattr(warnings, "_filters_mutated", None)
    if mutated is not None:
        mutated()  # so that the registries of warnings already shown are cleared, as filterwarnings does


def diff_environ(current: dict[str, str], baseline: dict[str, str] | None) -> dict[str, str | None]:
    base = baseline or {}
    changed: dict[str, str | None] = {key: value for key, value in current.items() if base.get(key) != value}
    changed.update((key, None) for key in base if key not in current)
    return changed


def apply_environ(diff: dict[str, str | None]) -> None:
    for key, value in diff.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def apply_path(path: list[str]) -> None:
    sys.path[:] = path


def read_cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the directory was removed: nothing to carry
        return None


SETTINGS = [
    Setting("matplotlib.rcParams", read_rc, apply_rc, diff=diff_rc, equal=equal_rc, snapshot=snapshot_rc,
            default=default_rc),
    Setting("matplotlib.colormaps", read_colormap_names, apply_colormaps, diff=diff_colormaps,
            default=default_colormap_names),
    Setting("pandas.options", read_pandas, apply_pandas, diff=diff_pandas, default=default_pandas),
    Setting("numpy.printoptions", read_printoptions, apply_printoptions, diff=diff_dict, default=default_printoptions),
    Setting("numpy.errstate", read_errstate, apply_errstate, diff=diff_dict, default=default_errstate),
    Setting("numpy.random", read_numpy_random, apply_numpy_random),
    Setting("sklearn.config", read_sklearn, apply_sklearn, diff=diff_dict, default=default_sklearn),
    Setting("random", read_random, apply_random),
    Setting("warnings.filters", lambda: warnings.filters, apply_warning_filters),
    Setting("os.environ", lambda: dict(os.environ), apply_environ, diff=diff_environ),
    Setting("sys.path", lambda: sys.path, apply_path),
    Setting("cwd", read_cwd, os.chdir, late=True),
    Setting("sys.recursionlimit", sys.getrecursionlimit, sys.setrecursionlimit),
    # The source of the cells that defined functions or classes (kiln_repl.running.Sources).
    Setting("cells.sources", SOURCES.read, SOURCES.apply, diff=lambda current, baseline: dict(current),
            equal=lambda current, baseline: not current, snapshot=dict),
    # IPython's execution count: _N and Out[N] go on numbering where the session left them.
    Setting("ipython.execution_count", shell.count, shell.set_count, late=True, volatile=True),
]


class Settings:
    """Reads the settings against this process's baseline, and puts saved ones back."""

    def __init__(self, settings: list[Setting] | None = None) -> None:
        self.settings = SETTINGS if settings is None else settings
        self.baseline: dict[str, Any] = {}

    def volatile(self) -> set[str]:
        """The names of the volatile settings."""
        return {setting.name for setting in self.settings if setting.volatile}

    def mark_baseline(self) -> None:
        """Takes the values a session that changed nothing would carry: called once the
        process is ready, before any user code."""
        for setting in self.settings:
            current = setting.read()
            self.baseline[setting.name] = None if current is None else setting.snapshot(current)

    def capture(self) -> dict[str, Any]:
        """The settings that differ from the baseline, by name, as apply takes them."""
        kept: dict[str, Any] = {}
        for setting in self.settings:
            current = setting.read()
            if current is None:
                continue
            baseline = self.baseline.get(setting.name)
            if baseline is None and setting.default is not None:
                baseline = self.baseline[setting.name] = setting.default()
            if setting.equal(current, baseline):
                continue
            if (value := setting.diff(current, baseline)) not in ({}, []):
                kept[setting.name] = value
        return kept

    def apply(self, saved: dict[str, Any], late: bool = False) -> list[str]:
        """Puts saved settings back, the early ones or the late ones; returns a note for each
        that could not be."""
        by_name = {setting.name: setting for setting in self.settings}
        notes = []
        for name, value in saved.items():
            setting = by_name.get(name)
            if setting is None or setting.late != late:
                continue  # or a setting this REPL does not know: a newer state, nothing to do
            try:
                setting.apply(value)
            except Exception as exc:
                notes.append(f"setting {name} not restored: {type(exc).__name__}: {exc}")
        return notes
