"""Reading a file someone else may have made: never blocks, never reads without a cap.

A path a user names (``--config``), or one found in a run directory, a checkpoint
or a bundle, can be a FIFO (``open`` waits forever for a writer), a device such
as ``/dev/zero`` (a read never ends), or a sparse file of many GiB (a whole read
exhausts memory). ``read_capped`` opens without blocking, accepts only a regular
file, and reads at most ``limit`` bytes; anything else is an ``OSError`` whose
message says what the file is and what was expected, so every caller's existing
``except OSError`` turns it into a clear error.
"""

from __future__ import annotations

import errno
import os
import stat


class NotRegularFile(OSError):
    """A FIFO, device, socket or directory where a regular file was expected."""


class FileTooLarge(OSError):
    """A file over the size its reader allows."""


def open_capped(path: str | os.PathLike[str], limit: int, *, follow_symlinks: bool = True,
                what: str = "allowed") -> int:
    """A descriptor of the regular file ``path`` (opened without blocking: a FIFO never makes
    us wait), refused if it is over ``limit`` bytes; the caller closes it. ``what`` ends the
    refusal: "over the 1.0 GiB {what}"."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(errno.EINVAL, f"not a regular file (it is {describe_kind(st.st_mode)})", str(path))
        if st.st_size > limit:
            raise FileTooLarge(errno.EFBIG, f"{human_bytes(st.st_size)}, over the {human_bytes(limit)} {what}",
                               str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_capped(path: str | os.PathLike[str], limit: int, *, follow_symlinks: bool = True) -> bytes:
    """The whole content of the regular file ``path``, refused if it is over ``limit`` bytes."""
    fd = open_capped(path, limit, follow_symlinks=follow_symlinks)
    try:
        chunks: list[bytes] = []
        total = 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:  # it grew while we read
            raise FileTooLarge(errno.EFBIG, f"over the {human_bytes(limit)} allowed", str(path))
        return b"".join(chunks)
    finally:
        os.close(fd)


def describe_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"

