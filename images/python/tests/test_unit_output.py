"""In-process tests of what a run's outcome becomes: decoded output, results, errors, tracebacks."""

import os
import signal
import traceback
import unittest
from typing import Callable, Sequence

from inprocess import PACKAGE_DIR, SERVER_HOME  # first: puts the server's package on sys.path
from kiln_repl.capture import decode_output
from kiln_repl.framing import write_all
from kiln_repl.running import (ENTRY_POINT, Outcome, cap_text, compile_cell, describe_exception, exit_outcome,
                               is_server_file, signal_outcome, user_traceback)


def raised(call: Callable[[], object]) -> BaseException:
    """The exception call raises, with its traceback (assertRaises drops it)."""
    try:
        call()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing was raised")


class DecodeOutputTest(unittest.TestCase):
    def test_cases(self) -> None:
        snowman = "\u2603".encode()
        cases = [
            ("plain", b"hi\n", 0, "hi\n", False),
            ("invalid UTF-8 is replaced", b"\xff ok \xe2\x82", 0, "\ufffd ok \ufffd", False),
            ("NUL and escapes stay", b"\x00\x1b[31m", 0, "\x00\x1b[31m", False),
            ("cut", b"x" * 10, 5, "x" * 10 + "\n[kiln: output truncated, 5 bytes dropped]\n", True),
            ("a character cut in half counts as dropped", snowman * 3 + snowman[:2], 21,
             "\u2603" * 3 + "\n[kiln: output truncated, 23 bytes dropped]\n", True),
            ("invalid bytes before a cut", b"\xff" + b"a" * 3, 1, "\ufffdaaa\n[kiln: output truncated, 1 bytes dropped]\n", True),
            ("nothing kept", b"", 7, "\n[kiln: output truncated, 7 bytes dropped]\n", True),
        ]
        for name, data, dropped, want, want_truncated in cases:
            with self.subTest(name):
                self.assertEqual(decode_output(data, dropped), (want, want_truncated))


class ResultTextTest(unittest.TestCase):
    def test_cap_text(self) -> None:
        self.assertEqual(cap_text("abc", 3), ("abc", False))
        self.assertEqual(cap_text("abcdef", 2), ("ab...[kiln: result truncated, 4 characters dropped]", True))

    def test_compile_cell_splits_a_final_expression(self) -> None:
        cases = [("x = 41\nx + 1", 42), ("x = 1", None), ("", None), ("print\n'last'", "last"), ("if True:\n    5", None)]
        for code, want in cases:
            with self.subTest(code=code):
                namespace: dict[str, object] = {}
                cell = compile_cell(code)
                exec(cell.body, namespace)
                self.assertEqual(None if cell.final is None else eval(cell.final, namespace), want)

    def test_compile_cell_finds_dotted_imports_at_top_level(self) -> None:
        code = ("import a.b, c, d.e as f\nfrom g.h import i\nif x:\n    import j.k\nelse:\n    import l.m\n"
                "try:\n    import n.o\nexcept ImportError:\n    import p.q\nfinally:\n    pass\n"
                "with ctx:\n    import r.s\nfor _ in []:\n    import t.u\n"
                "def fn():\n    import v.w\nclass K:\n    import x.y\n")
        self.assertEqual(compile_cell(code).imports, {"a.b", "j.k", "l.m", "n.o", "p.q", "r.s", "t.u"})

    def test_describe_exception(self) -> None:
        syntax_error = SyntaxError("expected ':'", ("<string>", 3, 5, "if x"))
        cases = [
            (ValueError("bad value"), "ValueError: bad value"),
            (KeyboardInterrupt(), "KeyboardInterrupt"),
            (KeyError("k"), "KeyError: 'k'"),
            (syntax_error, "SyntaxError: expected ':' (line 3)"),
            (ValueError("first\nsecond"), "ValueError: first second"),
        ]
        for exc, want in cases:
            self.assertEqual(describe_exception(exc), want)
        long = describe_exception(ValueError("y" * 5000))
        self.assertEqual(len(long), 1000)
        self.assertTrue(long.endswith("..."))

    def test_exit_outcome(self) -> None:
        cases = [(None, Outcome()), (0, Outcome()), (2, Outcome("error", 2, "SystemExit: 2")),
                 (256, Outcome("error", 1, "SystemExit: 256"))]
        for code, want in cases:
            self.assertEqual(exit_outcome(SystemExit(code)), want, code)

    def test_signal_outcome(self) -> None:
        self.assertEqual(signal_outcome(3), Outcome("error", 3, "Exit code 3"))
        self.assertEqual(signal_outcome(-signal.SIGKILL), Outcome("error", 137, "Exit code 137 (killed by SIGKILL)"))
        self.assertEqual(signal_outcome(-200), Outcome("error", 328, "Exit code 328 (killed by signal 200)"))


class TracebackTest(unittest.TestCase):
    def test_every_server_module_is_a_server_file(self) -> None:
        modules = [name for name in os.listdir(PACKAGE_DIR) if name.endswith(".py")]
        self.assertIn("server.py", modules)
        for name in modules:
            self.assertTrue(is_server_file(os.path.join(PACKAGE_DIR, name)), name)
        self.assertEqual(ENTRY_POINT, os.path.join(SERVER_HOME, "repl_server.py"))
        self.assertTrue(is_server_file(ENTRY_POINT))
        for other in ("<string>", "/mnt/data/kiln_repl.py", "/mnt/data/server.py", PACKAGE_DIR + "_other/x.py",
                      os.path.join(SERVER_HOME, "other.py"), __file__):
            self.assertFalse(is_server_file(other), other)

    def test_leading_server_frames_are_hidden(self) -> None:
        def user_writev(views: Sequence[memoryview]) -> int:
            raise ValueError("from user code")

        error = raised(lambda: write_all(user_writev, [b"x"]))
        # Start the traceback at the server's first frame, as run_python's does.
        tb = error.__traceback__
        while tb is not None and not tb.tb_frame.f_code.co_filename.startswith(PACKAGE_DIR):
            tb = tb.tb_next
        error.with_traceback(tb)
        self.assertIn("kiln_repl", "".join(traceback.format_exception(error)))
        text = user_traceback(error)
        self.assertTrue(text.startswith("Traceback (most recent call last):\n"), text)
        self.assertNotIn("kiln_repl", text)
        self.assertIn("in user_writev", text)
        self.assertTrue(text.endswith("ValueError: from user code\n"), text)

    def test_user_frames_are_kept_whole(self) -> None:
        body = compile_cell("def f():\n    return 1 / 0\nx = f()").body
        text = user_traceback(raised(lambda: exec(body, {})))
        self.assertIn('File "<string>", line 3, in <module>', text)
        self.assertIn('File "<string>", line 2, in f', text)


if __name__ == "__main__":
    unittest.main()
