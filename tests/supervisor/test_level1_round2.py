"""Level 1 as users hit it, with fakes: what the journal, status and the run report say when
the retried rollouts came back and a new hang followed before the trainer's step moved on."""

from __future__ import annotations

from pathlib import Path

import pytest

from hangwatch.cli.runreport import goodput
from hangwatch.cli.status import _engine_restarts
from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.journal import Journal, read_journal
from hangwatch.contract.samples import Sample
from hangwatch.contract.verdict import Verdict, VerdictKind
from hangwatch.supervisor.attempt import GraphPolicy, RecoveryLevel
from hangwatch.supervisor.engine_level import EngineLevel
from hangwatch.supervisor.killer import KillReport

pytestmark = pytest.mark.timeout(30)


class _Tree:
    def kill_groups(self, pgids, grace, kill_timeout):
        return KillReport(targets=({"pid": 20, "create_time": 1.0, "pgid": 20, "name": "worker"},),
                          signals=({"target": "pgid 20", "signal": "SIGKILL", "t": 0.0},), escalated=(),
                          survivors=(), duration_s=0.01, grace_rule="none", grace_s=0.0)


def test_a_hang_of_the_trainers_own_after_the_retried_rollouts_came_back_leaves_the_engine_recovered(tmp_path: Path):
    """The engine restart worked (the retried rollouts came back), then the trainer's own threads
    stalled in that very step (level 2). The journal once had no engine_recovered for it: status
    said 'no progress after it' and the run report 'not recovered'."""
    journal = Journal(tmp_path / "journal.jsonl", "run")
    level = EngineLevel(_Tree(), lambda: journal, lambda: 100.0, kill_timeout=5.0)
    verdict = Verdict(VerdictKind.STALL, detected_at=100.0, onset=96.0, reason="engine made no step",
                      evidence={"step": 17})
    assert level.restart(1, GraphPolicy(cudagraphs_off=True), RecoveryLevel(1, "engine only", frozenset({20})),
                         verdict, tmp_path / "control.json", None)
    back = Heartbeat(1000, 9, 0.0, 17, "train", {"engine_restarts": 1, "rollouts_ok": 1, "cudagraphs": "off"})
    level.observe(1, Sample(t=103.0, wall=103.0, cpu_pct={}, gpu=None, heartbeat=back))
    assert not level.unrecovered(1), "the retry came back: a hang now is not the retry failing"
    level.ended(1, back, 110.0, hang=True)  # the runner, at the new (level 2) verdict
    (recovered,) = [r for r in read_journal(tmp_path / "journal.jsonl") if r["event"] == "engine_recovered"]
    assert recovered["before_hang"] and not recovered.get("at_exit")
    assert recovered["onset_to_progress_s"] == 103.0 - 96.0, "timed when the rollouts were seen back"
    assert recovered["engine"]["cudagraphs"] == "off"
    (shown,) = _engine_restarts(read_journal(tmp_path / "journal.jsonl"))
    assert shown["recovered"] and shown["recovered_before_hang"]


def test_the_run_report_times_an_engine_recovery_from_its_record_and_names_the_level():
    """An engine_recovered journaled at the next hang is timed by its own onset_to_progress_s, not
    by when it was written; the next incident is the job's own."""
    T = 1_700_000_000.0
    r = {"run_id": "abc"}
    records = [
        {**r, "event": "run_started", "ts": T, "pid": 1},
        {**r, "event": "attempt_started", "ts": T + 1, "attempt": 1, "pid": 2},
        {**r, "event": "first_heartbeat", "ts": T + 11, "attempt": 1, "step": 1},
        {**r, "event": "incident", "ts": T + 641, "attempt": 1, "kind": "stall", "onset_wall": T + 611},
        {**r, "event": "recovery", "ts": T + 643, "attempt": 1, "level": 1, "scope": "engine", "reason": "x"},
        {**r, "event": "engine_restart", "ts": T + 643, "attempt": 1, "ok": True},
        {**r, "event": "engine_recovered", "ts": T + 700, "attempt": 1, "step": 17, "onset_to_progress_s": 40.0,
         "before_hang": True},
        {**r, "event": "incident", "ts": T + 700, "attempt": 1, "kind": "stall", "onset_wall": T + 670},
        {**r, "event": "attempt_ended", "ts": T + 702, "attempt": 1, "kind": "stall", "exit_code": -9},
    ]
    g = goodput(records)
    assert [(i.get("level"), i["time_to_recover_s"]) for i in g["incidents"]] == [(1, 40.0), (None, None)]


def test_an_engine_restart_the_generator_decided_alone_is_timed_and_stepped_from_its_own_beat(tmp_path: Path):
    """No verdict came (the generator's own generate timeout): its beats say which step's rollout
    wedged and when its request began and its worker died. The journal once took the first beat
    the supervisor saw of it, often steps later: the wedged step read 3 for 2, and the recovery
    0.25 s for two timeouts' worth of lost time."""
    journal = Journal(tmp_path / "journal.jsonl", "run")
    level = EngineLevel(_Tree(), lambda: journal, lambda: 0.0, kill_timeout=5.0)
    wall = 1_800_000_000.0
    info = {"engine_restarts": 1, "engine_restart_by": "generator", "cudagraphs": "off", "rollouts_ok": 1,
            "engine_restart_step": 2, "engine_restart_onset_wall": wall - 20.0, "engine_restart_killed_wall": wall - 5.0}
    seen = Heartbeat(1000, 9, 0.0, 4, "train", info)  # the trainer is two steps on already
    assert level.observe(1, Sample(t=500.0, wall=wall, cpu_pct={}, gpu=None, heartbeat=seen)) is not None
    records = read_journal(tmp_path / "journal.jsonl")
    (restart,) = [r for r in records if r["event"] == "engine_restart"]
    assert restart["step"] == 2 and restart["onset_to_killed_s"] == 15.0
    (recovered,) = [r for r in records if r["event"] == "engine_recovered"]
    assert recovered["onset_to_progress_s"] == 20.0 and recovered["kill_to_progress_s"] == 5.0
    assert level.last_restart == 495.0, "the retry window counts from the worker's death"


def test_a_generators_restart_times_that_are_not_times_fall_back_to_the_beat(tmp_path: Path):
    journal = Journal(tmp_path / "journal.jsonl", "run")
    level = EngineLevel(_Tree(), lambda: journal, lambda: 0.0, kill_timeout=5.0)
    wall = 1_800_000_000.0
    for n, (began, killed) in enumerate([(wall + 3600, wall + 3700), (wall - 5, wall - 20), ("x", None),
                                         (float("nan"), wall - 1), (True, wall - 1)]):
        info = {"engine_restarts": n + 1, "engine_restart_by": "generator", "cudagraphs": "off",
                "engine_restart_onset_wall": began, "engine_restart_killed_wall": killed}
        level.observe(1, Sample(t=500.0 + n, wall=wall, cpu_pct={}, gpu=None,
                                heartbeat=Heartbeat(1000, n, 0.0, 2, "generate", info)))
        assert level.last_restart == 500.0 + n
    restarts = [r for r in read_journal(tmp_path / "journal.jsonl") if r["event"] == "engine_restart"]
    assert [r["onset_to_killed_s"] for r in restarts] == [0.0] * 5 and {r["step"] for r in restarts} == {2}


def test_two_ranks_workers_wedged_in_the_same_weight_load_are_one_wedge(tmp_path: Path):
    """Two ranks on a node, both workers stuck in the same load: the first verdict restarts one
    worker; the second names the other by its own beat (``waiting_on``, no request in flight).
    It was in its load under the old policy at the first restart, so it is the same wedge: level 1
    again with the same policy. It was taken for a second wedge within the retry window: the job
    was restarted, with enforce_eager."""
    from hangwatch.supervisor.attempt import recovery_level
    from hangwatch.supervisor.engine_level import engines_in_a_call, stuck_engine
    from hangwatch.contract.capture import TreeProcess

    journal = Journal(tmp_path / "journal.jsonl", "run")
    level = EngineLevel(_Tree(), lambda: journal, lambda: 100.0, kill_timeout=5.0)
    beacons = tuple(Heartbeat(pid, 3, 0.0, 1, "load", {}) for pid in (20, 30)) + \
        (Heartbeat(40, 1, 0.0, 0, "idle", {}),)  # a standby, asleep
    at_first = Sample(t=100.0, wall=100.0, cpu_pct={}, gpu=None, engine=beacons)
    assert engines_in_a_call(at_first) == {20, 30}
    first = Verdict(VerdictKind.STALL, detected_at=100.0, onset=96.0, reason="stall",
                    evidence={"step": 1, "waiting_on": 20, "waiting_on_phase": "load", "waiting_on_silent_s": 4.0})
    assert level.restart(1, GraphPolicy(cudagraphs_off=True), RecoveryLevel(1, "load", frozenset({20})), first,
                         tmp_path / "control.json", None, in_flight=engines_in_a_call(at_first))
    second = {"step": 1, "waiting_on": 30, "waiting_on_phase": "load", "waiting_on_silent_s": 8.0, "engine_beats": 2}
    same = level.ran_old_policy(1, stuck_engine(second))
    assert same, "the other rank's worker stuck in the same load"
    tree = [TreeProcess(pid, 0.0, 1, pid, pid, "python", ("python", "-m", "hangwatch.generator.worker"))
            for pid in (30, 40)]
    decided = recovery_level(VerdictKind.STALL, mode="auto", phase="restore", tree=tree, trainer_pgid=1,
                             last_engine_restart=100.0, now=104.0, retry_window=1800.0, evidence=second,
                             window=3.0, engines_beat=True, retry_pending=False, same_wedge=same)
    assert decided.level == 1 and decided.engine_pgids == {30}


def test_the_run_report_counts_an_engine_restart_the_generator_decided_alone_as_lost():
    """No verdict came (the generator's own timeout): the time from its failed request to the
    trainer's next step is lost all the same. The report once counted it as progress, with no
    incident listed (88 % goodput for a run that spent 15 s of its 24 wedged)."""
    T = 1_700_000_000.0
    r = {"run_id": "abc"}
    records = [
        {**r, "event": "run_started", "ts": T, "pid": 1},
        {**r, "event": "attempt_started", "ts": T + 1, "attempt": 1, "pid": 2},
        {**r, "event": "first_heartbeat", "ts": T + 11, "attempt": 1, "step": 1},
        {**r, "event": "engine_restart", "ts": T + 500, "attempt": 1, "ok": True, "by": "generator", "backstop": True,
         "onset_to_killed_s": 300.0},
        {**r, "event": "engine_recovered", "ts": T + 510, "attempt": 1, "step": 18, "onset_to_progress_s": 310.0,
         "kill_to_progress_s": 10.0, "backstop": True},
        {**r, "event": "attempt_ended", "ts": T + 1011, "attempt": 1, "kind": "done", "exit_code": 0},
        {**r, "event": "run_finished", "ts": T + 1011, "outcome": "success", "exit_code": 0, "reason": "ok"},
    ]
    g = goodput(records)
    assert (g["hung_s"], g["recovery_s"], g["productive_s"]) == (300.0, 10.0, 1000.0 - 310.0)
    assert [(i["level"], i["time_to_recover_s"], i["latency_s"]) for i in g["incidents"]] == [(1, 310.0, 300.0)]
