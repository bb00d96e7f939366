"""Atomic writes: a reader sees the old content or the new, never half of either.

Both helpers write into a hidden temporary sibling (same directory, so the rename
is atomic), fsync it, rename it into place and fsync the directory; on any
failure (a full disk) the temporary is removed and the error re-raised, so
nothing half-written is left behind. ``durable=False`` skips the fsyncs: still
all-or-nothing for a reader, but not kept through a power loss; for a record
that only matters while its writer lives (a request in flight), where the two
fsyncs were most of the cost of a write.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator, Mapping

from hangwatch.contract.private import open_private


@contextlib.contextmanager
def replacing(path: Path, mode: int = 0o600, *, durable: bool = True) -> Iterator[BinaryIO]:
    """Yield a binary handle whose content replaces ``path`` when the block ends cleanly.

    The temporary is created O_EXCL (a planted symlink cannot redirect it) and the
    rename replaces a symlink at ``path`` rather than following it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            # By descriptor: in a directory others can write, the name could be a link by now.
            os.fchmod(handle.fileno(), mode)
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)


def write_file(path: Path, data: bytes, mode: int = 0o600, *, durable: bool = True) -> Path:
    with replacing(path, mode, durable=durable) as handle:
        handle.write(data)
    return path


def write_dir(final: Path, files: Mapping[str, bytes], mode: int = 0o700) -> Path:
    """Create the directory ``final`` holding ``files`` (relative path -> bytes).

    If ``final`` exists (two incidents in one second), ``-2``, ``-3``, ... is
    appended. Returns the path written.
    """
    final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        for name, data in files.items():
            path = tmp / name
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(path, "wb", opener=_new_private) as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(tmp, mode)  # mkdtemp makes it 0700
        target = _free_name(final)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(final.parent)
    return target


def _new_private(path: str, _flags: int) -> int:
    """``open``'s opener: a new file (O_EXCL, O_NOFOLLOW), 0600 whatever the umask."""
    return open_private(Path(path), os.O_WRONLY, new=True)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _free_name(final: Path) -> Path:
    if not final.exists():
        return final
    for n in range(2, 1000):
        candidate = final.with_name(f"{final.name}-{n}")
        if not candidate.exists():
            return candidate
    raise FileExistsError(final)
