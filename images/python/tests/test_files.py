"""Input files, returned files, and what is never returned."""

import os
import unittest
from typing import Any

from repl_client import ReplTestCase


def by_path(response: dict[str, Any]) -> dict[str, bytes]:
    return {f["path"]: f["content"] for f in response["files"]}


class FilesTest(ReplTestCase):
    @unittest.skipUnless(os.path.ismount("/mnt/data"), "needs the image's tmpfs on /mnt/data")
    def test_the_real_data_dir_is_writable(self) -> None:
        repl = self.start(data_dir="/mnt/data")
        name = f"probe-{os.getpid()}.txt"
        response = repl.run(f"import os\nopen({name!r}, 'w').write('ok')\nos.getcwd()",
                            files={f"in-{name}": "in"})
        self.assertOk(response)
        self.assertEqual(response["result"], "'/mnt/data'")
        self.assertEqual(by_path(response), {name: b"ok"})
        repl.run(f"import os; os.remove({name!r}); os.remove('in-{name}')")

    def test_new_and_changed_files_come_back(self) -> None:
        repl = self.start()
        files = {"data.csv": "a,b\n1,2\n", "keep/same.txt": "unchanged", "edit.txt": "old"}
        code = ("import csv\nrows = list(csv.reader(open('data.csv')))\n"
                "open('edit.txt', 'w').write('new')\nos.makedirs('out', exist_ok=True)\n"
                "open('out/result.bin', 'wb').write(bytes(range(256)))\nrows")
        response = repl.run("import os\n" + code, files=files)
        self.assertOk(response)
        self.assertEqual(response["result"], "[['a', 'b'], ['1', '2']]")
        self.assertEqual(by_path(response), {"edit.txt": b"new", "out/result.bin": bytes(range(256))})
        self.assertEqual({f["path"]: f["size"] for f in response["files"]}, {"edit.txt": 3, "out/result.bin": 256})
        self.assertIsNone(response["files_error"])
        self.assertEqual(repl.run("open('keep/same.txt').read()")["result"], "'unchanged'")

    def test_symlinks_are_never_followed(self) -> None:
        repl = self.start()
        code = ("import os\nos.symlink('/etc/passwd', 'passwd')\nos.symlink('/proc/self/environ', 'environ')\n"
                "os.symlink('/etc', 'etc')\nos.mkfifo('fifo')\nopen('real.txt', 'w').write('ok')")
        response = repl.run(code)
        self.assertOk(response)
        self.assertEqual(by_path(response), {"real.txt": b"ok"})

    def test_input_paths_that_escape_are_refused(self) -> None:
        repl = self.start()
        repl.run("import os\nos.symlink('/tmp', 'link')")
        outside = os.path.join(os.path.dirname(repl.data_dir), "kiln-escaped.txt")
        files = {p: "x" for p in
                 ("../kiln-escaped.txt", "/tmp/kiln-escaped.txt", "link/kiln-escaped.txt", "ok/../../x", "fine.txt")}
        response = repl.run("sorted(os.listdir('.'))", files=files)
        self.assertOk(response)
        self.assertEqual(response["result"], "['fine.txt', 'link']")
        self.assertEqual(response["stderr"].count("refused"), 4, response["stderr"])
        self.assertFalse(os.path.exists(outside))
        self.assertFalse(os.path.exists("/tmp/kiln-escaped.txt"))

    def test_caps_are_reported(self) -> None:
        repl = self.start()
        code = "for name in 'abc':\n    open(name, 'w').write('1')\nopen('big', 'w').write('x' * 2000)"
        response = repl.run(code, limits={"max_files": 2, "max_file_bytes": 1000})
        self.assertEqual(sorted(by_path(response)), ["a", "b"])
        self.assertEqual(response["files_error"],
                         "files not returned (over 1000 bytes): big (2000 bytes); "
                         "files not returned (over 2 files): c")
        self.assertIn("kiln: files not returned (over 2 files): c\n", response["stderr"])

    def test_long_lists_of_skipped_files_are_shortened(self) -> None:
        repl = self.start()
        response = repl.run("for i in range(30):\n    open(f'f{i:02}', 'w').write('1')", limits={"max_files": 5})
        self.assertEqual(len(response["files"]), 5)
        self.assertEqual(response["files_error"], "files not returned (over 5 files): "
                         + ", ".join(f"f{i:02}" for i in range(5, 25)) + " and 5 more")


if __name__ == "__main__":
    unittest.main()
