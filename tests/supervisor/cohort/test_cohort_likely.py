"""Learning of another node's incident between ticks: the heads-up while a verdict builds, and the short,
bounded poll of the incident key around it (pure parts on a fake clock, then two nodes' links on one
in-memory store)."""

from __future__ import annotations

import json
import math

import pytest

from hangwatch.supervisor.cohort.likely import (HINT_AT, MAX_ETA_S, Hint, HintOnce, IllegalWatchTransition,
                                                IncidentWatch, WatchState, eta, hint)
from hangwatch.supervisor.cohort.link import CohortLink

from cohort_helpers import pair
from fakes import MemoryStore

pytestmark = pytest.mark.timeout(30)


def _hint(node=1, attempt=1, eta_s=2.0, wall=500.0) -> Hint:
    return Hint(attempt, node, "stall", wall, eta_s)


# -- the heads-up's record and when it is due ----------------------------------------


def test_eta_is_what_is_left_of_the_window_once_half_of_it_passed():
    assert eta(("stall", 10.0, 0.25), 11.0) is None  # a quarter: nothing to tell yet
    assert eta(("stall", 10.0, HINT_AT), 12.0) == pytest.approx(2.0)  # half of a 4 s window
    assert eta(("progress", 0.0, 0.75), 90.0) == pytest.approx(30.0)  # 3/4 of 120 s
    assert eta(("stall", 0.0, 1.5), 6.0) == 0.0  # past due: expected now, never negative
    assert eta(("stall", 0.0, 1e-300 + HINT_AT), 1e300) == MAX_ETA_S
    assert eta(("stall", math.nan, 0.9), 1.0) is None


def test_a_building_verdict_is_told_once_per_onset_and_attempt():
    once = HintOnce()
    assert once.due(1, None, 5.0) is None
    assert once.due(1, ("stall", 0.0, 0.3), 3.0) is None
    assert once.due(1, ("stall", 0.0, 0.5), 5.0) == pytest.approx(5.0)
    assert once.due(1, ("stall", 0.0, 0.6), 6.0) is None  # the same verdict, still building
    assert once.due(1, ("stall", 20.0, 0.5), 25.0) == pytest.approx(5.0)  # a new onset: a new verdict
    assert once.due(2, ("stall", 20.0, 0.5), 25.0) == pytest.approx(5.0)  # a new attempt


def test_a_hint_reads_back_and_a_record_no_node_wrote_is_none():
    h = _hint()
    assert hint(json.dumps(h.to_json())) == h
    for raw in (None, "", "[]", "{}", '{"attempt": 1}', json.dumps({**h.to_json(), "eta_s": "soon"}),
                json.dumps({**h.to_json(), "wall": 1e400}), '{"attempt": 1, "node": 1, "rule": "x", '
                                                            '"wall": 1, "eta_s": NaN}'):
        assert hint(raw) is None, raw
    assert len(hint(json.dumps({**h.to_json(), "rule": "x" * 10_000})).rule) == 40


# -- the look-out ----------------------------------------------------------------------


def test_a_hint_opens_a_fast_poll_from_lead_before_the_expected_verdict_to_slack_after():
    watch = IncidentWatch(fast=0.05, lead=2.0, slack=5.0)
    watch.start(1)
    assert not watch.due(0.0)  # idle: the ticks poll, nothing between them
    assert watch.hinted(_hint(eta_s=10.0), me=0, now=100.0) == pytest.approx(115.0)
    assert watch.state is WatchState.LIKELY and watch.window == (108.0, 115.0)
    assert not watch.due(107.9)  # far from the expected verdict: still the ticks alone
    assert watch.due(108.0)
    assert not watch.due(108.03)  # not more often than every `fast` s
    assert watch.due(108.06)
    assert watch.due(114.9)
    assert not watch.due(115.1)  # the window passed with no announcement: back to the ticks
    assert watch.state is WatchState.IDLE and not watch.due(115.2)


def test_a_hint_due_now_polls_at_once_and_the_window_is_capped():
    watch = IncidentWatch(fast=0.05, lead=2.0, slack=5.0, cap=3.0)
    watch.start(1)
    assert watch.hinted(_hint(eta_s=0.5), me=0, now=10.0) == pytest.approx(13.0)  # capped at 3 s
    assert watch.due(10.0)


def test_own_repeated_or_other_attempts_hints_open_nothing():
    watch = IncidentWatch()
    watch.start(2)
    assert watch.hinted(_hint(node=0, attempt=2), me=0, now=1.0) is None  # ours
    assert watch.hinted(_hint(node=1, attempt=1), me=0, now=1.0) is None  # a past attempt's
    assert watch.state is WatchState.IDLE
    assert watch.hinted(_hint(node=1, attempt=2), me=0, now=1.0) is not None
    assert watch.hinted(_hint(node=1, attempt=2), me=0, now=1.5) is None  # the same hint, read again
    # One heads-up at a time: a hint rewritten at every tick (a stranger's, unauthenticated) starts no
    # py-spy round at every tick, only once the window it opened has passed.
    assert watch.hinted(_hint(node=1, attempt=2, wall=501.0), me=0, now=2.0) is None
    assert watch.hinted(_hint(node=1, attempt=2, wall=600.0), me=0, now=9.0) is not None  # its next verdict


def test_once_announced_nothing_is_polled_until_the_next_attempt():
    watch = IncidentWatch()
    watch.start(1)
    watch.hinted(_hint(), me=0, now=0.0)
    watch.announced()
    assert watch.state is WatchState.OPEN and not watch.due(1.0)
    assert watch.hinted(_hint(wall=700.0), me=0, now=1.0) is None
    watch.start(1)  # the same attempt: no change
    assert watch.state is WatchState.OPEN
    watch.start(2)
    assert watch.state is WatchState.IDLE and watch.hinted(_hint(attempt=2), me=0, now=2.0) is not None


def test_an_illegal_move_and_bad_settings_are_named_errors():
    watch = IncidentWatch()
    watch.start(1)
    watch.announced()
    with pytest.raises(IllegalWatchTransition, match="open -> likely"):
        watch._enter(WatchState.LIKELY)
    with pytest.raises(ValueError, match="fast=0"):
        IncidentWatch(fast=0)


# -- two nodes' links on one store -------------------------------------------------------


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.gets: list[str] = []

    def get(self, key):
        self.gets.append(key)
        return super().get(key)


def _links(store):
    _, clock, nodes = pair(store)
    journals = [[], []]

    class Journal:
        def __init__(self, records):
            self.records = records

        def append(self, event, **fields):
            self.records.append({"event": event, **fields})

    links = [CohortLink(n, (lambda j=Journal(journals[i]): j)) for i, n in enumerate(nodes)]
    return clock, nodes, links


def test_a_building_verdict_starts_the_others_early_round_and_wakes_them_at_the_announcement():
    store = CountingStore()
    _, nodes, (link0, link1) = _links(store)
    # Node 1's stall is half way through its 4 s window: it tells the others once.
    link1.building(1, ("stall", 10.0, 0.5), 12.0)
    written = [k for k in store.data if "/likely/" in k]
    assert len(written) == 1
    link1.building(1, ("stall", 10.0, 0.75), 13.0)
    assert hint(store.data[written[0]]).eta_s == pytest.approx(2.0)  # not written again
    # Node 0 reads it at its tick (its own clock: 500 s): its early round belongs to a verdict until 507.
    assert link0.heads_up(1, 500.0) == pytest.approx(507.0)
    assert link0.heads_up(1, 500.5) is None  # taken once
    assert not link0.wake(1, 500.6)  # polled: nothing announced yet
    assert not link0.wake(1, 500.62)  # within `fast` of the last read: no read
    nodes[1].announce(1, "stall", "gpu_util=100% cpu=0% for 4 s")
    assert link0.wake(1, 500.7)  # woken between ticks, within one fast poll of the announcement
    reads = len(store.gets)
    assert not link0.wake(1, 500.8) and len(store.gets) == reads  # known: no more reads
    verdict = link0.verdict(1, 500.8)
    assert verdict is not None and verdict.reason.startswith("node 1 announced stall")


def test_without_a_hint_the_store_is_read_only_at_the_ticks():
    store = CountingStore()
    _, nodes, (link0, _) = _links(store)
    assert link0.heads_up(1, 1.0) is None
    reads = len(store.gets)
    for i in range(100):
        assert not link0.wake(1, 1.0 + i * 0.05)
    assert len(store.gets) == reads
    nodes[0].hint(1, "stall", 1.0)  # this node's own hint is no heads-up for itself
    assert link0.heads_up(1, 6.0) is None and not link0.wake(1, 6.1)


def test_a_store_that_fails_leaves_the_hint_and_the_poll_to_the_ticks():
    store = CountingStore()
    _, nodes, (link0, link1) = _links(store)
    store.down = True
    link1.building(1, ("stall", 0.0, 0.5), 2.0)  # no raise: the others learn at their ticks
    assert nodes[0].poll(1) is None  # the tick's own poll fails: the store is failing for node 0
    reads = len(store.gets)
    store.down = False
    nodes[1].hint(1, "stall", 2.0)
    # While it fails, only the tick's own poll waits for a call's deadline: no heads-up read, no poll.
    assert link0.heads_up(1, 1.0) is None and len(store.gets) == reads
    assert nodes[0].poll(1) is None  # it answers again
    assert link0.heads_up(1, 1.0) is not None
    store.down = True
    assert not link0.wake(1, 1.1)  # a failed read: no raise
    reads = len(store.gets)
    assert not link0.wake(1, 1.2) and len(store.gets) == reads
