"""The engine-level restart with fakes (``engine_level.EngineLevel``): what it writes, what it
kills, what it leaves alone, when it is recovered; and when killed processes' GPU memory counts
as released after a whole-tree kill (``gpu_release.gpu_released``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hangwatch.contract.journal import Journal, read_journal
from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.contract.verdict import Verdict, VerdictKind
from hangwatch.supervisor.decide.attempt import GraphPolicy, RecoveryLevel
from hangwatch.supervisor.recover.engine_level import EngineLevel
from hangwatch.supervisor.decide.gpu_release import gpu_released

from fakes import FakeClock, FakeTree

pytestmark = pytest.mark.timeout(30)

GIB = 1024.0


def _dev(index: int, mib: float, pids: tuple[int, ...] | None = None) -> DeviceSample:
    return DeviceSample(index, 100.0, mib, pids)


def test_listed_processes_answer_exactly():
    assert not gpu_released([_dev(0, 70 * GIB, (10, 20))], {20}, GIB)
    assert gpu_released([_dev(0, 30 * GIB, (10,))], {20}, GIB), "the trainer (10) may keep its memory"


def test_whole_tree_on_unlisted_devices_needs_them_all_but_empty():
    assert not gpu_released([_dev(0, 30 * GIB), _dev(1, 0.3 * GIB)], {20}, GIB)
    assert gpu_released([_dev(0, 0.5 * GIB), _dev(1, 0.3 * GIB)], {20}, GIB)


def _restart(tmp_path: Path, pgids: frozenset[int], attempt: int = 1, *, gone: bool = False, step: int | None = 17):
    journal = Journal(tmp_path / "journal.jsonl", "run")
    tree = FakeTree(groups_gone=gone)
    level = EngineLevel(tree, lambda: journal, lambda: 100.0, kill_timeout=5.0)
    verdict = Verdict(VerdictKind.STALL, detected_at=100.0, onset=96.0, reason="engine made no step",
                      evidence={"step": step})
    control = tmp_path / "control.json"
    ok = level.restart(attempt, GraphPolicy(cudagraphs_off=True), RecoveryLevel(1, "engine only", pgids),
                       verdict, control, None)
    return ok, level, tree, control, journal


def test_the_engine_restart_names_its_worker_in_the_control_file_and_kills_without_grace(tmp_path: Path):
    ok, level, tree, control, _ = _restart(tmp_path, frozenset({20}))
    assert ok and tree.group_kills == [(frozenset({20}), 0.0)]
    record = json.loads(control.read_text())
    assert record["pgids"] == [20] and record["cudagraphs"] == "off" and record["seq"] == 1
    events = [r["event"] for r in read_journal(tmp_path / "journal.jsonl")]
    assert events == ["kill", "engine_restart"] and level.restarts == 1 and level.last_restart == 100.0


def test_a_stuck_worker_already_gone_is_the_generators_restart_and_nothing_is_killed(tmp_path: Path):
    """The generator's own timeout killed the stuck worker first and promoted its standby:
    the supervisor must not kill whatever engine is left (it widened to every group once)."""
    ok, level, tree, control, _ = _restart(tmp_path, frozenset())
    assert ok and tree.group_kills == [] and not control.exists()
    (restart,) = [r for r in read_journal(tmp_path / "journal.jsonl") if r["event"] == "engine_restart"]
    assert restart["by"] == "generator" and restart["pids"] == [] and level.last_restart == 100.0


def test_a_restart_whose_retry_failed_is_not_recovered_by_the_next_attempt(tmp_path: Path):
    ok, level, _, _, _ = _restart(tmp_path, frozenset({20}), attempt=1)
    beat = Heartbeat(1000, 9, 0.0, 18, "train")
    level.observe(2, Sample(t=103.0, wall=103.0, cpu_pct={}, gpu=None, heartbeat=beat))
    level.observe(1, Sample(t=104.0, wall=104.0, cpu_pct={}, gpu=None, heartbeat=beat))
    assert not [r for r in read_journal(tmp_path / "journal.jsonl") if r["event"] == "engine_recovered"]


def test_a_worker_gone_between_the_decision_and_the_kill_is_not_a_job_restart(tmp_path: Path):
    """The generator, waiting on the instruction, killed its worker first: it restarts it with
    that policy; the supervisor must not escalate (it once read 'no engine worker left')."""
    ok, _, tree, control, _ = _restart(tmp_path, frozenset({20}), gone=True)
    assert ok and control.exists() and tree.group_kills
    (restart,) = [r for r in read_journal(tmp_path / "journal.jsonl") if r["event"] == "engine_restart"]
    assert restart["ok"] and restart["by"] == "generator"


def test_a_control_file_that_cannot_be_written_restarts_the_job(tmp_path: Path):
    (tmp_path / "control.json").mkdir()  # os.replace onto a directory fails like a full disk would
    ok, _, tree, _, _ = _restart(tmp_path, frozenset({20}))
    assert not ok and tree.group_kills == [], "without the instruction nothing is killed alone"
    (restart,) = [r for r in read_journal(tmp_path / "journal.jsonl") if r["event"] == "engine_restart"]
    assert restart["ok"] is False and restart["escalated_to"] == "job"


def test_a_trainer_that_beats_no_step_is_recovered_at_its_first_own_beat_after_the_rollout(tmp_path: Path):
    _, level, _, _, _ = _restart(tmp_path, frozenset({20}), step=None)
    for t, (seq, phase) in enumerate([(5, "generate"), (6, "load"), (7, "generate"), (8, "sleep"), (9, "train"),
                                      (10, "train")]):
        level.observe(1, Sample(t=101.0 + t, wall=101.0 + t, cpu_pct={}, gpu=None,
                                heartbeat=Heartbeat(1000, seq, 0.0, None, phase)))
    (recovered,) = [r for r in read_journal(tmp_path / "journal.jsonl") if r["event"] == "engine_recovered"]
    assert recovered["step"] is None and recovered["onset_to_progress_s"] == 106.0 - 96.0


def _restart_with_probe(tmp_path: Path, listings: list[tuple[int, ...] | None]):
    """An engine restart whose GPU probe lists, at each poll, the next of ``listings``
    (the last repeats); the killed worker is pid 20, the trainer 10."""
    journal, clock, polls = Journal(tmp_path / "journal.jsonl", "run"), FakeClock(100.0), []

    def devices():
        polls.append(clock.now)
        pids = listings[min(len(polls), len(listings)) - 1]
        return (_dev(0, 30 * GIB, pids),)

    level = EngineLevel(FakeTree(), lambda: journal, clock, kill_timeout=5.0, devices=devices, sleep=clock.sleep,
                        release_timeout=10.0)
    verdict = Verdict(VerdictKind.STALL, detected_at=100.0, onset=96.0, reason="engine made no step",
                      evidence={"step": 17})
    ok = level.restart(1, GraphPolicy(cudagraphs_off=True), RecoveryLevel(1, "engine only", frozenset({20})),
                       verdict, tmp_path / "control.json", None)
    return ok, level, polls, read_journal(tmp_path / "journal.jsonl")


def test_the_engine_kill_is_verified_on_the_device_the_trainer_keeps_its_memory(tmp_path: Path):
    ok, level, polls, records = _restart_with_probe(tmp_path, [(10, 20), (10, 20), (10,)])
    assert ok and len(polls) == 3, "polled until the killed worker left the device, not until it was empty"
    assert [r["event"] for r in records] == ["kill", "gpu_released", "engine_restart"]
    (released,) = [r for r in records if r["event"] == "gpu_released"]
    assert released["released"] is True and released["scope"] == "engine" and released["waited_s"] == pytest.approx(0.4)


def test_a_killed_worker_still_holding_the_gpu_restarts_the_job(tmp_path: Path):
    """Its memory never freed, the retry would fail for lack of it: level 2 instead, within
    --gpu-release-timeout, and no retry window is started by a restart that failed."""
    ok, level, polls, records = _restart_with_probe(tmp_path, [(10, 20)])
    assert not ok and level.last_restart is None
    assert polls[-1] - polls[0] == pytest.approx(10.0, abs=0.3)
    (restart,) = [r for r in records if r["event"] == "engine_restart"]
    assert restart["ok"] is False and restart["escalated_to"] == "job" and "GPU memory" in restart["reason"]


def test_a_probe_that_lists_no_processes_cannot_verify_and_does_not_wait(tmp_path: Path):
    for name, listing in (("empty", ()), ("unlisted", None)):
        (tmp_path / name).mkdir()
        ok, _, polls, records = _restart_with_probe(tmp_path / name, [listing])
        assert ok and len(polls) == 1
        (released,) = [r for r in records if r["event"] == "gpu_released"]
        assert released["released"] is None


def test_status_links_each_incident_of_an_attempt_to_its_own_bundle(tmp_path: Path):
    """Several engine-level incidents in one attempt each have their bundle; status showed
    every one with the attempt's last (its report link and signature)."""
    from hangwatch.cli.run_summary import summarise

    journal = Journal(tmp_path / "journal.jsonl", "run")
    journal.append("attempt_started", attempt=1, pid=10, env={})
    for n in (1, 2):
        journal.append("incident", attempt=1, kind="stall", reason=f"wedge {n}")
        journal.append("capture", attempt=1, ok=True, evidence_path=str(tmp_path / f"bundle-{n}"))
    journal.append("incident", attempt=1, kind="stall", reason="wedge 3, its capture failed")
    journal.append("capture", attempt=1, ok=False, error="py-spy missing")
    incidents = summarise(tmp_path / "journal.jsonl")["incidents"]
    assert [i["evidence_path"] for i in incidents][:2] == [str(tmp_path / "bundle-1"), str(tmp_path / "bundle-2")]


def test_an_engine_restart_the_generator_decided_alone_is_journaled_once_and_its_policy_kept(tmp_path: Path):
    """No verdict came (no GPU probe, the engine's first request): the generator's own generate
    timeout restarted its engine with graphs off. Only its beats say so; the journal, the
    retry window and the run's policy for later attempts once knew nothing of it."""
    journal = Journal(tmp_path / "journal.jsonl", "run")
    level = EngineLevel(FakeTree(), lambda: journal, lambda: 100.0, kill_timeout=5.0)
    info = {"engine_restarts": 1, "engine_restart_by": "generator", "cudagraphs": "off", "enforce_eager": False}
    decided = [level.observe(1, Sample(t=200.0 + k, wall=200.0 + k, cpu_pct={}, gpu=None,
                                       heartbeat=Heartbeat(1000, 5 + k, 0.0, 3, "train", info)))
               for k in range(3)]
    assert decided[0] == GraphPolicy(cudagraphs_off=True) and decided[1:] == [None, None]
    (restart,) = [r for r in read_journal(tmp_path / "journal.jsonl") if r["event"] == "engine_restart"]
    assert restart["by"] == "generator" and restart["backstop"] and restart["cudagraphs"] == "off"
    assert level.last_restart == 200.0
    supervisor_asked = {**info, "engine_restarts": 2, "engine_restart_by": "supervisor"}
    assert level.observe(1, Sample(t=300.0, wall=300.0, cpu_pct={}, gpu=None,
                                   heartbeat=Heartbeat(1000, 9, 0.0, 4, "train", supervisor_asked))) is None


def test_two_generators_of_one_trainer_each_have_their_own_restart_journaled(tmp_path: Path):
    """A trainer process holding two generators (each counts its restarts from 1): the second's
    own restart is its own, not the first's seen again (before: keyed on pid and count only,
    it was never journaled and its policy never kept)."""
    journal = Journal(tmp_path / "journal.jsonl", "run")
    level = EngineLevel(FakeTree(), lambda: journal, lambda: 100.0, kill_timeout=5.0)
    first = {"engine_restarts": 1, "engine_restart_by": "generator", "cudagraphs": "off",
             "engine_restart_generator": 0}
    second = {**first, "engine_restart_generator": 1, "enforce_eager": True}
    for k, info in enumerate([first, first, second, second]):
        level.observe(1, Sample(t=200.0 + k, wall=200.0 + k, cpu_pct={}, gpu=None,
                                heartbeat=Heartbeat(1000, 5 + k, 0.0, 3, "train", info)))
    restarts = [r for r in read_journal(tmp_path / "journal.jsonl") if r["event"] == "engine_restart"]
    assert [r["enforce_eager"] for r in restarts] == [False, True]


def test_another_ranks_engine_stuck_under_the_old_policy_is_the_same_wedge(tmp_path: Path):
    """Two ranks' engines wedged a few seconds apart: the second, in flight under the old policy
    when the first was restarted, is that wedge again (level 1, no further escalation), not the
    retry failing; the first rank's fresh engine never is."""
    journal = Journal(tmp_path / "journal.jsonl", "run")
    level = EngineLevel(FakeTree(), lambda: journal, lambda: 100.0, kill_timeout=5.0)

    def restart(engine_pid: int, in_flight: frozenset[int]) -> bool:
        verdict = Verdict(VerdictKind.STALL, detected_at=100.0, onset=96.0, reason="engine made no step",
                          evidence={"step": 3, "engine_pid": engine_pid})
        return level.restart(1, GraphPolicy(cudagraphs_off=True), RecoveryLevel(1, "engine only", frozenset({engine_pid})),
                             verdict, tmp_path / "control.json", None, in_flight=in_flight)

    assert restart(20, frozenset({20, 30}))
    assert level.ran_old_policy(1, 30) and not level.ran_old_policy(1, 20) and not level.ran_old_policy(2, 30)
    assert restart(30, frozenset({30, 40}))  # 40: rank 0's retried engine, on the new policy
    assert not level.ran_old_policy(1, 40) and not level.ran_old_policy(1, 30)


def test_a_retry_whose_rollouts_came_back_is_no_longer_pending(tmp_path: Path):
    """Once the generator says the retried call's rollouts came back on the restarted engine, a
    crash before the step moves is the trainer's own (--on-crash judges it), not a failed retry."""
    ok, level, _, _, _ = _restart(tmp_path, frozenset({20}))
    assert level.unrecovered(1)
    failed_retry = Heartbeat(1000, 9, 0.0, 17, "restore", {"engine_restarts": 1, "rollouts_ok": 0})
    level.note_beat(failed_retry)
    assert level.unrecovered(1), "the restore beat of a failed retry says nothing came back"
    level.note_beat(Heartbeat(1000, 10, 0.0, 17, "restore", {"engine_restarts": 1, "rollouts_ok": 1}))
    assert not level.unrecovered(1)


def test_another_ranks_beat_of_its_own_earlier_retry_does_not_recover_this_restart(tmp_path: Path):
    """Ranks share the heartbeat file. Rank B's generator, restarted once long ago, beats
    ``engine_restarts 1, rollouts_ok 1`` (on every beat); rank A's second restart must not be taken
    as come back from B's beat: the beat names the instruction its restart followed."""
    ok, level, _, _, _ = _restart(tmp_path, frozenset({20}))  # instruction seq 1
    assert level.unrecovered(1)
    level.note_beat(Heartbeat(2000, 40, 0.0, 17, "train",
                              {"engine_restarts": 1, "rollouts_ok": 1, "engine_restart_seq": 7}))
    assert level.unrecovered(1), "rank B's beat speaks of another instruction's restart"
    level.note_beat(Heartbeat(1000, 10, 0.0, 17, "restore",
                              {"engine_restarts": 1, "rollouts_ok": 1, "engine_restart_seq": 1}))
    assert not level.unrecovered(1)


def test_a_restart_journaled_as_the_generators_is_not_journaled_again_from_its_beats(tmp_path: Path):
    """The stuck worker was gone (the generator's timeout killed it) when the verdict came: the
    supervisor journals that restart as the generator's; the backstop beat that follows is it."""
    ok, level, _, _, journal = _restart(tmp_path, frozenset())
    info = {"engine_restarts": 1, "engine_restart_by": "generator", "cudagraphs": "off"}
    level.observe(1, Sample(t=101.0, wall=101.0, cpu_pct={}, gpu=None, heartbeat=Heartbeat(1000, 5, 0.0, 17, "load", info)))
    assert len([r for r in read_journal(tmp_path / "journal.jsonl") if r["event"] == "engine_restart"]) == 1


def test_a_trainer_that_exits_once_its_retried_rollouts_came_back_was_recovered(tmp_path: Path):
    """The wedged rollout was the trainer's last: its retry came back, then it exited before any
    sample saw it go on. Status once said 'no progress after it' and the run report 'not recovered'."""
    ok, level, _, _, _ = _restart(tmp_path, frozenset({20}))
    left = Heartbeat(1000, 9, 0.0, 17, "restore", {"engine_restarts": 1, "rollouts_ok": 1, "cudagraphs": "off"})
    level.ended(1, left, 105.0)
    (recovered,) = [r for r in read_journal(tmp_path / "journal.jsonl") if r["event"] == "engine_recovered"]
    assert recovered["at_exit"] and recovered["step"] == 17 and recovered["onset_to_progress_s"] == 105.0 - 96.0
    assert recovered["engine"]["cudagraphs"] == "off" and not level.unrecovered(1)
    from hangwatch.cli.run_summary import _engine_restarts
    (shown,) = _engine_restarts(read_journal(tmp_path / "journal.jsonl"))
    assert shown["recovered"] and shown["recovered_at_exit"]  # status: "its retried rollouts came back, then ..."


def test_a_trainer_that_exits_before_its_retry_came_back_was_not_recovered(tmp_path: Path):
    ok, level, _, _, _ = _restart(tmp_path, frozenset({20}))
    level.ended(1, Heartbeat(1000, 9, 0.0, 17, "restore", {"engine_restarts": 1, "rollouts_ok": 0}), 105.0)
    assert not [r for r in read_journal(tmp_path / "journal.jsonl") if r["event"] == "engine_recovered"]
    assert level.unrecovered(1), "still the retry failing, for the runner to escalate"


def test_the_recovered_record_says_what_engine_ran_the_retry_though_its_beat_carries_none(tmp_path: Path):
    """The first beat past the wedged step is a checkpoint's, or a callback's plain one: the engine
    info comes from the generator's last beat since the restart (it once read engine: {})."""
    ok, level, _, _, _ = _restart(tmp_path, frozenset({20}))
    info = {"engine_restarts": 1, "rollouts_ok": 1, "cudagraphs": "off", "engine_worker": "standby",
            "applied_cudagraph_mode": "NONE", "loss": 0.5}
    for t, hb in enumerate([Heartbeat(1000, 9, 0.0, 17, "generate", info), Heartbeat(1000, 10, 0.0, 18, "checkpoint")]):
        level.observe(1, Sample(t=101.0 + t, wall=101.0 + t, cpu_pct={}, gpu=None, heartbeat=hb))
    (recovered,) = [r for r in read_journal(tmp_path / "journal.jsonl") if r["event"] == "engine_recovered"]
    assert recovered["step"] == 18 and recovered["engine"] == {
        "engine_restarts": 1, "cudagraphs": "off", "engine_worker": "standby", "applied_cudagraph_mode": "NONE"}


def test_an_engine_restart_the_generator_decided_alone_is_recovered_or_its_failed_retry_escalates(tmp_path: Path):
    """A backstop restart's retry is watched like the supervisor's own: ``engine_recovered`` once the
    trainer goes on (it never came: status said 'no progress after it' for the rest of the run),
    and while it is pending a crash is the retry failing."""
    journal = Journal(tmp_path / "journal.jsonl", "run")
    level = EngineLevel(FakeTree(), lambda: journal, lambda: 100.0, kill_timeout=5.0)
    info = {"engine_restarts": 1, "engine_restart_by": "generator", "cudagraphs": "off", "rollouts_ok": 0}
    level.observe(1, Sample(t=200.0, wall=200.0, cpu_pct={}, gpu=None, heartbeat=Heartbeat(1000, 5, 0.0, 2, "load", info)))
    assert level.unrecovered(1), "its retry has not come back yet"
    level.observe(1, Sample(t=203.0, wall=203.0, cpu_pct={}, gpu=None,
                            heartbeat=Heartbeat(1000, 9, 0.0, 3, "train", {**info, "rollouts_ok": 1})))
    (recovered,) = [r for r in read_journal(tmp_path / "journal.jsonl") if r["event"] == "engine_recovered"]
    assert recovered["backstop"] and recovered["step"] == 3 and recovered["kill_to_progress_s"] == 3.0


def test_a_backstop_restart_first_seen_after_its_retry_is_recovered_at_once(tmp_path: Path):
    journal = Journal(tmp_path / "journal.jsonl", "run")
    level = EngineLevel(FakeTree(), lambda: journal, lambda: 100.0, kill_timeout=5.0)
    info = {"engine_restarts": 1, "engine_restart_by": "generator", "cudagraphs": "off", "rollouts_ok": 1}
    level.observe(1, Sample(t=200.0, wall=200.0, cpu_pct={}, gpu=None, heartbeat=Heartbeat(1000, 9, 0.0, 3, "train", info)))
    (recovered,) = [r for r in read_journal(tmp_path / "journal.jsonl") if r["event"] == "engine_recovered"]
    assert recovered["step"] == 3 and recovered["backstop"] and not level.unrecovered(1)


def test_a_second_restarts_retry_is_not_taken_as_done_from_the_first_retrys_beats(tmp_path: Path):
    """After an engine restart whose retry came back, every beat says ``rollouts_ok ==
    engine_restarts`` (1 == 1) until the generator acts on the next restart: the wedged call's beat,
    read right after the second restart, once marked that retry done at once, so a crash of it
    was judged a crash of the trainer's own, not the retry failing."""
    journal = Journal(tmp_path / "journal.jsonl", "run")
    level = EngineLevel(FakeTree(), lambda: journal, lambda: 100.0, kill_timeout=5.0)

    def restart(step: int) -> None:
        verdict = Verdict(VerdictKind.STALL, detected_at=100.0, onset=96.0, reason="engine made no step",
                          evidence={"step": step})
        assert level.restart(1, GraphPolicy(cudagraphs_off=True), RecoveryLevel(1, "engine only", frozenset({20})),
                             verdict, tmp_path / "control.json", None)

    after_first = {"engine_restarts": 1, "rollouts_ok": 1, "cudagraphs": "off"}
    level.observe(1, Sample(t=99.0, wall=99.0, cpu_pct={}, gpu=None, heartbeat=Heartbeat(1000, 3, 0.0, 4, "train")))
    restart(4)
    for t, hb in enumerate([Heartbeat(1000, 4, 0.0, 4, "restore", after_first),
                            Heartbeat(1000, 5, 0.0, 5, "train", after_first),
                            Heartbeat(1000, 6, 0.0, 7, "generate", after_first)]):
        level.observe(1, Sample(t=101.0 + t, wall=101.0 + t, cpu_pct={}, gpu=None, heartbeat=hb))
    assert not level.unrecovered(1)
    restart(7)  # the engine wedged again in step 8's rollout
    stale = Heartbeat(1000, 6, 0.0, 7, "generate", after_first)  # the wedged call's beat, still the file's
    level.observe(1, Sample(t=110.0, wall=110.0, cpu_pct={}, gpu=None, heartbeat=stale))
    level.note_beat(stale)
    assert level.unrecovered(1), "the second retry has not come back"
    level.note_beat(Heartbeat(1000, 9, 0.0, 7, "restore", {**after_first, "engine_restarts": 2}))
    assert level.unrecovered(1)
    level.note_beat(Heartbeat(1000, 10, 0.0, 7, "sleep", {**after_first, "engine_restarts": 2, "rollouts_ok": 2}))
    assert not level.unrecovered(1)


def test_a_new_attempts_trainer_counts_its_restarts_afresh(tmp_path: Path):
    """The count an earlier attempt's trainer reached says nothing of the next one's generator."""
    ok, level, _, control, _ = _restart(tmp_path, frozenset({20}), attempt=1)
    old = {"engine_restarts": 3, "rollouts_ok": 3}
    level.observe(1, Sample(t=101.0, wall=101.0, cpu_pct={}, gpu=None, heartbeat=Heartbeat(1000, 9, 0.0, 18, "train", old)))
    verdict = Verdict(VerdictKind.STALL, detected_at=100.0, onset=96.0, reason="engine made no step", evidence={"step": 17})
    assert level.restart(2, GraphPolicy(cudagraphs_off=True), RecoveryLevel(1, "engine only", frozenset({20})),
                         verdict, control, None)
    level.note_beat(Heartbeat(2000, 5, 0.0, 17, "sleep", {"engine_restarts": 1, "rollouts_ok": 1}))
    assert not level.unrecovered(2)
