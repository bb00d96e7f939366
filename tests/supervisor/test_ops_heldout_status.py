"""Held-out status cases: what the person a page never reached sees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[2]


def _hangwatch(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hangwatch.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=80)


def test_status_says_which_alerts_were_not_delivered(tmp_path):
    """Failed alerts were journaled (notify_failed) but `hangwatch status` said nothing of them:
    the run's last alert could be lost and status showed a clean finish."""
    run_dir = tmp_path / "run"
    done = _hangwatch(["run", "--run-dir", str(run_dir), "--gpu-probe", "none", "--quiet", "--interval", "0.2",
                       "--notify-command",
                       "echo receiver down >&2; exit 3", "--", sys.executable, "-c", "pass"], tmp_path)
    assert done.returncode == 0, done.stderr
    shown = _hangwatch(["status", str(run_dir)], tmp_path)
    assert shown.returncode == 0, shown.stderr
    line = next((x for x in shown.stdout.splitlines() if x.startswith("alerts:")), "")
    assert "1 not delivered" in line and "did NOT reach command" in line and "receiver down" in line, shown.stdout
    data = json.loads(_hangwatch(["status", "--json", str(run_dir)], tmp_path).stdout)
    assert data["alerts_failed"]["count"] == 1 and data["alerts_failed"]["last"]["notification"] == "run_finished"


def test_a_crash_loop_of_hundreds_of_attempts_reads_in_a_few_lines(tmp_path):
    """400 alike attempts were 400 identical table lines between the run's state and its
    incidents; a run of alike attempts is now its first row, a count and its last row."""
    from hangwatch.cli.run_summary import render_status, summarise

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    records = [{"event": "run_started", "ts": 1000.0, "pid": 4242, "run_dir": str(run_dir)}]
    for n in range(1, 301):
        ts = 1000.0 + n
        records += [{"event": "attempt_started", "ts": ts, "attempt": n, "pid": 5000 + n, "create_time": ts,
                     "env": {"HANGWATCH_CUDAGRAPHS": "1"}},
                    {"event": "attempt_ended", "ts": ts + 0.1, "attempt": n, "kind": "crash", "exit_code": 3,
                     "signal": None, "reason": "trainer exited with code 3", "duration_s": 0.1}]
        if n == 150:  # one different attempt in the middle stays its own row
            records[-1].update(exit_code=-9, kind="silent_hang")
    records.append({"event": "run_finished", "ts": 1400.0, "outcome": "gave_up", "exit_code": 71,
                    "reason": "restart budget exhausted", "attempts": 300})
    (run_dir / "journal.jsonl").write_text("".join(json.dumps({"run_id": "r", **r}) + "\n" for r in records))
    text = render_status(summarise(run_dir / "journal.jsonl"))
    rows = [line for line in text.splitlines() if line[:7].strip().isdigit() or "more alike" in line]
    assert len(rows) == 7, text  # 1 ... 149, 150, 151 ... 300
    assert "147 more alike" in text and "148 more alike" in text
    assert "finished: restart budget exhausted" in text
