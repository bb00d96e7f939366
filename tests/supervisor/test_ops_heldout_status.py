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
    done = _hangwatch(["run", "--run-dir", str(run_dir), "--gpu-probe", "none", "--quiet", "--notify-command",
                       "echo receiver down >&2; exit 3", "--", sys.executable, "-c", "pass"], tmp_path)
    assert done.returncode == 0, done.stderr
    shown = _hangwatch(["status", str(run_dir)], tmp_path)
    assert shown.returncode == 0, shown.stderr
    line = next((x for x in shown.stdout.splitlines() if x.startswith("alerts:")), "")
    assert "1 not delivered" in line and "did NOT reach command" in line and "receiver down" in line, shown.stdout
    data = json.loads(_hangwatch(["status", "--json", str(run_dir)], tmp_path).stdout)
    assert data["alerts_failed"]["count"] == 1 and data["alerts_failed"]["last"]["notification"] == "run_finished"
