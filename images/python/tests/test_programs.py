"""Languages run as programs from a table (kiln_repl.languages), with stand-in languages that need
nothing but sh: the mechanism, in any image. The polyglot image's real languages are tested in
images/polyglot/tests."""

import json
import os
import tempfile
import time
import unittest
from typing import Any

from repl_client import Repl, ReplTestCase

# "fake" compiles like a real compiler: it checks the code ("oops" is its syntax error), says
# something, and writes a program into the build directory, which the run then starts. /tmp is
# noexec under images/test.sh, as in production: the program runs all the same (from a memfd).
FAKE_COMPILER = ("if grep -n oops {file} >&2; then echo 'main.fake: error: oops found' >&2; echo 'more output'; exit 3; fi; "
                 "echo 'compiling {file}'; { echo '#!/bin/sh'; cat {file}; } > prog; chmod +x prog")
TABLE: dict[str, Any] = {
    "fake": {
        "file": "main.fake",
        "compile": [["sh", "-c", FAKE_COMPILER]],
        "run": ["{build}/prog", "{args}"],
        "env": {"KILN_FAKE_BUILD": "{build}"},
    },
    # Compiles as it runs: a failed run whose stderr has a line "SYNTAX: ..." did not compile.
    "shell": {"file": "main.sh", "run": ["sh", "{src}", "{args}"], "compile_error": "^SYNTAX: ", "error": "^SYNTAX: "},
    "slow": {"file": "main.slow", "compile": [["sleep", "30"]], "run": ["true"]},
    "missing": {"file": "x", "run": ["kiln-no-such-program", "{src}"]},
    "python": {"file": "x", "run": ["python3", "{src}"]},
    "broken": {"file": "x", "run": "sh"},
}
WANT_LANGUAGES = ["python", "bash", "fake", "shell", "slow"]


class ProgramsTestCase(ReplTestCase):
    def setUp(self) -> None:
        handle, self.table = tempfile.mkstemp(prefix="kiln-languages-", suffix=".json")
        with os.fdopen(handle, "w") as table:
            json.dump(TABLE, table)
        self.addCleanup(os.unlink, self.table)

    def repl(self) -> Repl:
        return self.start("--languages", self.table)

    def assertOutcome(self, response: dict[str, Any], status: str, exit_code: int, error: str | None) -> None:
        self.assertEqual((response["status"], response["exit_code"], response["error"]), (status, exit_code, error),
                         f"stdout={response['stdout']!r} stderr={response['stderr']!r}")


class TableTest(ProgramsTestCase):
    def test_ready_frame_lists_the_languages_found(self) -> None:
        repl = self.repl()
        self.assertEqual(repl.ready["capabilities"]["languages"], WANT_LANGUAGES)
        log = repl.log_text()
        self.assertIn("language 'missing' left out: kiln-no-such-program not installed", log)
        self.assertIn("language 'python' of", log)
        self.assertIn("language 'broken' of", log)

    def test_no_table_is_python_and_bash(self) -> None:
        repl = self.start("--languages", "/nonexistent/languages.json")
        self.assertEqual(repl.ready["capabilities"]["languages"], ["python", "bash"])
        self.assertEqual(repl.log_text(), "")

    def test_other_languages_are_refused(self) -> None:
        repl = self.repl()
        for lang in ("missing", "broken", "cobol"):
            response = repl.run("x", lang=lang)
            self.assertEqual((response["type"], response["error"]), ("error", f"bad request: unknown lang '{lang}'"))
        response = repl.run("x", lang="fake", tools=[{"name": "t", "function": "t"}])
        self.assertEqual((response["type"], response["error"]), ("error", "bad request: tools cannot be called from fake"))
        self.assertOk(repl.run("echo still here", lang="fake"))


class CompiledTest(ProgramsTestCase):
    def test_compile_and_run(self) -> None:
        repl = self.repl()
        code = 'echo "hello $1|$2"; pwd; cat data.csv; echo err >&2; echo made > out.txt; echo "$KILN_FAKE_BUILD"'
        response = repl.run(code, lang="fake", args=["a", "b c"], files={"data.csv": "x,y\n1,2\n"},
                            state=b"a blob", capture_state=True)
        self.assertOk(response)
        lines = response["stdout"].splitlines()
        self.assertEqual(lines[:4], ["hello a|b c", os.path.realpath(repl.data_dir), "x,y", "1,2"])
        self.assertRegex(lines[4], r"^/tmp/kiln-run-[^/]+$", "the build directory is private, under /tmp")
        self.assertEqual(response["stderr"], "compiling main.fake\nerr\n", "the compiler's output, then the program's")
        self.assertEqual([(f["path"], f["content"]) for f in response["files"]], [("out.txt", b"made\n")],
                         "neither the source nor the program comes back")
        self.assertEqual((response["state"], response["state_unchanged"], response["state_error"]), (None, True, None))
        self.assertIsNone(response["result"])
        # The build directory is gone with the run.
        self.assertFalse(os.path.exists(lines[4]))

    def test_compile_error(self) -> None:
        repl = self.repl()
        response = repl.run("echo ran > ran.txt\noops\n", lang="fake")
        self.assertOutcome(response, "error", 3, "main.fake: error: oops found")
        self.assertEqual(response["stderr"], "2:oops\nmain.fake: error: oops found\nmore output\n")
        self.assertEqual((response["stdout"], response["files"]), ("", []), "nothing ran")

    def test_runtime_errors(self) -> None:
        repl = self.repl()
        response = repl.run("echo before; exit 4", lang="fake")
        self.assertOutcome(response, "error", 4, "Exit code 4")
        self.assertEqual(response["stdout"], "before\n")
        response = repl.run("kill -9 $$", lang="fake")
        self.assertOutcome(response, "error", 137, "Exit code 137 (killed by SIGKILL)")

    def test_compile_error_found_in_a_run(self) -> None:
        repl = self.repl()
        response = repl.run("echo out; echo 'SYNTAX: bad token' >&2; exit 2", lang="shell")
        self.assertOutcome(response, "error", 2, "SYNTAX: bad token")
        response = repl.run("echo 'no syntax error' >&2; exit 2", lang="shell")
        self.assertOutcome(response, "error", 2, "Exit code 2")
        self.assertEqual(response["stderr"], "no syntax error\n")

    def test_deadline_covers_the_compile(self) -> None:
        repl = self.repl()
        started = time.monotonic()
        response = repl.run("", lang="slow", timeout_ms=300)
        self.assertLess(time.monotonic() - started, 5)
        self.assertOutcome(response, "timeout", 124, "Time limit exceeded")
        started = time.monotonic()
        response = repl.run("echo start; sleep 60 & sleep 60; echo never", lang="fake", timeout_ms=1500)
        self.assertLess(time.monotonic() - started, 6)
        self.assertOutcome(response, "timeout", 124, "Time limit exceeded")
        self.assertEqual(response["stdout"], "start\n")
        count = repl.run("cat /proc/[0-9]*/comm 2>/dev/null | grep -c '^sleep$' || true", lang="bash")
        self.assertEqual(count["stdout"], "0\n", "the compiler's and the program's processes are all gone")

    def test_output_is_capped(self) -> None:
        repl = self.repl()
        response = repl.run("head -c 100000 /dev/zero | tr '\\0' x", lang="fake", limits={"max_output_bytes": 1000})
        self.assertOk(response)
        self.assertTrue(response["truncated"])
        self.assertTrue(response["stdout"].startswith("x" * 1000 + "\n[kiln: output truncated, 99000 bytes dropped]"))

    def test_interrupt(self) -> None:
        repl = self.repl()
        request_id = repl.start_run("echo start; sleep 60", lang="fake")
        time.sleep(1.0)
        repl.interrupt(request_id)
        response = repl.read_frame(10)
        self.assertOutcome(response, "cancelled", 130, "Interrupted")
        self.assertEqual(response["stdout"], "start\n")
        # An interrupt during the compile stops it, and nothing runs.
        request_id = repl.start_run("", lang="slow")
        time.sleep(0.5)
        repl.interrupt(request_id)
        self.assertOutcome(repl.read_frame(10), "cancelled", 130, "Interrupted")

    def test_code_that_cannot_be_an_argument(self) -> None:
        repl = self.repl()
        response = repl.run("echo a\0b", lang="bash")
        self.assertOutcome(response, "error", 127, "ValueError: embedded null byte")
        response = repl.run("echo x", lang="fake", args=["\ud800"])
        self.assertEqual((response["status"], response["exit_code"]), ("error", 127))
        response = repl.run("echo '\ud800'", lang="fake")  # a lone surrogate, which JSON allows
        self.assertOk(response)
        self.assertEqual(response["stdout"], "?\n")
        self.assertOk(repl.run("echo still here", lang="bash"))

    def test_events(self) -> None:
        repl = self.repl()
        request_id = repl.start_run("echo out", lang="fake", events=True)
        events, result = repl.collect(request_id)
        self.assertOk(result)
        streams: dict[str, str] = {}
        for event in events:
            streams[event["stream"]] = streams.get(event["stream"], "") + event["text"]
        self.assertEqual(streams, {"stdout": "out\n", "stderr": "compiling main.fake\n"})


if __name__ == "__main__":
    unittest.main()
