"""In-process tests of the data directory: input files in, new and changed files out, the caps."""

import os
import tempfile
import unittest

import inprocess  # noqa: F401  (the server's package, by path)
from kiln_repl.files import PathRefused, collect_files, snapshot, write_input_file
from kiln_repl.protocol import InputFile, Limits


def input_file(path: str, content: bytes) -> InputFile:
    """An input file whose content is a slice of a payload buffer, as the server gets it."""
    return InputFile(path, len(content), memoryview(bytearray(b"<" + content + b">"))[1:-1])


class DataDirTestCase(unittest.TestCase):
    def setUp(self) -> None:
        data_dir = tempfile.TemporaryDirectory(prefix="kiln-unit-")
        self.addCleanup(data_dir.cleanup)
        self.dir = data_dir.name

    def write(self, path: str, data: bytes | str) -> None:
        full = os.path.join(self.dir, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)

    def collect(self, before: dict[str, tuple[int, int, int]] | None = None,
                limits: Limits = Limits()) -> tuple[dict[str, bytes], list[str]]:
        files, problems, _ = collect_files(self.dir, before or {}, limits)
        return {item.path: item.content for item in files}, problems


class CollectFilesTest(DataDirTestCase):
    def test_new_and_changed_files_only(self) -> None:
        self.write("same.txt", "same")
        self.write("edit.txt", "old")
        before = snapshot(self.dir)
        self.write("edit.txt", "new, longer")
        self.write("out/deep/result.bin", bytes(range(256)))
        got, problems = self.collect(before)
        self.assertEqual(got, {"edit.txt": b"new, longer", "out/deep/result.bin": bytes(range(256))})
        self.assertEqual(problems, [])

    def test_deleted_files_are_those_of_before_that_are_gone(self) -> None:
        for path in ("keep", "gone", "sub/gone", "sub/keep"):
            self.write(path, "1")
        before = snapshot(self.dir)
        os.remove(os.path.join(self.dir, "gone"))
        os.remove(os.path.join(self.dir, "sub/gone"))
        os.symlink("keep", os.path.join(self.dir, "gone"))  # a symlink in its place is no file
        self.assertEqual(collect_files(self.dir, before, Limits())[2], ["gone", "sub/gone"])

    def test_order_is_files_then_subdirectories_by_name(self) -> None:
        for path in ("b", "a", "sub/z", "sub/a", "c/x"):
            self.write(path, "1")
        files, _, _ = collect_files(self.dir, {}, Limits())
        self.assertEqual([item.path for item in files], ["a", "b", "c/x", "sub/a", "sub/z"])

    def test_size_cap(self) -> None:
        self.write("small", "x" * 10)
        self.write("exact", "x" * 100)
        self.write("big", "x" * 101)
        got, problems = self.collect(limits=Limits(max_file_bytes=100))
        self.assertEqual(sorted(got), ["exact", "small"])
        self.assertEqual(problems, ["files not returned (over 100 bytes): big (101 bytes)"])

    def test_count_cap(self) -> None:
        for name in "abc":
            self.write(name, "1")
        got, problems = self.collect(limits=Limits(max_files=2))
        self.assertEqual(sorted(got), ["a", "b"])
        self.assertEqual(problems, ["files not returned (over 2 files): c"])

    def test_both_caps_and_a_long_list(self) -> None:
        for i in range(30):
            self.write(f"f{i:02}", "1")
        self.write("zbig", "x" * 50)
        _, problems = self.collect(limits=Limits(max_files=5, max_file_bytes=10))
        self.assertEqual(problems, [
            "files not returned (over 10 bytes): zbig (50 bytes)",
            "files not returned (over 5 files): " + ", ".join(f"f{i:02}" for i in range(5, 25)) + " and 5 more",
        ])

    def test_symlinks_and_special_files_are_skipped(self) -> None:
        outside = tempfile.NamedTemporaryFile(prefix="kiln-outside-")
        self.addCleanup(outside.close)
        outside.write(b"secret")
        outside.flush()
        self.write("real.txt", "ok")
        os.symlink(outside.name, os.path.join(self.dir, "to-file"))
        os.symlink(os.path.dirname(outside.name), os.path.join(self.dir, "to-dir"))
        os.symlink("real.txt", os.path.join(self.dir, "to-sibling"))
        os.mkfifo(os.path.join(self.dir, "fifo"))
        got, problems = self.collect()
        self.assertEqual(got, {"real.txt": b"ok"})
        self.assertEqual(problems, [])


class WriteInputFileTest(DataDirTestCase):
    def test_writes_nested_and_overwrites(self) -> None:
        self.write("dir/x.txt", "a much longer old content")
        write_input_file(self.dir, input_file("dir/x.txt", b"new"))
        write_input_file(self.dir, input_file("./made/up/y.bin", b"\x00\x01"))
        with open(os.path.join(self.dir, "dir/x.txt"), "rb") as handle:
            self.assertEqual(handle.read(), b"new")
        with open(os.path.join(self.dir, "made/up/y.bin"), "rb") as handle:
            self.assertEqual(handle.read(), b"\x00\x01")

    def test_paths_that_leave_are_refused(self) -> None:
        os.symlink(tempfile.gettempdir(), os.path.join(self.dir, "link"))
        os.symlink("/etc/hostname", os.path.join(self.dir, "file-link"))
        os.mkfifo(os.path.join(self.dir, "fifo"))
        for path in ("", ".", "/tmp/x", "../x", "a/../../x", "link/x", "file-link", "fifo", "nul\0x"):
            with self.subTest(path=path):
                with self.assertRaises(PathRefused):
                    write_input_file(self.dir, input_file(path, b"x"))
        self.assertEqual(sorted(os.listdir(self.dir)), ["fifo", "file-link", "link"])


if __name__ == "__main__":
    unittest.main()
