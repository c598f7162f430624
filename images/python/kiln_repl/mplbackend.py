"""kiln's matplotlib backend: Agg, whose show saves figures as files when the run asks for it.

matplotlib loads it by name (MPLBACKEND=module://kiln_repl.mplbackend in the image), when it
first needs a backend, so this module is not loaded at start like the others. It is safe all
the same: by then the kiln_repl package is in sys.modules, so this submodule is found through
the package's own __path__, never through sys.path and the data directory. What does not need
matplotlib is in kiln_repl.figures.
"""

from __future__ import annotations

from typing import Any

from matplotlib._pylab_helpers import Gcf
from matplotlib.backend_bases import FigureManagerBase
from matplotlib.backends.backend_agg import FigureCanvasAgg

from kiln_repl.figures import FIGURES
from kiln_repl.running import describe_exception


class FigureManagerKiln(FigureManagerBase):
    """plt.show() calls show() on each open figure's manager, fig.show() on its own."""

    def show(self) -> None:
        if FIGURES.enabled:
            show_and_close(self)
        else:
            super().show()  # Agg's: nothing, without a display


class FigureCanvasKiln(FigureCanvasAgg):
    """Agg's canvas, which notes the figures the code saves itself."""

    manager_class = FigureManagerKiln

    def print_figure(self, *args: Any, **kwargs: Any) -> Any:
        FIGURES.saved_by_code(self.figure)
        return super().print_figure(*args, **kwargs)


# The names matplotlib looks for in a backend module. plt.show() comes from the manager class.
FigureCanvas = FigureCanvasKiln
FigureManager = FigureManagerKiln


def show_and_close(manager: FigureManagerKiln) -> None:
    """Saves the manager's figure (see Figures.show) and closes it, even when saving fails."""
    with FIGURES.guard():
        try:
            FIGURES.show(manager.canvas.figure)
        finally:
            Gcf.destroy(manager)


def save_open_figures() -> list[str]:
    """Saves and closes the open figures of this backend, at the end of a run; returns a note
    for each figure that could not be saved."""
    notes = []
    for manager in Gcf.get_all_fig_managers():
        if isinstance(manager, FigureManagerKiln):
            try:
                show_and_close(manager)
            except Exception as exc:  # the code's figure, the code's error: noted, not raised
                notes.append(f"figure {manager.num} not saved: {describe_exception(exc)}")
    return notes


FIGURES.save_open = save_open_figures
