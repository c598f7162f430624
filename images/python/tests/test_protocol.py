"""Framing, the ready frame, ping, bad requests and the process modes."""

import json
import random
import unittest

from repl_client import REQUEST_END, REQUEST_START, ReplTestCase, encode_request


class ReadyTest(ReplTestCase):
    def test_ready_frame_lists_preloads(self):
        repl = self.start(preload=True)
        ready = repl.ready
        self.assertEqual(ready["type"], "ready")
        self.assertEqual(ready["protocol"], 1)
        self.assertRegex(ready["python"], r"^3\.\d+\.\d+")
        for name in ("numpy", "pandas", "scipy", "sklearn", "statsmodels", "matplotlib", "seaborn"):
            self.assertRegex(ready["preloaded"].get(name, ""), r"^\d+\.", name)
        self.assertEqual(ready["capabilities"], {"languages": ["python", "bash"], "state": True, "files": True})

    def test_preloaded_names_and_quiet_start(self):
        repl = self.start(preload=True)
        code = (
            "assert all(m is not None for m in (stats, optimize, interpolate, linear_model, tree, ensemble,\n"
            "    cluster, preprocessing, model_selection, metrics, sm, sns, json, csv, datetime, collections,\n"
            "    itertools, functools, math, random, re, os, sys))\n"
            "fig, ax = plt.subplots()\n"
            "ax.plot(np.arange(3))\n"
            "fig.savefig('plot.png')\n"
            "(matplotlib.get_backend().lower(), int(pd.Series([1, 2]).sum()), scipy.__name__)"
        )
        response = repl.run(code)
        self.assertOk(response)
        self.assertEqual(response["result"], "('agg', 3, 'scipy')")
        self.assertEqual(response["stderr"], "")
        self.assertEqual([f["path"] for f in response["files"]], ["plot.png"])
        # Nothing, such as a font cache rebuild, was said while warming up.
        self.assertEqual(repl.log_text(), "")


class FramingTest(ReplTestCase):
    def test_request_one_byte_at_a_time(self):
        repl = self.start()
        data = b"noise before the frame\n" + encode_request({"id": "slow", "op": "exec", "code": "print(6 * 7)"})
        for index in range(len(data)):
            repl.send_raw(data[index:index + 1])
        response = repl.read_frame()
        self.assertEqual(response["id"], "slow")
        self.assertEqual(response["stdout"], "42\n")

    def test_frames_split_at_odd_places(self):
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

    def test_restarted_frame_and_stray_lines(self):
        repl = self.start()
        repl.send_raw(REQUEST_START + b'{"id": "lost"' + b"\n" + b"x" * 100 + b"\n" +
                      encode_request({"id": "kept", "op": "ping"}))
        self.assertEqual(repl.read_frame(), {"id": "kept", "type": "pong"})

    def test_ping(self):
        repl = self.start()
        self.assertEqual(repl.request(op="ping"), {"id": "req-1", "type": "pong"})

    def test_bad_requests_get_an_error_frame(self):
        repl = self.start()
        repl.send_raw(REQUEST_START + b"{not json" + REQUEST_END)
        self.assertEqual(repl.read_frame()["id"], "")
        cases = [{"id": "a", "op": "fly"}, {"id": "b", "lang": "cobol"}, {"id": "c", "args": "x"},
                 {"id": "d", "timeout_ms": "soon"}, {"id": "e", "files": [{"path": "x", "content": "!!"}]}]
        for message in cases:
            repl.send_raw(REQUEST_START + json.dumps(message).encode() + REQUEST_END)
            response = repl.read_frame()
            self.assertEqual(response["type"], "error", message)
            self.assertEqual(response["id"], message["id"])
            self.assertTrue(response["error"].startswith("bad request: "))
        self.assertOk(repl.run("1"))

    def test_missing_fields_get_defaults(self):
        repl = self.start()
        repl.send_raw(REQUEST_START + b'{"id": "d", "code": "import sys; sys.argv"}' + REQUEST_END)
        response = repl.read_frame()
        self.assertOk(response)
        self.assertEqual(response["result"], "['<string>']")


class ModeTest(ReplTestCase):
    def test_no_preload_once(self):
        repl = self.start("--once")
        self.assertEqual(repl.ready["preloaded"], {})
        self.assertEqual(repl.request(op="ping")["type"], "pong")
        response = repl.run("'np' in globals(), 2 + 2")
        self.assertEqual(response["result"], "(False, 4)")
        self.assertEqual(repl.process.wait(timeout=10), 0)

    def test_serves_many_requests_until_eof(self):
        repl = self.start()
        for i in range(20):
            self.assertEqual(repl.run(f"{i}")["result"], str(i))
        repl.process.stdin.close()
        self.assertEqual(repl.process.wait(timeout=10), 0)


if __name__ == "__main__":
    unittest.main()
