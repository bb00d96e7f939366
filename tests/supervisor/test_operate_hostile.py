"""Unattended operation against what goes wrong around a run: a console that goes away,
alert commands that fork, flood or escape, alert targets that never finish, a metrics
textfile that cannot be written or is a link. Real processes, bounded waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]


def _hangwatch(args: list[str], cwd: Path, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hangwatch.cli", *args], cwd=cwd,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), **kw)


def _journal(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines() if line.strip()]


def test_a_console_that_goes_away_never_ends_the_run(tmp_path):
    """`hangwatch run ... 2>&1 | head`: the pipe's reader exits, the next log line raised
    EPIPE inside the supervisor, which called it an internal error and killed the trainer."""
    run_dir = tmp_path / "run"
    proc = _hangwatch(["run", "--run-dir", str(run_dir), "--gpu-probe", "none", "--interval", "0.1",
                       "--", sys.executable, "-c", "import time; time.sleep(1)"],
                      tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    proc.stdout.close()  # the reader is gone before the supervisor's first line
    assert proc.wait(timeout=40) == 0
    finished = [r for r in _journal(run_dir) if r["event"] == "run_finished"]
    assert [r["outcome"] for r in finished] == ["success"]
    assert "internal_error" not in (run_dir / "hangwatch.log").read_text()


def test_status_into_a_closed_pipe_is_not_an_internal_error(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lines = [{"event": "run_started", "ts": 1.0e9 + i, "run_id": "r", "pid": 1} if i == 0 else
             {"event": "trainer_info", "ts": 1.0e9 + i, "run_id": "r", "attempt": 1, "note": "x" * 200}
             for i in range(3000)]
    (run_dir / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    proc = _hangwatch(["status", "--follow", "--json", str(run_dir)], tmp_path, stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=30) == 141, err
    assert "internal error" not in err and "Traceback" not in err
