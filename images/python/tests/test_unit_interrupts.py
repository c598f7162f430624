"""In-process tests of the interrupter: what it interrupts, and what it never does."""

import signal
import subprocess
import threading
import time
import unittest
from typing import Any

import inprocess  # noqa: F401  (the server's package, by path)
from kiln_repl.interrupts import Interrupter


class InterrupterTest(unittest.TestCase):
    def setUp(self) -> None:
        self.interrupter = Interrupter()
        self.addCleanup(signal.signal, signal.SIGINT, signal.getsignal(signal.SIGINT))
        self.interrupter.install()

    def interrupt_later(self, seconds: float, request_id: str = "r1") -> None:
        """Sends the interrupt from another thread, as the channel's reader does."""
        timer = threading.Timer(seconds, self.interrupter.interrupt, [request_id])
        timer.start()
        self.addCleanup(timer.cancel)

    def run_cell(self, code: str, namespace: dict[str, Any] | None = None) -> str:
        """Runs code as the server runs a cell; returns "ran" or "interrupted"."""
        body = compile(code, "<string>", "exec")
        try:
            self.interrupter.enter_cell(body, None)
            exec(body, {"interrupter": self.interrupter} if namespace is None else namespace)
            self.interrupter.leave_cell()
        except KeyboardInterrupt:
            return "interrupted"
        finally:
            self.interrupter.leave_cell()
        return "ran"

    def test_the_cell_is_interrupted(self) -> None:
        self.interrupter.accept("r1", "python")
        self.interrupt_later(0.1)
        started = time.monotonic()
        self.assertEqual(self.run_cell("import time\ntime.sleep(30)"), "interrupted")
        self.assertLess(time.monotonic() - started, 1)
        self.assertTrue(self.interrupter.interrupted)

    def test_a_busy_cell_is_interrupted(self) -> None:
        self.interrupter.accept("r1", "python")
        self.interrupt_later(0.1)
        self.assertEqual(self.run_cell("while True:\n    pass"), "interrupted")

    def test_another_id_is_ignored(self) -> None:
        self.interrupter.accept("r1", "python")
        self.interrupt_later(0.05, "r2")
        self.assertEqual(self.run_cell("import time\ntime.sleep(0.3)"), "ran")
        self.assertFalse(self.interrupter.interrupted)

    def test_the_repls_own_code_is_not_interrupted_and_the_cell_gets_it_at_once(self) -> None:
        self.interrupter.accept("r1", "python")
        self.interrupt_later(0.05)
        time.sleep(0.3)  # the REPL's work before the cell: not interrupted
        self.assertEqual(self.run_cell("ran = True"), "interrupted", "delivered as the cell starts")

    def test_after_the_cell_nothing_is_interrupted_and_the_end_of_the_run_drops_it(self) -> None:
        self.interrupter.accept("r1", "python")
        self.assertEqual(self.run_cell("x = 1"), "ran")
        self.interrupt_later(0.05)
        time.sleep(0.3)  # the REPL's work after the cell, its code object still known
        self.assertFalse(self.interrupter.interrupted)
        self.interrupter.finish()
        self.interrupter.interrupt("r1")
        self.assertEqual(self.run_cell("x = 2"), "ran")

    def test_shielded_code_called_from_the_cell_finishes_and_the_cell_is_interrupted_after(self) -> None:
        self.interrupter.accept("r1", "python")
        self.interrupt_later(0.05)
        namespace: dict[str, Any] = {"interrupter": self.interrupter}
        code = "import time\nwith interrupter.shielded():\n    time.sleep(0.3)\n    saved = True\nafter = True"
        started = time.monotonic()
        self.assertEqual(self.run_cell(code, namespace), "interrupted")
        self.assertGreaterEqual(time.monotonic() - started, 0.3)
        self.assertTrue(namespace.get("saved"))
        self.assertNotIn("after", namespace)

    def test_a_cell_that_catches_it_goes_on_until_the_next_one(self) -> None:
        self.interrupter.accept("r1", "python")
        self.interrupt_later(0.05)
        self.interrupt_later(0.3)
        namespace: dict[str, Any] = {}
        code = "import time\ntry:\n    time.sleep(30)\nexcept KeyboardInterrupt:\n    caught = True\ntime.sleep(30)"
        self.assertEqual(self.run_cell(code, namespace), "interrupted")
        self.assertTrue(namespace["caught"])

    def test_bash_gets_sigint_in_its_group_even_when_the_interrupt_came_first(self) -> None:
        for interrupt_first in (False, True):
            with self.subTest(interrupt_first=interrupt_first):
                self.interrupter.accept("b1", "bash")
                if interrupt_first:
                    self.interrupter.interrupt("b1")
                child = subprocess.Popen(["bash", "-c", "sleep 30; echo never"], start_new_session=True,
                                         stdout=subprocess.PIPE)
                self.interrupter.program_started(child.pid)
                if not interrupt_first:
                    self.interrupter.interrupt("b1")
                out, _ = child.communicate(timeout=5)
                self.interrupter.program_ended()
                self.assertEqual((child.returncode, out), (-signal.SIGINT, b""))
                self.assertTrue(self.interrupter.interrupted)
                self.interrupter.finish()

    def test_an_interrupt_between_entering_the_cell_and_its_code_is_the_cells(self) -> None:
        self.interrupter.accept("r1", "python")
        body = compile("import time\ntime.sleep(30)", "<string>", "exec")
        started = time.monotonic()
        with self.assertRaises(KeyboardInterrupt):
            self.interrupter.enter_cell(body, None)
            self.interrupter.interrupt("r1")  # lands before the cell's code is on the stack
            for _ in range(10_000):
                pass  # bytecodes at which the handler runs
            exec(body, {})
        self.assertLess(time.monotonic() - started, 5)
        self.assertTrue(self.interrupter.interrupted)

    def test_after_the_cells_code_an_interrupt_waits_and_is_dropped(self) -> None:
        self.interrupter.accept("r1", "python")
        self.interrupter.enter_cell(compile("x = 1", "<string>", "exec"), None)
        self.interrupter.leave_cell()
        self.interrupter.interrupt("r1")
        for _ in range(10_000):
            pass  # the REPL's own work after the cell: not interrupted
        self.interrupter.finish()
        self.assertFalse(self.interrupter.interrupted)

    def test_a_program_that_lost_the_interrupt_as_it_started_gets_it_again(self) -> None:
        self.interrupter.resignal_after = 1.0
        self.interrupter.accept("b1", "bash")
        self.interrupter.interrupt("b1")
        # The program ignores SIGINT until told to go on: the first signal is lost, as it is
        # when it lands while bash forks its first command.
        child = subprocess.Popen(["bash", "-c", "trap '' INT; echo ready; read go; trap - INT; sleep 30; echo never"],
                                 start_new_session=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert child.stdin is not None and child.stdout is not None
        self.assertEqual(child.stdout.readline(), b"ready\n")
        self.interrupter.program_started(child.pid)
        child.stdin.write(b"go\n")
        child.stdin.flush()
        started = time.monotonic()
        out, _ = child.communicate(timeout=10)
        self.interrupter.program_ended()
        self.assertEqual((child.returncode, out), (-signal.SIGINT, b""))
        self.assertGreater(time.monotonic() - started, 0.5, "ended by the second signal, not the first")
        self.interrupter.finish()


if __name__ == "__main__":
    unittest.main()
