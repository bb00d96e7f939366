"""The kept batch in a bundle: the engine requests that were in flight when the incident came.

The generator's worker (and the instrumented in-process engine) keep each request's record
as ``inflight-<pid>.json`` in the attempt dir while it runs (``hangwatch.contract.batch``).
At capture time a wedged request's record is still there; ``kept_batches`` turns the records
of the captured tree's processes into bundle files:

* ``batch.json``: the request in flight the longest (a wedged one never returns, so it is the
  oldest), the one ``hangwatch reproduce`` runs;
* ``batches/pid-<pid>.json``: every other one (several ranks' engines in one attempt).

Invariants: only regular files directly in the attempt dir, never through a symlink, each
read with a cap (``MAX_READ_BYTES``), at most ``MAX_RECORDS`` of them; only records of a
process in the captured tree (a dead worker's leftover is not this incident's); every
record redacted (``redact_value``) like the rest of the bundle. A bad record is a problem
line, never a failed capture.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Collection, MutableMapping

from hangwatch.contract.batch import INFLIGHT_NAME, BatchError, read_record
from hangwatch.contract.redact import redact_value
from hangwatch.diagnostics.bundle import dumps_json

#: Records copied into one bundle at most (one per engine-driving process of the tree).
MAX_RECORDS = 16
BATCH_FILE = "batch.json"


def kept_batches(attempt_dir: str | os.PathLike[str] | None,
                 pids: Collection[int] | None = None) -> tuple[dict[str, str], list[str]]:
    """The bundle files for the records in ``attempt_dir`` of processes in ``pids`` (None: any),
    and one line per record that could not be read."""
    if attempt_dir is None:
        return {}, []
    found: list[tuple[int, Path]] = []
    try:
        with os.scandir(attempt_dir) as entries:
            for entry in entries:
                match = INFLIGHT_NAME.match(entry.name)
                if match and entry.is_file(follow_symlinks=False):
                    pid = int(match.group(1))
                    if pids is None or pid in pids:
                        found.append((pid, Path(entry.path)))
    except OSError:
        return {}, []
    records: list[tuple[float, int, dict[str, Any]]] = []
    problems: list[str] = []
    for pid, path in sorted(found)[:MAX_RECORDS]:
        try:
            record = read_record(path)
        except BatchError as exc:
            problems.append(f"pid {pid}: {exc}")
            continue
        wall = record.get("written_at")
        records.append((wall if isinstance(wall, (int, float)) and not isinstance(wall, bool) else float("inf"),
                        pid, record))
    if len(found) > MAX_RECORDS:
        problems.append(f"{len(found) - MAX_RECORDS} more in-flight record(s) left out (at most {MAX_RECORDS})")
    files: dict[str, str] = {}
    for index, (_, pid, record) in enumerate(sorted(records, key=lambda r: (r[0], r[1]))):
        name = BATCH_FILE if index == 0 else f"batches/pid-{pid}.json"
        files[name] = dumps_json(redact_value(record))
    return files, problems


def add_batches(result: tuple[dict[str, str], list[str]] | None, files: MutableMapping[str, Any],
                captured: list[str], failed: MutableMapping[str, str]) -> None:
    """The capture's ``batch`` step's result into the bundle's files and manifest lists."""
    if result is None:
        return
    kept, problems = result
    files.update(kept)
    if kept:
        captured.append("batch")
    if problems:
        failed["batch"] = "; ".join(problems)
