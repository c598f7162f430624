"""Tools: code calls the host's tools mid-run, through the real server over its real channel."""

import time
import unittest
from typing import Any

from repl_client import Repl, ReplTestCase

TOOLS = [{"name": "get-weather", "function": "get_weather"}, {"name": "add", "function": "add"}]


class ToolsTest(ReplTestCase):
    def answer(self, repl: Repl, request_id: str, reply: Any) -> dict[str, Any]:
        """Answers every round of tool calls with reply(call) until the result; returns it with
        the rounds seen, as "rounds"."""
        rounds = []
        while (frame := repl.next_tool_calls(request_id))["type"] == "tool_calls":
            rounds.append(frame["calls"])
            repl.tool_results(request_id, [reply(call) for call in frame["calls"]])
        frame["rounds"] = rounds
        return frame

    def test_a_call_returns_the_decoded_result_and_the_names_stay_out_of_the_session(self) -> None:
        repl = self.start()
        request_id = repl.start_run("w = await get_weather(city='Oslo')\nprint(w['temp'] + 1)\n'done'",
                                    tools=TOOLS, capture_state=True)
        result = self.answer(repl, request_id, lambda call: {"call_id": call["id"], "result": {"temp": 20},
                                                             "is_error": False})
        self.assertOk(result)
        self.assertEqual((result["stdout"], result["result"]), ("21\n", "'done'"))
        self.assertEqual(result["rounds"], [[{"id": "call_001", "name": "get-weather", "input": {"city": "Oslo"}}]])
        self.assertEqual(repl.run("w")["result"], "{'temp': 20}")
        self.assertEqual(repl.run("get_weather")["status"], "error", "the stub is gone after the run")

    def test_calls_made_together_go_out_in_one_frame(self) -> None:
        repl = self.start()
        code = ("a, b, c = await asyncio.gather(add(x=1, y=2), add(x=3, y=4), add(x=5, y=6))\n"
                "d = await add(x=a, y=b)\nprint(a, b, c, d)")
        request_id = repl.start_run(code, tools=TOOLS)
        result = self.answer(repl, request_id, lambda call: {
            "call_id": call["id"], "result": call["input"]["x"] + call["input"]["y"], "is_error": False})
        self.assertOk(result)
        self.assertEqual(result["stdout"], "3 7 11 10\n")
        self.assertEqual([len(calls) for calls in result["rounds"]], [3, 1])

    def test_a_failed_call_raises_at_the_call_with_its_message(self) -> None:
        repl = self.start()
        code = ("try:\n    await add(x=1)\nexcept Exception as exc:\n    print(type(exc).__name__, exc)\n"
                "await add(x=2)")
        request_id = repl.start_run(code, tools=TOOLS)
        result = self.answer(repl, request_id, lambda call: {
            "call_id": call["id"], "result": None, "is_error": True, "error_message": f"bad x={call['input']['x']}"})
        self.assertEqual(result["stdout"], "ToolError bad x=1\n")
        self.assertEqual((result["status"], result["error"]), ("error", "ToolError: bad x=2"))
        self.assertIn('File "<string>", line 5', result["stderr"])
        self.assertNotIn("asyncio", result["stderr"], "the event loop's frames are not the user's")

    def test_waiting_for_results_does_not_count_against_the_timeout(self) -> None:
        repl = self.start()
        request_id = repl.start_run("r = await add(x=1, y=1)\nimport time\ntime.sleep(0.3)\nprint(r)",
                                    tools=TOOLS, timeout_ms=600)
        frame = repl.next_tool_calls(request_id)
        time.sleep(1.0)  # longer than the whole timeout
        repl.tool_results(request_id, [{"call_id": frame["calls"][0]["id"], "result": 2, "is_error": False}])
        result = repl.next_tool_calls(request_id)
        self.assertOk(result)
        self.assertEqual(result["stdout"], "2\n")
        request_id = repl.start_run("await add(x=1, y=1)\nwhile True: pass", tools=TOOLS, timeout_ms=500)
        result = self.answer(repl, request_id, lambda call: {"call_id": call["id"], "result": 2, "is_error": False})
        self.assertEqual(result["status"], "timeout", "the clock runs again once the results are in")

    def test_an_input_that_is_not_json_or_too_big_raises_without_a_call(self) -> None:
        repl = self.start()
        code = ("for arg in (object(), 'x' * 2000):\n    try:\n        await add(x=arg)\n"
                "    except Exception as exc:\n        print(exc)")
        result = repl.run(code, tools=TOOLS, limits={"max_tool_call_bytes": 1000})
        self.assertOk(result)
        first, second = result["stdout"].splitlines()
        self.assertTrue(first.startswith("the input of add is not JSON: Object of type object"), first)
        self.assertEqual(second, "the input of add is 2009 bytes; the limit is 1000")

    def test_a_missing_result_raises(self) -> None:
        repl = self.start()
        request_id = repl.start_run("await add(x=1)", tools=TOOLS)
        frame = repl.next_tool_calls(request_id)
        repl.tool_results(request_id, [])
        result = repl.next_tool_calls(request_id)
        self.assertEqual(result["error"], f"ToolError: the host sent no result for add ({frame['calls'][0]['id']})")

    def test_bash_tools_are_shell_functions(self) -> None:
        repl = self.start()
        code = ('w=$(get_weather \'{"city": "Oslo"}\')\necho "$w" | python3 -c \'import json,sys; print(json.load(sys.stdin)["temp"])\'\n'
                '{ add \'{"x": 1}\' > a.json; } &\n{ add \'{"x": 2}\' > b.json; } &\nwait\ncat a.json b.json\n'
                'add \'{"x": 3}\' || echo "failed with $?"')

        def reply(call: dict[str, Any]) -> dict[str, Any]:
            if call["name"] == "get-weather":
                return {"call_id": call["id"], "result": {"temp": 20}, "is_error": False}
            if call["input"]["x"] == 3:
                return {"call_id": call["id"], "result": None, "is_error": True, "error_message": "no threes"}
            return {"call_id": call["id"], "result": f"x is {call['input']['x']}", "is_error": False}

        request_id = repl.start_run(code, lang="bash", tools=TOOLS)
        result = self.answer(repl, request_id, reply)
        self.assertOk(result)
        self.assertEqual(result["stdout"], "20\nx is 1\nx is 2\nfailed with 1\n")
        self.assertEqual(result["stderr"], "add: no threes\n")
        # The two background calls share a round when they reach the REPL within the batch
        # window (each starts a Python client); on a loaded machine they may come apart.
        self.assertIn([len(calls) for calls in result["rounds"]], ([1, 2, 1], [1, 1, 1, 1]))

    def test_invalid_tools_are_refused(self) -> None:
        repl = self.start()
        for tools in ([{"name": "x", "function": "class"}], [{"name": "x", "function": "a b"}],
                      [{"name": "x", "function": "f"}, {"name": "y", "function": "f"}]):
            response = repl.run("pass", tools=tools)
            self.assertEqual(response["type"], "error", tools)


if __name__ == "__main__":
    unittest.main()
