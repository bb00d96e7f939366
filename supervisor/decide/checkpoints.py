"""Choosing the checkpoint to resume from: the newest *complete* one.

transformers' ``get_last_checkpoint`` takes the highest-numbered folder
whether or not its save finished; a wedge or a kill during a save leaves
exactly such a folder. Here a checkpoint counts only when its completeness
marker exists and, for a JSON marker, parses. Incomplete ones are reported
and skipped, never touched: this module only reads.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from hangwatch.contract.capped import FileTooLarge, open_regular, read_capped

DEFAULT_GLOB = "checkpoint-*"
DEFAULT_MARKER = "trainer_state.json"

_STEP = re.compile(r"(\d+)(?!.*\d)")
# A step is a count of optimizer steps: one past this is a name, not a step. The trainer's user
# names the folders, and the journal's readers skip a record whose step no counter reaches
# (``contract.journal``): ``checkpoint-99999999999999999999`` erased every attempt's end from
# ``hangwatch status`` ("left open", no exit code) and from ``--resume``'s view of the run.
MAX_STEP = (1 << 63) - 1


@dataclass(frozen=True)
class CheckpointSpec:
    directory: Path
    glob: str = DEFAULT_GLOB
    marker: str = DEFAULT_MARKER


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int | None
    complete: bool
    problem: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"path": str(self.path), "step": self.step, "complete": self.complete, "problem": self.problem}


class CheckpointsUnreadable(Exception):
    """The checkpoint directory exists but cannot be listed (permissions, a stale NFS handle, an
    I/O error). Not "no checkpoints": a trainer relaunched from scratch would save over them."""


def scan(spec: CheckpointSpec) -> list[Checkpoint]:
    """All candidates, newest first (by the number in the name, then mtime).

    A directory that does not exist yet has none; one that cannot be listed raises
    ``CheckpointsUnreadable`` (``Path.glob`` would have said "none" without a word)."""
    return list(_judged(spec))


def newest_complete(spec: CheckpointSpec) -> tuple[Checkpoint | None, list[Checkpoint]]:
    """The newest complete checkpoint and the newer incomplete ones skipped on the way.

    Only those are judged, newest first: each judgement parses the marker, and HF's
    ``trainer_state.json`` holds the whole log history (MiBs on a long run). Judging every
    checkpoint, as ``scan`` does, took 18.7 s for 200 checkpoints of 2.9 MB at every attempt's
    end and again at the next one's start, on the path from a kill to the relaunch."""
    skipped = []
    for candidate in _judged(spec):
        if candidate.complete:
            return candidate, skipped
        skipped.append(candidate)
    return None, skipped


def complete_steps(spec: CheckpointSpec, limit: int) -> list[int]:
    """The steps of the newest ``limit`` complete checkpoints, newest first, judged newest down
    (what a node tells its cohort: judging every marker, as ``scan`` does, cost seconds between
    the kill and the relaunch on a long run)."""
    steps: list[int] = []
    if limit <= 0:
        return steps
    for candidate in _judged(spec, lambda step: step is not None and step not in steps):
        if candidate.complete and candidate.step is not None:
            steps.append(candidate.step)
            if len(steps) >= limit:
                break
    return steps


def complete_at(spec: CheckpointSpec, step: int | None) -> Checkpoint | None:
    """The newest complete checkpoint of ``step`` (the one a cohort agreed on), or None;
    only the folders of that step are judged."""
    if step is None:
        return None
    return next((c for c in _judged(spec, lambda at: at == step) if c.complete), None)


def _judged(spec: CheckpointSpec, wanted: Callable[[int | None], bool] = lambda step: True) -> Iterator[Checkpoint]:
    """The candidates whose step is ``wanted``, newest first, each judged (its marker read) only
    as the caller comes to it."""
    for path, step in _candidates(spec):
        if wanted(step):
            problem = _incomplete(path, spec.marker)
            yield Checkpoint(path, step, problem is None, problem)


def _candidates(spec: CheckpointSpec) -> list[tuple[Path, int | None]]:
    """(folder, step) of every checkpoint folder, newest first, none of them judged yet."""
    try:
        with os.scandir(spec.directory):
            pass
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CheckpointsUnreadable(f"cannot list the checkpoint directory {spec.directory}: "
                                    f"{exc.strerror or exc}") from exc
    found = []
    for path in _glob(spec.directory, spec.glob):
        if not path.is_dir() or path.name.startswith("."):
            continue
        match = _STEP.search(path.name)
        step = int(match.group(1)) if match else None  # a name is at most 255 bytes: int() is cheap
        if step is not None and step > MAX_STEP:
            step = None
        try:
            mtime = path.stat().st_mtime
        except OSError:
            mtime = 0.0
        found.append((step if step is not None else -1, mtime, path, step))
    found.sort(key=lambda f: (f[0], f[1]), reverse=True)
    return [(path, step) for _, _, path, step in found]


#: how deep ``**`` goes below the checkpoint directory (a folder nested thousands deep is no run's)
_MAX_GLOB_DEPTH = 32


def _glob(directory: Path, pattern: str) -> list[Path]:
    """``directory.glob(pattern)``, but a folder that goes away while it is walked is skipped.

    With a nested glob (``run-*/checkpoint-*``, ``**/checkpoint-*``) ``Path.glob`` lists each
    folder it descends into, and raised anything but a ``PermissionError`` out of the walk: a
    checkpoint the trainer's rotation (``save_total_limit``) deleted between the listing and
    the descent (``FileNotFoundError``), or a link the trainer's user put there to a folder
    that cannot be listed (a zombie's ``/proc/PID/net``: ``EINVAL``), was an internal error,
    exit 70, between two attempts, and the run was not relaunched. Now a folder that is gone
    or unreadable is skipped like pathlib skips one without permission, and a failure of
    another kind below the checkpoint directory is ``CheckpointsUnreadable``, which names it.
    As with ``Path.glob``, ``**`` never descends through a link; every name matches
    case-sensitively, dot-names included."""
    parts = [part for part in Path(pattern).parts if part not in ("", ".")]
    found: dict[str, Path] = {}

    def entries(folder: str) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(folder) as it:
                return list(it)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return []  # removed while we walked, replaced by a file, or not ours to list
        except OSError as exc:
            if folder == str(directory):
                raise
            raise CheckpointsUnreadable(f"cannot list {folder} below the checkpoint directory: "
                                        f"{exc.strerror or exc}") from exc

    def is_dir(entry: os.DirEntry[str], *, follow: bool = True) -> bool:
        try:
            return entry.is_dir(follow_symlinks=follow)
        except OSError:
            return False

    def walk(folder: str, i: int, depth: int) -> None:
        if i == len(parts):
            found.setdefault(folder, Path(folder))
            return
        part = parts[i]
        if part == "**":
            walk(folder, i + 1, depth)
            if depth < _MAX_GLOB_DEPTH:
                for entry in entries(folder):
                    if is_dir(entry, follow=False):
                        walk(entry.path, i, depth + 1)
            return
        for entry in entries(folder):
            if fnmatch.fnmatchcase(entry.name, part) and (i + 1 == len(parts) or is_dir(entry)):
                walk(entry.path, i + 1, depth + 1)

    walk(str(directory), 0, 0)
    return list(found.values())


def _incomplete(path: Path, marker: str) -> str | None:
    marker_path = path / marker
    if not marker_path.is_file():
        return f"no {marker} (save did not finish)"
    if marker_path.suffix == ".json":
        try:
            raw = read_capped(marker_path, MAX_MARKER_PARSE_BYTES)
            if raw.count(b"{") + raw.count(b"[") + raw.count(b",") > MAX_MARKER_VALUES:
                return _incomplete_tail(marker_path, marker)
            # Only whether it parses matters: objects are dropped as they are read, never kept.
            json.loads(raw, object_pairs_hook=_dropped)
        except FileTooLarge:
            return _incomplete_tail(marker_path, marker)
        except (OSError, ValueError, RecursionError) as exc:
            return f"{marker} unreadable: {exc}"
    return None


# The trainer (maybe another user) writes the marker: it is parsed whole only up to this
# size (HF's trainer_state.json holds the log history: MiBs on a long run); a larger one
# is judged by its last bytes, so a 3 GiB sparse file cannot take the supervisor's memory.
MAX_MARKER_PARSE_BYTES = 64 << 20
# Nor one of more values than this (a `{`, `[` or `,` each, counted before parsing): 64 MiB
# of `[{},{},...]`, parsed, was a 1.7 GB peak in the supervisor between two attempts. HF's
# log history is a few values per logged step: a million is far past a real one of 64 MiB.
MAX_MARKER_VALUES = 1 << 20


def _dropped(pairs: object) -> None:
    return None


def _incomplete_tail(marker_path: Path, marker: str) -> str | None:
    """A JSON document too large to parse: complete if it ends like one (a torn write does not)."""
    try:
        fd = open_regular(marker_path)  # the trainer's user may have swapped in a link to a device since
        try:
            tail = os.pread(fd, 4096, max(0, os.fstat(fd).st_size - 4096)).rstrip()
        finally:
            os.close(fd)
    except OSError as exc:
        return f"{marker} unreadable: {exc}"
    return None if tail.endswith((b"}", b"]")) else f"{marker} does not end like a whole JSON document"
