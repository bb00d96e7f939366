"""The lease: a member that stops renewing, or a store that stops answering, is lost within the
lease, and nothing else is (a finished node, skewed clocks, a job suspended as a whole, a blip).
Judged over the in-memory store, with fake clocks."""

from __future__ import annotations

import threading
import time

import pytest

from hangwatch.contract.verdict import VerdictKind
from hangwatch.supervisor.cohort.link import CohortLink
from hangwatch.supervisor.cohort.errors import MemberLeft, MemberLost, StoreLost
from hangwatch.supervisor.cohort.membership import Membership
from hangwatch.supervisor.cohort.node import Cohort
from hangwatch.supervisor.cohort.store import StoreError

from cohort_helpers import join_all, node, node_clock, pair
from fakes import FakeClock, MemoryStore

pytestmark = pytest.mark.timeout(30)


def test_a_member_that_stops_renewing_is_lost_within_the_lease():
    _, clock, (n0, n1) = pair()
    n0.renew(), n1.renew()
    for _ in range(5):
        clock.now += 1
        n0.renew(), n1.renew()
    assert n0.problem is None
    for _ in range(11):  # node 1's supervisor is gone: its counter stops
        clock.now += 1
        n0.renew()
    assert isinstance(n0.problem, MemberLost) and n0.problem.node == 1


def test_a_store_that_keeps_failing_is_lost_node_0():
    store, clock, (_, n1) = pair()
    n1.renew()
    store.down = True
    n1.renew()
    clock.now += 5
    n1.renew()
    assert n1.problem is None, "a blip is tolerated"
    clock.now += 6
    n1.renew()
    assert isinstance(n1.problem, StoreLost) and "unreachable" in str(n1.problem)


def _tick(clock_nodes, seconds=1.0, rounds=1):
    for _ in range(rounds):
        for clock, member in clock_nodes:
            clock.now += seconds
            member.renew()


def test_a_finished_node_is_no_loss_but_a_node_that_left_otherwise_is_at_once():
    """A node whose trainer finished stops renewing its lease: that must not kill the others'
    trainers (they may still be saving). A node that left without finishing is lost at once."""
    store = MemoryStore()
    c0, c1, c2 = node_clock(), node_clock(), node_clock()
    n0, n1, n2 = node(store, 0, 3, c0), node(store, 1, 3, c1), node(store, 2, 3, c2)
    join_all([n0, n1, n2])
    _tick([(c0, n0), (c1, n1), (c2, n2)], rounds=3)
    n1.finish(attempt=1)  # node 1's trainer exited 0; its supervisor is gone from now on
    _tick([(c0, n0), (c2, n2)], rounds=30)
    assert n0.problem is None and n2.problem is None, n0.problem
    n2._leave(finished=False)  # node 2's supervisor gave up
    _tick([(c0, n0)], rounds=2)
    assert isinstance(n0.problem, MemberLeft) and n0.problem.node == 2
    assert "node 2's supervisor stopped" in str(n0.problem)


def test_a_node_that_joined_but_never_renewed_is_lost_within_the_lease():
    """Its counter stays at zero: that is a lost node too (it was never taken for one)."""
    store = MemoryStore()
    n0, n1 = node(store, 0), node(store, 1)
    join_all([n0, n1])
    store.data[n1._key("lease", 1)] = "0"  # as if node 1 died between its join and its first renewal
    clock = n0.clock
    for _ in range(12):
        clock.now += 1
        n0.renew()
    assert isinstance(n0.problem, MemberLost) and n0.problem.node == 1


def test_skewed_clocks_decide_nothing():
    """Node clocks hours apart and running at different rates: leases are counters judged on
    each node's own clock, so nobody is lost while everyone renews, and a real loss is
    still seen within the lease on the observer's clock."""
    store = MemoryStore()
    c0, c1 = node_clock(1e9), node_clock(5.0)
    n0 = node(store, 0, clock=c0)
    n1 = Cohort(store, Membership(1, 2, "127.0.0.1", 29600, "job"), {"a": 1}, lease_interval=3600, lease_timeout=10,
                clock=c1, sleep=c1.sleep, wall=lambda: -7200.0)  # its wall clock two hours behind
    join_all([n0, n1])
    for _ in range(40):
        c0.now += 1.0
        c1.now += 0.25  # node 1's clock runs at a quarter of node 0's
        n0.renew(), n1.renew()
    assert n0.problem is None and n1.problem is None
    won = n1.announce(1, "stall", "x")
    assert n0.poll(1) == won, "an announcement is taken whatever its wall time"
    for _ in range(11):
        c0.now += 1.0
        n0.renew()
    assert isinstance(n0.problem, MemberLost)


def test_node_0_that_left_is_noticed_at_once_though_it_keeps_the_store_up():
    """Node 0 gave up alone (it took node 1, SIGSTOPped past the lease, for lost; or it hit an
    error) and keeps the store up for the others: its lease thread runs on while it lingers.
    Node 1 must read that node 0 left at its next lease round (before: only once node 0's
    linger ended and the store was gone, three leases later)."""
    store = MemoryStore()
    n0, n1 = (Cohort(store, Membership(i, 2, "127.0.0.1", 29600, "job"), {"a": 1}, lease_interval=0.02,
                     lease_timeout=10, barrier_timeout=30) for i in range(2))
    join_all([n0, n1])
    n0.why = "node 1's supervisor stopped renewing its lease 16 s ago"  # as CohortLink notes it
    closing = threading.Thread(target=n0.close, kwargs={"linger_cap": 20})
    closing.start()
    deadline = time.monotonic() + 5
    while n1.problem is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert isinstance(n1.problem, MemberLeft) and n1.problem.node == 0, n1.problem
    assert "node 0's supervisor gave up: node 1's supervisor stopped renewing" in str(n1.problem), "and why"
    n1.close()  # node 1 stops in turn: node 0's linger ends
    closing.join(timeout=5)
    assert not closing.is_alive()


def test_a_job_suspended_as_a_whole_loses_no_member_when_it_is_continued():
    """Slurm's suspend stops every process of the job; on resume node 0's lease thread ran
    before node 1's and took node 1's counter, unchanged for the whole pause, for a lost
    member: the job was killed with 75 (reproduced with the real job, 10 s pause, lease 4 s).
    Time this node was not running is not watched; a member that stays silent once the
    node watches again is still lost within the lease."""
    store = MemoryStore()
    c0 = node_clock()
    n0 = Cohort(store, Membership(0, 2, "127.0.0.1", 29600, "job"), {"a": 1}, lease_interval=0.02,
                lease_timeout=10, clock=c0, sleep=c0.sleep, wall=c0)
    n1 = node(store, 1)  # its lease thread never runs on its own: it is continued later
    join_all([n0, n1])
    time.sleep(0.1)  # node 0's lease thread has seen node 1's counter
    c0.now += 30  # the whole job stopped for 30 s: node 0's thread wakes 30 s late
    time.sleep(0.2)
    assert n0.problem is None, n0.problem
    n1.renew()  # node 1 continued a moment later
    silent = 0
    while n0.problem is None and silent < 60:  # then node 1 stays silent while node 0 watches
        c0.now += 1
        silent += 1
        time.sleep(0.06)
    assert isinstance(n0.problem, MemberLost) and n0.problem.node == 1 and silent >= 10
    n0.close(linger_cap=0)


def test_nodes_lost_in_the_same_lease_round_are_all_named():
    """4 nodes, nodes 1 and 2 SIGKILLed at once (a rack lost): node 0's journal named node 1 only."""
    store, clock = MemoryStore(), node_clock()
    nodes = [Cohort(store, Membership(i, 4, "127.0.0.1", 29600, "job"), {"a": 1}, lease_interval=3600,
                    lease_timeout=10, clock=clock, sleep=clock.sleep, wall=clock) for i in range(4)]
    for n in nodes:
        n.renew()
    clock.now += 0.5
    nodes[0].renew(), nodes[2].renew(), nodes[3].renew()  # node 2's last renewal came a round after node 1's
    for _ in range(10):  # nodes 1 and 2 are gone: their counters stop
        clock.now += 1
        nodes[0].renew(), nodes[3].renew()
    assert isinstance(nodes[0].problem, MemberLost) and nodes[0].problem.node == 1
    assert "and so did" not in str(nodes[0].problem), "node 2 is not lost yet"
    clock.now += 1
    nodes[0].renew()
    assert nodes[0].problem.node == 1 and "(and so did nodes [2])" in str(nodes[0].problem)
    assert "node 3" not in str(nodes[0].problem)


class _MissingView:
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
    clock = node_clock()
    store = MemoryStore()
    view = _MissingView(store)
    n0, n1 = node(store, 0, clock=clock), node(view, 1, clock=clock)
    join_all([n0, n1])
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
    clock = node_clock()
    store = MemoryStore()
    view = _MissingView(store)
    n0, n1 = node(store, 0, clock=clock), node(view, 1, clock=clock)
    join_all([n0, n1])
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


class Reconnecting:
    """A node's store client: its helper reconnects to whatever store listens on the port now."""

    def __init__(self, target: MemoryStore) -> None:
        self.target = target

    def __getattr__(self, name: str):
        return getattr(self.target, name)


def test_a_store_that_stops_answering_is_lost_within_the_lease_whichever_thread_saw_it_fail():
    """The store client serves one call at a time. While the store did not answer, the main loop's
    poll at each tick took it back at once (a late tick does not sleep), and the lease thread, the
    only one that judged a failing store lost, seldom had a call of its own: a real node whose
    store helper was frozen for 30 s under an 8 s lease was taken for cut off by nobody, itself
    included; it stopped only once the store answered again. Every call's failure counts now."""
    clock = node_clock()
    store = MemoryStore()
    link = Reconnecting(store)
    n0, n1 = node(store, 0, clock=clock), node(link, 1, clock=clock)
    join_all([n0, n1])
    cohort_link = CohortLink(n1, lambda: None)
    link.target = MemoryStore()
    link.target.down = True  # node 0's host cut off: every call of node 1 fails
    for _ in range(12):  # only the main loop's polls reach the store; the lease thread has no turn
        assert n1.poll(1) is None
        clock.now += 1
    verdict = cohort_link.verdict(1, clock.now)
    assert verdict is not None and verdict.kind is VerdictKind.COHORT_LOST, verdict
    assert "unreachable for 12 s" in verdict.reason
    # A store that answers again before the lease is a blip: nothing is lost.
    store2 = MemoryStore()
    link2 = Reconnecting(store2)
    m0, m1 = node(store2, 0, clock=clock), node(link2, 1, clock=clock)
    join_all([m0, m1])
    store2.down = True
    for _ in range(5):
        m1.poll(1)
        clock.now += 1
    store2.down = False
    m1.poll(1)
    clock.now += 10
    assert CohortLink(m1, lambda: None).verdict(1, clock.now) is None and m1.problem is None
    for n in (n0, n1, m0, m1):
        n._stop.set()


class _FrozenInFlight:
    """A call in flight while the whole job was suspended: it fails once continued, 30 s later."""

    def __init__(self, store: MemoryStore, clock: FakeClock) -> None:
        self.store, self.clock = store, clock

    def get(self, key: str):
        self.clock.now += 30
        raise StoreError("the cohort store did not answer within 2.66667 s")

    def __getattr__(self, name: str):
        return getattr(self.store, name)


def test_a_call_that_failed_across_a_pause_of_this_node_is_not_a_lease_of_failure():
    """The job suspended as a whole with a call in flight: the call fails once continued, the store
    answers the next one. Judged from the call's start, the pause alone made the store lost (75)."""
    clock = node_clock()
    store = MemoryStore()
    link = Reconnecting(store)
    n0, n1 = node(store, 0, clock=clock), node(link, 1, clock=clock)
    join_all([n0, n1])
    link.target = _FrozenInFlight(store, clock)
    assert n1.poll(1) is None  # the call in flight across the pause
    link.target = store
    assert CohortLink(n1, lambda: None).verdict(1, clock.now) is None and n1.problem is None
    for n in (n0, n1):
        n._stop.set()


def test_a_lease_record_erased_within_the_lease_never_has_its_node_taken_for_lost():
    """Without a secret a stranger can erase any key: an erased counter reads as moved, and its
    node writes it again at its next round (with a secret no stranger reaches the store at all)."""
    store = MemoryStore()
    c0, c1 = node_clock(), node_clock()
    n0, n1 = node(store, 0, clock=c0), node(store, 1, clock=c1)
    join_all([n0, n1])
    for round_ in range(60):
        c0.now += 1.0
        c1.now += 1.0
        if round_ % 3 == 0:
            n1.renew()  # node 1 renews slowly, well within the lease (10 s)
        if round_ % 7 == 0:
            store.data.pop(n1._key("lease", 1), None)  # the stranger erases it
        n0.renew()
    assert n0.problem is None
    for _ in range(5):  # node 1 gone; its record erased once more: it reads as moved, once
        c0.now += 1.0
        n0.renew()
    assert n0.problem is None
    store.data.pop(n1._key("lease", 1), None)
    for _ in range(11):  # and a lease after that, node 1 is lost all the same
        c0.now += 1.0
        n0.renew()
    assert isinstance(n0.problem, MemberLost) and n0.problem.node == 1
