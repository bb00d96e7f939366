"""The recovery level a verdict gets: the engine alone (level 1) or the whole job (level 2). Pure:
hand-built trees and verdicts in, levels out."""

from __future__ import annotations

from hangwatch.contract.capture import TreeProcess
from hangwatch.contract.verdict import VerdictKind
from hangwatch.supervisor.decide.attempt import RecoverySituation, recovery_level


def _tree(*cmdlines: tuple[int, int, str]) -> list[TreeProcess]:
    return [TreeProcess(pid, 0.0, 1, pgid, pgid, "python", tuple(cmd.split())) for pid, pgid, cmd in cmdlines]


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
