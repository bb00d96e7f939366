"""Unit tests of the supervisor's pure parts and safety checks."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import psutil
import pytest

from hangwatch.supervisor.decide.checkpoints import CheckpointSpec, complete_at, complete_steps, newest_complete
from hangwatch.contract.verdict import VerdictKind
from hangwatch.contract.heartbeat import beat, read_heartbeat
from hangwatch.contract.journal import Journal, read_journal
from hangwatch.supervisor.decide.restart import (
    EXIT_BUDGET,
    EXIT_NO_PROGRESS,
    AttemptOutcome,
    RestartPolicy,
    max_restarts,
    max_restarts_per_hour,
    no_checkpoint_progress,
)
from hangwatch.supervisor.watch.probes import FileProbe
from hangwatch.contract.procid import ProcKey, same_process
from hangwatch.supervisor.contain.members_file import kill_recorded

pytestmark = pytest.mark.timeout(30)


def _outcome(attempt, kind=VerdictKind.STALL, ended_at=0.0, start=None, end=None):
    return AttemptOutcome(attempt, kind, ended_at, start, end)


def test_newest_complete_checkpoint_skips_incomplete_and_corrupt(tmp_path):
    for step, state in [(10, '{"global_step": 10}'), (20, '{"global_step": 20}'), (30, None), (40, "{not json")]:
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        if state is not None:
            (d / "trainer_state.json").write_text(state)
    chosen, skipped = newest_complete(CheckpointSpec(tmp_path))
    assert chosen.path.name == "checkpoint-20" and chosen.step == 20
    assert [c.path.name for c in skipped] == ["checkpoint-40", "checkpoint-30"]
    assert "unreadable" in skipped[0].problem and "did not finish" in skipped[1].problem
    assert all((tmp_path / f"checkpoint-{s}").is_dir() for s in (10, 20, 30, 40)), "nothing deleted"


def test_a_cohorts_checkpoint_steps_are_judged_newest_down_only_as_far_as_needed(tmp_path, monkeypatch):
    """What a node tells its cohort (its newest complete steps) and the folder of the step the
    cohort agreed on: every marker was parsed for both (5 s for 200 checkpoints of 1.6 MB,
    between the kill and the relaunch)."""
    for step in range(10, 110, 10):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        if step != 90:
            (d / "trainer_state.json").write_text(f'{{"global_step": {step}}}')
    from hangwatch.supervisor.decide import checkpoints

    judged = []
    real = checkpoints._incomplete
    monkeypatch.setattr(checkpoints, "_incomplete", lambda path, marker: judged.append(path.name) or real(path, marker))
    spec = CheckpointSpec(tmp_path)
    assert complete_steps(spec, 3) == [100, 80, 70] and len(judged) == 4
    judged.clear()
    agreed = complete_at(spec, 30)
    assert agreed is not None and agreed.path.name == "checkpoint-30" and judged == ["checkpoint-30"]
    assert complete_at(spec, 90) is None and complete_at(spec, None) is None
    assert all((tmp_path / f"checkpoint-{s}").is_dir() for s in range(10, 110, 10)), "nothing deleted"


def test_checkpoint_custom_glob_and_marker(tmp_path):
    (tmp_path / "step_00100").mkdir()
    (tmp_path / "step_00100" / "COMPLETE").write_text("")
    (tmp_path / "step_00200").mkdir()
    chosen, _ = newest_complete(CheckpointSpec(tmp_path, glob="step_*", marker="COMPLETE"))
    assert chosen.step == 100
    assert newest_complete(CheckpointSpec(tmp_path / "missing"))[0] is None


def test_stop_rules_compose():
    rule = max_restarts(2) | no_checkpoint_progress(3)
    assert rule([_outcome(1), _outcome(2)], 0) is None
    assert rule([_outcome(1), _outcome(2), _outcome(3)], 0).exit_code == EXIT_BUDGET
    stuck = [_outcome(i, start=10, end=10) for i in (1, 2, 3)]
    assert (no_checkpoint_progress(3))(stuck, 0).exit_code == EXIT_NO_PROGRESS
    progressing = [_outcome(1, start=10, end=10), _outcome(2, start=10, end=20), _outcome(3, start=20, end=20)]
    assert (no_checkpoint_progress(3))(progressing, 0) is None


def test_per_hour_cap_counts_only_the_last_hour():
    rule = max_restarts_per_hour(2)
    old = [_outcome(i, ended_at=0.0) for i in range(5)]
    assert rule(old, now=7200.0) is None
    recent = [_outcome(i, ended_at=7000.0 + i) for i in range(3)]
    assert rule(old + recent, now=7200.0).exit_code == EXIT_BUDGET


def test_backoff_grows_and_is_capped():
    policy = RestartPolicy(max_restarts=100, max_restarts_per_hour=100, no_progress_limit=0, backoff_initial=1.0,
                           backoff_max=8.0, backoff_jitter=0.0, rng=random.Random(1))
    history, delays = [], []
    for i in range(1, 7):
        history.append(_outcome(i, kind=VerdictKind.CRASH, ended_at=float(i)))
        delays.append(policy.decide(history, 10.0).delay_s)
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    done = policy.decide(history + [_outcome(7, kind=VerdictKind.DONE)], 10.0)
    assert not done.restart and done.exit_code == 0


def test_a_one_off_hang_is_relaunched_without_backoff_but_repeats_back_off():
    policy = RestartPolicy(max_restarts=100, max_restarts_per_hour=100, no_progress_limit=0, backoff_initial=1.0,
                           backoff_max=8.0, backoff_jitter=1.0, rng=random.Random(1))
    for kind in (VerdictKind.STALL, VerdictKind.SILENT_HANG):
        first = policy.decide([_outcome(1, kind=kind, ended_at=5000.0)], 5000.0)
        assert first.restart and first.delay_s == 0.0 and "no backoff" in first.reason
    # Another hang within the hour is a repeated incident: backoff with jitter.
    again = policy.decide([_outcome(1, ended_at=4000.0), _outcome(2, ended_at=5000.0)], 5000.0)
    assert 2.0 <= again.delay_s <= 3.0
    # A hang hours after the last one is a one-off again.
    later = policy.decide([_outcome(1, ended_at=0.0), _outcome(2, ended_at=9000.0)], 9000.0)
    assert later.delay_s == 0.0
    # A crash is never relaunched without backoff.
    assert policy.decide([_outcome(1, kind=VerdictKind.CRASH, ended_at=5000.0)], 5000.0).delay_s >= 1.0


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


def test_heartbeat_round_trip_and_progress_token(tmp_path, monkeypatch):
    path = tmp_path / "hb.json"
    assert beat(step=1) is False  # no HANGWATCH_HEARTBEAT: a no-op, not an error
    monkeypatch.setenv("HANGWATCH_HEARTBEAT", str(path))
    assert beat(step=3, phase="checkpoint", cudagraphs="off")
    first = read_heartbeat(path)
    assert (first.step, first.phase, first.info["cudagraphs"]) == (3, "checkpoint", "off")
    beat(step=3, phase="checkpoint")
    assert read_heartbeat(path).token != first.token
    path.write_text("{half")
    assert read_heartbeat(path) is None


def test_file_probe_missing_malformed_and_dead_holders(tmp_path):
    path = tmp_path / "gpu.json"
    probe = FileProbe(path)
    assert probe.sample() is None
    path.write_text("{oops")
    assert probe.sample() is None
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path.write_text(json.dumps({"devices": [
        {"index": 0, "util_pct": 100, "mem_used_mib": 40000, "pids": [os.getpid()]},
        {"index": 1, "util_pct": 100, "mem_used_mib": 40000, "pids": [dead.pid]},
        {"index": 2, "util_pct": 100, "mem_used_mib": 10},
    ]}))
    d0, d1, d2 = probe.sample()
    assert (d0.util_pct, d0.pids) == (100.0, (os.getpid(),))
    assert (d1.util_pct, d1.mem_used_mib, d1.pids) == (0.0, 0.0, ()), "a dead process holds nothing"
    assert d2.pids is None, "no pids listed means ownership unknown"


def test_pid_reuse_is_never_signalled(tmp_path):
    """A recorded pid whose create time differs is a different process: leave it alone."""
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        real = ProcKey.of(psutil.Process(victim.pid))
        impostor = ProcKey(victim.pid, real.create_time - 100.0)
        assert same_process(impostor) is None
        tree = tmp_path / "tree.json"
        tree.write_text(json.dumps({"members": [{"pid": impostor.pid, "create_time": impostor.create_time}]}))
        assert kill_recorded(tree, grace=0.2) == []
        time.sleep(0.2)
        assert victim.poll() is None, "a process with a reused pid was signalled"
        tree.write_text(json.dumps({"members": [{"pid": real.pid, "create_time": real.create_time}]}))
        assert kill_recorded(tree, grace=5) == [victim.pid]
        assert victim.wait(5) == -signal.SIGKILL
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()


def test_the_supervisor_never_imports_cuda_libraries():
    """The watchdog must not share fate with CUDA: no torch, vllm or transformers in
    the process that runs `hangwatch run`, the capture and the replay."""
    code = (
        "import sys\n"
        "import hangwatch.cli.main, hangwatch.supervisor.runner\n"
        "from hangwatch.cli.run_wiring import default_capture_hook\n"
        "default_capture_hook()\n"
        "import hangwatch.cli.commands.replay, hangwatch.diagnostics.replay\n"
        "hangwatch.cli.main.build_parser()\n"
        "bad = [m for m in ('torch', 'vllm', 'transformers', 'trl', 'generator') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
