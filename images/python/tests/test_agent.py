"""The agent's calls through a real REPL: commands with their output as it comes, input,
signals, processes that outlive a cell, and files (kiln_repl.agent; E2B's envd is built on it)."""

import json
import os
import tempfile
import time
import unittest
from typing import Any

from repl_client import REQUEST_END, REQUEST_START, Repl, ReplTestCase


class Agent:
    """Agent calls on one REPL, numbered, with the frames of each kept apart."""

    def __init__(self, repl: Repl) -> None:
        self.repl = repl
        self.count = 0
        self.frames: dict[int, list[dict[str, Any]]] = {}

    def call(self, method: str, data: bytes = b"", **args: Any) -> int:
        self.count += 1
        header = {"binary": len(data), "op": "agent", "call": self.count, "method": method, "args": args}
        line = json.dumps(header, separators=(",", ":")).encode()
        self.repl.send_raw(REQUEST_START + line + b"\n" + data + REQUEST_END)
        return self.count

    def next(self, call: int, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not self.frames.get(call):
            frame = self.repl.read_frame(max(deadline - time.monotonic(), 0.1))
            if frame.get("type") == "agent":
                self.frames.setdefault(frame["call"], []).append(frame)
        return self.frames[call].pop(0)

    def until_end(self, call: int, timeout: float = 30.0) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        events = []
        while not (frame := self.next(call, timeout)).get("end"):
            events.append(frame)
        return events, frame

    def result(self, method: str, data: bytes = b"", **args: Any) -> dict[str, Any]:
        _, end = self.until_end(self.call(method, data, **args))
        return end


def output(events: list[dict[str, Any]], stream: str) -> bytes:
    return b"".join(e["data"] for e in events if e["event"].get("data") == stream)


class AgentTest(ReplTestCase):
    def setUp(self) -> None:
        self.agent = Agent(self.start())
        self.dir = tempfile.mkdtemp()

    def test_a_command_streams_its_output_and_ends_with_its_code(self) -> None:
        call = self.agent.call("proc.start", cmd="/bin/bash", args=["-c", "echo hi; echo oops >&2; exit 3"],
                               cwd=self.dir, envs={"GREETING": "x"})
        events, end = self.agent.until_end(call)
        self.assertIn("pid", events[0]["event"]["start"])
        self.assertEqual(output(events, "stdout"), b"hi\n")
        self.assertEqual(output(events, "stderr"), b"oops\n")
        self.assertEqual(end["event"]["end"], {"exit_code": 3, "exited": True, "status": "exit status 3"})
        self.assertNotIn("code", end)

    def test_cwd_and_env_reach_the_command(self) -> None:
        events, _ = self.agent.until_end(self.agent.call(
            "proc.start", cmd="/bin/bash", args=["-c", 'pwd; echo "$GREETING"'], cwd=self.dir, envs={"GREETING": "hello"}))
        self.assertEqual(output(events, "stdout").decode().split(), [os.path.realpath(self.dir), "hello"])

    def test_a_missing_command_is_not_found(self) -> None:
        end = self.agent.result("proc.start", cmd="/no/such/command")
        self.assertEqual(end["code"], "not_found")
        self.assertIn("/no/such/command", end["error"])

    def test_input_reaches_stdin_and_closing_it_ends_cat(self) -> None:
        call = self.agent.call("proc.start", cmd="cat", stdin=True)
        pid = self.agent.next(call)["event"]["start"]["pid"]
        self.assertNotIn("code", self.agent.result("proc.input", b"abc", process={"pid": pid}))
        self.assertNotIn("code", self.agent.result("proc.close_stdin", process={"pid": pid}))
        events, end = self.agent.until_end(call)
        self.assertEqual(output(events, "stdout"), b"abc")
        self.assertEqual(end["event"]["end"]["exit_code"], 0)

    def test_a_process_outlives_a_cell_until_it_is_killed(self) -> None:
        call = self.agent.call("proc.start", cmd="/bin/bash", args=["-c", "sleep 60 & wait"], tag="sleeper")
        pid = self.agent.next(call)["event"]["start"]["pid"]
        response = self.agent.repl.run("print(1)")
        self.assertEqual(response["status"], "ok")
        listed = self.agent.result("proc.list")["event"]["processes"]
        self.assertEqual([(p["pid"], p["tag"]) for p in listed], [(pid, "sleeper")])
        self.assertNotIn("code", self.agent.result("proc.signal", process={"tag": "sleeper"}, signal=9))
        _, end = self.agent.until_end(call)
        self.assertEqual(end["event"]["end"], {"exit_code": -1, "exited": False, "status": "signal: killed"})
        self.assertEqual(self.agent.result("proc.list")["event"]["processes"], [])

    def test_a_terminal_is_a_tty_of_the_size_asked(self) -> None:
        call = self.agent.call("proc.start", cmd="/bin/bash", args=["-c", "stty size; tty -s && echo tty"],
                               pty={"size": {"rows": 33, "cols": 101}})
        events, end = self.agent.until_end(call)
        self.assertEqual(output(events, "pty").split(), [b"33", b"101", b"tty"])
        self.assertEqual(end["event"]["end"]["exit_code"], 0)

    def test_files_are_written_read_listed_moved_and_removed(self) -> None:
        path = os.path.join(self.dir, "sub", "big.bin")
        content = os.urandom(3 << 20)
        half = len(content) // 2
        self.assertNotIn("code", self.agent.result("file.write", content[:half], path=path, offset=0))
        end = self.agent.result("file.write", content[half:], path=path, offset=half, last=True)
        self.assertEqual(end["event"]["entry"]["size"], len(content))
        events, end = self.agent.until_end(self.agent.call("file.read", path=path))
        self.assertEqual(b"".join(e["data"] for e in events), content)
        listed = self.agent.result("fs.list", path=self.dir, depth=2)["event"]["entries"]
        self.assertEqual([(e["path"], e["type"]) for e in listed],
                         [(os.path.join(self.dir, "sub"), "dir"), (path, "file")])
        self.assertEqual(self.agent.result("fs.mkdir", path=os.path.join(self.dir, "sub"))["code"], "already_exists")
        moved = self.agent.result("fs.move", source=path, destination=os.path.join(self.dir, "moved.bin"))
        self.assertEqual(moved["event"]["entry"]["name"], "moved.bin")
        self.assertNotIn("code", self.agent.result("fs.remove", path=os.path.join(self.dir, "sub")))
        self.assertEqual(self.agent.result("fs.stat", path=os.path.join(self.dir, "sub"))["code"], "not_found")
        self.assertEqual(self.agent.result("file.read", path=path)["code"], "not_found")

    def test_removing_what_is_not_there_succeeds(self) -> None:
        self.assertNotIn("code", self.agent.result("fs.remove", path=os.path.join(self.dir, "never")))

    def test_a_write_keeps_its_metadata_and_an_overwrite_drops_it(self) -> None:
        path = os.path.join(self.dir, "m.txt")
        end = self.agent.result("file.write", b"x", path=path, offset=0, last=True, metadata={"author": "ada"})
        self.assertEqual(end["event"]["entry"]["metadata"], {"author": "ada"})
        self.assertEqual(os.getxattr(path, "user.e2b.author"), b"ada")
        os.setxattr(path, "user.e2b.extra", b"1")
        self.assertEqual(self.agent.result("fs.stat", path=path)["event"]["entry"]["metadata"],
                         {"author": "ada", "extra": "1"})
        end = self.agent.result("file.write", b"y", path=path, offset=0, last=True)
        self.assertNotIn("metadata", end["event"]["entry"])

    def test_a_watch_names_each_change_below_its_directory_until_unwatched(self) -> None:
        nested = os.path.join(self.dir, "a")
        os.mkdir(nested)
        call = self.agent.call("fs.watch", path=self.dir, recursive=True, include_entry=True)
        self.assertEqual(self.agent.next(call)["event"], {"start": True})
        with open(os.path.join(nested, "f.txt"), "w") as handle:
            handle.write("hi")
        seen: list[tuple[str, str]] = []

        def until(change: tuple[str, str]) -> dict[str, Any]:
            while True:
                event = self.agent.next(call)["event"]
                seen.append((event["op"], event["name"]))
                if seen[-1] == change:
                    return dict(event)

        self.assertEqual(until(("write", "a/f.txt"))["entry"]["path"], os.path.join(nested, "f.txt"))
        os.rename(os.path.join(nested, "f.txt"), os.path.join(self.dir, "g.txt"))
        os.remove(os.path.join(self.dir, "g.txt"))
        until(("remove", "g.txt"))
        for change in [("create", "a/f.txt"), ("write", "a/f.txt"), ("rename", "a/f.txt"), ("create", "g.txt")]:
            self.assertIn(change, seen)
        self.assertNotIn("code", self.agent.result("fs.unwatch", target=call))
        self.assertTrue(self.agent.until_end(call)[1]["end"])

    def test_a_watch_of_what_is_not_a_directory_fails_at_once(self) -> None:
        self.assertEqual(self.agent.result("fs.watch", path=os.path.join(self.dir, "none"))["code"], "not_found")
        path = os.path.join(self.dir, "file")
        open(path, "w").close()
        self.assertEqual(self.agent.result("fs.watch", path=path)["code"], "invalid_argument")

    def test_metrics_come_from_the_cgroup(self) -> None:
        first = self.agent.result("sys.metrics")["event"]
        self.assertGreater(first["mem_total"], 0)
        self.assertGreater(first["disk_total"], 0)
        self.assertGreaterEqual(first["cpu_count"], 1)

    def test_an_unknown_method_is_unimplemented(self) -> None:
        self.assertEqual(self.agent.result("proc.fly")["code"], "unimplemented")


if __name__ == "__main__":
    unittest.main()
