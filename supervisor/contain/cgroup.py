"""Kernel containment: every attempt runs in a cgroup (v2) of its own.

The tree walk (``proctree``) finds members by looking, so it always races with
``fork``: a process forked after the last look, then escaped with ``setsid``
and a double fork, is invisible until the next tick, and if the supervisor dies
in between nobody kills it. A cgroup does not race: the trainer joins the
attempt's cgroup before it execs (``launcher``), every descendant is born in
it whatever it does to its session or group, and one write to ``cgroup.kill``
SIGKILLs all of them atomically with respect to fork.

Where: the cgroup v2 hierarchy's mount point (``/sys/fs/cgroup``, or a hybrid
layout's ``/sys/fs/cgroup/unified``) joined with the cgroup the supervisor
already runs in (``/proc/self/cgroup``), so under systemd, Slurm or Kubernetes
the run's cgroup is a child of the supervisor's own, where that is writable.
Layout: ``<ours>/hangwatch-<run id>/attempt-NNN``.

``detect`` decides once per run: ``cgroup`` demands it (an error otherwise),
``tree`` never uses it, ``auto`` uses it where it works and otherwise says why
(the caller warns once and falls back to the tree walk).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

MODES = ("auto", "cgroup", "tree")
#: bounds on reading cgroup files (cgroup.procs of a huge tree)
_MAX_READ = 1 << 20
#: bounds on the cgroups a trainer made below its attempt's that are read (``AttemptCgroup.pids``)
_MAX_CGROUPS = 256
_MAX_DEPTH = 16


class CgroupError(RuntimeError):
    """No usable cgroup v2 hierarchy (the message says why)."""


def _read(path: Path) -> str:
    with open(path, "rb") as handle:
        return handle.read(_MAX_READ).decode("ascii", "replace")


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def v2_mount(mountinfo: Path = Path("/proc/self/mountinfo")) -> tuple[Path, str] | None:
    """(mount point, root within the hierarchy) of the cgroup2 mount, or None."""
    for line in _read(mountinfo).splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if sep and right.split()[:1] == ["cgroup2"] and len(fields) >= 5:
            return Path(fields[4].replace("\\040", " ")), fields[3]
    return None


def own_cgroup(proc_cgroup: Path = Path("/proc/self/cgroup")) -> str | None:
    """Our cgroup v2 path ("0::/path"), relative to the hierarchy's root."""
    for line in _read(proc_cgroup).splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def base_dir(mountinfo: Path = Path("/proc/self/mountinfo"), proc_cgroup: Path = Path("/proc/self/cgroup")) -> Path:
    """The directory of the cgroup we run in; raises ``CgroupError`` when there is none."""
    mount = v2_mount(mountinfo)
    if mount is None:
        raise CgroupError("no cgroup v2 hierarchy is mounted")
    point, root = mount
    ours = own_cgroup(proc_cgroup)
    if ours is None:
        raise CgroupError("this process is in no cgroup v2 (no 0:: line in /proc/self/cgroup)")
    if root != "/" and (ours == root or ours.startswith(root + "/")):
        ours = ours[len(root):]
    if ours.endswith(" (deleted)"):
        raise CgroupError(f"our cgroup {ours} was deleted")
    return point / ours.lstrip("/")


@dataclass(frozen=True)
class AttemptCgroup:
    """One attempt's cgroup."""

    path: Path

    @property
    def procs_file(self) -> str:
        return str(self.path / "cgroup.procs")

    def pids(self) -> list[int]:
        """Every process in the cgroup and in the cgroups below it: a trainer may make its own
        (a data loader's memory limit, a tool that manages its workers' cgroups). Reading only
        ours missed them: neither sampled nor captured nor given the SIGTERM grace, and their
        cgroup kept ours from being removed. ``cgroup.kill`` and ``populated`` were recursive."""
        found: set[int] = set()
        for level in self._levels():
            try:
                found.update(int(x) for x in _read(level / "cgroup.procs").split())
            except (OSError, ValueError):
                continue
        return sorted(found)

    def _levels(self) -> list[Path]:
        """This cgroup and its descendants, parents before children (bounded: ``_MAX_CGROUPS``
        cgroups, ``_MAX_DEPTH`` levels; cgroupfs holds no symlinks, and none is followed)."""
        levels, frontier = [self.path], [self.path]
        for _ in range(_MAX_DEPTH):
            below = []
            for level in frontier:
                try:
                    with os.scandir(level) as entries:
                        below += [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
                except OSError:
                    continue
            below = below[: max(0, _MAX_CGROUPS - len(levels))]
            if not below:
                break
            levels += below
            frontier = below
        return levels

    def populated(self) -> bool:
        try:
            return "populated 1" in _read(self.path / "cgroup.events")
        except OSError:
            return False

    def usage(self) -> dict[str, float | int | None]:
        """CPU seconds and memory of everything that ran in the attempt (the cgroup's own counters;
        memory only where the memory controller is enabled for it)."""
        out: dict[str, float | int | None] = {"cpu_s": None, "memory_bytes": None, "memory_peak_bytes": None}
        try:
            m = re.search(r"^usage_usec (\d+)", _read(self.path / "cpu.stat"), re.M)
            out["cpu_s"] = round(int(m.group(1)) / 1e6, 3) if m else None
        except OSError:
            pass
        for key, name in (("memory_bytes", "memory.current"), ("memory_peak_bytes", "memory.peak")):
            try:
                out[key] = int(_read(self.path / name).split()[0])
            except (OSError, ValueError, IndexError):
                pass
        return out

    def kill(self) -> bool:
        """SIGKILL everything in the cgroup, atomically with respect to fork."""
        try:
            _write(self.path / "cgroup.kill", "1")
            return True
        except OSError:
            return False

    def remove(self, timeout: float = 2.0) -> bool:
        """rmdir once empty (bounded), the cgroups the trainer made below it first (a cgroup
        with children cannot be removed); False if it still holds processes (state D)."""
        deadline = time.monotonic() + timeout
        while True:
            for level in reversed(self._levels()[1:]):  # children before their parents
                try:
                    os.rmdir(level)
                except OSError:
                    pass  # still populated: the loop tries again
            try:
                os.rmdir(self.path)
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.02)


class Containment:
    """The run's cgroup and one child per attempt."""

    def __init__(self, run_cgroup: Path) -> None:
        self.path = run_cgroup
        self.current: AttemptCgroup | None = None

    @classmethod
    def create(cls, base: Path, run_id: str) -> "Containment":
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", run_id):
            raise CgroupError(f"run id {run_id!r} is not usable as a cgroup name")
        path = base / f"hangwatch-{run_id}-{os.getpid()}"
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            pass
        except OSError as exc:
            raise CgroupError(f"cannot create a cgroup under {base}: {exc.strerror or exc}") from exc
        if not (path / "cgroup.kill").exists():
            os.rmdir(path)
            raise CgroupError(f"{base} has no cgroup.kill (Linux >= 5.14 needed)")
        # Moving the trainer in needs write access to the common ancestor's cgroup.procs
        # (ours) as well as the target's: a trainer that cannot join must not be started.
        if not all(os.access(p / "cgroup.procs", os.W_OK) for p in (base, path)):
            os.rmdir(path)
            raise CgroupError(f"cannot move processes out of {base} (its cgroup.procs is not writable to us)")
        _enable_accounting(path)
        return cls(path)

    def new_attempt(self, name: str) -> AttemptCgroup:
        """A fresh cgroup for one attempt (``name``: the attempt folder's name)."""
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name) or name.startswith("."):
            raise CgroupError(f"attempt name {name!r} is not usable as a cgroup name")
        path = self.path / name
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            pass
        self.current = AttemptCgroup(path)
        return self.current

    def close(self) -> None:
        """Remove the attempts' cgroups that are empty, then the run's."""
        try:
            children = [p for p in self.path.iterdir() if p.is_dir()]
        except OSError:
            return
        for child in children:
            AttemptCgroup(child).remove(timeout=0.5)
        try:
            os.rmdir(self.path)
        except OSError:
            pass  # a survivor in state D keeps it; it is named after the run


def _enable_accounting(run: Path) -> None:
    """Memory (and CPU) figures per attempt where the controllers are available to us:
    the run's cgroup holds no process itself, so it may hand them to its children.
    Best effort: without them the attempt still has cpu.stat, and containment is whole."""
    try:
        available = _read(run / "cgroup.controllers").split()
    except OSError:
        return
    for controller in ("memory", "cpu"):
        if controller in available:
            try:
                _write(run / "cgroup.subtree_control", f"+{controller}")
            except OSError:
                pass


def check_owners(base: Path) -> None:
    """Raise ``CgroupError`` unless ``base`` and every cgroup above it are root's or ours.

    Whoever owns a cgroup above the attempt's (a delegated subtree: systemd chowns a user's
    ``user@UID.service`` to them, and root started from a terminal there stays in it) holds the
    common ancestor's ``cgroup.procs`` for any move below it: they moved root's trainer out of
    its attempt's cgroup into one of their own (reproduced as another user), where its
    ``cgroup.kill`` and ``cgroup.freeze`` are theirs, and the attempt's kill no longer reached
    it. Containment is claimed only where nobody else can undo it."""
    me = os.geteuid()
    level = base
    while (level / "cgroup.procs").exists():
        for path in (level, level / "cgroup.procs"):
            st = os.stat(path)
            if st.st_uid not in (0, me) or (path.name == "cgroup.procs" and st.st_mode & 0o022):
                raise CgroupError(
                    f"the cgroup {level} above the attempts' is controlled by uid {st.st_uid}, who could move "
                    "the trainer's processes out of their cgroup, freeze or kill them; start hangwatch from a "
                    "cgroup only root or you control (a system service, an ssh session)")
        if level.parent == level:
            break
        level = level.parent


def detect(mode: str, run_id: str, base: Path | None = None) -> tuple[Containment | None, str | None]:
    """(containment or None, why not). ``mode`` is auto, cgroup or tree."""
    if mode not in MODES:
        raise ValueError(f"--containment must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "tree":
        return None, "--containment tree"
    try:
        base = base if base is not None else base_dir()
        check_owners(base)
        return Containment.create(base, run_id), None
    except (CgroupError, OSError) as exc:
        if mode == "cgroup":
            raise CgroupError(f"--containment cgroup: {exc}") from exc
        return None, str(exc)


def kill_path(path: str, grace: float = 10.0) -> list[int]:
    """The guardian's kill: ``cgroup.kill`` on a cgroup the supervisor named, wait (bounded
    by ``grace``: exits take a while on a loaded node) until it is empty, remove it.
    Returns the pids that were in it."""
    cg = AttemptCgroup(Path(path))
    if not (cg.path / "cgroup.kill").is_file():
        return []
    pids = cg.pids()
    cg.kill()
    deadline = time.monotonic() + grace
    while cg.populated() and time.monotonic() < deadline:
        time.sleep(0.02)
    cg.remove(timeout=max(0.5, deadline - time.monotonic()))
    try:
        os.rmdir(cg.path.parent)  # the run's cgroup, if this was its last attempt
    except OSError:
        pass
    return pids


def kill_stale(run_id: str, base: Path | None = None) -> list[int]:
    """``--resume``: kill what is left in the cgroups of this run's dead supervisors
    (their guardian died too, say the whole node's OOM kill) and remove them."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", run_id):
        return []
    try:
        base = base if base is not None else base_dir()
        runs = [p for p in base.glob(f"hangwatch-{run_id}-*") if p.is_dir() and not p.is_symlink()]
    except (CgroupError, OSError):
        return []
    killed: list[int] = []
    for run in runs:
        for attempt in sorted(p for p in run.iterdir() if p.is_dir()):
            killed += kill_path(str(attempt))
        try:
            os.rmdir(run)
        except OSError:
            pass
    return killed
