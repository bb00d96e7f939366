"""Review round 9: the cohort's store-loss judgement, now made on every tick by the main loop too."""

from __future__ import annotations

import pytest

from hangwatch.supervisor.cohort.link import CohortLink
from hangwatch.supervisor.cohort.store import MemoryStore

from cohort_fakes import Clock, join_all as _join_all, node as _node

pytestmark = pytest.mark.timeout(30)


class _Blip:
    """Node 1's view of the store: it misses calls while ``down``."""

    def __init__(self, store: MemoryStore) -> None:
        self.store, self.down = store, False

    def __getattr__(self, name: str):
        from hangwatch.supervisor.cohort.store import StoreError

        attr = getattr(self.store, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            if self.down:
                raise StoreError("the cohort store did not answer within 3.33333 s")
            return attr(*args, **kwargs)
        return call


def test_a_blip_just_before_the_job_was_suspended_is_not_a_lease_of_failure_on_the_next_tick():
    """One call missed (node 0's host busy a moment), then the whole job suspended for a minute
    with no call in flight. Continued, the store answers again; but the main loop's tick asks the
    cohort before any call was made, and the time since that one miss, the pause included, was
    taken for a lease of failure: the node stopped (75) though nothing was wrong. Only failures
    seen count: the streak is as long as its last seen failure, not the time since its first."""
    clock = Clock()
    store = MemoryStore()
    view = _Blip(store)
    n0, n1 = _node(store, 0, clock), _node(view, 1, clock)
    _join_all([n0, n1])
    link = CohortLink(n1, lambda: None)
    view.down = True
    clock.now += 1
    assert n1.poll(1) is None  # one miss
    view.down = False
    clock.now += 60  # the job suspended as a whole (SIGSTOP); continued
    verdict = link.verdict(1, clock.now)  # the main loop's first tick after the pause
    assert verdict is None and n1.problem is None, verdict
    assert n1.poll(1) is None and n1.problem is None
    for n in (n0, n1):
        n._stop.set()


def test_a_store_still_failing_past_the_lease_is_lost_on_the_tick():
    """The store that does not answer at all is still lost within the lease (each tick's poll fails)."""
    clock = Clock()
    store = MemoryStore()
    view = _Blip(store)
    n0, n1 = _node(store, 0, clock), _node(view, 1, clock)
    _join_all([n0, n1])
    link = CohortLink(n1, lambda: None)
    view.down = True
    verdict = None
    for _ in range(30):
        clock.now += 1
        n1.poll(1)
        verdict = link.verdict(1, clock.now)
        if verdict is not None:
            break
    assert verdict is not None and "unreachable" in verdict.reason, verdict
    assert clock.now <= 12
    for n in (n0, n1):
        n._stop.set()
