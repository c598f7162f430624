"""Interrupts: the running code stops, the run ends as cancelled with what it had done so far."""

import time
import unittest
from typing import Any

from repl_client import Repl, ReplTestCase


class InterruptTest(ReplTestCase):
    def interrupt_after(self, repl: Repl, seconds: float, code: str, **fields: Any) -> tuple[dict[str, Any], float]:
        """Runs code, interrupts it after seconds; returns the result and how long it took to
        come after the interrupt."""
        request_id = repl.start_run(code, **fields)
        time.sleep(seconds)
        repl.interrupt(request_id)
        sent = time.monotonic()
        _, result = repl.collect(request_id)
        return result, result["arrived"] - sent

    def assertCancelled(self, result: dict[str, Any]) -> None:
        self.assertEqual((result["status"], result["exit_code"], result["error"]), ("cancelled", 130, "Interrupted"),
                         f"stderr={result['stderr']!r}")

    def test_sleep_is_interrupted_with_output_files_and_state_so_far(self) -> None:
        repl = self.start()
        code = "import time\nx = 41\nprint('before', flush=True)\nopen('partial.txt', 'w').write('p')\n" \
               "time.sleep(600)\nx = 0"
        result, took = self.interrupt_after(repl, 0.5, code, capture_state=True)
        self.assertCancelled(result)
        self.assertLess(took, 1.0)
        self.assertEqual((result["stdout"], result["stderr"]), ("before\n", ""))
        self.assertEqual([f["path"] for f in result["files"]], ["partial.txt"])
        self.assertIsNotNone(result["state_blob"])
        self.assertIsNone(result["result"])
        self.assertEqual(repl.run("x + 1")["result"], "42", "the namespace goes on from where it stopped")

    def test_a_busy_loop_is_interrupted(self) -> None:
        repl = self.start()
        result, took = self.interrupt_after(repl, 0.3, "n = 0\nwhile True:\n    n += 1", timeout_ms=20_000)
        self.assertCancelled(result)
        self.assertLess(took, 1.0)
        self.assertEqual(repl.run("n > 0")["result"], "True")

    def test_bash_is_interrupted(self) -> None:
        repl = self.start()
        result, took = self.interrupt_after(repl, 0.3, "echo start; sleep 600; echo never", lang="bash")
        self.assertCancelled(result)
        self.assertLess(took, 1.0)
        self.assertEqual(result["stdout"], "start\n")
        self.assertEqual(repl.run("echo ok", lang="bash")["stdout"], "ok\n")

    def test_an_interrupt_right_behind_the_request_is_not_lost(self) -> None:
        repl = self.start()
        request_id = repl.start_run("import time\ntime.sleep(600)", files={"big.bin": b"z" * 5_000_000})
        repl.interrupt(request_id)
        _, result = repl.collect(request_id, timeout=10)
        self.assertCancelled(result)

    def test_code_that_ignores_sigint_goes_on_and_the_repl_survives(self) -> None:
        repl = self.start()
        code = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(1.5)\n'done'"
        result, took = self.interrupt_after(repl, 0.3, code)
        self.assertOk(result)
        self.assertEqual(result["result"], "'done'")
        self.assertGreater(took, 0.8, "the code was not stopped")
        # The REPL's own handler is back for the next run.
        result, took = self.interrupt_after(repl, 0.3, "import time\ntime.sleep(600)")
        self.assertCancelled(result)

    def test_code_that_catches_the_interrupt_is_cancelled_and_a_second_interrupt_is_delivered(self) -> None:
        repl = self.start()
        code = ("import time\ncaught = 0\nwhile True:\n    try:\n        time.sleep(600)\n"
                "    except KeyboardInterrupt:\n        caught += 1\n        print('caught', caught, flush=True)\n"
                "        if caught == 2:\n            break")
        request_id = repl.start_run(code)
        for _ in range(2):
            time.sleep(0.3)
            repl.interrupt(request_id)
        _, result = repl.collect(request_id, timeout=10)
        self.assertCancelled(result)
        self.assertEqual(result["stdout"], "caught 1\ncaught 2\n")
        self.assertEqual(result["stderr"], "")

    def test_an_interrupt_for_another_id_is_ignored(self) -> None:
        repl = self.start()
        request_id = repl.start_run("import time\ntime.sleep(0.6)\n'slept'")
        time.sleep(0.2)
        repl.interrupt("not-" + request_id)
        _, result = repl.collect(request_id)
        self.assertOk(result)
        self.assertEqual(result["result"], "'slept'")

    def test_a_late_interrupt_is_ignored_and_never_answered(self) -> None:
        repl = self.start()
        response = repl.run("1")
        repl.interrupt(response["id"])
        self.assertEqual(repl.request(op="ping")["type"], "pong")
        response = repl.run("import time\ntime.sleep(0.3)\n2")
        self.assertOk(response)
        self.assertEqual(response["result"], "2")

    def test_an_interrupt_does_not_stop_the_repls_own_work(self) -> None:
        repl = self.start()
        # Interrupts arrive all along a run whose state and files take the REPL a while.
        code = "import os\nblob = os.urandom(20_000_000)\nfor i in range(200):\n    open(f'f{i}', 'w').write('x')"
        request_id = repl.start_run(code, capture_state=True, limits={"max_files": 500})
        for _ in range(40):
            repl.interrupt(request_id)
            time.sleep(0.01)
        _, result = repl.collect(request_id, timeout=30)
        self.assertIn(result["status"], ("ok", "cancelled"))
        self.assertEqual(repl.run("'alive'")["result"], "'alive'")

    def test_a_user_raised_keyboard_interrupt_stays_an_error(self) -> None:
        repl = self.start()
        response = repl.run("raise KeyboardInterrupt")
        self.assertEqual((response["status"], response["exit_code"]), ("error", 1))


if __name__ == "__main__":
    unittest.main()
