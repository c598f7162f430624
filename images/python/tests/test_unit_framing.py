"""In-process tests of the frames: requests read with their payloads whatever the reads return,
malformed and refused frames and the resync after them, and responses written in pieces."""

import json
import os
import unittest
from typing import Any, Sequence

import inprocess  # noqa: F401  (the server's package, by path)
from kiln_repl.framing import (IOV_MAX, RESPONSE_END, RESPONSE_START, FrameReader, Refused, read_request,
                               write_frame)
from kiln_repl.protocol import OutputFile, Request, Result
from repl_client import REQUEST_END, REQUEST_START, encode_request

STATE = b"\x04\x22\x4d\x18 state \n>>> REQUEST_END <<<\n\x00"  # payloads may hold anything
FIRST = encode_request({"id": "a", "code": "x"}, state=STATE, files={"in.csv": "a,b\n", "empty": b""})
SECOND = encode_request({"id": "b", "op": "ping"})
THIRD = encode_request({"id": "c"}, files={"fake.txt": REQUEST_START + b"\n" + REQUEST_END})
STREAM = b"noise before\n" + FIRST + b"between\n" + SECOND + THIRD


class ChunkSource:
    """A Source that returns the given chunks, one per read, cut down to what a read asks for."""

    def __init__(self, chunks: Sequence[bytes]) -> None:
        self.chunks = [chunk for chunk in chunks if chunk]
        self.read_bytes = 0
        self.readinto_bytes = 0

    def next_chunk(self, size: int) -> bytes:
        if not self.chunks:
            return b""
        chunk = self.chunks.pop(0)
        if len(chunk) > size:
            self.chunks.insert(0, chunk[size:])
        return chunk[:size]

    def read(self, size: int) -> bytes:
        chunk = self.next_chunk(size)
        self.read_bytes += len(chunk)
        return chunk

    def readinto(self, view: memoryview) -> int:
        chunk = self.next_chunk(len(view))
        view[:len(chunk)] = chunk
        self.readinto_bytes += len(chunk)
        return len(chunk)


def cut(data: bytes, *at: int) -> list[bytes]:
    """data in chunks, cut at the given offsets."""
    bounds = [0, *at, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


def summary(item: Request | Refused) -> Any:
    """What a test compares: a request's id and payloads, or a refusal's id and reason."""
    if isinstance(item, Refused):
        return ("refused", item.id, item.reason)
    state = None if item.state is None else bytes(item.state)
    return (item.id, state, [(f.path, bytes(f.content)) for f in item.files])


def read_all(chunks: Sequence[bytes]) -> list[Any]:
    reader = FrameReader(ChunkSource(chunks))
    items = []
    while (item := read_request(reader)) is not None:
        items.append(summary(item))
    return items


WANT = [("a", STATE, [("in.csv", b"a,b\n"), ("empty", b"")]), ("b", None, []),
        ("c", None, [("fake.txt", REQUEST_START + b"\n" + REQUEST_END)])]


class ReadRequestTest(unittest.TestCase):
    def test_any_chunking_gives_the_same_requests(self) -> None:
        data = STREAM
        first_payload = data.index(STATE)
        cases = {
            "one chunk": [data],
            "one byte at a time": [data[i:i + 1] for i in range(len(data))],
            "inside a start delimiter": cut(data, data.index(b"REQUEST_START") + 3),
            "inside an end delimiter": cut(data, data.index(b"REQUEST_END <<<\nbetween") + 5),
            "inside a header": cut(data, data.index(b'"id":"a"') + 3),
            "at the payload's start": cut(data, first_payload),
            "inside the payload": cut(data, first_payload + 5, first_payload + 9),
            "before and after newlines": cut(data, *[i for i in range(len(data)) if data[i:i + 1] == b"\n"]),
            "with empty chunks": [b"", *cut(data, 10, 10, 40), b""],
        }
        for name, chunks in cases.items():
            with self.subTest(name):
                self.assertEqual(b"".join(chunks), data)
                self.assertEqual(read_all(chunks), WANT)

    def test_every_single_cut(self) -> None:
        for at in range(1, len(STREAM)):
            self.assertEqual(read_all(cut(STREAM, at)), WANT, f"cut at {at}")

    def test_payloads_are_read_into_place_not_scanned(self) -> None:
        payload = bytes(range(256)) * 4096  # 1 MiB, with newlines and delimiter bytes in it
        data = encode_request({"id": "big"}, state=payload)
        source = ChunkSource([data[i:i + 4096] for i in range(0, len(data), 4096)])
        request = read_request(FrameReader(source))
        assert isinstance(request, Request) and request.state is not None
        self.assertEqual(bytes(request.state), payload)
        self.assertLess(source.read_bytes, 2 * 4096, "only the chunk with the header goes through read")
        self.assertGreater(source.readinto_bytes, len(payload) - 4096)

    def test_nothing_is_read_past_a_frame(self) -> None:
        class Source(ChunkSource):
            def read(self, size: int) -> bytes:
                if not self.chunks:
                    raise AssertionError("read past a complete frame")
                return super().read(size)

        request = read_request(FrameReader(Source([FIRST])))
        self.assertEqual(summary(request), WANT[0])  # type: ignore[arg-type]

    def test_a_start_where_a_header_is_expected_starts_over(self) -> None:
        data = REQUEST_START + REQUEST_START + SECOND[len(REQUEST_START):]
        self.assertEqual(read_all([data]), [("b", None, [])])

    def test_delimiters_are_whole_lines_outside_payloads(self) -> None:
        data = (b">>> REQUEST_START <<< \n" + b"x >>> REQUEST_START <<<\n" + b">>> REQUEST_END <<<\n" + SECOND)
        self.assertEqual(read_all([data]), [("b", None, [])])

    def test_long_lines_outside_a_frame_are_dropped(self) -> None:
        long_line = b"x" * 100_000 + REQUEST_START
        data = long_line + SECOND
        for chunks in ([data], [data[i:i + 7] for i in range(0, len(data), 7)]):
            self.assertEqual(read_all(chunks), [("b", None, [])])

    def test_refused_frames_then_the_next_is_served(self) -> None:
        header_too_small = REQUEST_START + b'{"binary":3,"id":"small","state":{"size":3}}\n12345' + REQUEST_END
        not_adding_up = REQUEST_START + b'{"binary":5,"id":"sum","state":{"size":3}}\n12345' + REQUEST_END
        over_state_cap = encode_request({"id": "cap", "limits": {"max_state_bytes": 4}}, state=b"12345")
        over_file_cap = encode_request({"id": "fcap", "limits": {"max_file_bytes": 4}}, files={"f": b"12345"})
        not_json = REQUEST_START + b'{"binary":2,oops}\nxy' + REQUEST_END
        no_binary = REQUEST_START + b'{"id":"nb","binary":0}\n' + REQUEST_END
        spaced = REQUEST_START + b'{"binary": 0, "id": "sp"}\n' + REQUEST_END
        cases = [
            (header_too_small, ("refused", "small", "the end delimiter does not follow the 3 bytes of binary")),
            (not_adding_up, ("refused", "sum", "the sizes of the state and files add up to 3 bytes, not binary 5")),
            (over_state_cap, ("refused", "cap", "state is 5 bytes, over max_state_bytes 4")),
            (over_file_cap, ("refused", "fcap", "file 'f' is 5 bytes, over max_file_bytes 4")),
            (not_json, ("refused", "", "request is not JSON: Expecting property name")),
            (no_binary, ("refused", "nb", 'the header does not start with {"binary":N')),
            (spaced, ("refused", "sp", 'the header does not start with {"binary":N')),
        ]
        for data, (refused, request_id, reason) in cases:
            with self.subTest(reason=reason):
                for chunks in ([data + SECOND], [bytes([b]) for b in data + SECOND]):
                    got = read_all(chunks)
                    self.assertEqual(len(got), 2, got)
                    self.assertEqual(got[0][:2], (refused, request_id))
                    self.assertTrue(got[0][2].startswith(reason), f"got {got[0][2]!r}, want {reason!r}")
                    self.assertEqual(got[1], ("b", None, []), "the next frame is served")

    def test_a_refused_payload_is_dropped_not_held(self) -> None:
        # The payload holds what would be a frame: dropped with the rest, it is never served.
        data = encode_request({"id": "cap", "limits": {"max_state_bytes": 10}}, state=SECOND * 3)
        source = ChunkSource([data[i:i + 16] for i in range(0, len(data), 16)] + [SECOND])
        reader = FrameReader(source)
        self.assertEqual(summary(read_request(reader)),  # type: ignore[arg-type]
                         ("refused", "cap", f"state is {len(SECOND) * 3} bytes, over max_state_bytes 10"))
        self.assertEqual(summary(read_request(reader)), ("b", None, []))  # type: ignore[arg-type]
        self.assertIsNone(read_request(reader))

    def test_end_of_file_inside_a_frame_is_end_of_file(self) -> None:
        refused = encode_request({"id": "cap", "limits": {"max_state_bytes": 4}}, state=b"123456789")
        cases = {
            "in the header": FIRST[:len(REQUEST_START) + 5],
            "in the payload": FIRST[:FIRST.index(STATE) + 5],
            "before the end delimiter": FIRST[:-len(REQUEST_END)],
            "inside the end delimiter": FIRST[:-5],
            "in a refused payload": refused[:-len(REQUEST_END) - 3],
            "after a refused payload": refused[:-len(REQUEST_END)],
        }
        for name, data in cases.items():
            with self.subTest(name):
                self.assertEqual(read_all([SECOND + data]), [("b", None, [])])
        self.assertEqual(read_all([]), [])

    def test_payload_slices_share_one_buffer(self) -> None:
        request = read_request(FrameReader(ChunkSource([FIRST])))
        assert isinstance(request, Request) and request.state is not None
        buffers = {id(request.state.obj), *(id(item.content.obj) for item in request.files)}
        self.assertEqual(len(buffers), 1)


class FakeWriter:
    """A writev that takes at most `most` bytes per call, as a full pipe does."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.data = bytearray()
        self.calls = 0
        self.widest = 0

    def __call__(self, views: Sequence[memoryview]) -> int:
        self.calls += 1
        self.widest = max(self.widest, len(views))
        taken = 0
        for view in views:
            part = view[:self.most - taken]
            self.data += part
            taken += len(part)
            if taken == self.most:
                break
        return taken


def split_frame(data: bytes) -> tuple[dict[str, Any], bytes]:
    """The header and the payload of one written response frame."""
    if not data.startswith(RESPONSE_START) or not data.endswith(RESPONSE_END):
        raise AssertionError(f"not one frame: {data[:100]!r}")
    line, _, rest = data[len(RESPONSE_START):].partition(b"\n")
    header: dict[str, Any] = json.loads(line)
    if not line.isascii() or next(iter(header)) != "binary":
        raise AssertionError(f"header {line[:100]!r}")
    if len(rest) != header["binary"] + len(RESPONSE_END):
        raise AssertionError(f"binary {header['binary']}, {len(rest) - len(RESPONSE_END)} bytes follow")
    return header, rest[:-len(RESPONSE_END)]


class WriteFrameTest(unittest.TestCase):
    def written(self, message: dict[str, Any], payloads: Sequence[bytes] = (), most: int = 1 << 30) -> bytes:
        writer = FakeWriter(most)
        write_frame(writer, message, payloads)
        return bytes(writer.data)

    def test_no_binary_is_three_lines(self) -> None:
        data = self.written({"id": "p", "type": "pong"})
        self.assertEqual(data, RESPONSE_START + b'{"binary":0,"id":"p","type":"pong"}\n' + RESPONSE_END)

    def test_one_line_of_ascii_then_the_raw_payloads(self) -> None:
        message = {"id": "a", "stdout": "line\nnext \u2603 \x00 >>> RESPONSE_END <<<"}
        payloads = [b"\x00state\n", b"", b">>> RESPONSE_END <<<\n"]
        header, payload = split_frame(self.written(message, payloads))
        self.assertEqual(header, {"binary": len(b"".join(payloads)), **message})
        self.assertEqual(payload, b"".join(payloads))

    def test_partial_writes_resume_where_they_stopped(self) -> None:
        payloads = [bytes([i]) * (i * 37) for i in range(20)]
        want = self.written({"id": "w"}, payloads)
        for most in (1, 3, 7, 100, 4096):
            with self.subTest(most=most):
                writer = FakeWriter(most)
                write_frame(writer, {"id": "w"}, payloads)
                self.assertEqual(bytes(writer.data), want)
                self.assertGreaterEqual(writer.calls, len(want) // most)

    def test_never_more_buffers_than_writev_takes(self) -> None:
        payloads = [b"%d," % i for i in range(3 * IOV_MAX)]
        writer = FakeWriter(1 << 30)
        write_frame(writer, {"id": "many"}, payloads)
        self.assertLessEqual(writer.widest, IOV_MAX)
        self.assertEqual(split_frame(bytes(writer.data))[1], b"".join(payloads))

    def test_a_writer_that_writes_nothing_is_an_error(self) -> None:
        with self.assertRaises(OSError):
            write_frame(lambda views: 0, {"id": "stuck"})

    def test_a_pipe_gets_the_same_bytes(self) -> None:
        read_fd, write_fd = os.pipe()
        self.addCleanup(os.close, read_fd)
        try:
            write_frame(lambda views: os.writev(write_fd, views), {"id": "p"}, [b"ab", b"c"])
        finally:
            os.close(write_fd)
        self.assertEqual(os.read(read_fd, 1 << 16), RESPONSE_START + b'{"binary":3,"id":"p"}\nabc' + RESPONSE_END)

    def test_a_result_with_state_and_two_files(self) -> None:
        result = Result(id="r1", stdout="hi\n", state=b"STATE", state_error=None,
                        files=[OutputFile("out/a.csv", b"x,y\n"), OutputFile("b.bin", b"\x00\x01")])
        data = self.written(result.to_message(), result.payloads())
        line = data[len(RESPONSE_START):data.index(b"\n", len(RESPONSE_START))]
        self.assertEqual(line, b'{"binary":11,"id":"r1","type":"result","status":"ok","exit_code":0,"stdout":"hi\\n",'
                               b'"stderr":"","error":null,"result":null,"state":{"size":5},"state_unchanged":false,'
                               b'"state_error":null,"state_token":null,'
                               b'"files":[{"path":"out/a.csv","size":4},{"path":"b.bin","size":2}],'
                               b'"files_error":null,"deleted_files":[],"truncated":false,"duration_ms":0,"memory_bytes":0,"outputs":null}')
        self.assertEqual(split_frame(data)[1], b"STATEx,y\n\x00\x01")


if __name__ == "__main__":
    unittest.main()
