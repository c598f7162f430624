"""bash requests."""

import time
import unittest

from repl_client import ReplTestCase


class BashTest(ReplTestCase):
    def test_args_files_and_exit_code(self) -> None:
        repl = self.start()
        code = 'echo "$0|$1|$2"; cat in.txt; echo oops >&2; echo made > out.txt; exit 3'
        response = repl.run(code, lang="bash", args=["a", "b c"], files={"in.txt": "input\n"},
                            state=b"not even a blob", capture_state=True)
        self.assertEqual((response["status"], response["exit_code"], response["error"]), ("error", 3, "Exit code 3"))
        self.assertEqual(response["stdout"], "bash|a|b c\ninput\n")
        self.assertEqual(response["stderr"], "oops\n")
        self.assertEqual([(f["path"], f["content"]) for f in response["files"]], [("out.txt", b"made\n")])
        self.assertEqual((response["state"], response["state_unchanged"], response["state_error"]), (None, True, None),
                         "bash leaves the state alone, and says so")
        self.assertIsNone(response["result"])

    def test_success(self) -> None:
        repl = self.start()
        response = repl.run("pwd", lang="bash")
        self.assertOk(response)
        self.assertEqual(response["exit_code"], 0)
        self.assertEqual(response["stdout"].strip(), repl.data_dir)
        self.assertEqual((response["state"], response["state_unchanged"]), (None, False), "no state was brought")

    def test_timeout_kills_the_whole_group(self) -> None:
        repl = self.start()
        started = time.monotonic()
        response = repl.run("echo start; sleep 60 & sleep 60; echo never", lang="bash", timeout_ms=300)
        self.assertLess(time.monotonic() - started, 5)
        self.assertEqual((response["status"], response["exit_code"], response["error"]), ("timeout", 124, "Time limit exceeded"))
        self.assertEqual(response["stdout"], "start\n")
        self.assertEqual(repl.run("cat /proc/[0-9]*/comm 2>/dev/null | grep -c '^sleep$' || true", lang="bash")["stdout"], "0\n")

    def test_killed_by_a_signal(self) -> None:
        repl = self.start()
        response = repl.run("kill -9 $$", lang="bash")
        self.assertEqual((response["exit_code"], response["error"]), (137, "Exit code 137 (killed by SIGKILL)"))


if __name__ == "__main__":
    unittest.main()
