"""Round 4 of hostile inputs: names with bytes that are not UTF-8."""

from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.timeout(60)


def test_the_run_report_of_a_run_dir_or_command_that_is_not_utf8_is_written(tmp_path):
    """A run dir or a command argument with a byte that is not UTF-8 (Python's lone surrogate,
    journaled as \\udcff) made `hangwatch report RUN_DIR` an internal error, exit 70."""
    from hangwatch.cli.runreport import write_run_report

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
