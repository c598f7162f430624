"""The server's own modules: all loaded before user code runs, and never taken from the data dir.

User code runs with the data directory first on sys.path, so a module of the server looked up
there could be replaced by a file the user wrote. The one exception, the matplotlib backend, is
loaded by matplotlib when it is first needed, as a submodule of the package already loaded.
"""

import os
import shutil
import tempfile
import unittest

from inprocess import PACKAGE_DIR, SERVER_HOME
from repl_client import ReplTestCase

MODULES = sorted(name[:-3] for name in os.listdir(PACKAGE_DIR) if name.endswith(".py") and name != "__init__.py")
BACKEND = "mplbackend"  # imports matplotlib: loaded when matplotlib needs it, not at start
AT_START = [name for name in MODULES if name != BACKEND]


class ServerModulesTest(ReplTestCase):
    def test_every_module_is_loaded_before_user_code(self) -> None:
        self.assertIn("server", MODULES)
        self.assertIn(BACKEND, MODULES)
        repl = self.start()
        response = repl.run("import sys\n"
                            "(sorted(m for m in sys.modules if m.split('.')[0] == 'kiln_repl'),\n"
                            " sys.modules['kiln_repl'].__path__, sys.path[0], %r in sys.path)" % SERVER_HOME)
        self.assertOk(response)
        want = (["kiln_repl", *(f"kiln_repl.{name}" for name in AT_START)], [PACKAGE_DIR],
                os.path.realpath(repl.data_dir), False)
        self.assertEqual(response["result"], repr(want))

    def test_user_files_named_like_server_modules_are_not_used(self) -> None:
        data_dir = self.data_dir()
        shadow = "open('SHADOWED-{}', 'w').write('imported')\nraise ImportError('a user file was imported')\n"
        os.mkdir(os.path.join(data_dir, "kiln_repl"))
        self.write(os.path.join(data_dir, "kiln_repl", "__init__.py"), shadow.format("package"))
        for name in ["repl_server", "kiln_repl", *MODULES]:
            self.write(os.path.join(data_dir, f"{name}.py"), shadow.format(name))

        # Files there at start, and one written by a run: none is picked up by the server.
        repl = self.start(data_dir=data_dir)
        runs = [
            repl.run("open('capture.py', 'a').write('')\nx = 1\nimport threading\nlock = threading.Lock()",
                     capture_state=True, files={"in.txt": "in"}),
            repl.run("print('out')\nopen('out.txt', 'w').write('x')\n1 / 0", timeout_ms=5000),
            repl.run("echo bash", lang="bash"),
        ]
        self.assertEqual(runs[0]["state_error"], "not kept (unpicklable): lock (lock)")
        self.assertEqual([f["path"] for f in runs[1]["files"]], ["out.txt"])
        self.assertEqual(runs[1]["error"], "ZeroDivisionError: division by zero")
        self.assertNotIn("kiln_repl", runs[1]["stderr"])
        self.assertEqual(runs[2]["stdout"], "bash\n")
        self.assertEqual(repl.request(op="ping")["type"], "pong")
        self.assertEqual([name for name in os.listdir(data_dir) if name.startswith("SHADOWED")], [])

        # User code that imports one of the names gets the server's module, already loaded.
        response = repl.run("import kiln_repl, kiln_repl.files\n(kiln_repl.__file__, kiln_repl.files.__file__)")
        self.assertEqual(response["result"], repr((os.path.join(PACKAGE_DIR, "__init__.py"),
                                                   os.path.join(PACKAGE_DIR, "files.py"))))

    def test_matplotlib_loads_the_servers_backend_whatever_the_data_dir_holds(self) -> None:
        data_dir = self.data_dir()
        shadow = "open('SHADOWED-{}', 'w').write('imported')\n"
        os.mkdir(os.path.join(data_dir, "kiln_repl"))
        for path in ("kiln_repl/__init__.py", "kiln_repl/mplbackend.py", "kiln_repl.py", "mplbackend.py",
                     "kiln_repl/figures.py", "figures.py"):
            self.write(os.path.join(data_dir, path), shadow.format(path.replace("/", "-")))

        # Without pre-imports, matplotlib is first imported by the code, after it has run.
        repl = self.start(data_dir=data_dir)
        repl.run("open('mplbackend.py', 'a').write('')")
        response = repl.run("import sys\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n"
                            "backend = sys.modules['kiln_repl.mplbackend']\n"
                            "(plt.get_backend(), backend.__file__, sys.modules['kiln_repl.figures'].__file__)",
                            figures=True)
        self.assertOk(response)
        self.assertEqual(response["result"], repr(("module://kiln_repl.mplbackend", os.path.join(PACKAGE_DIR, "mplbackend.py"),
                                                   os.path.join(PACKAGE_DIR, "figures.py"))))
        self.assertEqual([f["path"] for f in response["files"]], ["figure-1.png"])
        self.assertEqual([name for name in os.listdir(data_dir) if name.startswith("SHADOWED")], [])

    def data_dir(self) -> str:
        """The image's /mnt/data when it is there, else a temporary directory; either is left
        as it was found."""
        if not os.path.ismount("/mnt/data"):
            path = tempfile.mkdtemp(prefix="kiln-test-")
            self.addCleanup(shutil.rmtree, path)
            return path
        before = set(os.listdir("/mnt/data"))
        self.addCleanup(self.remove_new_entries, "/mnt/data", before)
        return "/mnt/data"

    def remove_new_entries(self, path: str, before: set[str]) -> None:
        for name in set(os.listdir(path)) - before:
            entry = os.path.join(path, name)
            if os.path.isdir(entry) and not os.path.islink(entry):
                shutil.rmtree(entry)
            else:
                os.remove(entry)

    def write(self, path: str, text: str) -> None:
        with open(path, "w") as handle:
            handle.write(text)


if __name__ == "__main__":
    unittest.main()
