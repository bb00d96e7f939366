"""The runner takes the first evidence round while a hang is building, through the
capture hook's optional ``early_round`` (the supervisor never imports diagnostics),
and hands it to the capture at the verdict only if it belongs to that incident."""

from __future__ import annotations

import threading

import pytest

from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.contract.verdict import Verdict, VerdictKind

from hangwatch.supervisor.recover.capture import BoundedCapture

from fakes import FakeCapture, FakeClock, fake_supervisor

pytestmark = pytest.mark.timeout(30)


class EarlyCapture(FakeCapture):
    def __init__(self) -> None:
        super().__init__()
        self.early: list[tuple[float, object]] = []
        self.clock = None

    def early_round(self, tree, deadline):
        token = f"round-{len(self.early) + 1}"
        self.early.append((self.clock(), token))
        return token


def _with_early(tmp_path, script, **over):
    sup, tree, clock, _ = fake_supervisor(tmp_path, script, **over)
    capture = EarlyCapture()
    capture.clock = clock
    sup.capture_hook = capture
    return sup, tree, clock, capture


def test_the_early_round_is_taken_at_half_the_window_and_reaches_the_capture(tmp_path):
    sup, _, _, capture = _with_early(tmp_path, ["wedge", "train"])
    assert sup.run() == 0
    # Stall confirmed from 1000 s, window 10 s: one early round at 1005, the verdict at 1010.
    assert [round(t) for t, _ in capture.early] == [1005]
    request = capture.requests[0]
    assert request.verdict.kind is VerdictKind.STALL
    assert request.extra["early_round"] == "round-1" and request.extra["early_round_rule"] == "stall"


def test_an_early_round_from_an_incident_that_cleared_is_not_used(tmp_path):
    sup, tree, clock, capture = _with_early(tmp_path, ["wedge", "train"])
    original = tree.sample

    def sample():
        s = original()
        if 1000 <= clock.now < 1008 or clock.now >= 1010:
            return s  # wedged: GPU busy, CPU idle, no beat
        # 1008-1009: a beat and a working host. The first early round (1005) is stale now.
        return Sample(s.t, s.wall, {pid: 100.0 for pid in s.cpu_pct}, s.gpu,
                      Heartbeat(4001, int(clock.now), clock.now, 1, "train"), s.tree_size)

    tree.sample = sample
    assert sup.run() == 0
    assert [round(t) for t, _ in capture.early] == [1005, 1015]
    request = capture.requests[0]
    assert round(request.verdict.onset) == 1010 and request.extra["early_round"] == "round-2"


def test_a_hook_without_early_round_gets_no_extra(tmp_path):
    sup, _, _, capture = fake_supervisor(tmp_path, ["wedge", "train"])
    assert sup.run() == 0
    assert "early_round" not in capture.requests[0].extra


def _bounded(capture: EarlyCapture):
    clock = FakeClock(100.0)
    capture.clock = clock
    return BoundedCapture(capture, journal=lambda: None, clock=clock, sleep=clock.sleep, stopping=lambda: False,
                          timeout=15.0), clock


def _announced(at: float) -> Verdict:
    # As ``CohortLink.verdict`` makes it: onset and detection when this node learned of it.
    return Verdict(VerdictKind.STALL, at, at, "node 1 announced stall: ...")


def test_another_nodes_heads_up_takes_the_early_round_for_the_verdict_learned_from_it():
    capture = EarlyCapture()
    bounded, clock = _bounded(capture)
    assert bounded.early_round_now(100.0, lambda: [], until=107.0)
    extra = bounded.early_extra(_announced(102.5))  # learned after the round: still its incident
    assert extra == {"early_round": "round-1", "early_round_rule": "cohort"}


def test_a_heads_up_round_is_not_used_past_its_window_nor_taken_twice_at_once():
    capture = EarlyCapture()
    bounded, _ = _bounded(capture)
    assert bounded.early_round_now(100.0, lambda: [], until=107.0)
    assert bounded.early_extra(_announced(108.0)) == {}  # the hang it was taken for cleared
    assert bounded.early_extra(_announced(108.0)) == {}  # (handed out once)
    hook = EarlyCapture()
    gate = threading.Event()
    hook.early_round = lambda tree, deadline: gate.wait(5)
    slow, _ = _bounded(hook)
    assert slow.early_round_now(100.0, lambda: [], until=107.0)
    assert not slow.early_round_now(100.5, lambda: [], until=108.0)  # one still running
    gate.set()


def test_a_hook_without_early_round_takes_no_heads_up_round():
    bounded, _ = _bounded(FakeCapture())  # type: ignore[arg-type]
    assert not bounded.early_round_now(100.0, lambda: [], until=107.0)


def test_a_heads_up_while_this_nodes_own_round_is_fresh_takes_none_but_one_after_a_stale_round_does():
    capture = EarlyCapture()
    bounded, _ = _bounded(capture)
    assert bounded.early_round_now(100.0, lambda: [], until=107.0)
    bounded._early.thread.join(5)
    assert not bounded.early_round_now(101.0, lambda: [], until=108.0)  # taken 1 s ago: as good
    assert bounded.early_round_now(200.0, lambda: [], until=207.0)  # 100 s old: that hang cleared
    assert [token for _, token in capture.early] == ["round-1", "round-2"]
