"""Two-level recovery: the engine alone (level 1) or the whole job (level 2), with real processes.

The toy trainer drives the fake engine in its isolated worker, as the demo does; at
step 3 the engine wedges in a function named like vLLM's cuda-graph replay while graphs
are on. Level 1 itself (trainer pid unchanged, no checkpoint reloaded, training completes)
is the demo's test (tests/test_demo.py), and so is ``--recovery job`` (the demo's other
mode); here: the other escalations to level 2, and the pure decision behind them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hangwatch.contract.capture import TreeProcess
from hangwatch.contract.verdict import VerdictKind
from hangwatch.supervisor.decide.attempt import RecoverySituation, recovery_level

ROOT = Path(__file__).resolve().parents[2]
HANGWATCH = str(Path(sys.executable).parent / "hangwatch")


def _run(tmp_path: Path, *extra_hw: str, trainer: tuple[str, ...] = (),
         wedge: tuple[str, ...] = ("--wedge-at-step", "3")) -> tuple[int, list[dict], str]:
    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    argv = [HANGWATCH, "run", "--quiet", "--run-dir", str(run_dir), "--gpu-probe", f"file:{tmp_path / 'gpu.json'}",
            "--interval", "0.25", "--stall-window", "3", "--grace", "1", "--backoff", "0.1", "--capture-timeout", "15",
            "--checkpoint-dir", str(ckpt), "--resume-arg", "--resume_from_checkpoint={checkpoint}", *extra_hw, "--",
            sys.executable, str(ROOT / "scripts" / "toy_trainer.py"), "--steps", "6", "--save-every", "2",
            "--checkpoint-dir", str(ckpt), *wedge, "--generate-timeout", "120", "--step-time", "0.05",
            *trainer]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGWATCH_")}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=150)
    journal = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    return proc.returncode, journal, proc.stdout + proc.stderr


def _two_ranks(tmp_path: Path, *toy: str) -> list[dict]:
    """Two ranks of the toy trainer on one node (``tests/fixtures/two_rank_toy.py``), each with a
    standby engine, under hangwatch; ``toy``: its options (after ``--``: rank 1's only). Exit 0."""
    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    argv = [HANGWATCH, "run", "--quiet", "--run-dir", str(run_dir), "--gpu-probe", f"file:{tmp_path / 'gpu.json'}",
            "--interval", "0.25", "--stall-window", "3", "--engine-step-timeout", "2", "--grace", "1",
            "--backoff", "0.1", "--capture-timeout", "15", "--checkpoint-dir", str(ckpt),
            "--resume-arg", "--resume_from_checkpoint={checkpoint}", "--",
            sys.executable, str(ROOT / "tests" / "fixtures" / "two_rank_toy.py"), "--steps", "6",
            "--checkpoint-dir", str(ckpt), "--generate-timeout", "120", "--step-time", "0.1", "--standby-engine", *toy]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGWATCH_")}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=150)
    journal = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return journal


def _events(journal: list[dict], name: str) -> list[dict]:
    return [r for r in journal if r["event"] == name]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_second_engine_wedge_within_the_window_restarts_the_job(tmp_path):
    """Graphs kept on after a stall: the retried batch wedges again, right after the engine
    restart, so the second incident goes to level 2 (tree killed, resumed from a checkpoint)."""
    code, journal, out = _run(tmp_path, "--cudagraphs-after-stall", "keep", trainer=("--wedge-on-attempts", "1"))
    assert code == 0, out[-3000:]
    restarts = _events(journal, "engine_restart")
    # The retry hung: that engine restart failed (status once said the trainer lived on after it).
    assert [r["ok"] for r in restarts] == [True, False], "one engine restart, then escalation"
    assert restarts[1]["escalated_to"] == "job" and "hung" in restarts[1]["reason"]
    assert len(_events(journal, "incident")) == 2
    assert len(_events(journal, "capture")) == 2, "evidence captured before the kill at both levels"
    starts = _events(journal, "attempt_started")
    assert len(starts) == 2 and starts[1]["resume_from"], "level 2: a new attempt from the newest checkpoint"
    # --cudagraphs-after-stall keep: graphs stay on at both levels (the CLI flag to the attempt's env).
    assert restarts[0]["cudagraphs"] == "on"
    assert [s["env"]["HANGWATCH_CUDAGRAPHS"] for s in starts] == ["1", "1"]
    events = [r["event"] for r in journal]
    second = [i for i, e in enumerate(events) if e == "incident"][1]
    assert events[second + 1: second + 5] == ["capture", "recovery", "engine_restart", "kill"]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_an_engine_restart_that_fails_falls_back_to_a_job_restart(tmp_path):
    """The fresh engine (graphs off) cannot start: the trainer's retry fails and the trainer
    exits. That is the engine wedge escalating to level 2 (a new attempt from the checkpoint),
    not a crash of the trainer's own: --on-crash stop once gave up here. (The injected fault
    fails every graphs-off engine, so attempt 2 crashes for real and --on-crash stop ends it.)"""
    code, journal, out = _run(tmp_path, "--on-crash", "stop", trainer=("--fail-engine-without-graphs",))
    assert code == 73, out[-3000:]
    restarts = _events(journal, "engine_restart")
    assert [r["ok"] for r in restarts] == [True, False] and restarts[1]["escalated_to"] == "job"
    assert not _events(journal, "engine_recovered")
    ended = _events(journal, "attempt_ended")
    assert ended[0]["kind"] == "stall" and ended[0]["evidence_path"], "the level-1 bundle stays the attempt's evidence"
    starts = _events(journal, "attempt_started")
    assert len(starts) == 2 and starts[1]["env"]["HANGWATCH_CUDAGRAPHS"] == "0" and starts[1]["resume_from"]
    assert ended[1]["kind"] == "crash"


def _tree(*cmdlines: tuple[int, int, str]) -> list[TreeProcess]:
    return [TreeProcess(pid, 0.0, 1, pgid, pgid, "python", tuple(cmd.split())) for pid, pgid, cmd in cmdlines]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_wedged_trainer_restarts_the_job_even_with_an_engine_worker_in_the_tree(tmp_path):
    """The trainer's own thread is the stalled one (its last beat says train, the engine
    sleeps): killing the engine would not help, so the tree is killed and resumed."""
    code, journal, out = _run(tmp_path, wedge=("--trainer-wedge-at-step", "3", "--wedge-on-attempts", "1"))
    assert code == 0, out[-3000:]
    (incident,) = _events(journal, "incident")
    assert incident["phase"] == "train" and incident["evidence"].get("rule") != "engine_step"
    assert not _events(journal, "engine_restart"), "no engine-only recovery for a trainer wedge"
    (recovery,) = _events(journal, "recovery")
    assert recovery["level"] == 2 and "its own threads are stalled" in recovery["reason"]
    starts = _events(journal, "attempt_started")
    assert len(starts) == 2 and starts[1]["resume_from"], "level 2: a new attempt from the newest checkpoint"
    events = [r["event"] for r in journal]
    assert events.index("capture") < events.index("kill"), "evidence before the kill"


def test_the_level_decision():
    tree = _tree((100, 100, "python train.py"), (200, 200, "python -P -u -m hangwatch.generator.worker"),
                 (201, 200, "python -c from multiprocessing.spawn import spawn_main"))
    kw = dict(mode="auto", phase="generate", tree=tree, trainer_pgid=100, last_engine_restart=None, now=1000.0,
              retry_window=600.0)
    one = recovery_level(RecoverySituation(VerdictKind.STALL, **kw))
    assert one.level == 1 and one.engine_pgids == {200}
    assert recovery_level(RecoverySituation(VerdictKind.STALL, **{**kw, "mode": "job"})).level == 2
    assert recovery_level(RecoverySituation(VerdictKind.SILENT_HANG, **kw)).level == 2
    trainer_stalled = recovery_level(RecoverySituation(VerdictKind.STALL, **{**kw, "phase": "train"}))
    assert trainer_stalled.level == 2 and "its own threads" in trainer_stalled.reason
    assert recovery_level(RecoverySituation(VerdictKind.STALL, **{**kw, "tree": tree[:1]})).level == 2, "no isolated engine worker"
    again = recovery_level(RecoverySituation(VerdictKind.STALL, **{**kw, "last_engine_restart": 700.0}))
    assert again.level == 2 and "second engine wedge" in again.reason
    assert recovery_level(RecoverySituation(VerdictKind.STALL, **{**kw, "last_engine_restart": 300.0})).level == 1, "outside the window"
    assert recovery_level(RecoverySituation(VerdictKind.STALL, **{**kw, "in_cohort": True})).level == 2
    pending = recovery_level(RecoverySituation(VerdictKind.STALL, **{**kw, "retry_pending": True}))
    assert pending.level == 2 and "before the retry" in pending.reason, "the generator retries a batch once"
    same = recovery_level(RecoverySituation(VerdictKind.STALL, **{**kw, "retry_pending": True, "last_engine_restart": 999.0,
                                                "same_wedge": True}))
    assert same.level == 1, "another rank's engine stuck under the old policy: the same wedge"


def test_a_stuck_engine_in_flight_is_level_1_whatever_another_rank_last_beat():
    """Two ranks on one node share the heartbeat file: the phase is whichever rank beat last
    (here one past its rollouts, in 'restore'); the engine step rule names rank 1's stuck
    engine, whose rank waits on it. That is level 1, not 'its own threads are stalled'."""
    tree = _tree((100, 100, "python launcher.py"), (110, 100, "python train.py --rank 0"),
                 (120, 100, "python train.py --rank 1"), (200, 200, "python -P -u -m hangwatch.generator.worker"),
                 (300, 300, "python -P -u -m hangwatch.generator.worker"))
    kw = dict(mode="auto", phase="restore", tree=tree, trainer_pgid=100, last_engine_restart=None, now=1000.0,
              retry_window=600.0, window=8.0)
    stuck = {"engine_beats": 2, "engine_pid": 300, "engine_silent_s": 4.0, "rule": "engine_step"}
    level = recovery_level(RecoverySituation(VerdictKind.STALL, **kw, evidence=stuck))
    assert level.level == 1 and level.engine_pgids == {300}
    idle = recovery_level(RecoverySituation(VerdictKind.STALL, **{**kw, "phase": "train"}, evidence={"engine_beats": 2}))
    assert idle.level == 2 and "its own threads" in idle.reason, "no engine in flight: the trainer's own stall"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_standby_worker_takes_over_and_is_spared_by_the_engine_kill(tmp_path):
    """The engine step rule names the stuck worker; only its group is killed; the standby
    (started asleep, graphs off) takes over and the same trainer process finishes."""
    code, journal, out = _run(tmp_path, "--engine-step-timeout", "1.5", trainer=("--standby-engine",))
    assert code == 0, out[-3000:]
    (incident,) = _events(journal, "incident")
    assert incident["evidence"]["rule"] == "engine_step"
    stuck = incident["evidence"]["engine_pid"]
    (restart,) = _events(journal, "engine_restart")
    assert restart["ok"] and restart["pids"] == [stuck], "only the stuck worker's group was killed"
    assert [r["scope"] for r in _events(journal, "recovery")] == ["engine"]
    (kill,) = [r for r in _events(journal, "kill") if r.get("scope") == "engine"]
    assert kill["grace_rule"] == "none" and kill["signals"][0]["signal"] == "SIGKILL", "no grace for the engine"
    (recovered,) = _events(journal, "engine_recovered")
    assert recovered["engine"]["engine_worker"] == "standby" and recovered["engine"]["cudagraphs"] == "off"
    assert len(_events(journal, "first_heartbeat")) == 1, "once an attempt, not again after the engine restart"
    (started,) = _events(journal, "attempt_started")
    # The generator's own timeout may not fire first: engine step timeout + 2 intervals + capture deadline + slack.
    assert started["env"]["HANGWATCH_DETECT_WITHIN"] == "19" and started["env"]["HANGWATCH_ENGINE_RECOVERY"] == "engine"
    standby = json.loads((tmp_path / "run" / "attempts" / "attempt-001" / "generator-standby.json").read_text())
    assert standby["role"] == "active" and standby["pid"] != stuck
    events = [r["event"] for r in journal]
    assert events.index("capture") < events.index("kill"), "evidence before the kill"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_worker_wedged_in_its_weight_load_is_restarted_alone_and_the_standby_takes_over(tmp_path):
    """The engine wedges while loading step 2's weights: the trainer waits on it in 'load', not for
    rollouts. The beat names that worker: only its group is killed, the standby retries the step in
    the same trainer process (it was a job restart, the trainer's model reloaded from a checkpoint)."""
    code, journal, out = _run(tmp_path, wedge=("--wedge-in-load", "2"), trainer=("--standby-engine",))
    assert code == 0, out[-3000:]
    (incident,) = _events(journal, "incident")
    assert incident["phase"] == "load" and incident["evidence"]["waiting_on"]
    (recovery,) = _events(journal, "recovery")
    assert recovery["level"] == 1 and "'load'" in recovery["reason"], recovery
    (restart,) = _events(journal, "engine_restart")
    assert restart["ok"] and restart["pids"] == [incident["evidence"]["waiting_on"]], "only the waited-on worker"
    (recovered,) = _events(journal, "engine_recovered")
    assert recovered["engine"]["engine_worker"] == "standby" and recovered["engine"]["cudagraphs"] == "off"
    assert len(_events(journal, "attempt_started")) == 1, "the trainer lived on: no checkpoint reloaded"
    events = [r["event"] for r in journal]
    assert events.index("capture") < events.index("kill"), "evidence before the kill"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_two_ranks_on_a_node_whose_engines_both_wedge_recover_at_the_engine_level(tmp_path):
    """Two ranks share the heartbeat file (its phase is whichever rank beat last) and their
    engines wedge in the same step, a few seconds apart. Each stuck engine is restarted alone
    with graphs off; the job is not restarted (it was: the phase read 'restore', then the second
    engine was taken for the retry failing and the policy escalated to enforce_eager)."""
    journal = _two_ranks(tmp_path, "--wedge-at-step", "3", "--", "--save-every", "0")
    assert len(_events(journal, "attempt_started")) == 1, "no job restart"
    restarts = _events(journal, "engine_restart")
    assert [r["ok"] for r in restarts] == [True, True] and restarts[0]["pids"] != restarts[1]["pids"]
    assert [r["level"] for r in _events(journal, "recovery")] == [1, 1]
    assert all(r["cudagraphs"] == "off" and not r["enforce_eager"] for r in _events(journal, "recovery"))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_one_ranks_worker_wedged_in_its_load_is_named_by_its_own_beat_not_the_shared_file(tmp_path):
    """Two ranks share the heartbeat file; rank 1's worker wedges loading step 2's weights while
    rank 0 beats on through its rollouts to 'restore' (the file then named rank 0's healthy
    worker, and the job was restarted as 'its own threads are stalled'). The stuck worker's own
    beat says it is in its load: it alone is restarted, in the same attempt."""
    journal = _two_ranks(tmp_path, "--", "--wedge-in-load", "2")
    assert len(_events(journal, "attempt_started")) == 1, "no job restart"
    (incident,) = _events(journal, "incident")
    stuck = incident["evidence"]["waiting_on"]
    assert incident["evidence"]["waiting_on_phase"] == "load"
    (restart,) = _events(journal, "engine_restart")
    assert restart["ok"] and restart["pids"] == [stuck]
    wedged = (tmp_path / "run" / "attempts" / "attempt-001" / "generator-worker.log").read_text()
    assert f"fake engine (pid {stuck}): cuda graph replay wedged" in wedged, "the stuck worker, not rank 0's"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_stop_during_the_retry_is_a_stop_not_a_failed_retry(tmp_path):
    """SIGTERM right after the engine restart: the trainer dies of the forwarded stop before its
    retry came back. That is the user's stop (interrupted), not the retry failing escalated to
    the job (it was journaled as engine_restart ok: false and a stall)."""
    import signal
    import time

    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    argv = [HANGWATCH, "run", "--quiet", "--run-dir", str(run_dir), "--gpu-probe", f"file:{tmp_path / 'gpu.json'}",
            "--interval", "0.25", "--stall-window", "3", "--grace", "1", "--backoff", "0.1", "--capture-timeout", "15",
            "--checkpoint-dir", str(ckpt), "--resume-arg", "--resume_from_checkpoint={checkpoint}", "--",
            sys.executable, str(ROOT / "scripts" / "toy_trainer.py"), "--steps", "6", "--save-every", "2",
            "--checkpoint-dir", str(ckpt), "--wedge-at-step", "3", "--generate-timeout", "120", "--step-time", "0.05"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGWATCH_")}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        journal_path = run_dir / "journal.jsonl"
        deadline = time.monotonic() + 120
        while not (journal_path.exists() and '"engine_restart"' in journal_path.read_text()):
            assert time.monotonic() < deadline and proc.poll() is None, "no engine restart"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    journal = [json.loads(line) for line in journal_path.read_text().splitlines()]
    assert [r["ok"] for r in _events(journal, "engine_restart")] == [True], "no failed retry was journaled"
    assert all(r["kind"] != "stall" for r in _events(journal, "attempt_ended"))
    assert journal[-1]["event"] == "run_finished" and journal[-1]["outcome"] == "interrupted"


def test_a_stall_while_the_trainer_waits_on_its_engine_worker_outside_generate_does_not_blame_the_trainer():
    """The engine worker wedged in its weight load/wake or sleep: a job restart, but the trainer's
    threads are only waiting on the worker (a real run's journal said 'its own threads are stalled',
    pointing the user at the wrong process)."""
    tree = _tree((100, 100, "python train.py"), (200, 200, "python -P -u -m hangwatch.generator.worker"))
    kw = dict(mode="auto", tree=tree, trainer_pgid=100, last_engine_restart=None, now=1000.0, retry_window=600.0)
    for phase in ("load", "sleep", "standby"):
        for evidence in ({}, {"engine_beats": 1}):
            level = recovery_level(RecoverySituation(VerdictKind.STALL, phase=phase, evidence=evidence, **kw))
            assert level.level == 2 and "own threads" not in level.reason, (phase, evidence, level.reason)
            assert "engine's worker" in level.reason and repr(phase) in level.reason
    for phase in ("train", "start", "restore"):
        assert "its own threads" in recovery_level(RecoverySituation(VerdictKind.STALL, phase=phase, **kw)).reason


def test_a_wedge_in_the_weight_load_or_sleep_restarts_the_worker_the_trainer_waits_on():
    """The generator beats which worker a load or sleep waits on: that worker alone is restarted
    (level 1), its standby spared; a pid that is not an engine worker of the tree (the trainer's own,
    a stale one) or the standby's start stays a job restart."""
    tree = _tree((100, 100, "python train.py"), (200, 200, "python -P -u -m hangwatch.generator.worker"),
                 (300, 300, "python -P -u -m hangwatch.generator.worker"))
    kw = dict(mode="auto", tree=tree, trainer_pgid=100, last_engine_restart=None, now=1000.0, retry_window=600.0)
    for phase in ("load", "sleep"):
        for beats in ({}, {"engine_beats": 2}):
            level = recovery_level(RecoverySituation(VerdictKind.STALL, phase=phase, evidence={"waiting_on": 200, **beats}, **kw))
            assert level.level == 1 and level.engine_pgids == {200}, (phase, beats, level)
            assert repr(phase) in level.reason and "200" in level.reason
        for pid in (100, 999):
            assert recovery_level(RecoverySituation(VerdictKind.STALL, phase=phase, evidence={"waiting_on": pid}, **kw)).level == 2
        again = recovery_level(RecoverySituation(VerdictKind.STALL, phase=phase, evidence={"waiting_on": 200},
                               **{**kw, "last_engine_restart": 900.0}))
        assert again.level == 2 and "second engine wedge" in again.reason
    assert recovery_level(RecoverySituation(VerdictKind.STALL, phase="standby", evidence={"waiting_on": 200}, **kw)).level == 2
    assert recovery_level(RecoverySituation(VerdictKind.STALL, phase="train", evidence={"waiting_on": 200}, **kw)).level == 2
    # Two ranks share the heartbeat file: the healthy one beat on to 'restore'. The stuck worker's
    # own beat says it is in its load: that worker is restarted, not the job (it was, 'its own
    # threads are stalled'); unless it entered the call only now, well inside the stall.
    told = {"waiting_on": 300, "waiting_on_phase": "load", "waiting_on_silent_s": 8.0, "engine_beats": 2}
    level = recovery_level(RecoverySituation(VerdictKind.STALL, phase="restore", evidence=told, window=8.0, **kw))
    assert level.level == 1 and level.engine_pgids == {300} and "'load'" in level.reason
    fresh = recovery_level(RecoverySituation(VerdictKind.STALL, phase="restore", evidence={**told, "waiting_on_silent_s": 1.0},
                           window=8.0, **kw))
    assert fresh.level == 2 and "the stall is elsewhere" in fresh.reason
