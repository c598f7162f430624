"""What pip installed in a session, kept with its state so that a resumed session has it again.

With egress on, pip installs under the session's own base (egress.PACKAGES_BASE, in the working
directory). The state's header carries that directory as an uncompressed tar (the whole blob is
compressed anyway), and a restore writes it back before the names are unpickled, so that objects
of those packages come back too. Nothing is downloaded again: the host keeps the files, in the
state blob. The archive is made again only when the directory changed.
"""

from __future__ import annotations

import io
import os
import tarfile

# The most a session's installed files may take in its state, as a tar: past it they are not
# kept, and the state's notes say so.
MAX_ARCHIVE_BYTES = 32 << 20

Fingerprint = tuple[tuple[str, int, int], ...]


class Packages:
    """The session's installed packages under root."""

    def __init__(self, root: str, cap: int = MAX_ARCHIVE_BYTES) -> None:
        self.root = root
        self.cap = cap
        self._fingerprint: Fingerprint = ()
        self._archive: bytes | None = None
        self._note: str | None = None

    def archive(self) -> tuple[bytes | None, str | None]:
        """The directory as a tar (None when it is empty or over the cap), and a note when it
        could not be kept."""
        fingerprint = tree_fingerprint(self.root)
        if fingerprint == self._fingerprint:
            return self._archive, self._note
        self._fingerprint, self._archive, self._note = fingerprint, None, None
        if not any(size for _, size, _ in fingerprint):
            return None, None
        size = sum(size for _, size, _ in fingerprint)
        if size > self.cap:
            self._note = (f"installed packages not kept ({size >> 20} MB of files, over the {self.cap >> 20} MB a "
                          "session keeps): a resumed session will not have them")
            return None, self._note
        buffer = io.BytesIO()
        try:
            with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for name in sorted(os.listdir(self.root)):
                    tar.add(os.path.join(self.root, name), arcname=name)
        except OSError as exc:
            self._note = f"installed packages not kept: {exc.strerror or exc}"
            return None, self._note
        self._archive = buffer.getvalue()
        return self._archive, None

    def restore(self, archive: bytes) -> str | None:
        """Writes a kept archive back under root; a note when it could not be."""
        try:
            os.makedirs(self.root, exist_ok=True)
            with tarfile.open(fileobj=io.BytesIO(archive), mode="r") as tar:
                # The "data" filter: no links out, no devices, no absolute paths (Python 3.12; the
                # linter's stubs are older).
                tar.extractall(self.root, filter="data")  # type: ignore[call-arg]
        except (OSError, tarfile.TarError) as exc:
            return f"installed packages not restored: {exc}"
        self._fingerprint, self._archive, self._note = tree_fingerprint(self.root), archive, None
        return None


def tree_fingerprint(root: str) -> Fingerprint:
    """Every regular file under root with its size and modification time, in a stable order."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            out.append((os.path.relpath(path, root), info.st_size, info.st_mtime_ns))
    return tuple(out)
