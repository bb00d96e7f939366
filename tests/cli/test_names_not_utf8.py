"""Names with bytes that are not UTF-8, in run dirs, commands and checkpoints, reaching what hangwatch writes and prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(60)


def test_the_run_report_of_a_run_dir_or_command_that_is_not_utf8_is_written(tmp_path):
    """A run dir or a command argument with a byte that is not UTF-8 (Python's lone surrogate,
    journaled as \\udcff) made `hangwatch report RUN_DIR` an internal error, exit 70."""
    from hangwatch.cli.run_page import write_run_report

    run_dir = tmp_path / os.fsdecode(b"run-\xff")
    run_dir.mkdir(mode=0o700)
    records = [
        {"event": "run_started", "ts": 1000.0, "run_id": "r", "pid": 1, "run_dir": str(run_dir),
         "command": ["python", "train.py", os.fsdecode(b"data-\xff.bin")]},
        {"event": "attempt_started", "ts": 1001.0, "run_id": "r", "attempt": 1, "pid": 2},
        {"event": "attempt_ended", "ts": 1010.0, "run_id": "r", "attempt": 1, "kind": "exited", "exit_code": 0},
        {"event": "run_finished", "ts": 1011.0, "run_id": "r", "outcome": "success", "exit_code": 0},
    ]
    (run_dir / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    path, _ = write_run_report(run_dir)
    assert "\\udcff" in path.read_text()


def test_status_on_a_utf8_terminal_shows_a_checkpoint_name_that_is_not_utf8(tmp_path):
    """The trainer's user named a checkpoint folder with a byte that is not UTF-8
    (``checkpoint-5\\xff``); the next attempt resumed from it and the journal kept it. On a
    UTF-8 terminal (stdout strict outside the C locale) `hangwatch status` of that run was an
    internal error, exit 70. Now such a byte is shown as \\udcff, like control characters."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    resumed = os.fsdecode(str(tmp_path).encode() + b"/ckpt/checkpoint-5\xff")
    records = [
        {"event": "run_started", "ts": 1000.0, "run_id": "r", "pid": 1, "run_dir": str(run_dir), "command": ["x"]},
        {"event": "attempt_started", "ts": 1001.0, "run_id": "r", "attempt": 1, "pid": 2},
        {"event": "attempt_ended", "ts": 1002.0, "run_id": "r", "attempt": 1, "kind": "crash", "exit_code": 1},
        {"event": "attempt_started", "ts": 1003.0, "run_id": "r", "attempt": 2, "pid": 3, "resume_from": resumed},
        {"event": "attempt_ended", "ts": 1004.0, "run_id": "r", "attempt": 2, "kind": "crash", "exit_code": 1},
        {"event": "run_finished", "ts": 1005.0, "run_id": "r", "outcome": "gave_up", "exit_code": 71, "reason": "budget"},
    ]
    (run_dir / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    done = subprocess.run([sys.executable, "-m", "hangwatch.cli", "status", str(run_dir)], capture_output=True,
                          env=dict(os.environ, PYTHONIOENCODING="utf-8:strict"), timeout=60)
    assert done.returncode == 0, done.stderr
    assert b"checkpoint-5\\udcff" in done.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_a_planted_name_never_forges_a_line_in_an_error(tmp_path):
    """The refusal of a run dir holding another user's entry quoted its name with the newline
    in it: 'hangwatch: all good ...' came out as a line of its own."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    planted = run_dir / "a\nhangwatch: all good"
    planted.touch()
    os.chown(planted, 65534, 65534)
    done = subprocess.run([sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(run_dir), "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "a\\nhangwatch: all good" in done.stderr, done.stderr
