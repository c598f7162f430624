"""Cells in IPython's language, as notebooks and models write them: magics, shell escapes, help,
the history names, and a kernel's completion, in a real REPL with the pre-imports."""

import json
import os
import shutil
import tempfile
from typing import Any

from repl_client import Repl, ReplTestCase


class IPythonTest(ReplTestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="kiln-ipython-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.repl = self.start(preload=True, data_dir=self.dir)

    def ok(self, code: str, **fields: Any) -> dict[str, Any]:
        answer = self.repl.run(code, timeout_ms=60_000, **fields)
        self.assertOk(answer)
        return answer

    def test_line_and_cell_magics(self) -> None:
        self.assertEqual(self.ok("%matplotlib inline")["stdout"], "")
        self.assertIn("Wall time", self.ok("%time total = sum(range(1000))")["stdout"])
        self.assertEqual(self.ok("total")["result"], "499500")
        timed = self.ok("%timeit -n 10 -r 2 sum(range(100))")["stdout"]
        self.assertRegex(timed, r"per loop \(mean ± std\. dev\. of 2 runs, 10 loops each\)")
        self.assertIn("Wall time", self.ok("%%time\na = 2\nb = a * 21")["stdout"])
        self.assertEqual(self.ok("b")["result"], "42")
        self.assertIn("per loop", self.ok("%%timeit -n 5 -r 1\nsorted(range(50))")["stdout"])

    def test_writefile_run_and_files(self) -> None:
        wrote = self.ok("%%writefile helper.py\ndef double(x):\n    return 2 * x\nprint('helper ran')\n")
        self.assertIn("Writing helper.py", wrote["stdout"])
        self.assertIn("helper.py", [f["path"] for f in wrote["files"]], "the file is the session's")
        self.assertIn("helper ran", self.ok("%run helper.py")["stdout"])
        self.assertEqual(self.ok("double(21)")["result"], "42")
        self.assertIn("Writing", self.ok("%%file notes.txt\nline one\n")["stdout"])
        self.assertEqual(self.ok("open('notes.txt').read()")["result"], "'line one\\n'")

    def test_shell_escapes(self) -> None:
        out = self.ok("!echo hello from bash; echo to stderr >&2")
        self.assertIn("hello from bash", out["stdout"])
        self.assertIn("to stderr", out["stderr"])
        self.ok("!exit 3")
        self.assertEqual(self.ok("_exit_code")["result"], "3")
        self.ok("open('a.csv', 'w').write('x'); open('b.csv', 'w').write('y')")
        listed = self.ok("files = !ls *.csv\nfiles")
        self.assertEqual(listed["result"], "['a.csv', 'b.csv']")
        self.assertEqual(self.ok("name = 'a.csv'\nlines = !cat {name}\nlines")["result"], "['x']")

    def test_environment_directory_and_names(self) -> None:
        self.ok("%env MODE=full")
        self.assertEqual(self.ok("import os\nos.environ['MODE']")["result"], "'full'")
        self.ok("os.makedirs('sub', exist_ok=True)")
        self.assertIn("sub", self.ok("%cd sub")["stdout"])
        self.assertEqual(self.ok("%pwd")["result"], repr(os.path.join(os.path.realpath(self.dir), "sub")))
        self.ok("%cd ..")
        self.ok("alpha = 1\nbeta = 'two'")
        who = self.ok("%who")["stdout"]
        self.assertIn("alpha", who)
        self.assertIn("beta", who)
        self.assertNotIn("np", who, "the pre-imports are the kernel's own, as a kernel's are")
        self.assertIn("str", self.ok("%whos")["stdout"])
        self.ok("%reset -f")
        self.assertEqual(self.repl.run("alpha")["status"], "error")

    def test_help(self) -> None:
        helped = self.ok("len?")["stdout"]
        self.assertIn("Signature: len(obj, /)", helped)
        self.assertIn("Return the number of items", helped)
        self.ok("def area(r):\n    'The area of a circle of radius r.'\n    return 3.14159 * r * r")
        self.assertIn("def area(r):", self.ok("area??")["stdout"])
        self.assertIn("The area of a circle", self.ok("area?")["stdout"])

    def test_history_names(self) -> None:
        self.ok("10")
        self.ok("x = 5")
        self.ok("x * 2")
        check = self.ok("_1, _3, __, In[2], Out[3], _i2")
        self.assertEqual(check["result"], "(10, 10, 10, 'x = 5', 10, 'x = 5')")
        self.assertEqual(self.ok("_")["result"], "(10, 10, 10, 'x = 5', 10, 'x = 5')")

    def test_what_needs_a_terminal_is_refused(self) -> None:
        for code in ("%debug", "%pdb on", "%matplotlib qt", "%gui qt"):
            answer = self.repl.run(code)
            self.assertEqual(answer["status"], "error", code)
            self.assertRegex(answer["error"], r"^UsageError: .*(terminal|standard input|inline|GUI)", code)
        missing = self.repl.run("%no_such_magic")
        self.assertEqual(missing["error"], "UsageError: Line magic function `%no_such_magic` not found.")
        self.assertNotIn("Traceback", missing["stderr"])
        self.assertEqual(self.repl.run("input('name? ')")["status"], "error")

    def test_load_ext_and_xmode(self) -> None:
        self.ok("%load_ext autoreload\n%autoreload 2")
        self.ok("%xmode Minimal")
        failed = self.repl.run("1 / 0")
        self.assertEqual(failed["error"], "ZeroDivisionError: division by zero")
        self.assertNotIn("Traceback", failed["stderr"], "Minimal shows the error alone")

    def test_errors_keep_what_was_bound(self) -> None:
        failed = self.repl.run("kept = 1\n!true\nraise ValueError('late')")
        self.assertEqual(failed["error"], "ValueError: late")
        self.assertIn("raise ValueError('late')", failed["stderr"], "the traceback shows the user's line")
        self.assertEqual(self.ok("kept")["result"], "1")

    def test_plain_python_turns_it_off(self) -> None:
        answer = self.repl.run("%time x = 1", plain_python=True)
        self.assertEqual(answer["status"], "error")
        self.assertTrue(answer["error"].startswith("SyntaxError"), answer["error"])
        self.assertEqual(self.ok("x = 2\nx", plain_python=True)["result"], "2")

    def test_state_keeps_names_not_the_shell(self) -> None:
        first = self.ok("%time data = [1, 2, 3]\nlisting = !echo kept\n7", capture_state=True)
        self.assertIsNone(first["state_error"], "nothing of IPython's is left out: none of it is stored")
        resumed = self.start(preload=True, data_dir=self.dir)
        again = resumed.run("data, listing, _1 if '_1' in dir() else _3, get_ipython().execution_count",
                            state=first["state_blob"], capture_state=True)
        self.assertOk(again)
        self.assertEqual(again["result"], "([1, 2, 3], ['kept'], 7, 2)")


    def test_what_a_cell_defined_shows_its_lines_after_a_restore(self) -> None:
        first = self.ok("def risky(x):\n    'Divides one by x.'\n    return 1 / x", capture_state=True)
        resumed = self.start(preload=True, data_dir=self.dir)
        failed = resumed.run("risky(0)", state=first["state_blob"], capture_state=True)
        self.assertEqual(failed["error"], "ZeroDivisionError: division by zero")
        self.assertIn('File "<cell 1>", line 3, in risky\n    return 1 / x', failed["stderr"])
        source = resumed.run("risky??")
        self.assertOk(source)
        self.assertIn("return 1 / x", source["stdout"])


class CompletionTest(ReplTestCase):
    """Jupyter's complete, inspect and is_complete, as the host asks them (kiln_repl.introspect)."""

    def ask(self, repl: Repl, kind: str, code: str, cursor: int | None = None) -> dict[str, Any]:
        call = ("__import__('kiln_repl.introspect', fromlist=['answer']).answer(globals(), "
                f"{kind!r}, {code!r}, {len(code) if cursor is None else cursor})")
        answer = repl.run(call, read_only=True, timeout_ms=60_000)
        self.assertOk(answer)
        content: dict[str, Any] = json.loads(answer["stdout"])
        return content

    def test_modules_attributes_keys_and_paths(self) -> None:
        repl = self.start(preload=True)
        self.assertOk(repl.run("settings = {'alpha': 1, 'beta': 2}\nimport os"))
        self.assertIn("numpy", self.ask(repl, "complete", "import nump")["matches"])
        attrs = self.ask(repl, "complete", "np.lin")
        self.assertIn("linspace", attrs["matches"])
        self.assertEqual((attrs["cursor_start"], attrs["cursor_end"]), (3, 6))
        self.assertIn("alpha", self.ask(repl, "complete", "settings['al")["matches"])
        self.assertIn("/etc/", self.ask(repl, "complete", "open('/et")["matches"])

    def test_inspection_and_completeness(self) -> None:
        repl = self.start(preload=True)
        found = self.ask(repl, "inspect", "np.linspace(", 11)
        self.assertTrue(found["found"])
        self.assertIn("Signature", found["data"]["text/plain"])
        self.assertIn("num=50", found["data"]["text/plain"])
        self.assertFalse(self.ask(repl, "inspect", "no_such_name")["found"])
        self.assertEqual(self.ask(repl, "is_complete", "for i in range(3):")["status"], "incomplete")
        self.assertEqual(self.ask(repl, "is_complete", "x = 1")["status"], "complete")
        self.assertEqual(self.ask(repl, "is_complete", "%time x = 1")["status"], "complete")

    def test_read_only_calls_count_nothing(self) -> None:
        repl = self.start(preload=True)
        self.assertOk(repl.run("1"))
        self.ask(repl, "complete", "pri")
        self.assertEqual(repl.run("get_ipython().execution_count")["result"], "2")
