"""In-process tests of the event stream: coalescing, order, decoding, and the end of a run."""

import random
import threading
import time
import unittest
from typing import Any, Sequence

import inprocess  # noqa: F401  (the server's package, by path)
from kiln_repl.events import COALESCE_BYTES, COALESCE_SECONDS, EventStream
from kiln_repl.log import Logger


class Recorder:
    """A send that keeps the frames, with the time each was sent."""

    def __init__(self, fail: bool = False) -> None:
        self.frames: list[tuple[dict[str, Any], list[bytes], float]] = []
        self.fail = fail
        self.lock = threading.Lock()

    def send(self, message: dict[str, Any], payloads: Sequence[bytes]) -> None:
        if self.fail:
            raise BrokenPipeError("the host went away")
        with self.lock:
            self.frames.append((message, list(payloads), time.monotonic()))

    def texts(self, stream: str) -> str:
        return "".join(m["text"] for m, _, _ in self.frames if m["type"] == "output" and m["stream"] == stream)

    def summary(self) -> list[tuple[str, str]]:
        return [(m.get("stream") or m["type"], m.get("text") or m["name"]) for m, _, _ in self.frames]


def stream(recorder: Recorder) -> EventStream:
    return EventStream("r1", recorder.send, Logger(-1))


class EventStreamTest(unittest.TestCase):
    def test_a_chunk_waits_for_company_at_most_the_coalescing_time(self) -> None:
        recorder = Recorder()
        events = stream(recorder)
        started = time.monotonic()
        events.output("stdout", b"a")
        events.output("stdout", b"b\n")
        time.sleep(COALESCE_SECONDS * 4)
        events.output("stdout", b"c\n")
        events.close(set())
        self.assertEqual(recorder.summary(), [("stdout", "ab\n"), ("stdout", "c\n")])
        first_sent = recorder.frames[0][2] - started
        self.assertGreaterEqual(first_sent, COALESCE_SECONDS * 0.9)
        self.assertLess(first_sent, COALESCE_SECONDS * 3)
        self.assertEqual(recorder.frames[0][0], {"id": "r1", "type": "output", "stream": "stdout", "text": "ab\n"})

    def test_enough_bytes_go_at_once(self) -> None:
        recorder = Recorder()
        events = stream(recorder)
        events.output("stderr", b"x" * COALESCE_BYTES)
        deadline = time.monotonic() + COALESCE_SECONDS / 2
        while not recorder.frames and time.monotonic() < deadline:
            time.sleep(0.001)
        self.assertEqual(recorder.summary(), [("stderr", "x" * COALESCE_BYTES)], "sent before the timer")
        events.close(set())

    def test_many_small_writes_are_a_few_frames(self) -> None:
        recorder = Recorder()
        events = stream(recorder)
        lines = [f"{i}\n".encode() for i in range(100_000)]
        for line in lines:
            events.output("stdout", line)
        events.close(set())
        self.assertLess(len(recorder.frames), 100)
        self.assertEqual(recorder.texts("stdout"), b"".join(lines).decode())

    def test_a_display_goes_behind_the_output_given_before_it(self) -> None:
        recorder = Recorder()
        events = stream(recorder)
        events.output("stdout", b"before\n")
        events.output("stderr", b"warn\n")
        events.display("figure-1.png", b"PNG")
        events.output("stdout", b"after\n")
        events.close(set())
        self.assertEqual(recorder.summary(), [("stdout", "before\n"), ("stderr", "warn\n"),
                                              ("display", "figure-1.png"), ("stdout", "after\n")])
        message, payloads, _ = recorder.frames[2]
        self.assertEqual((message, payloads),
                         ({"id": "r1", "type": "display", "name": "figure-1.png", "mime": "image/png"}, [b"PNG"]))

    def test_texts_add_up_to_the_decoding_of_all_the_bytes_however_split(self) -> None:
        rng = random.Random(12)
        alphabet = [b"a", b"\n", "\u2603".encode(), "\u00e9".encode(), b"\xff", b"\xe2\x82", b"\xf0\x9f", b"\x00"]
        for _ in range(20):
            data = b"".join(rng.choice(alphabet) for _ in range(200))
            cuts = sorted(rng.sample(range(1, len(data)), 20))
            recorder = Recorder()
            events = stream(recorder)
            for start, end in zip([0, *cuts], [*cuts, len(data)]):
                events.output("stdout", data[start:end])
                if rng.random() < 0.1:
                    time.sleep(COALESCE_SECONDS * 1.2)  # let a half character be sent alone
            events.close(set())
            self.assertEqual(recorder.texts("stdout"), data.decode("utf-8", "replace"), data)

    def test_a_cut_stream_ends_with_the_kept_whole_characters_and_no_notes(self) -> None:
        recorder = Recorder()
        events = stream(recorder)
        events.output("stdout", "ab\u2603".encode()[:-1])
        events.output("stderr", b"err\xe2")
        events.close({"stdout"}, "kiln: a note\n")
        self.assertEqual(recorder.texts("stdout"), "ab", "the half snowman is dropped, as in the result")
        self.assertEqual(recorder.texts("stderr"), "err\ufffdkiln: a note\n")

    def test_nothing_waiting_sends_nothing(self) -> None:
        recorder = Recorder()
        events = stream(recorder)
        events.close(set(), "")
        self.assertEqual(recorder.frames, [])

    def test_a_broken_channel_ends_the_sender_and_close_returns(self) -> None:
        recorder = Recorder(fail=True)
        events = stream(recorder)
        events.output("stdout", b"x" * COALESCE_BYTES)
        events.output("stdout", b"more")
        events.close(set())  # returns: the test would hang otherwise


if __name__ == "__main__":
    unittest.main()
