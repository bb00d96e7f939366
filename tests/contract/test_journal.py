"""The journal: appends that survive a torn or short write, and records a reader skips."""

from __future__ import annotations

import json
import os
import subprocess
import shutil

import pytest

from hangwatch.contract.journal import Journal, read_journal
from hangwatch.contract.journal import JournalError


pytestmark = pytest.mark.timeout(30)


def test_journal_appends_and_survives_a_torn_last_line(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl", "r1")
    journal.append("run_started", pid=1)
    journal.append("attempt_started", attempt=1, pid=2, env={})
    with open(tmp_path / "journal.jsonl", "a") as f:
        f.write('{"event": "kill", "ts"')  # crash mid-write
    records = read_journal(tmp_path / "journal.jsonl")
    assert [r["event"] for r in records] == ["run_started", "attempt_started"]
    assert all("ts" in r and r["run_id"] == "r1" for r in records)
    assert oct(os.stat(tmp_path / "journal.jsonl").st_mode & 0o777) == "0o600"
    with pytest.raises(ValueError):
        journal.append("made_up_event")


@pytest.fixture
def small_tmpfs(tmp_path):
    """An 8 KiB tmpfs (two pages); skipped where mounting is not allowed."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k,mode=0700", "tmpfs", str(mnt)],
                          capture_output=True, timeout=10)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], timeout=10)


@pytest.mark.timeout(30)
def test_short_journal_write_on_a_full_tmpfs_is_truncated_back(small_tmpfs):
    (small_tmpfs / "filler").write_bytes(b"f" * 4096)  # one of the two pages
    journal = Journal(small_tmpfs / "journal.jsonl", "run1")
    journal.append("run_started", pad="x" * 1500)
    # Only part of this record fits in the last page: the write comes back short.
    with pytest.raises(JournalError):
        journal.append("kill", pad="y" * 5000)
    text = (small_tmpfs / "journal.jsonl").read_text()
    assert text.endswith("\n") and all(json.loads(line) for line in text.splitlines()), "a fragment was left behind"
    (small_tmpfs / "filler").unlink()
    journal.append("run_finished", outcome="success")
    assert [r["event"] for r in read_journal(small_tmpfs / "journal.jsonl")] == ["run_started", "run_finished"]


def test_a_deeply_nested_journal_line_is_skipped(tmp_path):
    path = tmp_path / "journal.jsonl"
    path.write_text(json.dumps({"event": "run_started", "run_id": "r"}) + "\n" + "[" * 100_000 + "\n")
    assert [r["event"] for r in read_journal(path)] == ["run_started"]


def test_wrongly_typed_journal_records_are_skipped_not_a_traceback(tmp_path):
    from hangwatch.contract.journal import fold_journal

    path = tmp_path / "journal.jsonl"
    lines = [{"event": "run_started", "run_id": "r", "pid": 1, "ts": 1.0},
             {"event": "attempt_started", "attempt": "one", "ts": 2.0},
             {"event": "attempt_started", "attempt": 1, "ts": 2.0, "env": ["x"]},
             {"event": "attempt_started", "attempt": 1, "pid": 5, "ts": 3.0, "env": {}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    run = fold_journal(read_journal(path))
    assert [a.pid for a in run.attempts] == [5]
