"""Files and folders that only their owner controls: the run directory and what is in it.

hangwatch often runs as root. Everything it writes into a run directory
(journal, tree, settings, logs, bundles) would be an attack surface if another
local user could touch it: a symlinked ``journal.jsonl`` makes root append to a
file of the attacker's choice, a planted ``settings.json`` chooses the command a
``--resume`` launches. So:

* a run directory must be owned by the effective user and writable by nobody
  else (``private_dir`` refuses it otherwise, saying why and how to fix it), and
  is tightened to 0700;
* files are opened with ``O_NOFOLLOW`` (``O_EXCL`` where they must be new) and
  end up 0600 whatever the umask (``open_private``);
* files read back on ``--resume`` are checked first (``check_private_file``).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from hangwatch.contract.errors import ConfigError

FILE_MODE = 0o600
DIR_MODE = 0o700


class UnsafePathError(ConfigError):
    """A path another user could control; the message says why and how to fix it."""


def private_dir(path: Path, what: str = "run directory", *, create: bool = True) -> Path:
    """Make sure ``path`` is a directory that only we control; create it (0700) if missing."""
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(path, DIR_MODE)
        except FileExistsError:
            pass
    st = os.lstat(path)
    _check_owned(path, st, what, kind="directory")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{what} {path} is not a directory; choose another path")
    if stat.S_IMODE(st.st_mode) != DIR_MODE:
        os.chmod(path, DIR_MODE)  # ours and not writable by others: only tighten
    return path


def check_private_file(path: Path, what: str) -> None:
    """Refuse to trust ``path`` unless it is a regular file of ours that nobody else can write."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"{what} {path} is a symbolic link; hangwatch never follows links in a run "
                              "directory (another user may have planted it): remove it or start a new --run-dir")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(f"{what} {path} is not a regular file; remove it or start a new --run-dir")
    _check_owned(path, st, what, kind="file")


def open_private(path: Path, flags: int, *, new: bool = False) -> int:
    """``os.open`` that never follows a symlink and leaves a file of ours at 0600.

    ``new``: the file must not exist yet (``O_EXCL``). An existing file must be a
    regular file owned by the effective user; anything else raises ``OSError``.
    """
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    if new:
        flags |= os.O_CREAT | os.O_EXCL
    fd = os.open(path, flags, FILE_MODE)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise OSError(errno.EPERM, "not a regular file owned by us (refusing to write it)", str(path))
        if stat.S_IMODE(st.st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)  # the umask, or a file from an older version
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_owned(path: Path, st: os.stat_result, what: str, kind: str) -> None:
    me = os.geteuid()
    if st.st_uid != me:
        raise UnsafePathError(
            f"{what} {path} is owned by uid {st.st_uid}, not by you (uid {me}): whoever owns it could "
            f"redirect or replace what hangwatch writes there; use a new --run-dir, or "
            f"`chown {me} {path}` if it really is yours")
    if st.st_mode & 0o022:
        raise UnsafePathError(
            f"{what} {path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}): another user "
            f"could plant files in it; `chmod go-w {path}` (hangwatch keeps it 0700) or use a new --run-dir"
            if kind == "directory" else
            f"{what} {path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}); "
            f"`chmod 600 {path}` if its content is yours, or start a new --run-dir")
