"""Review round 8, with fakes: a --resume after a supervisor that died while capturing an
incident that decides no policy (another rank's engine stuck in the same wedge, under the old
policy) keeps the policy the first incident decided."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hangwatch.contract import env as names
from hangwatch.contract.journal import read_journal
from hangwatch.supervisor.decide.attempt import RunState
from hangwatch.supervisor.config import SETTINGS, build
from hangwatch.supervisor.watch.probes import NoProbe
from hangwatch.supervisor.runner import Supervisor

from tests.supervisor.test_level1_round2 import _Clock, _TwoLoadsTree

pytestmark = pytest.mark.timeout(30)


def _supervisor(tmp_path: Path, tree, capture, state=None) -> Supervisor:
    values = {k: v[1] for k, v in SETTINGS.items()}
    values.update(run_dir=str(tmp_path / "run"), interval=1.0, stall_window=10.0, engine_step_timeout=5.0,
                  backoff=1.0, gpu_probe="none", quiet=True)
    config = build(values, ["python", "train.py"])
    config.run_dir.mkdir(parents=True, exist_ok=True)
    return Supervisor(config, NoProbe(), capture, state=state, tree=tree, clock=tree.clock, sleep=tree.clock.sleep,
                      wall=tree.clock)


def test_a_resume_after_dying_in_the_same_wedges_capture_does_not_add_enforce_eager(tmp_path: Path):
    """Two ranks' workers wedged in the same weight load: the first incident turned graphs off
    (level 1); the second is the same wedge under the old policy and decides nothing. The
    supervisor died capturing the second: the resumed run relaunched with enforce_eager too."""
    def capture(request):
        path = request.run_dir / "incidents" / f"bundle-{request.attempt}-{request.verdict.detected_at}"
        path.mkdir(parents=True)
        return path

    assert _supervisor(tmp_path / "a", _TwoLoadsTree(_Clock()), capture).run() == 0
    lines = (tmp_path / "a" / "run" / "journal.jsonl").read_text().splitlines(keepends=True)
    events = [json.loads(line)["event"] for line in lines]
    second = [i for i, e in enumerate(events) if e == "incident"][1]
    # SIGKILLed while capturing the second incident: the journal ends with it.
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "run" / "journal.jsonl").write_text("".join(lines[:second + 1]))
    records = read_journal(tmp_path / "run" / "journal.jsonl")
    assert records[-1]["event"] == "incident" and records[-1]["kind"] == "stall"

    tree = _TwoLoadsTree(_Clock())
    tree.attempt = 1  # the next launch is attempt 2, which trains to the end
    sup = _supervisor(tmp_path, tree, lambda request: None, state=RunState.from_journal(records))
    assert sup.run(resumed=True) == 0
    records = read_journal(tmp_path / "run" / "journal.jsonl")
    started = [r for r in records if r["event"] == "attempt_started"][-1]
    assert started["attempt"] == 2 and started["env"][names.CUDAGRAPHS] == "0"
    assert names.ENFORCE_EAGER not in started["env"], "the same wedge decided no further policy"


def test_status_of_a_run_dir_whose_not_started_record_is_a_fifo_answers(tmp_path):
    """status reads run dirs other users may write: a FIFO named like the record of a run that
    stopped before it began hung it (a plain open() of a FIFO waits for a writer)."""
    import os
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    (run_dir / "settings.json").write_text("{}")
    os.mkfifo(run_dir / "not_started.json", 0o600)
    done = subprocess.run([sys.executable, "-m", "hangwatch.cli", "status", str(run_dir)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "stopped before its run began" in done.stdout, done.stderr
