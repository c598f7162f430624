"""The sandbox's agent: commands, terminals and files that kiln asks for beside the cells.

kiln serves E2B's envd API itself and carries each of its calls here as an "agent" frame: a call
number, a method and its arguments, maybe a payload. Every call runs on a thread of its own and
answers with "agent" frames of the same number: events (a process's output, a file's chunks),
then one that ends the call, with its result or its error. The cells never wait for it, nor it
for them. The processes it starts are its own: the end of a cell leaves them running.
"""

from __future__ import annotations

import errno
import fcntl
import grp
import os
import pwd
import select
import signal
import stat
import struct
import subprocess
import termios
import threading
import time
from typing import Any, Callable

from kiln_repl.log import Logger

HOME = "/home/user"
CHUNK = 1 << 20  # the most bytes one event carries
SIGNALS = {9: signal.SIGKILL, 15: signal.SIGTERM}

Send = Callable[[dict[str, Any], tuple[bytes, ...]], None]


class AgentError(Exception):
    """A call's failure, with the code kiln answers with (Connect's codes)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def os_error(exc: OSError, path: str = "") -> AgentError:
    codes = {errno.ENOENT: "not_found", errno.EEXIST: "already_exists", errno.EACCES: "permission_denied",
             errno.EPERM: "permission_denied", errno.EROFS: "permission_denied",
             errno.ENOTDIR: "invalid_argument", errno.EISDIR: "invalid_argument",
             errno.ENOTEMPTY: "failed_precondition", errno.ENOSPC: "resource_exhausted",
             errno.EDQUOT: "resource_exhausted", errno.EFBIG: "resource_exhausted"}
    where = f" {path}" if path else ""
    return AgentError(codes.get(exc.errno or 0, "internal"), f"{exc.strerror or exc}:{where}")


def home() -> str:
    return HOME if os.path.isdir(HOME) else os.getcwd()


def resolve(path: Any) -> str:
    """A path as envd reads one: relative to the home, ~ expanded."""
    if not isinstance(path, str) or path == "":
        raise AgentError("invalid_argument", "path is required")
    if path == "~" or path.startswith("~/"):
        path = home() + path[1:]
    if not os.path.isabs(path):
        path = os.path.join(home(), path)
    return os.path.normpath(path)


def entry(path: str) -> dict[str, Any]:
    """What envd says of one file: lstat's, with a symlink's target."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise os_error(exc, path) from None
    kind = "file"
    target = None
    if stat.S_ISLNK(info.st_mode):
        kind = "symlink"
        target = shown(os.path.realpath(path))
        try:
            if os.path.isdir(path):
                kind = "dir"
        except OSError:
            pass
    elif stat.S_ISDIR(info.st_mode):
        kind = "dir"
    out: dict[str, Any] = {
        "name": os.path.basename(path) or "/", "type": kind, "path": path, "size": info.st_size,
        "mode": stat.S_IMODE(info.st_mode), "permissions": stat.filemode(info.st_mode),
        "owner": name_of(pwd.getpwuid, info.st_uid), "group": name_of(grp.getgrgid, info.st_gid),
        "mtime_ns": info.st_mtime_ns,
    }
    if target is not None:
        out["symlink_target"] = target
    if kind == "file" and (metadata := file_metadata(path)):
        out["metadata"] = metadata
    return out


METADATA_PREFIX = "user.e2b."  # where envd keeps a file's metadata: its extended attributes


def file_metadata(path: str) -> dict[str, str]:
    try:
        names = [n for n in os.listxattr(path) if n.startswith(METADATA_PREFIX)]
        return {n[len(METADATA_PREFIX):]: os.getxattr(path, n).decode(errors="replace") for n in names}
    except OSError:
        return {}  # no extended attributes on this file system, or the file went


def set_metadata(fd: int, path: str, metadata: dict[str, str]) -> None:
    """Replaces the file's metadata: an overwrite keeps none of what the file had."""
    try:
        for name in os.listxattr(fd):
            if name.startswith(METADATA_PREFIX):
                os.removexattr(fd, name)
        for key, value in metadata.items():
            os.setxattr(fd, METADATA_PREFIX + str(key), str(value).encode())
    except OSError as exc:
        if exc.errno != errno.EOPNOTSUPP:
            raise os_error(exc, path) from None
        if metadata:
            raise AgentError("failed_precondition",
                             f"file metadata needs extended attributes, which the file system of {path} lacks") from None
        # else: nothing to clear where nothing can be kept


def shown(path: str) -> str:
    """A resolved path with the home under its own name: /home/user is /mnt/data by another
    name, and callers know the files they made as the home's."""
    real = os.path.realpath(HOME)
    if real != HOME and (path == real or path.startswith(real + "/")):
        return HOME + path[len(real):]
    return path


def name_of(lookup: Callable[[int], Any], ident: int) -> str:
    try:
        return str(lookup(ident)[0])
    except KeyError:
        return str(ident)


class Proc:
    """One process the agent started: who listens to its output, and how it ended."""

    def __init__(self, popen: subprocess.Popen[bytes], config: dict[str, Any], tag: str | None,
                 master: int | None) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.config = config
        self.tag = tag
        self.master = master  # a terminal's side of its PTY, or None for pipes
        self.listeners: set[int] = set()
        self.exited = threading.Event()  # the process itself; its output may still be read
        self.ended = threading.Event()  # its end is sent


class Agent:
    """Runs the agent calls of one REPL. send writes a frame on the channel (any thread);
    proxy_env gives the egress proxy's variables, or none."""

    def __init__(self, send: Send, logger: Logger, proxy_env: Callable[[], dict[str, str]]) -> None:
        self._send = send
        self._logger = logger
        self._proxy_env = proxy_env
        self._lock = threading.Lock()
        self._procs: dict[int, Proc] = {}
        self._methods: dict[str, Callable[[int, dict[str, Any], memoryview], dict[str, Any] | None]] = {
            "proc.start": self.start, "proc.connect": self.connect, "proc.list": self.list,
            "proc.input": self.input, "proc.close_stdin": self.close_stdin, "proc.signal": self.signal,
            "proc.update": self.update, "proc.unsubscribe": self.unsubscribe,
            "fs.stat": self.stat, "fs.list": self.list_dir, "fs.mkdir": self.mkdir, "fs.move": self.move,
            "fs.remove": self.remove, "file.read": self.read, "file.write": self.write,
            "fs.watch": self.watch, "fs.unwatch": self.unwatch, "sys.metrics": self.metrics,
        }
        self._watches: dict[int, threading.Event] = {}  # by call: set to end that watch
        self._last_cpu: tuple[float, int] | None = None  # (monotonic seconds, cgroup usage_usec)

    def pids(self) -> set[int]:
        """The processes the agent runs, which a cell's end leaves alone."""
        with self._lock:
            return set(self._procs)

    def handle(self, call: int, method: str, args: dict[str, Any], data: memoryview) -> None:
        """Takes a call from the channel's reader: it never blocks."""
        threading.Thread(target=self._run, args=(call, method, args, data), name=f"agent-{call}",
                         daemon=True).start()

    def _run(self, call: int, method: str, args: dict[str, Any], data: memoryview) -> None:
        try:
            fn = self._methods.get(method)
            if fn is None:
                raise AgentError("unimplemented", f"unknown agent method {method!r}")
            result = fn(call, args, data)
            if result is not None:
                self.end(call, result)
        except AgentError as exc:
            self.end(call, None, exc.code, str(exc))
        except OSError as exc:
            err = os_error(exc)
            self.end(call, None, err.code, str(err))
        except Exception as exc:  # a bug here must not end the REPL
            self._logger.log(f"agent {method} failed: {exc!r}")
            self.end(call, None, "internal", f"{type(exc).__name__}: {exc}")

    def event(self, call: int, event: dict[str, Any], data: bytes = b"") -> None:
        self._send({"type": "agent", "call": call, "event": event}, (data,) if data else ())

    def end(self, call: int, result: dict[str, Any] | None, code: str = "", message: str = "") -> None:
        frame: dict[str, Any] = {"type": "agent", "call": call, "end": True, "event": result or {}}
        if code:
            frame["code"], frame["error"] = code, message
        self._send(frame, ())

    # --- processes ---------------------------------------------------------------------------

    def start(self, call: int, args: dict[str, Any], _: memoryview) -> None:
        cmd = args.get("cmd")
        if not isinstance(cmd, str) or not cmd:
            raise AgentError("invalid_argument", "cmd is required")
        argv = [cmd, *[str(a) for a in args.get("args") or []]]
        cwd = resolve(args["cwd"]) if args.get("cwd") else home()
        if not os.path.isdir(cwd):
            raise AgentError("invalid_argument", f"cwd {cwd!r} is not a directory")
        env = dict(os.environ)
        env.update(self._proxy_env())
        env.update({"HOME": home(), "USER": "user", "PWD": cwd, "TERM": "xterm-256color" if args.get("pty") else "dumb"})
        env.update({str(k): str(v) for k, v in (args.get("envs") or {}).items()})
        pty = args.get("pty")
        master = None
        if pty:
            master, slave = os.openpty()
            set_size(master, pty)
            try:
                popen = subprocess.Popen(argv, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                                         start_new_session=True, preexec_fn=take_terminal, close_fds=True)
            except OSError as exc:
                os.close(master)
                raise start_error(exc, cmd) from None
            finally:
                os.close(slave)
        else:
            stdin = subprocess.PIPE if args.get("stdin") else subprocess.DEVNULL
            try:
                popen = subprocess.Popen(argv, cwd=cwd, env=env, stdin=stdin, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
            except OSError as exc:
                raise start_error(exc, cmd) from None
        config = {"cmd": cmd, "args": argv[1:], "envs": args.get("envs") or {}, "cwd": cwd}
        proc = Proc(popen, config, args.get("tag") or None, master)
        proc.listeners.add(call)
        with self._lock:
            self._procs[proc.pid] = proc
        self.event(call, {"start": {"pid": proc.pid}})
        readers = []
        if master is not None:
            readers.append(threading.Thread(target=self._pump, args=(proc, master, "pty"), daemon=True))
        else:
            assert popen.stdout is not None and popen.stderr is not None
            readers.append(threading.Thread(target=self._pump, args=(proc, popen.stdout.fileno(), "stdout"), daemon=True))
            readers.append(threading.Thread(target=self._pump, args=(proc, popen.stderr.fileno(), "stderr"), daemon=True))
        for reader in readers:
            reader.start()
        timeout = args.get("timeout_ms") or 0
        if timeout > 0:
            threading.Thread(target=self._deadline, args=(proc, timeout / 1000), daemon=True).start()
        code = popen.wait()
        proc.exited.set()
        for reader in readers:
            reader.join()
        if master is not None:
            os.close(master)
        end = {"exit_code": code if code >= 0 else -1, "exited": code >= 0,
               "status": f"exit status {code}" if code >= 0 else f"signal: {signal_name(-code)}"}
        with self._lock:
            self._procs.pop(proc.pid, None)
            listeners = set(proc.listeners)
        proc.ended.set()
        for listener in listeners:
            self.end(listener, {"end": end})
        return None

    def _deadline(self, proc: Proc, seconds: float) -> None:
        if not proc.ended.wait(seconds):
            kill_group(proc.pid, signal.SIGKILL)

    def _pump(self, proc: Proc, fd: int, stream: str) -> None:
        # A PTY's master is read until it is drained after its process exited: Linux then
        # reads EIO, but gVisor's master blocks while the slave's last user is gone.
        poller = None
        if stream == "pty":
            poller = select.poll()
            poller.register(fd, select.POLLIN)
        while True:
            if poller is not None and not poller.poll(100):
                if proc.exited.is_set():
                    return
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # a PTY whose every process ended reads EIO
                return
            if not chunk:
                return
            with self._lock:
                listeners = set(proc.listeners)
            for listener in listeners:
                self.event(listener, {"data": stream}, chunk)

    def find(self, args: dict[str, Any]) -> Proc:
        selector = args.get("process") or {}
        with self._lock:
            if "pid" in selector:
                proc = self._procs.get(int(selector["pid"]))
            else:
                proc = next((p for p in self._procs.values() if p.tag == selector.get("tag")), None)
        if proc is None:
            raise AgentError("not_found", f"process {selector.get('pid', selector.get('tag'))} not found")
        return proc

    def connect(self, call: int, args: dict[str, Any], _: memoryview) -> None:
        proc = self.find(args)
        with self._lock:
            if proc.ended.is_set():
                raise AgentError("not_found", f"process {proc.pid} has ended")
            proc.listeners.add(call)
        self.event(call, {"start": {"pid": proc.pid}})
        return None  # ended by the process's end, or by unsubscribe

    def unsubscribe(self, _: int, args: dict[str, Any], __: memoryview) -> dict[str, Any]:
        target = int(args.get("target") or 0)
        with self._lock:
            procs = list(self._procs.values())
            for proc in procs:
                proc.listeners.discard(target)
        return {}

    def list(self, _: int, __: dict[str, Any], ___: memoryview) -> dict[str, Any]:
        with self._lock:
            procs = [{"pid": p.pid, "tag": p.tag, "config": p.config} for p in self._procs.values()]
        return {"processes": procs}

    def input(self, _: int, args: dict[str, Any], data: memoryview) -> dict[str, Any]:
        proc = self.find(args)
        if proc.master is not None:
            os.write(proc.master, bytes(data))
            return {}
        stdin = proc.popen.stdin
        if stdin is None or stdin.closed:
            raise AgentError("failed_precondition", f"process {proc.pid} has no open stdin")
        try:
            stdin.write(bytes(data))
            stdin.flush()
        except (BrokenPipeError, ValueError):
            raise AgentError("failed_precondition", f"process {proc.pid} closed its stdin") from None
        return {}

    def close_stdin(self, _: int, args: dict[str, Any], __: memoryview) -> dict[str, Any]:
        proc = self.find(args)
        if proc.master is not None:
            raise AgentError("failed_precondition", "a terminal's input is closed with Ctrl+D, not CloseStdin")
        if proc.popen.stdin is not None and not proc.popen.stdin.closed:
            proc.popen.stdin.close()
        return {}

    def signal(self, _: int, args: dict[str, Any], __: memoryview) -> dict[str, Any]:
        proc = self.find(args)
        which = SIGNALS.get(int(args.get("signal") or 0))
        if which is None:
            raise AgentError("invalid_argument", f"signal {args.get('signal')} is not SIGTERM (15) or SIGKILL (9)")
        kill_group(proc.pid, which)
        return {}

    def update(self, _: int, args: dict[str, Any], __: memoryview) -> dict[str, Any]:
        proc = self.find(args)
        if args.get("pty"):
            if proc.master is None:
                raise AgentError("failed_precondition", f"process {proc.pid} has no terminal")
            set_size(proc.master, args["pty"])
        return {}

    def metrics(self, _: int, __: dict[str, Any], ___: memoryview) -> dict[str, Any]:
        """The sandbox's use now, from its cgroup: CPU since the last ask, memory, disk."""
        now, usage = time.monotonic(), cgroup_value("cpu.stat", "usage_usec")
        cpus = os.cpu_count() or 1
        quota = open_text("/sys/fs/cgroup/cpu.max").split()
        if len(quota) == 2 and quota[0].isdigit() and int(quota[1]) > 0:
            cpus = max(1, round(int(quota[0]) / int(quota[1])))
        pct = 0.0
        with self._lock:
            if self._last_cpu is not None and now > self._last_cpu[0]:
                pct = (usage - self._last_cpu[1]) / 1e6 / (now - self._last_cpu[0]) / cpus * 100
            self._last_cpu = (now, usage)
        memory_total = cgroup_value("memory.max") or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        disk = os.statvfs(home())
        return {"cpu_count": cpus, "cpu_used_pct": round(max(pct, 0.0), 2),
                "mem_used": cgroup_value("memory.current"), "mem_total": memory_total,
                "mem_cache": cgroup_value("memory.stat", "file"),
                "disk_used": (disk.f_blocks - disk.f_bfree) * disk.f_frsize, "disk_total": disk.f_blocks * disk.f_frsize}

    # --- files -------------------------------------------------------------------------------

    def stat(self, _: int, args: dict[str, Any], __: memoryview) -> dict[str, Any]:
        return {"entry": entry(resolve(args.get("path")))}

    def list_dir(self, _: int, args: dict[str, Any], __: memoryview) -> dict[str, Any]:
        root = resolve(args.get("path"))
        depth = max(int(args.get("depth") or 1), 1)
        if not os.path.isdir(root):
            if os.path.lexists(root):
                raise AgentError("invalid_argument", f"path {root} is not a directory")
            raise AgentError("not_found", f"path {root} does not exist")
        entries: list[dict[str, Any]] = []

        def walk(path: str, level: int) -> None:
            try:
                names = sorted(os.listdir(path))
            except OSError as exc:
                raise os_error(exc, path) from None
            for name in names:
                child = os.path.join(path, name)
                try:
                    info = entry(child)
                except AgentError:
                    continue  # gone between the listing and the stat
                entries.append(info)
                if info["type"] == "dir" and level < depth and not os.path.islink(child):
                    walk(child, level + 1)

        walk(root, 1)
        return {"entries": entries}

    def mkdir(self, _: int, args: dict[str, Any], __: memoryview) -> dict[str, Any]:
        path = resolve(args.get("path"))
        if os.path.isdir(path):
            raise AgentError("already_exists", f"directory {path} already exists")
        try:
            os.makedirs(path)
        except OSError as exc:
            raise os_error(exc, path) from None
        return {"entry": entry(path)}

    def move(self, _: int, args: dict[str, Any], __: memoryview) -> dict[str, Any]:
        source, destination = resolve(args.get("source")), resolve(args.get("destination"))
        try:
            os.makedirs(os.path.dirname(destination), exist_ok=True)
            os.rename(source, destination)
        except OSError as exc:
            raise os_error(exc, source) from None
        return {"entry": entry(destination)}

    def remove(self, _: int, args: dict[str, Any], __: memoryview) -> dict[str, Any]:
        """Removes a file or a tree; what is not there is already removed, as envd has it."""
        path = resolve(args.get("path"))
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                remove_tree(path)
            else:
                os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise os_error(exc, path) from None
        return {}

    def watch(self, call: int, args: dict[str, Any], _: memoryview) -> dict[str, Any]:
        """A directory's changes as they happen (inotify, through watchdog): a start event once
        the watch is in place, then one event per change, named relative to the directory,
        until fs.unwatch names this call."""
        root = resolve(args.get("path"))
        if not os.path.isdir(root):
            if os.path.lexists(root):
                raise AgentError("invalid_argument", f"path {root} is not a directory")
            raise AgentError("not_found", f"path {root} does not exist")
        from watchdog.observers.inotify import InotifyObserver  # only an agent that watches pays for it

        with self._lock:
            stop = self._watches.setdefault(call, threading.Event())  # an unwatch may come first
        observer = InotifyObserver()
        try:
            observer.schedule(Changes(self, call, root, bool(args.get("include_entry"))), root,
                              recursive=bool(args.get("recursive")))
            observer.start()
        except OSError as exc:
            with self._lock:
                self._watches.pop(call, None)
            raise os_error(exc, root) from None
        try:
            self.event(call, {"start": True})
            stop.wait()
        finally:
            observer.stop()
            observer.join()
            with self._lock:
                self._watches.pop(call, None)
        return {}

    def unwatch(self, _: int, args: dict[str, Any], __: memoryview) -> dict[str, Any]:
        target = int(args.get("target") or 0)
        with self._lock:
            self._watches.setdefault(target, threading.Event()).set()
        return {}

    def read(self, call: int, args: dict[str, Any], _: memoryview) -> dict[str, Any]:
        path = resolve(args.get("path"))
        if os.path.isdir(path):
            raise AgentError("invalid_argument", f"path {path} is a directory")
        try:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                while chunk := handle.read(CHUNK):
                    self.event(call, {"data": "file"}, chunk)
        except OSError as exc:
            raise os_error(exc, path) from None
        return {"size": size}

    def write(self, _: int, args: dict[str, Any], data: memoryview) -> dict[str, Any]:
        """One chunk of a file: the first (offset 0) makes the file and its directories."""
        path = resolve(args.get("path"))
        offset = int(args.get("offset") or 0)
        try:
            if offset == 0:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                if os.path.isdir(path):
                    raise AgentError("invalid_argument", f"path {path} is a directory")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if offset == 0 else 0), 0o644)
            try:
                if offset == 0:
                    set_metadata(fd, path, args.get("metadata") or {})
                os.lseek(fd, offset, os.SEEK_SET)
                view = data
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        except OSError as exc:
            raise os_error(exc, path) from None
        return {"entry": entry(path)} if args.get("last") else {}


class Changes:
    """A watch's handler for watchdog: its events as envd's (create, write, remove, rename),
    each with the changed entry when asked and it is still there."""

    def __init__(self, agent: Agent, call: int, root: str, include_entry: bool) -> None:
        self._agent, self._call, self._root, self._include_entry = agent, call, root, include_entry

    def dispatch(self, event: Any) -> None:
        kind = event.event_type
        if kind == "created":
            changes = [("create", event.src_path)]
        elif kind == "modified" and not event.is_directory:  # a directory's own change is its children's
            changes = [("write", event.src_path)]
        elif kind == "deleted":
            changes = [("remove", event.src_path)]
        elif kind == "moved":
            changes = [("rename", event.src_path), ("create", event.dest_path)]
        else:
            return  # opened, closed: envd says nothing of them
        for op, path in changes:
            path = os.fsdecode(path)
            name = os.path.relpath(path, self._root)
            if name == "." or name.startswith("../"):
                continue  # the directory itself, or where a move took its file
            out: dict[str, Any] = {"name": name, "op": op}
            if self._include_entry and op in ("create", "write"):
                try:
                    out["entry"] = entry(path)
                except AgentError:
                    pass  # gone again already
            self._agent.event(self._call, out)


def cgroup_value(name: str, key: str = "") -> int:
    """A number from the sandbox's own cgroup (v2, as a container sees it at /sys/fs/cgroup);
    0 when the file or the key is not there."""
    try:
        with open(os.path.join("/sys/fs/cgroup", name)) as handle:
            text = handle.read()
    except OSError:
        return 0
    if not key:
        value = text.strip()
        return int(value) if value.isdigit() else 0
    for line in text.splitlines():
        name_, _, value = line.partition(" ")
        if name_ == key and value.strip().isdigit():
            return int(value)
    return 0


def open_text(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def remove_tree(path: str) -> None:
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            os.remove(os.path.join(root, name))
        for name in dirs:
            full = os.path.join(root, name)
            os.remove(full) if os.path.islink(full) else os.rmdir(full)
    os.rmdir(path)


def start_error(exc: OSError, cmd: str) -> AgentError:
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return AgentError("not_found", f"command {cmd!r} not found")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return AgentError("permission_denied", f"command {cmd!r} cannot be run: {exc.strerror}")
    return AgentError("internal", f"command {cmd!r} could not start: {exc.strerror}")


def take_terminal() -> None:
    """In the child, after setsid: its PTY becomes the session's controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def set_size(fd: int, pty: dict[str, Any]) -> None:
    size = pty.get("size") or {}
    rows, cols = int(size.get("rows") or 24), int(size.get("cols") or 80)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def kill_group(pid: int, which: signal.Signals) -> None:
    """Signals the process's whole group (it leads its own session), so that what a shell
    started ends with it."""
    try:
        os.killpg(pid, which)
    except OSError:
        try:
            os.kill(pid, which)
        except OSError:
            pass


def signal_name(number: int) -> str:
    try:
        return {signal.SIGKILL: "killed", signal.SIGTERM: "terminated", signal.SIGINT: "interrupt"}.get(
            signal.Signals(number), signal.Signals(number).name.lower())
    except ValueError:
        return str(number)

