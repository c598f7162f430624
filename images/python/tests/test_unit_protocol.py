"""In-process tests of the protocol's messages: request headers parsed and checked, payloads
attached, the result's header and payloads."""

import dataclasses
import json
import unittest
from typing import Any

import inprocess  # noqa: F401  (the server's package, by path)
from kiln_repl.protocol import (BadRequest, InputFile, Limits, OutputFile, Result, attach_payloads, header_binary,
                                parse_request, request_id_of)


def header(message: dict[str, Any], binary: int = 0) -> bytes:
    """A compact header line with "binary" first, as every sender writes it."""
    return json.dumps({"binary": binary, **message}, separators=(",", ":")).encode()


class ParseRequestTest(unittest.TestCase):
    def test_defaults(self) -> None:
        request = parse_request(header({"id": "a"}))
        self.assertEqual((request.id, request.op, request.lang, request.code, request.args), ("a", "exec", "python", "", []))
        self.assertEqual((request.state_size, request.state, request.capture_state, request.timeout_ms, request.files),
                         (None, None, False, 30_000, []))
        self.assertEqual(request.limits, Limits(1 << 20, 10 << 20, 50, 64 << 20))

    def test_nulls_get_defaults(self) -> None:
        nulls = header({"id": "n", "lang": None, "code": None, "args": None, "state": None,
                        "capture_state": None, "timeout_ms": None, "files": None, "limits": None})
        self.assertEqual(parse_request(nulls), parse_request(header({"id": "n"})))

    def test_every_field(self) -> None:
        message = {"id": "full", "op": "exec", "lang": "bash", "code": "echo", "args": ["a", "b c"],
                   "state": {"size": 4}, "capture_state": True, "timeout_ms": 500,
                   "files": [{"path": "in/x.txt", "size": 2}, {"path": "empty"}],
                   "limits": {"max_output_bytes": 10, "max_files": 3}}
        request = parse_request(header(message, binary=6))
        self.assertEqual((request.lang, request.code, request.args, request.state_size), ("bash", "echo", ["a", "b c"], 4))
        self.assertEqual((request.capture_state, request.timeout_ms), (True, 500))
        self.assertEqual(request.files, [InputFile("in/x.txt", 2), InputFile("empty", 0)])
        self.assertEqual(request.limits, Limits(max_output_bytes=10, max_files=3))

    def test_payloads_are_attached_as_slices_of_one_buffer(self) -> None:
        message = {"id": "p", "state": {"size": 3}, "files": [{"path": "a", "size": 2}, {"path": "b", "size": 0},
                                                              {"path": "c", "size": 1}]}
        payload = bytearray(b"STAab!")
        request = attach_payloads(parse_request(header(message, binary=6)), payload)
        assert request.state is not None
        self.assertEqual(bytes(request.state), b"STA")
        self.assertEqual([(f.path, bytes(f.content)) for f in request.files], [("a", b"ab"), ("b", b""), ("c", b"!")])
        self.assertIs(request.state.obj, payload, "a slice, not a copy")

    def test_a_zero_size_state_is_a_state(self) -> None:
        request = attach_payloads(parse_request(header({"state": {"size": 0}})), bytearray())
        self.assertEqual(request.state, b"")

    def test_limits_and_timeout_not_above_zero_or_unknown_are_ignored(self) -> None:
        request = parse_request(b'{"binary":0, "id": "l", "timeout_ms": 0, "limits": {"max_files": 0, '
                                b'"max_file_bytes": -1, "max_state_bytes": null, "bogus": 7, "max_output_bytes": 99}}')
        self.assertEqual(request.timeout_ms, 30_000)
        self.assertEqual(request.limits, Limits(max_output_bytes=99))

    def test_ping(self) -> None:
        self.assertEqual(parse_request(b'{"binary":0,"id":"p","op":"ping"}').op, "ping")

    def test_interrupt(self) -> None:
        request = parse_request(b'{"binary":0,"id":"r1","op":"interrupt"}')
        self.assertEqual((request.id, request.op), ("r1", "interrupt"))

    def test_events_and_figures(self) -> None:
        cases: list[tuple[dict[str, Any], tuple[bool, bool]]] = [
            ({}, (False, False)), ({"events": None, "figures": None}, (False, False)),
            ({"events": True}, (True, False)), ({"figures": True}, (False, True)),
            ({"events": False, "figures": True}, (False, True)),
        ]
        for fields, want in cases:
            with self.subTest(fields=fields):
                request = parse_request(header({"id": "e", **fields}))
                self.assertEqual((request.events, request.figures), want)

    def test_live_fields(self) -> None:
        request = parse_request(header({"id": "l", "live": True, "state_base": "12-3", "delete_files": ["a", "b/c"]}))
        self.assertEqual((request.live, request.state_base, request.delete_files), (True, "12-3", ["a", "b/c"]))
        plain = parse_request(header({"id": "p", "live": None, "state_base": None, "delete_files": None}))
        self.assertEqual((plain.live, plain.state_base, plain.delete_files), (False, "", []))

    def test_python_syntax_fields(self) -> None:
        request = parse_request(header({"id": "s", "plain_python": True, "read_only": True}))
        self.assertEqual((request.plain_python, request.read_only), (True, True))
        default = parse_request(header({"id": "d"}))
        self.assertEqual((default.plain_python, default.read_only), (False, False))
        with self.assertRaises(BadRequest):
            parse_request(header({"id": "b", "plain_python": "yes"}))

    def test_limits_are_frozen(self) -> None:
        with self.assertRaises(dataclasses.FrozenInstanceError):
            Limits().max_files = 5  # type: ignore[misc]

    def test_bad_requests(self) -> None:
        cases = [
            (b'{"binary":0,not json', "request is not JSON: "),
            (b'{"binary":0}[1, 2]', "request is not JSON: "),
            (b'{"binary":0, "id": 5}', "id has the wrong type"),
            (b'{"binary":0, "id": null}', "id has the wrong type"),
            (b'{"binary":0, "id": "a", "op": "fly"}', "unknown op 'fly'"),
            (b'{"binary":0, "id": "a", "lang": "cobol"}', "unknown lang 'cobol'"),
            (b'{"binary":0, "id": "a", "code": 5}', "code has the wrong type"),
            (b'{"binary":0, "id": "a", "args": "x"}', "args has the wrong type"),
            (b'{"binary":0, "id": "a", "args": [1]}', "args[] has the wrong type"),
            (b'{"binary":0, "id": "a", "binary": 1}', "binary is given twice"),
            (b'{"binary":1, "id": "a", "binary": true, "state": {"size": 1}}', "binary has the wrong type"),
            (b'{"binary":0, "id": "a", "state": "QUJD"}', "state has the wrong type"),
            (b'{"binary":0, "id": "a", "state": {}}', "state.size has the wrong type"),
            (b'{"binary":0, "id": "a", "state": {"size": -1}}', "state.size is negative"),
            (b'{"binary":0, "id": "a", "capture_state": "yes"}', "capture_state has the wrong type"),
            (b'{"binary":0, "id": "a", "timeout_ms": "soon"}', "timeout_ms has the wrong type"),
            (b'{"binary":0, "id": "a", "timeout_ms": true}', "timeout_ms has the wrong type"),
            (b'{"binary":0, "id": "a", "files": {"x": 1}}', "files has the wrong type"),
            (b'{"binary":0, "id": "a", "files": [1]}', "files[] has the wrong type"),
            (b'{"binary":0, "id": "a", "files": [{"size": 0}]}', "files[].path has the wrong type"),
            (b'{"binary":0, "id": "a", "files": [{"path": "x", "content": "aGk="}]}', None),  # v1's content is ignored
            (b'{"binary":0, "id": "a", "files": [{"path": "x", "size": "2"}]}', "files[].size has the wrong type"),
            (b'{"binary":0, "id": "a", "limits": [1]}', "limits has the wrong type"),
            (b'{"binary":0, "id": "a", "limits": {"max_files": "3"}}', "limits.max_files has the wrong type"),
            (b'{"binary":0, "id": "a", "limits": {"max_files": true}}', "limits.max_files has the wrong type"),
            (b'{"binary":0, "id": "a", "events": "yes"}', "events has the wrong type"),
            (b'{"binary":0, "id": "a", "figures": 1}', "figures has the wrong type"),
            (b'{"binary":0, "id": "a", "live": "yes"}', "live has the wrong type"),
            (b'{"binary":0, "id": "a", "state_base": 7}', "state_base has the wrong type"),
            (b'{"binary":0, "id": "a", "delete_files": "x"}', "delete_files has the wrong type"),
            (b'{"binary":0, "id": "a", "delete_files": [1]}', "delete_files[] has the wrong type"),
            (b'{"binary":0, "id": "a", "op": "fly", "code": 5}', "unknown op 'fly'"),  # the first fault in field order
            (b'{"binary":5, "id": "a", "state": {"size": 2}, "files": [{"path": "x", "size": 2}]}',
             "the sizes of the state and files add up to 4 bytes, not binary 5"),
            (b'{"binary":0, "id": "a", "state": {"size": 2}}', "the sizes of the state and files add up to 2 bytes"),
            (b'{"binary":9, "id": "a", "state": {"size": 9}, "limits": {"max_state_bytes": 8}}',
             "state is 9 bytes, over max_state_bytes 8"),
            (b'{"binary":9, "id": "a", "files": [{"path": "x", "size": 9}], "limits": {"max_file_bytes": 8}}',
             "file 'x' is 9 bytes, over max_file_bytes 8"),
            (b'{"binary":8, "id": "a", "state": {"size": 8}, "limits": {"max_state_bytes": 8}}', None),  # at the cap
        ]
        for payload, want in cases:
            with self.subTest(payload=payload):
                if want is None:
                    parse_request(payload)
                    continue
                with self.assertRaises(BadRequest) as caught:
                    parse_request(payload)
                self.assertTrue(str(caught.exception).startswith(want), f"got {caught.exception}, want {want}")

    def test_header_binary(self) -> None:
        cases: list[tuple[bytes, int | None]] = [
            (b'{"binary":0}', 0), (b'{"binary":12,"id":"a"}', 12), (b'{"binary":0,', 0),
            (b'{"binary": 1}', None), (b'{ "binary":1}', None), (b'{"id":"a","binary":1}', None),
            (b'{"binary":01}', None), (b'{"binary":1.5}', None), (b'{"binary":-1}', None), (b'{"binary":"1"}', None),
            (b'{"binary":' + b"9" * 17 + b"}", None), (b"", None), (b'{"binary":3', None),
        ]
        for line, want in cases:
            with self.subTest(line=line):
                if want is not None:
                    self.assertEqual(header_binary(line), want)
                    continue
                with self.assertRaises(BadRequest):
                    header_binary(line)

    def test_request_id_of(self) -> None:
        cases = [(b'{"binary":0,"id": "x", "op": "fly"}', "x"), (b'{"id": 5}', ""), (b"{not json", ""), (b"[]", "")]
        for payload, want in cases:
            self.assertEqual(request_id_of(payload), want, payload)


class ResultTest(unittest.TestCase):
    def test_message_and_payloads(self) -> None:
        result = Result(id="r", state=b"blob", files=[OutputFile("a", b"12"), OutputFile("b/c", b"")])
        message = result.to_message()
        self.assertEqual(list(message), ["id", "type", "status", "exit_code", "stdout", "stderr", "error", "result",
                                         "state", "state_unchanged", "state_error", "state_token", "files",
                                         "files_error", "deleted_files", "truncated", "duration_ms", "memory_bytes",
                                         "outputs"])
        self.assertEqual((message["state"], message["files"]),
                         ({"size": 4}, [{"path": "a", "size": 2}, {"path": "b/c", "size": 0}]))
        self.assertEqual(result.payloads(), [b"blob", b"12", b""])

    def test_no_state(self) -> None:
        result = Result(id="r", state_unchanged=True, files=[OutputFile("a", b"1")])
        self.assertEqual((result.to_message()["state"], result.to_message()["state_unchanged"]), (None, True))
        self.assertEqual(result.payloads(), [b"1"])


if __name__ == "__main__":
    unittest.main()
