"""The run journal: every decision, one JSON object per line, appended with fsync.

Append-only and fsynced per record, so after a crash (of the supervisor, the
machine, the disk) every decision that was acted on is on disk, and a reader
at most sees a torn last line, which ``read_journal`` skips.

Schema (all records have ``event``, ``ts`` (wall-clock seconds) and
``run_id``); see docs/journal.md for the fields of each event.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterator

EVENTS = (
    "run_started",
    "run_resumed",
    "attempt_started",
    "first_heartbeat",
    "trainer_info",
    "incident",
    "capture",
    "kill",
    "gpu_released",
    "attempt_ended",
    "restart_scheduled",
    "run_finished",
)


class JournalError(RuntimeError):
    """The journal could not be written; the supervisor cannot keep its record."""


class Journal:
    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        if event not in EVENTS:
            raise ValueError(f"unknown journal event {event!r}")
        record = {"event": event, "ts": round(time.time(), 4), "run_id": self.run_id, **fields}
        line = json.dumps(record, default=str, separators=(",", ":")) + "\n"
        with self._lock:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, line.encode())
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise JournalError(f"cannot append to {self.path}: {exc}") from exc
        return record


def read_journal(path: Path) -> list[dict[str, Any]]:
    return list(iter_journal(path))


def iter_journal(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                # A torn last line after a crash mid-write; every earlier line is whole.
                continue
            if isinstance(record, dict) and "event" in record:
                yield record
