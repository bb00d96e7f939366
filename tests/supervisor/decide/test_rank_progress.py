"""The per-rank progress rule: every trainer process's own beats, judged one by one on a fake clock.

Two ranks (pids 100 and 200) beat into their own files (``Sample.beats``) and the newest beat of
either is the shared file's (``Sample.heartbeat``). Time comes from ``FakeClock``; each test
states when the verdict must come, to the tick.
"""

from __future__ import annotations

import pytest

from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.contract.verdict import VerdictKind
from hangwatch.supervisor.decide.detector import Detector, DetectorConfig
from fakes import FakeClock

pytestmark = pytest.mark.timeout(60)

RANK0, RANK1 = 100, 200
TIMEOUT = 10.0


class TwoRanks:
    """Two ranks on a fake clock: ``tick()`` reads both files, and whichever rank beat this tick."""

    def __init__(self, config: DetectorConfig | None = None, *, ranks: bool = True) -> None:
        self.clock = FakeClock(start=0.0)
        self.detector = Detector(config or DetectorConfig(progress_timeout=TIMEOUT), start=0.0)
        self.beats: dict[int, Heartbeat] = {}
        self.seq = {RANK0: 0, RANK1: 0}
        self.newest: Heartbeat | None = None
        self.alive = {RANK0, RANK1}
        self.ranks = ranks

    def beat(self, pid: int, phase: str | None = "train", *, final: bool = False) -> None:
        self.seq[pid] += 1
        rank = (0 if pid == RANK0 else 1) if self.ranks else None
        hb = Heartbeat(pid=pid, seq=self.seq[pid], ts=self.clock(), step=self.seq[pid], phase=phase,
                       rank=rank, final=final)
        self.beats[pid] = self.newest = hb

    def tick(self):
        t = self.clock()
        cpu = {pid: 100.0 for pid in self.alive}
        sample = Sample(t=t, wall=t, cpu_pct=cpu, gpu=(DeviceSample(0, 100.0, 1000.0, (RANK0, RANK1)),),
                        heartbeat=self.newest, beats=tuple(self.beats.values()))
        verdict = self.detector.observe(sample)
        self.clock.sleep(1.0)
        return verdict

    def run(self, seconds: int, beating: set[int], every: int = 1):
        """``seconds`` ticks, the ``beating`` ranks beating every ``every`` ticks; the first verdict."""
        for i in range(seconds):
            for pid in sorted(beating):
                if i % every == 0:
                    self.beat(pid)
            verdict = self.tick()
            if verdict is not None:
                return verdict
        return None


def test_one_rank_silent_while_the_other_beats_is_a_hang_naming_that_rank():
    ranks = TwoRanks()
    assert ranks.run(5, {RANK0, RANK1}) is None
    stuck_at = ranks.clock() - 1.0  # rank 1's last beat was read at this tick
    verdict = ranks.run(60, {RANK0})
    assert verdict is not None
    assert verdict.kind in (VerdictKind.SILENT_HANG, VerdictKind.STALL)
    assert verdict.evidence["rule"] == "rank_progress"
    assert verdict.evidence["stuck_rank"] == 1
    assert verdict.evidence["stuck_pid"] == RANK1
    assert "rank 1 (pid 200)" in verdict.reason
    assert verdict.detected_at == stuck_at + TIMEOUT
    assert verdict.onset == stuck_at


def test_a_process_without_a_rank_is_named_by_its_pid():
    ranks = TwoRanks(ranks=False)
    ranks.run(3, {RANK0, RANK1})
    verdict = ranks.run(60, {RANK1})
    assert verdict is not None and verdict.evidence["stuck_pid"] == RANK0
    assert "stuck_rank" not in verdict.evidence
    assert "pid 100" in verdict.reason


def test_ranks_beating_at_different_rates_within_the_timeout_are_no_hang():
    ranks = TwoRanks()
    for _ in range(30):
        ranks.beat(RANK1)  # rank 1 every tick, rank 0 every 9 ticks (it also evaluates)
        if ranks.clock() % 9 == 0:
            ranks.beat(RANK0)
        assert ranks.tick() is None


def test_a_rank_that_sent_its_final_beat_is_never_judged():
    ranks = TwoRanks()
    ranks.run(3, {RANK0, RANK1})
    ranks.beat(RANK1, "train_end", final=True)
    assert ranks.run(100, {RANK0}) is None


def test_a_rank_that_exited_is_never_judged():
    ranks = TwoRanks()
    ranks.run(3, {RANK0, RANK1})
    ranks.alive.discard(RANK1)  # its file stays behind, its process is gone from the tree
    assert ranks.run(100, {RANK0}) is None


def test_a_rank_is_judged_only_after_its_first_beat():
    ranks = TwoRanks()
    assert ranks.run(100, {RANK0}) is None  # rank 1 still loading: its warm-up allowance


def test_a_rank_in_a_long_phase_keeps_that_phase_timeout():
    ranks = TwoRanks(DetectorConfig(progress_timeout=TIMEOUT, phase_timeouts={"checkpoint": 50.0}))
    ranks.run(2, {RANK0, RANK1})
    ranks.beat(RANK0, "checkpoint")  # rank 0 saves while rank 1 goes on
    assert ranks.run(45, {RANK1}) is None
    verdict = ranks.run(20, {RANK1})
    assert verdict is not None and verdict.evidence["stuck_rank"] == 0 and verdict.window == 50.0


def test_whole_tree_silence_keeps_the_shared_progress_verdict():
    ranks = TwoRanks()
    ranks.run(3, {RANK0, RANK1})
    verdict = ranks.run(60, set())
    assert verdict is not None and verdict.evidence["rule"] == "progress"


def test_time_the_supervisor_did_not_run_is_no_rank_silence():
    ranks = TwoRanks()
    ranks.run(3, {RANK0, RANK1})
    ranks.run(5, {RANK0})
    ranks.clock.advance(100.0)
    ranks.detector.unobserved(100.0)
    assert ranks.run(3, {RANK0}) is None


def test_the_building_verdict_names_the_rank_rule():
    ranks = TwoRanks()
    ranks.run(3, {RANK0, RANK1})
    ranks.run(6, {RANK0})
    building = ranks.detector.building(ranks.clock() - 1.0)
    assert building is not None and building[0] == "rank_progress" and 0.5 < building[2] < 1.0


def test_samples_with_per_rank_beats_round_trip_through_json():
    ranks = TwoRanks()
    ranks.beat(RANK0)
    ranks.beat(RANK1, final=True)
    t = 1.0
    sample = Sample(t=t, wall=t, cpu_pct={RANK0: 1.0}, gpu=None, heartbeat=ranks.newest,
                    beats=tuple(ranks.beats.values()))
    again = Sample.from_json(sample.to_json())
    assert again.beats == sample.beats
    assert again.beats[1].final and again.beats[1].rank == 1
    assert "beats" not in Sample(t=t, wall=t, cpu_pct={}, gpu=None).to_json()


def test_ranks_waiting_while_rank_0_evaluates_alone_are_paused_until_it_is_back():
    """Rank 0 evaluates for 30 s (beating ``eval``) while rank 1 waits in a barrier, silent: no
    verdict. Back to training, rank 1's clock goes on where it was paused: its silence less the
    30 s it may have waited."""
    ranks = TwoRanks()
    ranks.run(3, {RANK0, RANK1})
    last = ranks.clock() - 1.0
    eval_start = ranks.clock()
    for _ in range(30):
        ranks.beat(RANK0, "eval")
        assert ranks.tick() is None
    back = ranks.clock()
    ranks.beat(RANK0, "train")
    verdict = ranks.run(60, {RANK0})
    assert verdict is not None and verdict.evidence["stuck_rank"] == 1
    assert verdict.detected_at == last + (back - eval_start) + TIMEOUT
    assert verdict.onset == last + (back - eval_start)


def test_evaluations_more_often_than_the_timeout_do_not_hide_a_stuck_rank():
    """Rank 0 evaluates alone for 4 s of every 8: rank 1's clock is paused for those, not restarted,
    so it is caught after TIMEOUT seconds of counted silence."""
    ranks = TwoRanks()
    ranks.run(3, {RANK0, RANK1})
    verdict = None
    for i in range(200):
        ranks.beat(RANK0, "eval" if i % 8 < 4 else "train")
        verdict = ranks.tick()
        if verdict is not None:
            break
    assert verdict is not None and verdict.evidence["stuck_rank"] == 1
    assert 18.0 <= verdict.detected_at <= 24.0  # ~10 s counted, ~10 s paused, from its last beat at t=2


def test_a_side_process_beating_another_phase_all_along_holds_no_clock():
    """An asynchronous layout: a rollout worker beats ``generate`` all along beside the trainer.
    The trainer stuck is caught at its own timeout: the worker's phase began before the trainer's
    last beat, so it is not what the trainer waits for."""
    ranks = TwoRanks()
    for _ in range(5):
        ranks.beat(RANK0, "generate")
        ranks.beat(RANK1, "train")
        assert ranks.tick() is None
    stuck_at = ranks.clock() - 1.0
    for _ in range(60):
        ranks.beat(RANK0, "generate")
        verdict = ranks.tick()
        if verdict is not None:
            break
    assert verdict is not None and verdict.evidence["stuck_rank"] == 1
    assert verdict.detected_at == stuck_at + TIMEOUT
