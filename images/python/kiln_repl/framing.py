"""Frames on the wire: reading requests with their binary payloads, writing responses.

A frame is a start delimiter line, one header line of JSON whose first member is "binary" (the
number of raw payload bytes after the header's newline), those bytes, then the end delimiter
and a newline. The format is described in docs/protocol.md of the kiln repository.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Collection, Protocol, Sequence

from kiln_repl.protocol import (NATIVE_LANGUAGES, READ_CHUNK, BadRequest, Request, attach_payloads, header_binary,
                                parse_request, request_id_of)

REQUEST_START = b">>> REQUEST_START <<<"
REQUEST_END = b">>> REQUEST_END <<<"
RESPONSE_START = b">>> RESPONSE_START <<<\n"
RESPONSE_END = b">>> RESPONSE_END <<<\n"
IOV_MAX = 1024  # Linux's UIO_MAXIOV: writev refuses more buffers than this in one call

Writev = Callable[[Sequence[memoryview]], int]


class Source(Protocol):
    """Where request bytes come from; each call returns whatever one read gives (b"" or 0 at
    end of file)."""

    def read(self, size: int) -> bytes: ...

    def readinto(self, view: memoryview) -> int: ...


class FdSource:
    """A Source over a file descriptor."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self, size: int) -> bytes:
        return os.read(self.fd, size)

    def readinto(self, view: memoryview) -> int:
        return os.readv(self.fd, [view])


@dataclass(frozen=True)
class Refused:
    """A request answered with an error frame: nothing of it runs."""

    id: str
    reason: str

    def message(self) -> dict[str, Any]:
        return {"id": self.id, "type": "error", "error": f"bad request: {self.reason}"}


class FrameReader:
    """Reads frames from a Source, whatever the reads return.

    Lines are scanned only outside the payloads: payload bytes go straight from the source into
    the buffer that holds them.
    """

    def __init__(self, source: Source) -> None:
        self.source = source
        self.pending = bytearray()  # read from the source and not yet consumed

    def fill(self) -> bool:
        """Appends one read to pending; False at end of file."""
        chunk = self.source.read(READ_CHUNK)
        self.pending += chunk
        return bool(chunk)

    def next_line(self, bounded: bool) -> bytes | None:
        """The next line without its newline; None at end of file.

        A bounded line is dropped as it arrives once it is longer than a delimiter, and comes
        back as b"": outside a frame only delimiters matter, and noise is never buffered.
        """
        scanned = 0
        while True:
            end = self.pending.find(b"\n", scanned)
            if end >= 0:
                line = bytes(self.pending[:end])
                del self.pending[:end + 1]
                return line
            if bounded and len(self.pending) > len(REQUEST_START):
                return b"" if self.drop_line() else None
            scanned = len(self.pending)
            if not self.fill():
                return None

    def drop_line(self) -> bool:
        """Discards up to and including the next newline; False at end of file."""
        while (end := self.pending.find(b"\n")) < 0:
            self.pending.clear()
            if not self.fill():
                return False
        del self.pending[:end + 1]
        return True

    def next_header(self) -> bytes | None:
        """Skips to the next start delimiter and returns the header line after it; None at end
        of file. A start delimiter where a header is expected starts the frame over."""
        in_frame = False
        while (line := self.next_line(bounded=not in_frame)) is not None:
            if line == REQUEST_START:
                in_frame = True
            elif in_frame:
                return line
        return None

    def read_payload(self, size: int) -> bytearray | None:
        """The next size bytes, read into one buffer; None at end of file."""
        payload = bytearray(size)
        view = memoryview(payload)
        have = min(size, len(self.pending))
        with memoryview(self.pending) as arrived:
            view[:have] = arrived[:have]
        del self.pending[:have]
        while have < size:
            count = self.source.readinto(view[have:])
            if count == 0:
                return None
            have += count
        return payload

    def skip_payload(self, size: int) -> bool:
        """Reads and drops the next size bytes; False at end of file."""
        have = min(size, len(self.pending))
        del self.pending[:have]
        scratch = memoryview(bytearray(min(size - have, READ_CHUNK)))
        while have < size:
            count = self.source.readinto(scratch[:size - have])
            if count == 0:
                return False
            have += count
        return True

    def end_follows(self) -> bool | None:
        """Whether the end delimiter and a newline come next (and consumes them); None at end
        of file. When they do not, the bytes read stay pending and scanning resumes there."""
        want = REQUEST_END + b"\n"
        while len(self.pending) < len(want) and want.startswith(self.pending):
            if not self.fill():
                return None
        if not self.pending.startswith(want):
            return False
        del self.pending[:len(want)]
        return True


def read_request(reader: FrameReader, languages: Collection[str] = NATIVE_LANGUAGES) -> Request | Refused | None:
    """The next request with its payloads, or what refused it; None at end of file.

    A header that names no binary length gives no way to find the frame's end: scanning for
    the next start delimiter resumes after it. Otherwise the payloads of a refused request are
    read and dropped as they come, never held.
    """
    header = reader.next_header()
    if header is None:
        return None
    try:
        binary = header_binary(header)
    except BadRequest as exc:
        return Refused(request_id_of(header), str(exc))
    try:
        request = parse_request(header, languages)
    except BadRequest as exc:
        return drop_refused(reader, header, binary, str(exc))
    try:
        payload = reader.read_payload(binary)
    except MemoryError:
        return drop_refused(reader, header, binary, f"{binary} bytes of binary cannot be held")
    if payload is None:
        return None
    follows = reader.end_follows()
    if follows is None:
        return None
    if not follows:
        return Refused(request.id, f"the end delimiter does not follow the {binary} bytes of binary")
    return attach_payloads(request, payload)


def drop_refused(reader: FrameReader, header: bytes, binary: int, reason: str) -> Refused | None:
    """Reads and drops a refused request's payloads; None when end of file comes first."""
    if not reader.skip_payload(binary) or reader.end_follows() is None:
        return None
    return Refused(request_id_of(header), reason)


def write_frame(writev: Writev, message: dict[str, Any], payloads: Sequence[bytes] = ()) -> None:
    """Writes one response frame: "binary" first, then the message, then the payloads as they
    are. ensure_ascii keeps the header on one line of plain ASCII."""
    header = {"binary": sum(len(payload) for payload in payloads), **message}
    line = json.dumps(header, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    write_all(writev, [RESPONSE_START, line, b"\n", *payloads, RESPONSE_END])


def write_all(writev: Writev, parts: Sequence[bytes]) -> None:
    """Writes the parts in order without joining them, resuming after partial writes."""
    views = [memoryview(part) for part in parts if len(part)]
    first = 0
    while first < len(views):
        written = writev(views[first:first + IOV_MAX])
        if written <= 0:
            raise OSError("writev wrote nothing")
        while first < len(views) and written >= len(views[first]):
            written -= len(views[first])
            first += 1
        if written:
            views[first] = views[first][written:]
