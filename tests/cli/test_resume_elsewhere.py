"""``--resume`` typed in another directory: the run goes on where it was started.

A run started as ``cd work && hangwatch run --checkpoint-dir out -- python train.py`` and
resumed as ``hangwatch run --resume work/run`` from elsewhere must relaunch ``train.py``
from ``work`` and keep reading ``work/out`` (before: the command could not be found, or a
relative checkpoint dir silently pointed at a new, empty directory)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hangwatch.contract.journal import Journal
from hangwatch.supervisor.config import SETTINGS, save_values

HANGWATCH = [sys.executable, "-m", "hangwatch.cli"]

TRAINER = """\
import os, pathlib
ckpt = pathlib.Path("out")
print("cwd", os.getcwd(), "checkpoints", sorted(p.name for p in ckpt.iterdir()), flush=True)
"""


def _interrupted_run(work: Path) -> Path:
    """What a supervisor SIGKILLed in ``work`` leaves: settings with relative paths, an open journal."""
    (work / "out" / "checkpoint-5").mkdir(parents=True)
    (work / "out" / "checkpoint-5" / "trainer_state.json").write_text("{}")
    (work / "train.py").write_text(TRAINER)
    run_dir = work / "run"
    run_dir.mkdir(mode=0o700)
    values = {k: v[1] for k, v in SETTINGS.items()} | {
        "run_dir": str(run_dir), "gpu_probe": "none", "checkpoint_dir": "out", "resume_arg": "--resumed={checkpoint}"}
    save_values(run_dir, values, [sys.executable, "train.py"], cwd=str(work))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=50)
    Journal(run_dir / "journal.jsonl", run_id="r1").append("run_started", pid=gone.pid, command=["python", "train.py"])
    os.chmod(run_dir / "journal.jsonl", 0o600)
    return run_dir


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_resume_from_another_directory_runs_where_the_run_was_started(tmp_path: Path) -> None:
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    run_dir = _interrupted_run(work)
    result = subprocess.run([*HANGWATCH, "run", "--quiet", "--resume", str(run_dir)], cwd=elsewhere,
                            capture_output=True, text=True, timeout=50)
    assert result.returncode == 0, result.stderr
    out = (run_dir / "attempts" / "attempt-001" / "stdout.log").read_text()
    assert f"cwd {work} checkpoints ['checkpoint-5']" in out, out
    started = [json.loads(x) for x in (run_dir / "journal.jsonl").read_text().splitlines()
               if '"attempt_started"' in x]
    assert started and started[-1]["resume_from"] == str(work / "out" / "checkpoint-5"), started


@pytest.mark.timeout(60)
def test_a_resume_whose_start_directory_is_gone_says_so(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    run_dir = _interrupted_run(work)
    moved = tmp_path / "moved"
    run_dir.rename(moved)
    (work / "train.py").unlink()
    for p in sorted(work.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    work.rmdir()
    result = subprocess.run([*HANGWATCH, "run", "--resume", str(moved)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=50)
    assert result.returncode == 2, result.stderr
    assert f"the run was started in {work}, which is gone" in result.stderr and "Traceback" not in result.stderr
