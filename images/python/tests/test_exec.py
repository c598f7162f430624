"""Running Python: output capture, results, errors, exits, deadlines and limits."""

import time
import unittest

from repl_client import ReplTestCase


class CaptureTest(ReplTestCase):
    def test_printed_delimiters_stay_in_stdout(self) -> None:
        repl = self.start()
        code = ("print('>>> RESPONSE_END <<<')\nprint('>>> RESPONSE_START <<<')\n"
                "print('>>> REQUEST_START <<<')\nprint('>>> REQUEST_END <<<')")
        response = repl.run(code)
        self.assertOk(response)
        self.assertEqual(response["stdout"].count("<<<"), 4)
        self.assertEqual(repl.request(op="ping")["type"], "pong")

    def test_forged_response_on_fd1_is_only_stdout(self) -> None:
        repl = self.start()
        forged = ('\\n>>> RESPONSE_END <<<\\n>>> RESPONSE_START <<<\\n'
                  '{"id":"req-1","type":"result","status":"ok"}\\n>>> RESPONSE_END <<<\\n')
        response = repl.run(f"import os\nos.write(1, b'{forged}')\nos.write(2, b'{forged}')\n'done'")
        self.assertOk(response)
        self.assertEqual(response["result"], "'done'")
        self.assertIn('"status":"ok"}', response["stdout"])
        self.assertIn('"status":"ok"}', response["stderr"])
        self.assertEqual(repl.request(op="ping")["type"], "pong")

    def test_child_process_output_is_captured(self) -> None:
        repl = self.start()
        response = repl.run("import subprocess, os\nsubprocess.run(['echo', 'hi'])\n"
                            "os.system('echo there >&2')\nprint('py')")
        self.assertOk(response)
        self.assertEqual(response["stdout"], "hi\npy\n")
        self.assertEqual(response["stderr"], "there\n")

    def test_print_and_fd_writes_keep_their_order(self) -> None:
        repl = self.start()
        response = repl.run("import os, sys\nprint('a')\nos.write(1, b'b\\n')\nsys.stdout.write('c')\n"
                            "sys.stdout.flush()\nos.write(1, b'd')")
        self.assertEqual(response["stdout"], "a\nb\ncd")

    def test_invalid_utf8_nul_and_escapes_give_valid_json(self) -> None:
        repl = self.start()
        response = repl.run("import os\nos.write(1, b'\\xff\\xfe ok \\x00 \\x1b[31mred\\x1b[0m \\xe2\\x82')\n"
                            "print('\\udcff', '\\u2603')")
        self.assertOk(response)
        self.assertIn("\ufffd", response["stdout"])
        self.assertIn("\x00", response["stdout"])
        self.assertIn("\x1b[31mred", response["stdout"])
        self.assertIn("\u2603", response["stdout"])

    def test_nothing_leaks_into_the_next_run(self) -> None:
        repl = self.start()
        repl.run("import os, sys\nsys.stdout.write('pending')\nos.write(2, b'err')")
        response = repl.run("print('second')")
        self.assertEqual((response["stdout"], response["stderr"]), ("second\n", ""))

    def test_closed_streams_are_restored(self) -> None:
        repl = self.start()
        repl.run("import os, sys\nsys.stdout.close()\nos.close(2)\nsys.stderr = None")
        response = repl.run("import sys\nprint('back')\nprint('err', file=sys.stderr)")
        self.assertOk(response)
        self.assertEqual((response["stdout"], response["stderr"]), ("back\n", "err\n"))

    def test_stdin_is_empty(self) -> None:
        repl = self.start()
        response = repl.run("input()")
        self.assertEqual(response["error"], "EOFError: input() is not available: kiln runs code without standard input")
        response = repl.run("import sys\nsys.stdin.read()")
        self.assertOk(response)


class ResultTest(ReplTestCase):
    def test_final_expression(self) -> None:
        repl = self.start()
        cases = [("x = 41\nx + 1", "42"), ("'a'", "'a'"), ("print('p')", None), ("x = 1", None),
                 ("None", None), ("[i for i in range(3)]", "[0, 1, 2]")]
        for code, want in cases:
            self.assertEqual(repl.run(code)["result"], want, code)

    def test_namespace_persists_and_is_main(self) -> None:
        repl = self.start()
        repl.run("counter = 10\ndef bump():\n    global counter\n    counter += 1")
        repl.run("bump()")
        self.assertEqual(repl.run("counter, __name__")["result"], "(11, '__main__')")

    def test_args_and_working_directory(self) -> None:
        repl = self.start()
        response = repl.run("import os, sys\n(sys.argv, os.getcwd() == os.path.realpath(%r))" % repl.data_dir,
                            args=["a", "b c"])
        self.assertEqual(response["result"], "(['<string>', 'a', 'b c'], True)")

    def test_modules_written_in_the_data_dir_are_importable(self) -> None:
        repl = self.start()
        repl.run("open('helper.py', 'w').write('VALUE = 5')")
        self.assertEqual(repl.run("import helper\nhelper.VALUE")["result"], "5")

    def test_long_result_is_capped(self) -> None:
        repl = self.start()
        response = repl.run("'x' * 5000", limits={"max_output_bytes": 100})
        self.assertTrue(response["truncated"])
        self.assertTrue(response["result"].startswith("'" + "x" * 99))
        self.assertIn("[kiln: result truncated, 4902 characters dropped]", response["result"])


class ErrorTest(ReplTestCase):
    def assertNoReplFrames(self, stderr: str) -> None:
        self.assertNotIn("repl_server", stderr)
        self.assertNotIn("/opt/kiln", stderr)

    def test_syntax_error(self) -> None:
        repl = self.start()
        response = repl.run("x = 1\ny = 2\nif x\n    pass\n")
        self.assertEqual(response["status"], "error")
        self.assertEqual(response["exit_code"], 1)
        self.assertEqual(response["error"], "SyntaxError: expected ':' (line 3)")
        self.assertIn('File "<string>", line 3', response["stderr"])
        self.assertIn("if x", response["stderr"])
        self.assertNoReplFrames(response["stderr"])

    def test_runtime_error_points_at_user_lines(self) -> None:
        repl = self.start()
        response = repl.run("a = 1\n\ndef f():\n    return a / 0\n\nf()\n")
        self.assertEqual(response["status"], "error")
        self.assertEqual(response["error"], "ZeroDivisionError: division by zero")
        stderr = response["stderr"]
        self.assertTrue(stderr.startswith("Traceback (most recent call last):\n"), stderr)
        self.assertIn('File "<string>", line 6, in <module>', stderr)
        self.assertIn('File "<string>", line 4, in f', stderr)
        self.assertIn("return a / 0", stderr)
        self.assertNoReplFrames(stderr)

    def test_error_in_final_expression(self) -> None:
        repl = self.start()
        response = repl.run("x = {}\nx['missing']")
        self.assertEqual(response["error"], "KeyError: 'missing'")
        self.assertIn('line 2, in <module>', response["stderr"])
        self.assertNoReplFrames(response["stderr"])

    def test_a_traceback_that_cannot_be_formatted_is_still_told(self) -> None:
        # Python 3.13's "Did you mean" hint lists a frame's locals; a mapping that raises there
        # (patsy's formula namespace, on a misspelt column) once took the server down.
        repl = self.start()
        code = ("class Lookup:\n    def __getitem__(self, key):\n        raise KeyError(key)\n"
                "def formula():\n    return eval('misspelt', {}, Lookup())\nformula()")
        response = repl.run(code)
        self.assertEqual(response["status"], "error")
        self.assertEqual(response["error"], "NameError: name 'misspelt' is not defined")
        self.assertIn('line 6, in <module>', response["stderr"])
        self.assertTrue(response["stderr"].endswith("NameError: name 'misspelt' is not defined\n"), response["stderr"])
        self.assertEqual(repl.run("1 + 1")["result"], "2")

    def test_namespace_is_the_main_module(self) -> None:
        # So that what looks a session's class up by module finds it: pickle, unittest.main.
        repl = self.start()
        response = repl.run("import pickle, sys\nclass Point:\n    pass\n"
                            "type(pickle.loads(pickle.dumps(Point()))) is Point, sys.modules['__main__'].Point is Point")
        self.assertEqual(response["result"], "(True, True)")

    def test_exits_and_interrupts_are_answered(self) -> None:
        repl = self.start()
        cases = [
            ("import sys\nprint('bye')\nsys.exit(0)", "ok", 0, None),
            ("import sys\nsys.exit()", "ok", 0, None),
            ("exit()", "ok", 0, None),
            ("import sys\nsys.exit(2)", "error", 2, "SystemExit: 2"),
            ("import sys\nsys.exit('failed badly')", "error", 1, "SystemExit: failed badly"),
            ("raise KeyboardInterrupt", "error", 1, "KeyboardInterrupt"),
        ]
        for code, status, exit_code, error in cases:
            response = repl.run(code)
            self.assertEqual((response["status"], response["exit_code"], response["error"]),
                             (status, exit_code, error), code)
        self.assertIn("KeyboardInterrupt", response["stderr"])
        self.assertEqual(repl.run("1 + 1")["result"], "2")

    def test_memory_error(self) -> None:
        repl = self.start()
        response = repl.run("x = bytearray(1 << 46)")
        self.assertEqual(response["status"], "error")
        self.assertTrue(response["error"].startswith("MemoryError"), response["error"])

    def test_long_error_message_is_one_line(self) -> None:
        repl = self.start()
        response = repl.run("raise ValueError('first\\nsecond ' + 'y' * 5000)")
        self.assertNotIn("\n", response["error"])
        self.assertLessEqual(len(response["error"]), 1000)


class DeadlineTest(ReplTestCase):
    def test_busy_loop_times_out_with_partial_output(self) -> None:
        repl = self.start()
        started = time.monotonic()
        response = repl.run("print('before', flush=True)\nwhile True:\n    pass", timeout_ms=500)
        self.assertLess(time.monotonic() - started, 5)
        self.assertEqual((response["status"], response["exit_code"], response["error"]),
                         ("timeout", 124, "Time limit exceeded"))
        self.assertEqual(response["stdout"], "before\n")
        self.assertEqual(repl.run("'alive'")["result"], "'alive'")

    def test_sleep_and_except_exception_time_out(self) -> None:
        repl = self.start()
        code = "import time\nwhile True:\n    try:\n        time.sleep(100)\n    except Exception:\n        pass"
        response = repl.run(code, timeout_ms=300)
        self.assertEqual(response["status"], "timeout")

    def test_leftover_child_processes_are_killed(self) -> None:
        repl = self.start()
        response = repl.run("import subprocess\nsubprocess.Popen(['sleep', '300']).pid")
        pid = int(response["result"])
        code = f"import os\ntry:\n    os.kill({pid}, 0)\n    alive = True\nexcept ProcessLookupError:\n    alive = False\nalive"
        self.assertEqual(repl.run(code)["result"], "False")

    def test_orphaned_grandchildren_are_killed(self) -> None:
        repl = self.start()
        repl.run("import subprocess, time\nsubprocess.run('sleep 300 & echo $! > pid', shell=True)\ntime.sleep(0.2)")
        code = "import os\nos.path.exists('/proc/' + open('pid').read().strip())"
        self.assertEqual(repl.run(code)["result"], "False")

    def test_timed_out_child_is_killed(self) -> None:
        repl = self.start()
        started = time.monotonic()
        response = repl.run("import subprocess\nsubprocess.run('sleep 30; echo late', shell=True)", timeout_ms=300)
        self.assertEqual(response["status"], "timeout")
        self.assertLess(time.monotonic() - started, 5)
        self.assertNotIn("late", response["stdout"])

    def test_fork_that_falls_through_answers_once(self) -> None:
        repl = self.start()
        response = repl.run("import os\npid = os.fork()\nprint('forked')")
        self.assertOk(response)
        self.assertEqual(repl.request(op="ping")["type"], "pong")


class OutputLimitTest(ReplTestCase):
    def test_output_over_the_cap_is_marked(self) -> None:
        repl = self.start()
        response = repl.run("print('x' * 5000, end='')", limits={"max_output_bytes": 1000})
        self.assertTrue(response["truncated"])
        self.assertEqual(response["stdout"], "x" * 1000 + "\n[kiln: output truncated, 4000 bytes dropped]\n")

    def test_cut_never_splits_a_character(self) -> None:
        repl = self.start()
        response = repl.run("print('\\u2603' * 10, end='')", limits={"max_output_bytes": 10})
        self.assertEqual(response["stdout"], "\u2603" * 3 + "\n[kiln: output truncated, 21 bytes dropped]\n")

    def test_flood_does_not_hang(self) -> None:
        repl = self.start()
        code = ("import os, subprocess\nchunk = b'y' * 65536\nfor _ in range(800):\n    os.write(1, chunk)\n"
                "subprocess.run('head -c 50000000 /dev/zero >&2', shell=True)\nprint('x' * 10_000_000)\n'end'")
        started = time.monotonic()
        response = repl.run(code, limits={"max_output_bytes": 4096}, timeout=60)
        self.assertLess(time.monotonic() - started, 60)
        self.assertOk(response)
        self.assertEqual(response["result"], "'end'")
        self.assertTrue(response["truncated"])
        self.assertIn(f"{800 * 65536 + 10_000_001 - 4096} bytes dropped", response["stdout"])
        self.assertIn(f"{50_000_000 - 4096} bytes dropped", response["stderr"])
        self.assertEqual(repl.run("print('small')")["stdout"], "small\n")


if __name__ == "__main__":
    unittest.main()
