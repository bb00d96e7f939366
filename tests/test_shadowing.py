"""A user's own `supervisor/`, `generator/`, `diagnostics/` packages
cannot shadow ours: not on sys.path, not in the trainer's working directory.

The look-alikes raise on import, so any bare import of them anywhere (the CLI,
the guardian, the engine worker, the HF callback) fails the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TRAINER = textwrap.dedent("""
    import json, os, sys
    from hangwatch.trainer import beat, HangwatchCallback, rollout_engine_kwargs, apply_rollout_policy
    from hangwatch.generator.process import WorkerProcess

    beat(step=1, phase="train")
    callback = HangwatchCallback()  # builds the transformers subclass
    worker = WorkerProcess("fake", {"enable_sleep_mode": True}, log_dir=os.environ["HANGWATCH_ATTEMPT_DIR"])
    worker.start(60)
    worker.close(30)
    beat(step=2, phase="train")
    with open(sys.argv[1], "w") as out:
        json.dump({"callback": type(callback).__mro__[1].__module__, "kwargs": rollout_engine_kwargs(os.environ),
                   "worker_pid": worker.pid, "guardian_ok": True}, out)
""")


def _lookalikes(where: Path) -> None:
    for name in ("supervisor", "generator", "diagnostics"):
        pkg = where / name
        pkg.mkdir()
        (pkg / "__init__.py").write_text(f"raise ImportError('the user\\'s own {name} package was imported')\n")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_run_guardian_worker_and_callback_ignore_lookalike_packages(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    _lookalikes(work)
    (work / "train.py").write_text(TRAINER)
    result_file = tmp_path / "result.json"
    run_dir = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(work))
    env.pop("HANGWATCH_CONFIG", None)
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "hangwatch"), "run", "--quiet", "--gpu-probe", "none", "--interval", "0.2",
         "--run-dir", str(run_dir), "--", sys.executable, "train.py", str(result_file)],
        cwd=work, env=env, capture_output=True, text=True, timeout=150,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(result_file.read_text())
    assert result["callback"] == "hangwatch.generator.hf_callback"
    records = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    assert records[0]["guardian"] == "armed", "the guardian started (and said so) despite the look-alikes"
    assert records[-1]["outcome"] == "success"
