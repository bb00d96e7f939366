"""What keeps a run of days bounded on disk: incident retention, the free-space
watch, and a rate limit for journal records a trainer can trigger every tick.

Each piece is a small decision over injected inputs (a clock, a statvfs, a
directory listing), so tests drive them without waiting or filling a disk.
The runner calls them; nothing here signals a process or touches a checkpoint.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

#: trainer logs are cut to this (head + tail) while the disk is low: logs give way first
LOW_DISK_LOG_BYTES = 1024 * 1024


class HeapTrim:
    """Hands freed heap memory back to the kernel every ``every_s`` (10) seconds (glibc only).

    Measured: with every Python object of the supervisor accounted for
    (tracemalloc flat over minutes), its RSS still rose ~8 KB/s at a 5 ms
    tick, memory that glibc's allocator had freed but kept (``malloc_trim``
    returned 1.2 MB of it at once, and with it every 10 s the RSS stayed
    flat). One call costs well under a millisecond; elsewhere it is a no-op.
    """

    def __init__(self, clock: Callable[[], float], every_s: float = 10.0) -> None:
        self._clock = clock
        self._every = every_s
        self._next = clock() + every_s
        self._trim = _malloc_trim()

    def maybe(self) -> None:
        if self._trim is None:
            return
        now = self._clock()
        if now >= self._next:
            self._next = now + self._every
            self._trim(0)


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None


class RecordBudget:
    """A token bucket for records the trainer drives (``trainer_info``).

    ``beat(loss=...)`` on every step would otherwise put one fsynced journal
    line per tick in the journal, which must grow with events, not ticks. The
    first ``burst`` changes go through at once (policy reports, a few startup
    notes); after that one record per ``every_s`` seconds, the latest value
    winning (``due`` says whether to write it now).
    """

    def __init__(self, clock: Callable[[], float], *, burst: int = 10, every_s: float = 60.0) -> None:
        self._clock = clock
        self._burst = burst
        self._every = every_s
        self._tokens = float(burst)
        self._at = clock()

    def due(self) -> bool:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) / self._every)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


@dataclass(frozen=True)
class Bundle:
    path: Path
    signature: str | None


def _bundles(incidents: Path) -> list[Bundle]:
    """The run's incident bundles, oldest first: their names start with the UTC time of the
    incident (docs/bundle-format.md), which rewriting a report inside one does not change."""
    found = []
    try:
        entries = list(os.scandir(incidents))
    except OSError:
        return []
    for entry in entries:
        # Only finished bundles (a capture renames its temporary folder into place).
        if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
            continue
        manifest = Path(entry.path) / "manifest.json"
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not a bundle we understand: never delete it
        found.append(Bundle(Path(entry.path), _signature(data)))
    found.sort(key=lambda b: b.path.name)
    return found


def _signature(manifest: Any) -> str | None:
    classification = manifest.get("classification") if isinstance(manifest, dict) else None
    if isinstance(classification, dict):
        value = classification.get("signature_id")
        if isinstance(value, str) and value:
            return value
    return None


def choose_pruned(bundles: list[Bundle], keep: int) -> list[Bundle]:
    """Every bundle that is neither among the newest ``keep`` nor the first of its signature.

    Pure: ``bundles`` oldest first. The first bundle of each signature is the
    one a maintainer compares a new failure against, so it stays on top of the
    ``keep`` newest (counting it in ``keep`` would let a run with many
    signatures delete each new bundle as it is written); bundles without a
    signature are kept only while they are among the newest.
    """
    if keep < 1 or len(bundles) <= keep:
        return []
    seen: set[str] = set()
    firsts: set[Path] = set()
    for b in bundles:
        if b.signature is not None and b.signature not in seen:
            seen.add(b.signature)
            firsts.add(b.path)
    return [b for b in bundles[:-keep] if b.path not in firsts]


def prune_incidents(incidents: Path, keep: int) -> list[dict[str, Any]]:
    """Remove the bundles ``choose_pruned`` picks; returns what was removed (for the journal).

    Only folders directly under ``RUN_DIR/incidents`` that hold a readable
    ``manifest.json`` are candidates, so a checkpoint directory (or anything
    else a user keeps there) is never touched.
    """
    removed = []
    for b in choose_pruned(_bundles(incidents), keep):
        try:
            shutil.rmtree(b.path)
        except OSError:
            continue
        removed.append({"bundle": b.path.name, "signature": b.signature})
    return removed


@dataclass(frozen=True)
class DiskReading:
    free_mb: float
    low: bool
    newly_low: bool  # the first reading under the threshold in this run: warn now


class DiskWatch:
    """Free space on the run dir's filesystem, read at most every ``every_s`` seconds.

    ``low`` stays true until the free space is back above the threshold plus
    10 % (no flapping at the edge); the warning is given once per run.
    """

    def __init__(self, path: Path, min_free_mb: float, clock: Callable[[], float] = time.monotonic, *,
                 every_s: float = 1.0, statvfs: Callable[[Path], os.statvfs_result] = os.statvfs) -> None:
        self.path = path
        self.min_free_mb = min_free_mb
        self._clock = clock
        self._every = every_s
        self._statvfs = statvfs
        self._next = float("-inf")
        self.low = False
        self.warned = False

    def check(self) -> DiskReading | None:
        """A reading when one is due (and the threshold is on), else None."""
        if self.min_free_mb <= 0:
            return None
        now = self._clock()
        if now < self._next:
            return None
        self._next = now + self._every
        try:
            st = self._statvfs(self.path)
        except OSError:
            return None
        free_mb = st.f_bavail * st.f_frsize / (1024 * 1024)
        if free_mb < self.min_free_mb:
            self.low = True
        elif free_mb > self.min_free_mb * 1.1:
            self.low = False
        newly = self.low and not self.warned
        self.warned = self.warned or self.low
        return DiskReading(round(free_mb, 1), self.low, newly)
