"""Files in the data directory: input files written in, new and changed files collected out.

Symlinks are never followed either way, so neither can reach outside the data directory.
"""

from __future__ import annotations

import os
import stat
from pathlib import PurePosixPath
from typing import Iterator

from kiln_repl.protocol import InputFile, Limits, OutputFile

# The REPL's own place in the working directory (what pip installs in a session): never an
# output, never listed.
PRIVATE_DIR = ".kiln"
NAMES_LISTED_MAX = 20  # file names listed per kind of skip; the rest are counted

Snapshot = dict[str, tuple[int, int, int]]


class PathRefused(Exception):
    """An input file that cannot be written without leaving the data directory."""


def is_within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def relative_parts(path: str) -> list[str]:
    parts = [part for part in PurePosixPath(path).parts if part != "."]
    if not parts or path.startswith("/") or "\0" in path:
        raise PathRefused("not a relative path")
    if ".." in parts:
        raise PathRefused("the path leaves the data directory")
    return parts


def open_parent(data_dir: str, parts: list[str], create: bool) -> int:
    """Opens the directory that holds the last of parts, walking down from data_dir with
    directory fds so that no symlink is followed; missing directories are made when create.
    The caller closes the fd."""
    dir_fd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=dir_fd)
                except FileExistsError:
                    pass
            try:
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
            except OSError:
                raise PathRefused(f"{part!r} is a symlink or not a directory") from None
            os.close(dir_fd)
            dir_fd = next_fd
    except BaseException:
        os.close(dir_fd)
        raise
    return dir_fd


def write_input_file(data_dir: str, item: InputFile) -> None:
    """Writes one input file, walking down with directory fds so that no symlink is followed."""
    parts = relative_parts(item.path)
    dir_fd = open_parent(data_dir, parts, create=True)
    try:
        write_at(dir_fd, parts[-1], item.content)
    finally:
        os.close(dir_fd)


def write_at(dir_fd: int, name: str, content: bytes | memoryview, mode: int = 0o644) -> None:
    """Writes a regular file name in the directory dir_fd; a symlink, a FIFO or anything else
    but a regular file in its place is refused."""
    # O_NONBLOCK: a FIFO left in the way must fail, not hang.
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(name, flags, mode, dir_fd=dir_fd)
    except OSError as exc:
        raise PathRefused(f"cannot be written ({exc.strerror}; a symlink is refused)") from None
    with open(fd, "wb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PathRefused("not a regular file")
        handle.truncate(0)
        handle.write(content)


def remove_file(data_dir: str, path: str) -> None:
    """Removes one file (or the symlink in its place) under data_dir, following no symlink on
    the way; a file already gone is no error."""
    parts = relative_parts(path)
    try:
        dir_fd = open_parent(data_dir, parts, create=False)
    except PathRefused:
        return  # a directory on the way is gone: so is the file
    try:
        os.unlink(parts[-1], dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise PathRefused(f"cannot be removed ({exc.strerror})") from None
    finally:
        os.close(dir_fd)


def walk_regular_files(data_dir: str) -> Iterator[tuple[str, str, int, os.stat_result]]:
    """Yields (relative path, name, dir fd, lstat) of the regular files under data_dir.

    Symlinks are never followed. The order is stable: a directory's files sorted by name,
    then its subdirectories sorted by name.
    """
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(data_dir, follow_symlinks=False):
        prefix = os.path.relpath(dirpath, data_dir)
        if prefix == ".":
            dirnames[:] = [name for name in dirnames if name != PRIVATE_DIR]
        dirnames.sort()
        for name in sorted(filenames):
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                yield (name if prefix == "." else f"{prefix}/{name}"), name, dir_fd, info


def snapshot(data_dir: str) -> Snapshot:
    return {path: fingerprint(info) for path, _, _, info in walk_regular_files(data_dir)}


def fingerprint(info: os.stat_result) -> tuple[int, int, int]:
    return info.st_size, info.st_mtime_ns, info.st_ino


def read_regular_file(name: str, dir_fd: int, limit: int) -> bytes | None:
    """Reads a file that is still a regular file; None if it holds more than limit bytes."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    with open(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("no longer a regular file")
        data = handle.read(limit + 1)
    return data if len(data) <= limit else None


def collect_files(data_dir: str, before: Snapshot,
                  limits: Limits) -> tuple[list[OutputFile], list[str], list[str]]:
    """Returns the regular files that are new or changed since before, within the caps, one
    line for each kind of file left out, and the files of before that are gone."""
    files: list[OutputFile] = []
    too_big, too_many, unreadable = [], [], []
    seen = set()
    for path, name, dir_fd, info in walk_regular_files(data_dir):
        seen.add(path)
        if before.get(path) == fingerprint(info):
            continue
        if info.st_size > limits.max_file_bytes:
            too_big.append(f"{path} ({info.st_size} bytes)")
            continue
        if len(files) >= limits.max_files:
            too_many.append(path)
            continue
        try:
            data = read_regular_file(name, dir_fd, limits.max_file_bytes)
        except OSError as exc:
            unreadable.append(f"{path} ({exc.strerror or exc})")
            continue
        if data is None:
            too_big.append(f"{path} (grew past the limit while read)")
            continue
        files.append(OutputFile(path, data))
    problems = []
    if too_big:
        problems.append(f"files not returned (over {limits.max_file_bytes} bytes): {list_names(too_big)}")
    if too_many:
        problems.append(f"files not returned (over {limits.max_files} files): {list_names(too_many)}")
    if unreadable:
        problems.append(f"files not returned (unreadable): {list_names(unreadable)}")
    return files, problems, sorted(path for path in before if path not in seen)


def list_names(names: list[str]) -> str:
    listed = ", ".join(names[:NAMES_LISTED_MAX])
    more = len(names) - NAMES_LISTED_MAX
    return f"{listed} and {more} more" if more > 0 else listed
