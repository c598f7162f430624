"""Events while a request runs: output as it comes, coalesced, and what they add up to."""

import unittest
from typing import Any

from repl_client import ReplTestCase


def texts(events: list[dict[str, Any]], stream: str) -> str:
    return "".join(event["text"] for event in events if event["type"] == "output" and event["stream"] == stream)


class EventsTest(ReplTestCase):
    def test_output_comes_as_it_is_written(self) -> None:
        repl = self.start()
        request_id = repl.start_run("import time\nprint('a', flush=True)\ntime.sleep(1)\nprint('b')", events=True)
        events, result = repl.collect(request_id)
        self.assertOk(result)
        self.assertEqual([(event["stream"], event["text"]) for event in events], [("stdout", "a\n"), ("stdout", "b\n")])
        self.assertEqual(set(events[0]) - {"arrived"}, {"binary", "id", "type", "stream", "text"})
        self.assertLess(events[0]["arrived"], events[1]["arrived"] - 0.7, "'a' came while the code slept")
        self.assertLessEqual(events[1]["arrived"], result["arrived"])

    def test_a_print_loop_is_a_few_frames_that_add_up_to_stdout(self) -> None:
        repl = self.start()
        code = "import sys\nfor i in range(10_000):\n    print(i)\n    print('e', i, file=sys.stderr)"
        events, result = repl.collect(repl.start_run(code, events=True))
        self.assertOk(result)
        self.assertFalse(result["truncated"])
        self.assertLessEqual(len(events), 30, "coalesced, not one frame a line")
        self.assertEqual(texts(events, "stdout"), result["stdout"])
        self.assertEqual(texts(events, "stderr"), result["stderr"])

    def test_nothing_past_the_cap_is_sent(self) -> None:
        repl = self.start()
        code = "for i in range(5_000):\n    print('\\u2603' * 3, i)"
        events, result = repl.collect(repl.start_run(code, events=True, limits={"max_output_bytes": 10_000}))
        self.assertTrue(result["truncated"])
        sent = texts(events, "stdout")
        self.assertTrue(result["stdout"].startswith(sent))
        self.assertEqual(result["stdout"][len(sent):][:len("\n[kiln: output truncated")], "\n[kiln: output truncated")
        self.assertLessEqual(len(sent.encode()), 10_000)

    def test_invalid_utf8_split_between_chunks_decodes_as_the_result(self) -> None:
        repl = self.start()
        code = ("import os, time\nfor part in (b'\\xe2', b'\\x98', b'\\x83 ok \\xff', b'\\xe2\\x82'):\n"
                "    os.write(1, part)\n    time.sleep(0.08)")
        events, result = repl.collect(repl.start_run(code, events=True))
        self.assertEqual(result["stdout"], "\u2603 ok \ufffd\ufffd")
        self.assertEqual(texts(events, "stdout"), result["stdout"])
        self.assertGreater(len(events), 1)

    def test_stderr_events_carry_the_repls_notes_too(self) -> None:
        repl = self.start()
        code = "import sys\nprint('oops', file=sys.stderr)\nopen('big', 'w').write('x' * 100)"
        events, result = repl.collect(repl.start_run(code, events=True, files={"../out": "x"},
                                                     limits={"max_file_bytes": 10}))
        self.assertTrue(result["stderr"].startswith("kiln: input file '../out' refused"), result["stderr"])
        self.assertTrue(result["stderr"].endswith("kiln: files not returned (over 10 bytes): big (100 bytes)\n"))
        self.assertEqual(texts(events, "stderr"), result["stderr"])

    def test_bash_events(self) -> None:
        repl = self.start()
        events, result = repl.collect(repl.start_run("echo one; sleep 0.3; echo two >&2", lang="bash", events=True))
        self.assertOk(result)
        self.assertEqual([(event["stream"], event["text"]) for event in events], [("stdout", "one\n"), ("stderr", "two\n")])

    def test_without_events_only_the_result_comes(self) -> None:
        repl = self.start()
        events, result = repl.collect(repl.start_run("import time\nprint('a', flush=True)\ntime.sleep(0.2)",
                                                     events=False))
        self.assertEqual((events, result["stdout"]), ([], "a\n"))

    def test_a_thread_left_printing_sends_nothing_after_the_result(self) -> None:
        repl = self.start()
        code = "import threading, time\ndef talk():\n    while True:\n        print('.', flush=True)\n        time.sleep(0.01)\n" \
               "threading.Thread(target=talk, daemon=True).start()\ntime.sleep(0.1)"
        events, result = repl.collect(repl.start_run(code, events=True))
        self.assertEqual(texts(events, "stdout"), result["stdout"])
        events, result = repl.collect(repl.start_run("'next'"))
        self.assertEqual((events, result["result"]), ([], "'next'"))


if __name__ == "__main__":
    unittest.main()
