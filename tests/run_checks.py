"""Checks every end-to-end test can apply to a finished run: the journal is whole and
ordered, and checkpoints were not touched."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def snapshot(directory: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``directory``: (mtime_ns, size, sha256), by relative path."""
    out = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            st = path.stat()
            out[str(path.relative_to(directory))] = (st.st_mtime_ns, st.st_size, hashlib.sha256(path.read_bytes()).hexdigest())
        elif path.is_dir():
            out[str(path.relative_to(directory)) + "/"] = (path.stat().st_mtime_ns, 0, "")
    return out


def check_journal(run_dir: Path, *, supervisor_killed: bool = False) -> list[dict]:
    """Every line parses and has event/ts/run_id; one run_id; attempts paired; run_finished last."""
    lines = (run_dir / "journal.jsonl").read_text().splitlines()
    assert lines, "empty journal"
    records = []
    for n, line in enumerate(lines, 1):
        try:
            r = json.loads(line)
        except ValueError as exc:
            raise AssertionError(f"journal line {n} does not parse: {line!r}") from exc
        for key in ("event", "ts", "run_id"):
            assert key in r, f"journal line {n} has no {key!r}: {r}"
        records.append(r)
    assert len({r["run_id"] for r in records}) == 1, "several run_ids"
    ts = [r["ts"] for r in records]
    assert ts == sorted(ts), "journal timestamps go backwards"
    started = [r["attempt"] for r in records if r["event"] == "attempt_started"]
    ended = [r["attempt"] for r in records if r["event"] == "attempt_ended"]
    finished = [r for r in records if r["event"] == "run_finished"]
    if supervisor_killed:
        assert not finished
        assert ended == started[: len(ended)]
    else:
        assert started == ended, f"attempt_started {started} vs attempt_ended {ended}"
        # An alert about the end can only fail after it (notify_failed); nothing else may follow.
        decisions = [r for r in records if r["event"] != "notify_failed"]
        assert len(finished) == 1 and decisions[-1]["event"] == "run_finished", "run_finished must be last, once"
    for r in records:
        if r["event"] == "incident":
            following = [x for x in records if x["event"] in ("capture", "kill") and x.get("attempt") == r["attempt"]]
            assert [x["event"] for x in following][:2] == ["capture", "kill"], "incident without capture then kill"
    return records
