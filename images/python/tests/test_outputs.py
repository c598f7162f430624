"""Rich outputs: the MIME bundles of what code displays and of a cell's last value, in the result
and, when the run streams, as events in order with the output around them."""

import base64
import unittest
from typing import Any

from repl_client import ReplTestCase

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def kinds(result: dict[str, Any]) -> list[str]:
    return [item["type"] for item in result["outputs"]]


class OutputsTest(ReplTestCase):
    def test_a_dataframe_is_an_html_table_and_its_text(self) -> None:
        repl = self.start()
        code = ("import numpy as np, pandas as pd\n"
                "df = pd.DataFrame({'city': ['Oslo', 'Lima', 'Pune'], 'temp': np.array([3.5, 19.25, 27.0])})\n"
                "df.describe()")
        result = repl.run(code)
        self.assertOk(result)
        self.assertEqual(kinds(result), ["execute_result"])
        data = result["outputs"][0]["data"]
        self.assertIn("<table", data["text/html"])
        self.assertIn("19.25", data["text/html"])
        self.assertEqual(data["text/plain"], result["result"])

    def test_ipython_display_objects_and_the_display_builtin(self) -> None:
        repl = self.start()
        code = ("from IPython.display import display, HTML, Markdown, JSON, Latex, SVG\n"
                "display(HTML('<b>bold</b>'))\nprint('between')\n"
                "display(Markdown('# Title'), JSON({'a': [1, 2]}))\n"
                "display(Latex(r'$x^2$'))\n"
                "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1\" height=\"1\"></svg>'))\n"
                "import builtins\nbuiltins.display is display")
        result = repl.run(code)
        self.assertOk(result)
        self.assertEqual(result["stdout"], "between\n")
        self.assertEqual(kinds(result), ["display_data"] * 5 + ["execute_result"])
        html, markdown, js, latex, svg, last = (item["data"] for item in result["outputs"])
        self.assertEqual(html["text/html"], "<b>bold</b>")
        self.assertEqual(markdown["text/markdown"], "# Title")
        self.assertEqual(js["application/json"], {"a": [1, 2]})
        self.assertEqual(latex["text/latex"], "$x^2$")
        self.assertIn("<svg", svg["image/svg+xml"])
        self.assertEqual(last, {"text/plain": "True"})

    def test_mimebundle_and_png_formatters(self) -> None:
        repl = self.start()
        code = ("import io, matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
                "class Chart:\n"
                "    def _repr_png_(self):\n"
                "        fig = plt.figure(); plt.plot([1, 3, 2]); buf = io.BytesIO(); fig.savefig(buf, format='png')\n"
                "        plt.close(fig); return buf.getvalue()\n"
                "class Custom:\n"
                "    def _repr_mimebundle_(self, include=None, exclude=None):\n"
                "        return {'text/plain': 'custom', 'application/vnd.kiln+json': {'ok': True}}, {'k': 1}\n"
                "class Liar:\n"
                "    def __getattr__(self, name):\n"
                "        return lambda *a, **k: 'made up'\n"
                "    def __repr__(self):\n"
                "        return 'Liar()'\n"
                "class Broken:\n"
                "    def _repr_html_(self):\n"
                "        raise ValueError('no html')\n"
                "display(Chart(), Custom(), Liar(), Broken(), Chart)")
        result = repl.run(code)
        self.assertOk(result)
        chart, custom, liar, broken, cls = result["outputs"]
        self.assertTrue(base64.b64decode(chart["data"]["image/png"]).startswith(PNG_SIGNATURE))
        self.assertEqual(custom["data"], {"text/plain": "custom", "application/vnd.kiln+json": {"ok": True}})
        self.assertEqual(custom["metadata"], {"k": 1})
        self.assertEqual(liar["data"], {"text/plain": "Liar()"})
        self.assertEqual(broken["data"].keys(), {"text/plain"})
        self.assertEqual(cls["data"].keys(), {"text/plain"})

    def test_a_figure_is_an_output_naming_its_file(self) -> None:
        repl = self.start()
        code = "import matplotlib.pyplot as plt\nprint('before')\nplt.plot([1, 2])\nplt.show()\n42"
        result = repl.run(code, figures=True)
        self.assertOk(result)
        figure, last = result["outputs"]
        self.assertEqual((figure["type"], figure["figure"]), ("display_data", "figure-1.png"))
        self.assertEqual(last["data"], {"text/plain": "42"})
        self.assertEqual([item["path"] for item in result["files"]], ["figure-1.png"])

    def test_events_come_in_order_with_the_output(self) -> None:
        repl = self.start()
        code = ("from IPython.display import display, HTML\nprint('one')\ndisplay(HTML('<i>two</i>'))\n"
                "import matplotlib.pyplot as plt\nplt.plot([1])\nplt.show()\nprint('three')\n'four'")
        events, result = repl.collect(repl.start_run(code, figures=True, events=True))
        self.assertOk(result)
        seen = []
        for event in events:
            if event["type"] == "output":
                seen.append(event["text"])
            elif event["type"] == "display":
                seen.append(event["name"])
            else:
                output = event["output"]
                seen.append(output.get("figure") or output["data"].get("text/html") or output["data"]["text/plain"])
        self.assertEqual(seen, ["one\n", "<i>two</i>", "figure-1.png", "figure-1.png", "three\n", "'four'"])
        self.assertEqual([item["type"] for item in result["outputs"]], ["display_data", "display_data", "execute_result"])

    def test_a_huge_bundle_keeps_its_text_with_a_note(self) -> None:
        repl = self.start()
        code = "from IPython.display import HTML\nHTML('<p>' + 'x' * (9 << 20) + '</p>')"
        result = repl.run(code)
        self.assertOk(result)
        self.assertEqual(result["outputs"][0]["data"].keys(), {"text/plain"})
        self.assertIn("text/html left out", result["stderr"])

    def test_real_data_a_wide_table_a_fitted_model_and_an_array(self) -> None:
        # Real data, not toy values: a 2000-row DataFrame whose HTML is past 64 KiB (pandas
        # truncates its repr, so the whole table is shown with to_html), a fitted
        # scikit-learn model (which has its own _repr_html_), and a NumPy array past 64 KiB,
        # whose last value is its text alone; the names stay for the next cell.
        repl = self.start()
        code = ("import numpy as np, pandas as pd\n"
                "from IPython.display import display, HTML\n"
                "from sklearn.linear_model import LogisticRegression\n"
                "rng = np.random.default_rng(7)\n"
                "df = pd.DataFrame({'x': rng.normal(size=2000), 'y': rng.integers(0, 2, 2000)})\n"
                "display(HTML(df.to_html()))\n"
                "model = LogisticRegression().fit(df[['x']], df.y)\n"
                "display(model)\n"
                "arr = rng.normal(size=(300, 300))\n"
                "arr")
        result = repl.run(code)
        self.assertOk(result)
        self.assertEqual(kinds(result), ["display_data", "display_data", "execute_result"])
        table, fitted, last = (item["data"] for item in result["outputs"])
        self.assertGreater(len(table["text/html"]), 64 << 10)
        self.assertEqual(table["text/html"].count("<tr"), 2001)
        self.assertIn("LogisticRegression", fitted["text/plain"])
        self.assertIn("LogisticRegression", fitted.get("text/html", ""))
        self.assertEqual(last.keys(), {"text/plain"})
        self.assertTrue(last["text/plain"].startswith("array(["))
        again = repl.run("print(arr.nbytes > 64 << 10, round(model.score(df[['x']], df.y), 1) >= 0.3)")
        self.assertEqual(again["stdout"], "True True\n")

    def test_bash_and_none_have_no_outputs(self) -> None:
        repl = self.start()
        self.assertEqual(repl.run("echo hi", lang="bash")["outputs"], [])
        self.assertEqual(repl.run("x = 1\nNone")["outputs"], [])
        self.assertEqual(repl.run("print(x)")["outputs"], [])


if __name__ == "__main__":
    unittest.main()
