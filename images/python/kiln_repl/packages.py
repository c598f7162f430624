"""What pip installed in a session, kept with its state so that a resumed session has it again.

With egress on, pip installs under the session's own base (egress.PACKAGES_BASE, in the working
directory). The state's header carries that directory's files (relative path -> mode and bytes;
the whole blob is compressed anyway), and a restore writes them back before the names are
unpickled, so that objects of those packages come back too. Nothing is downloaded again: the
host keeps the files, in the state blob. The map is made again only when a quick look (a stat per package, see quick_fingerprint) sees a
change: a capture of a session that installed nothing new walks no package's files.
"""

from __future__ import annotations

import os
import stat

from kiln_repl.files import PathRefused, open_parent, relative_parts, write_at

# The most a session's installed files may take in its state: past it they are not kept, and
# the state's notes say so.
MAX_ARCHIVE_BYTES = 32 << 20

Fingerprint = tuple[tuple[str, int, int], ...]
Archive = dict[str, tuple[int, bytes]]  # relative path -> (mode bits, content)


class Packages:
    """The session's installed packages under root."""

    def __init__(self, root: str, cap: int = MAX_ARCHIVE_BYTES) -> None:
        self.root = root
        self.cap = cap
        self._fingerprint: Fingerprint = ()
        self._archive: Archive | None = None
        self._note: str | None = None

    def archive(self) -> tuple[Archive | None, str | None]:
        """The directory's files (None when there are none or they are over the cap), and a
        note when they could not be kept."""
        quick = quick_fingerprint(self.root)
        if quick == self._fingerprint:
            return self._archive, self._note
        self._fingerprint, self._archive, self._note = quick, None, None
        fingerprint = tree_fingerprint(self.root)
        size = sum(size for _, size, _ in fingerprint)
        if not size:
            return None, None
        if size > self.cap:
            self._note = (f"installed packages not kept ({size >> 20} MB of files, over the {self.cap >> 20} MB a "
                          "session keeps): a resumed session will not have them")
            return None, self._note
        archive: Archive = {}
        try:
            for path, _, _ in fingerprint:
                full = os.path.join(self.root, path)
                with open(full, "rb") as handle:
                    archive[path] = (stat.S_IMODE(os.fstat(handle.fileno()).st_mode), handle.read())
        except OSError as exc:
            self._note = f"installed packages not kept: {exc.strerror or exc}"
            return None, self._note
        self._archive = archive
        return archive, None

    def restore(self, archive: object) -> str | None:
        """Writes kept files back under root, never outside it and never through a link; a
        note when they could not be."""
        if not isinstance(archive, dict):
            return "installed packages not restored: not a map of files"
        parents: dict[str, int] = {}  # each directory opened once, walked down without links
        try:
            os.makedirs(self.root, exist_ok=True)
            for path, entry in archive.items():
                mode, content = entry
                if not isinstance(path, str) or not isinstance(content, bytes) or not isinstance(mode, int):
                    raise PathRefused("not a file entry")
                parts = relative_parts(path)
                parent = "/".join(parts[:-1])
                if parent not in parents:
                    parents[parent] = open_parent(self.root, parts, create=True)
                write_at(parents[parent], parts[-1], content, 0o755 if mode & 0o111 else 0o644)
        except (OSError, PathRefused, ValueError, TypeError) as exc:
            return f"installed packages not restored: {exc}"
        finally:
            for fd in parents.values():
                os.close(fd)
        self._fingerprint, self._archive, self._note = quick_fingerprint(self.root), archive, None
        return None


def tree_fingerprint(root: str) -> Fingerprint:
    """Every regular file under root with its size and modification time, in a stable order;
    symlinks are not followed, nor kept."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                out.append((os.path.relpath(path, root), info.st_size, info.st_mtime_ns))
    return tuple(out)


# How deep the quick look goes: root/lib/python3.13/site-packages/<a package> is 4.
QUICK_DEPTH = 4


def quick_fingerprint(root: str) -> Fingerprint:
    """What changes when pip installs, upgrades or removes anything: the entries down to the
    packages' own directories (each one's inode and time, which a new or removed file in it
    changes) and each distribution's RECORD, which pip writes on every install. It costs a
    stat per package, not per file: it is taken on every capture. A file edited in place
    inside a package is not seen until something else changes."""
    out: list[tuple[str, int, int]] = []

    def visit(path: str, rel: str, depth: int) -> None:
        try:
            entries = sorted(os.scandir(path), key=lambda entry: entry.name)
        except OSError:
            return
        for entry in entries:
            name = f"{rel}/{entry.name}" if rel else entry.name
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            out.append((name, info.st_ino, info.st_mtime_ns))
            if entry.name.endswith(".dist-info") and entry.is_dir(follow_symlinks=False):
                try:
                    record = os.lstat(os.path.join(entry.path, "RECORD"))
                    out.append((name + "/RECORD", record.st_size, record.st_mtime_ns))
                except OSError:
                    pass
            elif depth < QUICK_DEPTH and entry.is_dir(follow_symlinks=False):
                visit(entry.path, name, depth + 1)

    visit(root, "", 1)
    return tuple(out)
