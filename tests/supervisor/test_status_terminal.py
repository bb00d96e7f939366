"""`hangwatch status` prints text the trainer chose (phases, reasons, paths): never raw escapes."""

from __future__ import annotations

import os

import pytest

from hangwatch.cli.main import main
from hangwatch.contract.journal import Journal

pytestmark = pytest.mark.timeout(30)

EVIL = "\x1b]0;owned\x07\x1b[2J"


def test_status_escapes_control_characters(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    os.chmod(run_dir, 0o700)
    j = Journal(run_dir / "journal.jsonl", "r1")
    j.append("run_started", pid=999999, command=["x"])
    j.append("attempt_started", attempt=1, pid=1, env={"HANGWATCH_CUDAGRAPHS": "1"}, resume_from=None)
    j.append("incident", attempt=1, kind="stall", reason=f"phase {EVIL}", latency_s=1.0)
    j.append("attempt_ended", attempt=1, kind="stall", exit_code=-9, reason=EVIL)
    j.append("run_finished", outcome="gave_up", exit_code=71, reason=EVIL)
    assert main(["status", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;owned\\x07" in out
