"""The supervisor's instructions to a running trainer: one small JSON file beside the heartbeat.

Used by the engine-level recovery (level 1): before the supervisor kills a wedged
rollout-engine worker, it writes here which cuda-graph policy the engine must
restart with. The trainer-side generator reads it when its worker dies under
it, restarts the worker with that policy and retries the batch. The trainer
never writes here, and the supervisor never talks to the engine directly.

    {"seq": 1, "action": "restart_engine", "cudagraphs": "off", "enforce_eager": false,
     "reason": "...", "attempt": 1}

``seq`` grows with every instruction, so a reader acts on each one once. The
file is replaced atomically, 0600, never through a symlink; a reader caps what
it reads.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

MAX_BYTES = 64 * 1024


def write_control(path: Path, record: dict[str, Any]) -> None:
    """Replace the control file with ``record`` (atomically: a reader sees the old or the new one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, json.dumps(record).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_control(path: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    """The current instruction, or None (no file, unreadable, or not an instruction)."""
    if not path:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block
    except OSError:
        return None
    try:
        data = os.read(fd, MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        return None
    try:
        record = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("seq"), int) else None
