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
    fd = open_regular(path, follow_symlinks=follow_symlinks)
    try:
        st = os.fstat(fd)
        if st.st_size > limit:
            raise FileTooLarge(errno.EFBIG, f"{human_bytes(st.st_size)}, over the {human_bytes(limit)} {what}",
                               str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> int:
    """A read-only descriptor of ``path`` if it is a regular file, else ``NotRegularFile``
    (a symlink, when not followed: ``ELOOP``, as ``O_NOFOLLOW`` says it).

    A device is never opened, even for an instant: the path is opened ``O_PATH`` (which
    runs no driver's open) and checked, and only a regular file is then opened for
    reading, through ``/proc/self/fd`` (the same inode, so a link swapped in meanwhile
    changes nothing). Checking the path and then opening it raced: another user who
    can write where the path points (a checkpoint folder) flipped a link between a
    file and their pseudo-terminal, and root's supervisor, a session leader without
    a terminal as under systemd, took it as its controlling terminal (then ^C from them
    was a SIGINT to it); a ``/dev/watchdog`` opened and closed may reboot the node.
    """
    nofollow = 0 if follow_symlinks else os.O_NOFOLLOW
    try:
        probe = os.open(path, os.O_PATH | os.O_CLOEXEC | nofollow)
    except AttributeError:  # no O_PATH (not Linux): a non-blocking open, checked after
        probe = None
    if probe is None:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY | nofollow)
        _check_regular(fd, path, close=True)
        return fd
    try:
        _check_regular(probe, path, close=False)
        try:
            return os.open(f"/proc/self/fd/{probe}", os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
        except FileNotFoundError:  # no /proc here: the regular file's own path, checked again
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY | nofollow)
            _check_regular(fd, path, close=True)
            return fd
    finally:
        os.close(probe)


def _check_regular(fd: int, path: str | os.PathLike[str], *, close: bool) -> None:
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        return
    if close:
        os.close(fd)
    if stat.S_ISLNK(mode):  # O_PATH | O_NOFOLLOW opened the link itself
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
    raise NotRegularFile(errno.EINVAL, f"not a regular file (it is {describe_kind(mode)})", str(path))


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

