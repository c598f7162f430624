"""The wire protocol's messages: requests with their limits, and the messages sent back.

How they travel, in frames with binary payloads, is framing's part. The format is described in
docs/protocol.md of the kiln repository.
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, Collection, Sequence

PROTOCOL_VERSION = 2
DEFAULT_TIMEOUT_MS = 30_000
READ_CHUNK = 1 << 16  # bytes asked of one read, on the protocol channel and the capture pipes
# Every header starts with exactly these bytes: the binary length comes first so that it can be
# read, and refused, before the rest. 16 digits are more bytes than any host sends.
HEADER_START = re.compile(rb'\{"binary":(0|[1-9][0-9]{0,15})[,}]')


@dataclass(frozen=True)
class Limits:
    """The caps a request may lower or raise; the defaults apply to what it leaves out."""

    max_output_bytes: int = 1 << 20  # kept of stdout, and of stderr; characters of the result
    max_file_bytes: int = 10 << 20  # size of each input and each returned file
    max_files: int = 50  # number of returned files
    max_state_bytes: int = 64 << 20  # size of the compressed state, given or captured
    max_state_raw_bytes: int = 256 << 20  # size of a captured state's pickle, before compression
    max_tool_call_bytes: int = 256 << 10  # the JSON input of one tool call


LIMIT_NAMES = frozenset(limit.name for limit in fields(Limits))
NO_BYTES = memoryview(b"")


@dataclass(frozen=True)
class InputFile:
    """A file to write before the run; content is a slice of the request's payloads."""

    path: str
    size: int
    content: memoryview = NO_BYTES


@dataclass(frozen=True)
class Tool:
    """A tool of the host's client the code may call: name is the client's, function the
    identifier the code calls it by (a Python function, or a shell function in bash)."""

    name: str
    function: str


@dataclass(frozen=True)
class Request:
    """A parsed request. state_size and the files' sizes come from the header; state and the
    files' contents are filled in from the payloads once they are read."""

    id: str
    op: str
    lang: str = "python"
    code: str = ""
    args: list[str] = field(default_factory=list)
    state_size: int | None = None
    state: memoryview | None = None
    capture_state: bool = False
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    files: list[InputFile] = field(default_factory=list)
    limits: Limits = Limits()
    events: bool = False  # send output and display events while the code runs
    figures: bool = False  # save matplotlib figures as files (Python)
    tools: list[Tool] = field(default_factory=list)  # the client's tools the code may call
    results: memoryview = NO_BYTES  # tool_results: the JSON list of results, the one payload
    live: bool = False  # the sandbox goes on serving its session (a live session)
    state_base: str = ""  # the state_token of the capture the host holds, if it holds one
    delete_files: list[str] = field(default_factory=list)  # paths to remove before the run
    # Python's syntax alone: no IPython transformations (magics, !cmd, obj?) and no history.
    plain_python: bool = False
    # The host's own read of the namespace (a completion, an inspection): Python's syntax, no
    # history, nothing counted.
    read_only: bool = False
    conn: int = 0  # net: the connection of the code's the frame is about (kiln_repl.egress)
    net: str = ""  # net: what it says: data, eof, close or ack
    n: int = 0  # net: ack's count of bytes delivered
    data: memoryview = NO_BYTES  # net: data's bytes, the one payload; agent: the call's payload
    call: int = 0  # agent: the call's number, which its answers carry (kiln_repl.agent)
    method: str = ""  # agent: what it asks
    params: dict[str, Any] = field(default_factory=dict)  # agent: the method's arguments


class BadRequest(Exception):
    """The frame does not hold a valid request; the host gets a frame of type "error"."""


@dataclass(frozen=True)
class OutputFile:
    """A file returned by a run: its content travels as a payload, not in the header."""

    path: str
    content: bytes


@dataclass
class Result:
    """The exec response. Every field is always sent: the blobs as payloads after the header,
    state as {"size": N} and each file as {"path", "size"} in it."""

    id: str
    status: str = "ok"
    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    result: str | None = None
    state: bytes | None = None
    state_unchanged: bool = False
    state_error: str | None = None
    state_token: str | None = None  # names the state this capture left, sent back or unchanged
    files: list[OutputFile] = field(default_factory=list)
    files_error: str | None = None
    deleted_files: list[str] = field(default_factory=list)  # files present when the run began that it removed
    truncated: bool = False
    duration_ms: int = 0
    memory_bytes: int = 0  # the process's resident memory after a live request's run
    # The rich outputs, in order, as a JSON array (kiln_repl.rich): the last payload, None without.
    outputs: bytes | None = None

    def to_message(self) -> dict[str, Any]:
        """The header's members after "binary", in the order of the fields."""
        message: dict[str, Any] = {"id": self.id, "type": "result"}
        for name, value in vars(self).items():
            if name == "state":
                value = None if value is None else {"size": len(value)}
            elif name == "files":
                value = [{"path": item.path, "size": len(item.content)} for item in value]
            elif name == "outputs":
                value = None if value is None else {"size": len(value)}
            if name != "id":
                message[name] = value
        return message

    def payloads(self) -> list[bytes]:
        """The blobs in the order the header names them: the state, each file, the outputs."""
        state = [] if self.state is None else [self.state]
        outputs = [] if self.outputs is None else [self.outputs]
        return state + [item.content for item in self.files] + outputs


NATIVE_LANGUAGES = ("python", "bash")  # the languages the REPL knows without the image's table
TOOL_LANGUAGES = NATIVE_LANGUAGES  # the languages whose code can call the client's tools


def ready_message(python_version: str, preloaded: dict[str, str],
                  languages: Sequence[str] = NATIVE_LANGUAGES) -> dict[str, Any]:
    """The frame the host counts the sandbox warm on: sent before the first request, or, with
    --await-hello, as the answer to the host's hello."""
    return {
        "type": "ready",
        "protocol": PROTOCOL_VERSION,
        "python": python_version,
        "preloaded": preloaded,
        "capabilities": {"languages": list(languages), "state": True, "files": True, "tools": True,
                         "outputs": True, "agent": True},
    }


# ---------------------------------------------------------------------------------------------
# Requests


def expect(value: Any, kind: type | tuple[type, ...], name: str) -> Any:
    """Returns value if it has the JSON type wanted (a bool does not count as an int)."""
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise BadRequest(f"{name} has the wrong type")
    return value


def expect_size(value: Any, name: str) -> int:
    if expect(value, int, name) < 0:
        raise BadRequest(f"{name} is negative")
    return int(value)


def header_binary(header: bytes) -> int:
    """The binary length a header starts with; BadRequest when it does not start as it must."""
    match = HEADER_START.match(header)
    if match is None:
        raise BadRequest('the header does not start with {"binary":N')
    return int(match.group(1))


def parse_request(header: bytes, languages: Collection[str] = NATIVE_LANGUAGES) -> Request:
    """Decodes and validates a request header; missing or null fields get their defaults.
    languages are those the REPL runs (its ready frame lists them); any other is refused.

    The fields are checked in the order of the protocol's table, so a request with several
    faults is always refused for the same one; then that the sizes add up to binary, then the
    caps, all before a byte of the payloads is read.
    """
    binary = header_binary(header)
    try:
        message = json.loads(header)  # an object: the header starts with {"binary":
    except Exception as exc:  # ValueError, and RecursionError for absurd nesting
        raise BadRequest(f"request is not JSON: {exc}") from None
    request_id = expect(message.get("id", ""), str, "id")
    op = message.get("op", "exec")
    if op not in ("exec", "ping", "hello", "interrupt", "tool_results", "net", "agent"):
        raise BadRequest(f"unknown op {op!r}")
    if op == "net":
        return parse_net(message, binary)
    if op == "agent":
        return parse_agent(message, binary)
    lang = message.get("lang") or "python"
    if not isinstance(lang, str) or lang not in languages:
        raise BadRequest(f"unknown lang {lang!r}")
    code = expect(message.get("code") or "", str, "code")
    args = [expect(arg, str, "args[]") for arg in expect(message.get("args") or [], list, "args")]
    if expect(message["binary"], int, "binary") != binary:
        raise BadRequest("binary is given twice")
    state_size = parse_state(message.get("state"))
    capture_state = expect(message.get("capture_state") or False, bool, "capture_state")
    timeout_ms = message.get("timeout_ms")
    if timeout_ms is None or expect(timeout_ms, int, "timeout_ms") <= 0:
        timeout_ms = DEFAULT_TIMEOUT_MS
    files = [parse_file(item) for item in expect(message.get("files") or [], list, "files")]
    limits = parse_limits(message.get("limits"))
    events = expect(message.get("events") or False, bool, "events")
    figures = expect(message.get("figures") or False, bool, "figures")
    tools = parse_tools(message.get("tools"), lang)
    live = expect(message.get("live") or False, bool, "live")
    state_base = expect(message.get("state_base") or "", str, "state_base")
    delete_files = [expect(path, str, "delete_files[]")
                    for path in expect(message.get("delete_files") or [], list, "delete_files")]
    plain_python = expect(message.get("plain_python") or False, bool, "plain_python")
    read_only = expect(message.get("read_only") or False, bool, "read_only")
    if op == "tool_results":
        # The one payload is the results' JSON: no state, no files.
        return Request(id=request_id, op=op)
    check_sizes(binary, state_size, files, limits)
    return Request(id=request_id, op=op, lang=lang, code=code, args=args, state_size=state_size,
                   capture_state=capture_state, timeout_ms=timeout_ms, files=files, limits=limits,
                   events=events, figures=figures, tools=tools, live=live, state_base=state_base,
                   delete_files=delete_files, plain_python=plain_python, read_only=read_only)


NET_OPS = ("data", "eof", "close", "ack")


AGENT_MAX_BINARY = 8 << 20  # a file's chunk: kiln sends at most 4 MiB


def parse_agent(message: dict[str, Any], binary: int) -> Request:
    """An agent call: E2B's envd, as kiln carries it (kiln_repl.agent)."""
    if expect(message["binary"], int, "binary") != binary:
        raise BadRequest("binary is given twice")
    if binary > AGENT_MAX_BINARY:
        raise BadRequest(f"agent call with {binary} bytes of data")
    call = expect_size(message.get("call", 0), "call")
    method = expect(message.get("method") or "", str, "method")
    params = expect(message.get("args") or {}, dict, "args")
    return Request(id="", op="agent", call=call, method=method, params=params)


def parse_net(message: dict[str, Any], binary: int) -> Request:
    """A net frame: one of the code's connections, from the host's side."""
    if expect(message["binary"], int, "binary") != binary:
        raise BadRequest("binary is given twice")
    net = message.get("net")
    if net not in NET_OPS:
        raise BadRequest(f"unknown net {net!r}")
    conn = expect_size(message.get("conn", 0), "conn")
    n = expect_size(message.get("n") or 0, "n")
    if (net == "data") != (binary > 0) or binary > 256 << 10:
        raise BadRequest(f"net {net} with {binary} bytes of data")
    return Request(id="", op="net", conn=conn, net=net, n=n)


def parse_state(value: Any) -> int | None:
    """The size of the state blob, or None when the request brings none."""
    if value is None:
        return None
    return expect_size(expect(value, dict, "state").get("size"), "state.size")


SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_tools(value: Any, lang: str) -> list[Tool]:
    """The tools, each function a valid identifier of the language, no two alike."""
    tools = []
    items = expect(value or [], list, "tools")
    if items and lang not in TOOL_LANGUAGES:
        raise BadRequest(f"tools cannot be called from {lang}")
    for item in items:
        expect(item, dict, "tools[]")
        name = expect(item.get("name"), str, "tools[].name")
        function = expect(item.get("function"), str, "tools[].function")
        valid = SHELL_NAME.fullmatch(function) if lang == "bash" else function.isidentifier() and not keyword.iskeyword(function)
        if not name or not valid:
            raise BadRequest(f"tool {name!r}: {function!r} is not a valid {lang} function name")
        tools.append(Tool(name, function))
    if len({tool.function for tool in tools}) != len(tools):
        raise BadRequest("two tools have the same function name")
    return tools


def parse_file(item: Any) -> InputFile:
    expect(item, dict, "files[]")
    path = expect(item.get("path"), str, "files[].path")
    return InputFile(path, expect_size(item.get("size") or 0, "files[].size"))


def check_sizes(binary: int, state_size: int | None, files: list[InputFile], limits: Limits) -> None:
    """Refuses sizes that do not add up to binary, and a state or file over its cap."""
    total = (state_size or 0) + sum(item.size for item in files)
    if total != binary:
        raise BadRequest(f"the sizes of the state and files add up to {total} bytes, not binary {binary}")
    if state_size is not None and state_size > limits.max_state_bytes:
        raise BadRequest(f"state is {state_size} bytes, over max_state_bytes {limits.max_state_bytes}")
    for item in files:
        if item.size > limits.max_file_bytes:
            raise BadRequest(f"file {item.path!r} is {item.size} bytes, over max_file_bytes {limits.max_file_bytes}")


def attach_payloads(request: Request, payload: bytearray) -> Request:
    """The request with its state and files' contents as slices of payload, which is exactly
    as long as the sizes add up to (parse_request checked them)."""
    view = memoryview(payload)
    if request.op in ("net", "agent"):
        return replace(request, data=view)
    if request.op == "tool_results":
        return replace(request, results=view)
    state = None
    offset = 0
    if request.state_size is not None:
        state = view[:request.state_size]
        offset = request.state_size
    files = []
    for item in request.files:
        files.append(replace(item, content=view[offset:offset + item.size]))
        offset += item.size
    return replace(request, state=state, files=files)


def parse_limits(value: Any) -> Limits:
    """Unknown names are ignored, and so are values that are null or not above zero."""
    chosen: dict[str, int] = {}
    for name, limit in expect(value or {}, dict, "limits").items():
        if name in LIMIT_NAMES and limit is not None and expect(limit, int, f"limits.{name}") > 0:
            chosen[name] = limit
    return Limits(**chosen)


def request_id_of(header: bytes) -> str:
    """The id of a request, as far as it can be read; "" when it cannot."""
    try:
        message = json.loads(header)
    except Exception:
        return ""
    if isinstance(message, dict) and isinstance(message.get("id"), str):
        return str(message["id"])
    return ""
