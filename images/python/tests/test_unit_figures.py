"""In-process tests of figures as files: names, what is saved, who hears of it."""

import contextlib
import os
import shutil
import tempfile
import unittest
from typing import Any, Iterator

import inprocess  # noqa: F401  (the server's package, by path)
from kiln_repl.figures import Figures, write_new_figure


class FakeFigure:
    """Saves a fixed image, as Figure.savefig does to a file object."""

    def __init__(self, image: bytes) -> None:
        self.image = image
        self.saves: list[dict[str, Any]] = []

    def savefig(self, fname: Any, **kwargs: Any) -> None:
        self.saves.append(kwargs)
        fname.write(self.image)


class FiguresTest(unittest.TestCase):
    def setUp(self) -> None:
        self.data_dir = tempfile.mkdtemp(prefix="kiln-test-")
        self.addCleanup(shutil.rmtree, self.data_dir)
        self.displayed: list[tuple[str, bytes]] = []

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        yield

    def figures(self) -> Figures:
        figures = Figures()
        figures.begin(self.data_dir, lambda name, png: self.displayed.append((name, png)), self.guard)
        return figures

    def read(self, name: str) -> bytes:
        with open(os.path.join(self.data_dir, name), "rb") as handle:
            return handle.read()

    def test_names_take_the_first_free_numbers(self) -> None:
        os.mkdir(os.path.join(self.data_dir, "figure-2.png"))
        os.symlink("/etc/passwd", os.path.join(self.data_dir, "figure-3.png"))
        names = [write_new_figure(self.data_dir, f"png{i}".encode()) for i in range(3)]
        self.assertEqual(names, ["figure-1.png", "figure-4.png", "figure-5.png"])
        self.assertEqual(self.read("figure-4.png"), b"png1")
        os.remove(os.path.join(self.data_dir, "figure-1.png"))
        self.assertEqual(write_new_figure(self.data_dir, b"again"), "figure-1.png")

    def test_show_saves_and_displays_the_same_bytes(self) -> None:
        figures = self.figures()
        figure = FakeFigure(b"\x89PNG one")
        self.assertEqual(figures.show(figure), "figure-1.png")
        self.assertEqual(self.read("figure-1.png"), b"\x89PNG one")
        self.assertEqual(self.displayed, [("figure-1.png", b"\x89PNG one")])
        self.assertEqual(figure.saves, [{"format": "png", "bbox_inches": "tight"}])

    def test_a_figure_the_code_saved_is_not_saved_again(self) -> None:
        figures = self.figures()
        mine, other = FakeFigure(b"mine"), FakeFigure(b"other")
        figures.saved_by_code(mine)
        self.assertIsNone(figures.show(mine))
        self.assertEqual(figures.show(other), "figure-1.png")
        self.assertEqual((mine.saves, self.displayed), ([], [("figure-1.png", b"other")]))

    def test_end_saves_what_is_open_only_when_on(self) -> None:
        figures = Figures()
        calls: list[str] = []

        def save_open() -> list[str]:
            calls.append("saved")
            return ["figure 3 not saved: ValueError"]

        figures.save_open = save_open
        self.assertEqual(figures.end(), [], "off: nothing is saved")
        figures.begin(self.data_dir, None, self.guard)
        self.assertEqual(figures.end(), ["figure 3 not saved: ValueError"])
        self.assertEqual((calls, figures.enabled, figures.display), (["saved"], False, None))

    def test_without_a_display_the_file_is_still_written(self) -> None:
        figures = Figures()
        figures.begin(self.data_dir, None, self.guard)
        self.assertEqual(figures.show(FakeFigure(b"x")), "figure-1.png")
        self.assertEqual(os.listdir(self.data_dir), ["figure-1.png"])


if __name__ == "__main__":
    unittest.main()
