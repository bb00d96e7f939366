"""``RUN_DIR/tree.json``: the tree's members (pid + create time), kept current.

It exists for the case the supervisor cannot handle itself: being SIGKILLed.
A later ``hangwatch run --resume RUN_DIR`` reads it (once it has checked that
the file is ours and nobody else could write it) to find what the dead
supervisor was watching, and kills exactly those processes (still verified by
create time, so a reused pid is never hit). The guardian gets the same list
over its pipe instead (``guardian.Guardian.send``), never from this file.

Rewritten (atomically) only when membership changes, not on every tick.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

import psutil

from hangwatch.contract import atomic
from hangwatch.contract.capped import read_capped
from hangwatch.contract.procid import ProcKey, kill_verified, same_process


class TreeFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._last: frozenset[ProcKey] | None = None

    def update(self, members: Iterable[psutil.Process]) -> bool:
        """Record ``members``; True when they changed since the last call."""
        keys = set()
        for proc in members:
            try:
                keys.add(ProcKey.of(proc))
            except psutil.Error:
                continue
        frozen = frozenset(keys)
        if frozen == self._last:
            return False
        self._last = frozen
        data = [{"pid": k.pid, "create_time": k.create_time} for k in sorted(frozen)]
        try:
            # 0600, through an O_EXCL temporary: a planted symlink is replaced, never followed.
            atomic.write_file(self.path, json.dumps({"supervisor_pid": os.getpid(), "members": data}).encode())
        except OSError:
            self._last = None  # try again next tick (a full disk may clear)
        return True


def recorded(path: Path) -> list[ProcKey]:
    try:
        # Capped (a tree is a few hundred members) and never through a link or a FIFO.
        data = json.loads(read_capped(path, MAX_TREE_BYTES, follow_symlinks=False))
        return [ProcKey(int(m["pid"]), float(m["create_time"])) for m in data.get("members", [])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError):
        return []


MAX_TREE_BYTES = 16 << 20


def kill_recorded(path: Path, grace: float = 2.0) -> list[int]:
    """SIGKILL every recorded member that is still the same process. Returns their pids."""
    procs = [p for p in (same_process(k) for k in recorded(path)) if p is not None]
    kill_verified(procs, grace)
    return [p.pid for p in procs]
