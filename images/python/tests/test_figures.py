"""Figures: matplotlib figures saved as files (and display events) when a request asks for it."""

import unittest
from typing import Any

from repl_client import ReplTestCase

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOT = "import matplotlib.pyplot as plt\n"


def paths(result: dict[str, Any]) -> list[str]:
    return [item["path"] for item in result["files"]]


class FiguresTest(ReplTestCase):
    def test_a_figure_left_open_is_saved_and_closed(self) -> None:
        repl = self.start()
        result = repl.run(PLOT + "plt.plot([1, 2, 3])", figures=True)
        self.assertOk(result)
        self.assertEqual(paths(result), ["figure-1.png"])
        self.assertTrue(result["files"][0]["content"].startswith(PNG_SIGNATURE))
        self.assertEqual(repl.run("plt.get_fignums()")["result"], "[]")

    def test_each_show_saves_the_open_figures_under_the_next_free_number(self) -> None:
        repl = self.start()
        code = PLOT + "plt.plot([1])\nplt.show()\nplt.plot([2])\nplt.show()\nplt.get_fignums()"
        result = repl.run(code, figures=True, files={"figure-2.png": "taken"})
        self.assertOk(result)
        self.assertEqual(result["result"], "[]")
        self.assertEqual(paths(result), ["figure-1.png", "figure-3.png"])
        self.assertEqual(paths(repl.run("plt.plot([3])", figures=True)), ["figure-4.png"])

    def test_fig_show_saves_that_figure_only(self) -> None:
        repl = self.start()
        result = repl.run(PLOT + "a = plt.figure()\nb = plt.figure()\nb.show()\nplt.get_fignums()", figures=True)
        self.assertEqual(result["result"], "[1]")
        self.assertEqual(paths(result), ["figure-1.png", "figure-2.png"], "b when shown, a at the end")

    def test_a_figure_the_code_saved_is_closed_not_saved_again(self) -> None:
        repl = self.start()
        result = repl.run(PLOT + "plt.plot([1])\nplt.savefig('mine.png')\nplt.show()\nplt.get_fignums()", figures=True)
        self.assertEqual(result["result"], "[]")
        self.assertEqual(paths(result), ["mine.png"])

    def test_without_figures_the_backend_is_agg(self) -> None:
        repl = self.start()
        code = PLOT + ("import warnings\nwith warnings.catch_warnings(record=True) as caught:\n"
                       "    warnings.simplefilter('always')\n    plt.plot([1])\n    plt.show()\n    plt.gcf().show()\n"
                       "(caught, plt.get_fignums())")
        result = repl.run(code)
        self.assertOk(result)
        self.assertEqual((result["result"], paths(result), result["stderr"]), ("([], [1])", [], ""))
        # A later run with figures on saves what was left open.
        self.assertEqual(paths(repl.run("pass", figures=True)), ["figure-1.png"])

    def test_display_events_carry_the_files_bytes_in_order_with_the_output(self) -> None:
        repl = self.start()
        code = PLOT + "print('first')\nplt.plot([1])\nplt.show()\nprint('second')\nplt.plot([2])"
        events, result = repl.collect(repl.start_run(code, figures=True, events=True))
        self.assertOk(result)
        kinds = [event.get("text") or event.get("name") for event in events if event["type"] != "bundle"]
        self.assertEqual(kinds, ["first\n", "figure-1.png", "second\n", "figure-2.png"])
        files = {item["path"]: item["content"] for item in result["files"]}
        for event in events:
            if event["type"] == "display":
                self.assertEqual(event["mime"], "image/png")
                self.assertEqual(event["content"], files[event["name"]])

    def test_a_figure_that_cannot_be_drawn_is_noted_at_the_end(self) -> None:
        repl = self.start()
        code = PLOT + ("from matplotlib.artist import Artist\nclass Broken(Artist):\n"
                       "    def draw(self, renderer):\n        raise ValueError('cannot draw')\n"
                       "plt.figure().add_artist(Broken())")
        result = repl.run(code, figures=True)
        self.assertOk(result)
        self.assertEqual(paths(result), [])
        self.assertEqual(result["stderr"], "kiln: figure 1 not saved: ValueError: cannot draw\n")
        self.assertEqual(repl.run("plt.get_fignums()")["result"], "[]")

    def test_bash_and_other_processes_are_untouched(self) -> None:
        repl = self.start()
        script = "import matplotlib.pyplot as plt; plt.plot([1]); plt.show(); plt.savefig('sub.png')"
        result = repl.run(f"python3 -c \"{script}\"", lang="bash", figures=True)
        self.assertOk(result)
        self.assertEqual(paths(result), ["sub.png"])


if __name__ == "__main__":
    unittest.main()
