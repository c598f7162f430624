"""What a run left running: found through /proc, killed, and reaped when it is ours."""

from __future__ import annotations

import os
import resource
import signal
import time

from kiln_repl.log import Logger


def process_ids(pid: int) -> tuple[int, int, int] | None:
    """Reads (ppid, process group, session) from /proc; None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), int(fields[2]), int(fields[3])
    except (OSError, IndexError, ValueError):
        return None


def leftover_processes(leaders: set[int], keep: set[int] | frozenset[int] = frozenset()) -> set[int]:
    """The processes descended from this one, or in a process group or session led by one of
    leaders. Groups and sessions also catch orphans, which init has adopted. The processes of
    keep, and what descends from them, are not among them."""
    me = os.getpid()
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in (1, me):
            if ids := process_ids(int(entry)):
                table[int(entry)] = ids
    found = {pid for pid, (_, group, session) in table.items() if group in leaders or session in leaders} - keep
    frontier = {me} | found
    while frontier:
        children = {pid for pid, (ppid, _, _) in table.items() if ppid in frontier} - found - keep
        found |= children
        frontier = children
    return found


def kill_leftovers(leaders: set[int], logger: Logger, keep: set[int] | frozenset[int] = frozenset()) -> None:
    """SIGKILLs what a run left running and reaps those that were this process's children; the
    processes of keep are the REPL's own (the egress relay) and stay."""
    for _ in range(20):
        pids = leftover_processes(leaders, keep)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in pids:
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass  # not our child: init reaps it
        time.sleep(0.001)
    logger.log("leftover processes survived SIGKILL")


RLIMITS_ENV = "KILN_RLIMITS"
"""Resource limits the REPL sets on itself at start, for hosts with no say in them (a Kubernetes
Pod has no ulimits): "nofile=1024,fsize=268435456,core=0". Limits are only ever lowered."""

RLIMIT_NAMES = {"nofile": resource.RLIMIT_NOFILE, "fsize": resource.RLIMIT_FSIZE, "core": resource.RLIMIT_CORE}


def apply_rlimits(spec: str | None, logger: Logger) -> None:
    """Lowers this process's limits (and so its children's) to those of spec. A limit per uid,
    such as nproc, is no limit here: every sandbox on a node may share the uid."""
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        name, _, value = item.strip().partition("=")
        if name not in RLIMIT_NAMES or not value.isdigit():
            logger.log(f"{RLIMITS_ENV}: ignored {item.strip()!r}")
            continue
        which = RLIMIT_NAMES[name]
        _, hard = resource.getrlimit(which)
        limit = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
        resource.setrlimit(which, (limit, limit))
