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
    """Make sure ``path`` is a directory that only we control; create it (0700) if missing.

    Also refused: a directory above it that another user could change (they could
    swap our directory for a link), and an existing directory holding a link or
    another user's file (planted while it was open to others, and still there after
    a ``chmod``: root would write through it)."""
    check_ancestors(path, what)
    existed = True
    if create:
        _make_parents(path.parent)
        try:
            os.mkdir(path, DIR_MODE)
            existed = False
        except FileExistsError:
            pass
    st = os.lstat(path)
    _check_owned(path, st, what, kind="directory")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{what} {path} is not a directory; choose another path")
    if stat.S_IMODE(st.st_mode) != DIR_MODE:
        os.chmod(path, DIR_MODE)  # ours and not writable by others: only tighten
    if existed:
        _check_entries(path, what)
    return path


def check_ancestors(path: Path, what: str) -> None:
    """Refuse ``path`` when a directory above it (as written, and with links resolved) is
    one another user could change, or a link on the way is another user's: they could
    rename our directory away and put a link in its place, and everything written
    "into the run directory" would land where the link points. Root's and our own
    directories are fine, and so are sticky ones like /tmp (there nobody but an
    entry's owner may rename it)."""
    me = os.geteuid()
    written = Path(os.path.abspath(path))
    for folder in [*reversed(written.parents), written, *reversed(Path(os.path.realpath(written)).parents)]:
        try:
            st = os.lstat(folder)
        except (FileNotFoundError, NotADirectoryError):
            continue  # not there yet: we create it, 0755 at most
        except OSError as exc:  # a link loop, a name too long, a mount that fails: not checkable
            raise UnsafePathError(f"{what} {path}: {folder} on its way cannot be checked "
                                  f"({exc.strerror or exc}); choose another path") from None
        if folder == written and not stat.S_ISLNK(st.st_mode):
            continue  # the directory itself: its owner and mode are checked by its user
        if st.st_uid not in (0, me):
            kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "a directory"
            raise UnsafePathError(
                f"{what} {path}: {folder} on its way is {kind} owned by uid {st.st_uid}, not by you (uid {me}) or "
                f"root: that user could replace what hangwatch writes below it; choose a path under directories only "
                f"you or root control (e.g. your home or /var/tmp)")
        if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise UnsafePathError(
                f"{what} {path}: {folder} on its way is writable by group or others and not sticky (mode "
                f"{stat.S_IMODE(st.st_mode):o}): another user could rename what is below it and put a link in its "
                f"place; `chmod go-w {folder}` or `chmod +t {folder}`, or choose a path under directories only you or "
                "root control")


def _make_parents(folder: Path) -> None:
    """``mkdir -p`` whose new folders are never writable by others, whatever the umask."""
    missing = []
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for new in reversed(missing):
        try:
            os.mkdir(new, 0o755)  # 0755 & ~umask: never group/other-writable
        except FileExistsError:
            pass


# A run directory holds about ten entries; looking at this many bounds the scan.
_MAX_ENTRIES_CHECKED = 4096


def _check_entries(path: Path, what: str) -> None:
    me = os.geteuid()
    with os.scandir(path) as entries:
        for n, entry in enumerate(entries):
            if n >= _MAX_ENTRIES_CHECKED:
                break
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode) or st.st_uid != me:
                why = "a symbolic link" if stat.S_ISLNK(st.st_mode) else f"owned by uid {st.st_uid}, not by you (uid {me})"
                raise UnsafePathError(
                    f"{what} {path} holds {entry.name!r}, {why}: hangwatch never writes through what another user may "
                    f"have planted; remove {Path(entry.path)} if you know what it is, or use a new --run-dir")


def check_trusted_file(path: Path, what: str, why: str) -> None:
    """Refuse a file that decides what hangwatch runs (a config file: ``--notify-command``)
    when someone but us or root could change it, or a directory on its way."""
    check_ancestors(path, what)
    real = Path(os.path.realpath(path))
    st = os.stat(real)
    if not stat.S_ISREG(st.st_mode):
        return  # not a file at all: its reader says what it is instead
    me = os.geteuid()
    if st.st_uid not in (0, me):
        raise UnsafePathError(f"{what} {path} is owned by uid {st.st_uid}, not by you (uid {me}) or root: {why}; "
                              f"use a copy of your own")
    if st.st_mode & 0o022:
        raise UnsafePathError(f"{what} {path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}): "
                              f"{why}; `chmod go-w {real}`")


def _privileged() -> bool:
    """Whether we run with more privilege than the users whose files we might trust (root).

    The import-path and tool checks guard against another user getting our uid through a
    module or a program they can change; a user's own supervisor grants nothing that the
    command it starts as that user (same environment, same PATH) did not already."""
    return os.geteuid() == 0


def check_import_path(pythonpath: str | None) -> None:
    """Refuse a ``PYTHONPATH`` entry another user could change (or put a module in).

    ``PYTHONPATH`` is hangwatch's own import path too, ahead of its site-packages: root
    supervising ``setpriv --reuid=alice python train.py`` with ``PYTHONPATH=/home/alice/proj``
    in its environment (so that the trainer finds its modules) imported, as root, whatever
    alice put there later: the supervisor imports lazily (the report at a capture, apprise
    at an alert) and starts helpers (``notify_exec`` at each alert, a re-armed guardian)
    that import from it, and the trainer, running as alice, writes there (reproduced: a
    module she planted ran with uid 0). Each entry, an empty one meaning the working
    directory, must be ours or root's and not writable by group or others (sticky or not:
    anyone can add a file to ``/tmp``), below directories only we or root control; one that
    does not exist yet must not be creatable by another user.

    Only as root: a user's own supervisor runs the command as that same user, with the
    same PYTHONPATH, so whoever can write an entry already has the trainer's imports (and
    the user's own uid); refusing it there closed nothing and refused a cluster's shared
    group folder (setgid 2775) or a tree made under umask 002."""
    if not pythonpath or not _privileged():
        return
    me = os.geteuid()
    # Both halves: the same PYTHONPATH left in hangwatch's own environment is refused again.
    fix = ("hangwatch imports its own code (and its helpers') from PYTHONPATH; to give it to the command only, "
           "start hangwatch without it and pass it there: env -u PYTHONPATH hangwatch run ... -- "
           "env PYTHONPATH=... COMMAND")
    for entry in pythonpath.split(os.pathsep):
        path = Path(os.path.abspath(entry or os.getcwd()))
        try:
            check_ancestors(path, "PYTHONPATH entry")
        except UnsafePathError as exc:
            raise UnsafePathError(f"{exc}. {fix}") from None
        real = Path(os.path.realpath(path))
        target = real
        while True:
            try:
                st = os.stat(target)
                break
            except (FileNotFoundError, NotADirectoryError):
                if target.parent == target:
                    return
                target = target.parent  # not there yet: who could create it decides
            except OSError as exc:
                raise UnsafePathError(f"PYTHONPATH entry {entry} cannot be checked ({exc.strerror or exc}): "
                                      f"remove it from PYTHONPATH. {fix}") from None
        problem = (f"owned by uid {st.st_uid}, not by you (uid {me}) or root" if st.st_uid not in (0, me)
                   else f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o})" if st.st_mode & 0o022
                   else None)
        if problem is not None:
            shown = entry or f"(empty: the working directory {path})"
            if target != real:
                shown += f" (not there yet; {target}, where it would be made,)"
            elif real != path:
                shown += f" ({real})"
            raise UnsafePathError(f"PYTHONPATH entry {shown} is {problem}: whoever can write there can put a "
                                  f"module in it that hangwatch imports as you. {fix}")


def untrusted_reason(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` (a program we would run) is one another user could change, or None.

    ``check_trusted_file``'s rule (ours or root's, not group/other-writable, below folders
    only we or root control), as a reason instead of an error. Only as root (see
    ``_privileged``): a user's own supervisor runs its tools as that user, from the PATH
    their shell runs them from; passing them over lost every stack of a py-spy installed
    under umask 002 (``~/.local/bin`` 775) or in a group's shared environment."""
    if not _privileged():
        return None
    try:
        check_trusted_file(Path(path), "program", "it would run as you")
    except UnsafePathError as exc:
        return str(exc)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    return None


def trusted_which(name: str, skipped: list[str] | None = None) -> str | None:
    """``shutil.which(name)``, passing over a match another user could change.

    The supervisor runs tools at a capture (py-spy, setpriv, nvidia-smi), often as root. A
    PATH that holds another user's folder (the trainer's venv ``bin``, even appended after
    the system's) had root run the ``py-spy`` they put there (reproduced: it wrote uid 0),
    when hangwatch's own was next to its interpreter. Each match passed over is described in
    ``skipped``."""
    import shutil  # noqa: PLC0415

    for folder in (os.environ.get("PATH") or os.defpath).split(os.pathsep):
        found = shutil.which(name, path=folder or ".")
        if found is None:
            continue
        why = untrusted_reason(found)
        if why is None:
            return found
        if skipped is not None:
            skipped.append(why)
    return None


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
