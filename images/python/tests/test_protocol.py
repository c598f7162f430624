"""Framing, the ready frame, ping, bad requests and the process modes."""

import json
import os
import random
import unittest

from repl_client import REQUEST_END, REQUEST_START, SERVER, Repl, ReplTestCase, encode_request


class ReadyTest(ReplTestCase):
    def test_ready_frame_lists_preloads(self) -> None:
        repl = self.start(preload=True)
        ready = repl.ready
        self.assertEqual(ready["type"], "ready")
        self.assertEqual(ready["protocol"], 2)
        self.assertRegex(ready["python"], r"^3\.\d+\.\d+")
        for name in ("numpy", "pandas", "scipy", "sklearn", "statsmodels", "matplotlib", "seaborn"):
            self.assertRegex(ready["preloaded"].get(name, ""), r"^\d+\.", name)
        # An image with a language table (polyglot) lists its languages after these two.
        table = os.path.join(os.path.dirname(SERVER), "languages.json")
        languages = ["python", "bash"]
        if os.path.exists(table):
            with open(table) as handle:
                languages += list(json.load(handle))
        self.assertEqual(ready["capabilities"], {"languages": languages, "state": True, "files": True, "tools": True,
                                                 "outputs": True, "agent": True})

    def test_preloaded_names_and_quiet_start(self) -> None:
        repl = self.start(preload=True)
        code = (
            "assert all(m is not None for m in (stats, optimize, interpolate, linear_model, tree, ensemble,\n"
            "    cluster, preprocessing, model_selection, metrics, sm, sns, json, csv, datetime, collections,\n"
            "    itertools, functools, math, random, re, os, sys))\n"
            "fig, ax = plt.subplots()\n"
            "ax.plot(np.arange(3))\n"
            "fig.savefig('plot.png')\n"
            "(matplotlib.get_backend(), int(pd.Series([1, 2]).sum()), scipy.__name__)"
        )
        response = repl.run(code)
        self.assertOk(response)
        self.assertEqual(response["result"], "('module://kiln_repl.mplbackend', 3, 'scipy')")
        self.assertEqual(response["stderr"], "")
        self.assertEqual([f["path"] for f in response["files"]], ["plot.png"])
        # Nothing, such as a font cache rebuild, was said while warming up.
        self.assertEqual(repl.log_text(), "")


    def test_await_hello_answers_the_greeting_with_ready(self) -> None:
        # With --await-hello the REPL says nothing until greeted (the host of a Kubernetes Pod
        # attaches only once it runs, and what was written before is lost): the first frame is
        # the answer to the hello, with its id; a second hello is answered the same way.
        repl = Repl(hello="h1")
        self.addCleanup(repl.close)
        self.assertEqual((repl.ready["type"], repl.ready["id"]), ("ready", "h1"))
        self.assertEqual(repl.ready["protocol"], 2)
        self.assertIn("python", repl.ready["capabilities"]["languages"])
        self.assertOk(repl.run("x = 2\nx * 21"))
        again = repl.request(op="hello")
        self.assertEqual((again["type"], again["capabilities"]), ("ready", repl.ready["capabilities"]))
        self.assertEqual(repl.run("x")["result"], "2")


    def test_rlimits_from_the_environment_bind_user_code(self) -> None:
        # A Pod has no ulimits: the REPL lowers its own, and user code inherits them.
        repl = self.start(env={"KILN_RLIMITS": "nofile=64,fsize=65536,core=0,nproc=1"})
        response = repl.run(
            "import resource, os\n"
            "print([resource.getrlimit(r) for r in (resource.RLIMIT_NOFILE, resource.RLIMIT_FSIZE, resource.RLIMIT_CORE)])\n"
            "print('KILN_RLIMITS' in os.environ)\n"
            "open('big.bin', 'wb').write(b'x' * 100000)")
        self.assertEqual(response["stdout"].splitlines(), ["[(64, 64), (65536, 65536), (0, 0)]", "False"])
        self.assertEqual(response["status"], "error")  # the write past fsize fails
        self.assertIn("nproc", repl.log_text())  # a limit per uid is refused, and said so


class FramingTest(ReplTestCase):
    def test_request_one_byte_at_a_time(self) -> None:
        repl = self.start()
        data = b"noise before the frame\n" + encode_request({"id": "slow", "op": "exec", "code": "print(6 * 7)"})
        for index in range(len(data)):
            repl.send_raw(data[index:index + 1])
        response = repl.read_frame()
        self.assertEqual(response["id"], "slow")
        self.assertEqual(response["stdout"], "42\n")

    def test_frames_split_at_odd_places(self) -> None:
        repl = self.start()
        data = b"".join(encode_request({"id": f"r{i}", "op": "exec", "code": f"{i} * 2"}) for i in range(5))
        cuts = sorted(random.Random(7).sample(range(1, len(data)), 40))
        # Cut right inside a delimiter too.
        cuts.append(data.index(REQUEST_END) + 5)
        start = 0
        for cut in sorted(set(cuts)) + [len(data)]:
            repl.send_raw(data[start:cut])
            start = cut
        for i in range(5):
            response = repl.read_frame()
            self.assertEqual((response["id"], response["result"]), (f"r{i}", str(i * 2)))

    def test_restarted_frame_and_stray_lines(self) -> None:
        repl = self.start()
        repl.send_raw(REQUEST_START + encode_request({"id": "kept", "op": "ping"}))
        self.assertEqual(repl.read_frame(), {"binary": 0, "id": "kept", "type": "pong"})
        # A header cut short: an error frame, then the stray line is skipped and the next served.
        repl.send_raw(REQUEST_START + b'{"binary":0,"id": "lost"\n' + b"x" * 100 + b"\n" +
                      encode_request({"id": "next", "op": "ping"}))
        self.assertEqual(repl.read_frame()["type"], "error")
        self.assertEqual(repl.read_frame(), {"binary": 0, "id": "next", "type": "pong"})

    def test_ping(self) -> None:
        repl = self.start()
        self.assertEqual(repl.request(op="ping"), {"binary": 0, "id": "req-1", "type": "pong"})

    def test_payloads_hold_any_bytes(self) -> None:
        repl = self.start()
        content = bytes(range(256)) + REQUEST_END + b"\n" + REQUEST_START + b"\x00"
        response = repl.run("data = open('in.bin', 'rb').read()\nopen('out.bin', 'wb').write(data[::-1])\nlen(data)",
                            files={"in.bin": content})
        self.assertOk(response)
        self.assertEqual(response["result"], str(len(content)))
        self.assertEqual([(f["path"], f["content"]) for f in response["files"]], [("out.bin", content[::-1])])

    def test_bad_requests_get_an_error_frame(self) -> None:
        repl = self.start()
        cases: list[tuple[bytes, str, str]] = [
            (REQUEST_START + b"{not json\n" + REQUEST_END, "", 'the header does not start with {"binary":N'),
            (REQUEST_START + b'{"binary":0,not json\n' + REQUEST_END, "", "request is not JSON: "),
            (encode_request({"id": "a", "op": "fly"}), "a", "unknown op 'fly'"),
            (encode_request({"id": "b", "lang": "cobol"}), "b", "unknown lang 'cobol'"),
            (encode_request({"id": "c", "args": "x"}), "c", "args has the wrong type"),
            (encode_request({"id": "d", "timeout_ms": "soon"}), "d", "timeout_ms has the wrong type"),
            (encode_request({"id": "e", "limits": {"max_file_bytes": 2}}, files={"x": "abc"}), "e",
             "file 'x' is 3 bytes, over max_file_bytes 2"),
            (REQUEST_START + b'{"binary":4,"id":"f","state":{"size":3}}\nabcd' + REQUEST_END, "f",
             "the sizes of the state and files add up to 3 bytes, not binary 4"),
        ]
        for data, request_id, reason in cases:
            with self.subTest(reason=reason):
                repl.send_raw(data)
                response = repl.read_frame()
                self.assertEqual((response["binary"], response["type"], response["id"]), (0, "error", request_id))
                self.assertTrue(response["error"].startswith("bad request: " + reason), response["error"])
        self.assertOk(repl.run("1"))

    def test_a_length_that_lies_is_refused_and_the_next_frame_served(self) -> None:
        repl = self.start()
        # binary says 3, but 8 bytes come: the end delimiter is not where it must be.
        repl.send_raw(REQUEST_START + b'{"binary":3,"id":"liar","code":"print(1)","files":[{"path":"f","size":3}]}\n'
                      + b"12345678" + REQUEST_END)
        refused = repl.read_frame()
        self.assertEqual((refused["type"], refused["id"]), ("error", "liar"))
        self.assertEqual(refused["error"], "bad request: the end delimiter does not follow the 3 bytes of binary")
        response = repl.run("import os\nos.listdir('.')")
        self.assertOk(response)
        self.assertEqual(response["result"], "[]", "nothing of the refused request ran")

    def test_a_state_over_the_cap_is_refused_and_the_next_request_served(self) -> None:
        repl = self.start()
        refused = repl.run("x = 1", state=b"s" * 2000, capture_state=True, limits={"max_state_bytes": 1000})
        self.assertEqual((refused["type"], refused["error"]),
                         ("error", "bad request: state is 2000 bytes, over max_state_bytes 1000"))
        response = repl.run("'x' in globals()")
        self.assertOk(response)
        self.assertEqual(response["result"], "False")

    def test_end_of_file_inside_a_payload_is_a_clean_exit(self) -> None:
        repl = self.start()
        data = encode_request({"id": "cut", "code": "open('ran', 'w')"}, files={"big": b"z" * 100_000})
        repl.send_raw(data[:len(data) // 2])
        repl.stdin.close()
        self.assertEqual(repl.process.wait(timeout=10), 0)
        self.assertEqual(os.listdir(repl.data_dir), [])
        self.assertEqual(repl.log_text(), "")

    def test_missing_fields_get_defaults(self) -> None:
        repl = self.start()
        repl.send_raw(REQUEST_START + b'{"binary":0,"id": "d", "code": "import sys; sys.argv"}\n' + REQUEST_END)
        response = repl.read_frame()
        self.assertOk(response)
        self.assertEqual(response["result"], "['<string>']")


class ModeTest(ReplTestCase):
    def test_no_preload_once(self) -> None:
        repl = self.start("--once")
        self.assertEqual(repl.ready["preloaded"], {})
        self.assertEqual(repl.request(op="ping")["type"], "pong")
        response = repl.run("'np' in globals(), 2 + 2")
        self.assertEqual(response["result"], "(False, 4)")
        self.assertEqual(repl.process.wait(timeout=10), 0)

    def test_serves_many_requests_until_eof(self) -> None:
        repl = self.start()
        for i in range(20):
            self.assertEqual(repl.run(f"{i}")["result"], str(i))
        repl.stdin.close()
        self.assertEqual(repl.process.wait(timeout=10), 0)


if __name__ == "__main__":
    unittest.main()
