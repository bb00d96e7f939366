"""Is the owner of a leftover file or directory certainly dead?

Sweepers (staging files in /dev/shm, runtime dirs in /tmp) used to decide from
the pid in the name alone. That is wrong across PID namespaces (a container
sharing /dev/shm: the pid means nothing here), and following a name in a
world-writable directory can follow someone else's symlink.

So an owner holds a shared ``flock`` on its file (or directory) for as long as
it lives (``hold``); the kernel drops it however the owner dies, in whatever
namespace. ``abandoned`` says yes only when everything agrees: a real file or
directory (never a symlink) owned by us, whose lock nobody holds, named after a
pid that does not exist here either (files of older versions hold no lock).
"""

from __future__ import annotations

import fcntl
import os
import stat
import threading

from hangwatch.contract.procid import pid_exists

_held: dict[str, int] = {}
_lock = threading.Lock()


def hold(path: str, fd: int | None = None) -> None:
    """Hold a shared lock on ``path`` for this process's life (or until ``release``)."""
    own = fd is None
    if fd is None:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    else:
        fd = os.dup(fd)
        os.set_inheritable(fd, False)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:
        os.close(fd)
        if own:
            raise
        return
    with _lock:
        old = _held.pop(path, None)
        _held[path] = fd
    if old is not None:
        os.close(old)


def release(path: str) -> None:
    with _lock:
        fd = _held.pop(path, None)
    if fd is not None:
        os.close(fd)


def abandoned(path: str, pid: int, *, directory: bool = False) -> int | None:
    """An fd holding the exclusive lock on ``path`` when its owner is certainly dead
    (the caller removes it, then closes the fd); None when it may be alive or is not ours."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    if not kind_ok or st.st_uid != os.geteuid():
        return None  # a symlink, a FIFO, or someone else's: never ours to judge
    if pid_exists(pid):
        return None
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | (os.O_DIRECTORY if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if (os.fstat(fd).st_ino, os.fstat(fd).st_dev) != (st.st_ino, st.st_dev):
            raise OSError("replaced since the look")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None  # the lock is held: the owner lives, maybe in another pid namespace
    return fd
