"""In-process tests of the session's installed packages: archived when they change, written back
by a restore, and left out with a note past the cap."""

import os
import tempfile
import unittest

import inprocess  # noqa: F401  (the server's package, by path)
from kiln_repl.packages import Packages


class PackagesTest(unittest.TestCase):
    def setUp(self) -> None:
        self.root = tempfile.mkdtemp()
        self.addCleanup(lambda: os.system(f"rm -rf {self.root}"))

    def install(self, root: str, name: str, body: str) -> None:
        path = os.path.join(root, "lib", "python3", "site-packages", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(body)

    def test_nothing_installed_is_no_archive(self) -> None:
        os.makedirs(os.path.join(self.root, "lib", "python3", "site-packages"))
        self.assertEqual(Packages(self.root).archive(), (None, None))

    def test_an_archive_comes_back_whole_elsewhere(self) -> None:
        self.install(self.root, "mod.py", "VALUE = 42\n")
        packages = Packages(self.root)
        archive, note = packages.archive()
        self.assertIsNotNone(archive)
        self.assertIsNone(note)
        self.assertIs(packages.archive()[0], archive)  # unchanged: not made again
        other = tempfile.mkdtemp()
        self.addCleanup(lambda: os.system(f"rm -rf {other}"))
        restored = Packages(other)
        assert archive is not None
        self.assertIsNone(restored.restore(archive))
        with open(os.path.join(other, "lib", "python3", "site-packages", "mod.py")) as handle:
            self.assertEqual(handle.read(), "VALUE = 42\n")
        self.assertEqual(restored.archive()[0], archive)  # as restored: the same archive
        self.install(other, "more.py", "x = 1\n")
        self.assertNotEqual(restored.archive()[0], archive)

    def test_a_file_added_inside_a_package_is_seen(self) -> None:
        self.install(self.root, "pkg/__init__.py", "A = 1\n")
        packages = Packages(self.root)
        first, _ = packages.archive()
        self.install(self.root, "pkg/more.py", "B = 2\n")  # as an upgrade adds a module
        second, _ = packages.archive()
        assert second is not None
        self.assertIsNot(second, first)
        self.assertIn("lib/python3/site-packages/pkg/more.py", second)

    def test_past_the_cap_nothing_is_kept_and_a_note_says_so(self) -> None:
        self.install(self.root, "big.py", "#" * 4096)
        archive, note = Packages(self.root, cap=1024).archive()
        self.assertIsNone(archive)
        assert note is not None
        self.assertIn("not kept", note)

    def test_a_broken_archive_is_a_note(self) -> None:
        self.assertIn("not restored", Packages(self.root).restore(b"not a map") or "")

    def test_a_path_out_of_the_base_is_refused(self) -> None:
        for path in ("../escape.py", "/etc/passwd", "lib/../../x"):
            with self.subTest(path=path):
                note = Packages(self.root).restore({path: (0o644, b"x")})
                self.assertIn("not restored", note or "")
        self.assertFalse(os.path.exists(os.path.join(os.path.dirname(self.root), "escape.py")))

    def test_a_symlink_in_the_way_is_not_followed(self) -> None:
        outside = tempfile.mkdtemp()
        self.addCleanup(lambda: os.system(f"rm -rf {outside}"))
        os.symlink(outside, os.path.join(self.root, "lib"))
        note = Packages(self.root).restore({"lib/evil.py": (0o644, b"x")})
        self.assertIn("not restored", note or "")
        self.assertEqual(os.listdir(outside), [])

    def test_console_scripts_stay_executable(self) -> None:
        note = Packages(self.root).restore({"bin/tool": (0o755, b"#!/bin/sh\necho hi\n")})
        self.assertIsNone(note)
        # The mode, not os.access: the image's /tmp, where the test writes, is noexec.
        self.assertTrue(os.stat(os.path.join(self.root, "bin", "tool")).st_mode & 0o100)


if __name__ == "__main__":
    unittest.main()
