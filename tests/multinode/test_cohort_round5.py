"""Cohort faults of a store that is alive but unreliable: replies that come after their call
gave up (the call was done all the same), and connections that are cut (a network blip)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

import pytest

from hangwatch.supervisor.cohort.membership import Membership
from hangwatch.supervisor.cohort.node import Cohort
from hangwatch.supervisor.cohort.store import MemoryStore, StoreError, TCPStoreClient

from test_cohort_faults import Clock, _join_all, _node

pytestmark = pytest.mark.timeout(60)


class _LateStore(MemoryStore):
    """Node 0's host under load: the next ``late`` calls are done, but their replies come after the
    call's deadline (a third of the lease), so the caller sees a failure and retries. The real
    store does exactly that (``test_a_store_blip_shorter_than_the_lease_leaves_every_later_call_right``:
    both timed-out adds landed)."""

    def __init__(self) -> None:
        super().__init__()
        self.late = 0
        self.clocks: list[Clock] = []

    def _late(self) -> None:
        if self.late > 0:
            self.late -= 1
            for c in self.clocks:
                c.now += 10 / 3
            raise StoreError("the cohort store did not answer within 3.33 s")

    def set(self, key: str, value: str) -> None:
        super().set(key, value)
        self._late()

    def add(self, key: str, amount: int = 1) -> int:
        value = super().add(key, amount)
        self._late()
        return value


def test_a_late_reply_to_this_nodes_capture_does_not_count_it_twice():
    """Node 1 says it has its stacks while the store answers late: its call is retried, and the
    retried add counted node 1 twice (2 of 2 nodes), so node 1 stopped waiting and killed its
    ranks, waking node 0's out of their collective in the middle of node 0's capture."""
    store = _LateStore()
    clock0, clock1 = Clock(), Clock(start=5000.0)
    store.clocks = [clock0, clock1]
    n0, n1 = _node(store, 0, clock=clock0), _node(store, 1, clock=clock1)
    _join_all([n0, n1])
    store.late = 1
    assert n1.all_captured(1, timeout=8) is None, "node 0 never captured: node 1 waits out its capture timeout"
    assert clock1.now - 5000.0 >= 8
    n0.mark_captured(1)  # node 0 has its stacks now
    assert n1.all_captured(1, timeout=8) is not None
    for n in (n0, n1):
        n.close(linger_cap=0)


def test_the_capture_wait_skips_a_node_that_left_and_counts_a_crashed_one():
    store, clock = MemoryStore(), Clock()
    nodes = [Cohort(store, Membership(i, 3, "127.0.0.1", 29600, "job"), {"a": 1}, lease_interval=3600,
                    lease_timeout=10, barrier_timeout=30, clock=clock, sleep=clock.sleep, wall=clock) for i in range(3)]
    _join_all(nodes)
    nodes[1].finish(1)  # node 1's trainer finished: nothing to capture there
    nodes[2].mark_captured(1)  # node 2's trainer crashed: nothing to capture either
    assert nodes[0].all_captured(1, timeout=8) == 0.0
    for n in nodes:
        n.close(linger_cap=0)


def test_status_of_a_node_still_joining_and_of_one_refused_at_start(tmp_path, capsys):
    """A cohort node waits at start until every node has joined (up to --join-timeout, 120 s), before
    its journal exists: ``hangwatch status`` said "not a hangwatch run directory" all that time, and
    the same for a node refused at the join."""
    import os

    from hangwatch.cli import rundir
    from hangwatch.cli.main import main

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    (run / "settings.json").write_text("{}")
    fd = rundir.lock(run)  # the supervisor, alive, still joining
    try:
        assert main(["status", str(run)]) == 0
        assert "starting: no attempt yet" in capsys.readouterr().out
    finally:
        os.close(fd)
    assert main(["status", "--json", str(run)]) == 0
    assert "stopped before its run began" in json.loads(capsys.readouterr().out)["state"]
    assert main(["status", str(tmp_path)]) == 2  # not a run directory at all


def test_a_store_blip_while_the_nodes_join_is_waited_out():
    """The join may last minutes (every node waits for the last one): one failed call there said
    "node 0 closed the cohort store while this node was joining", and the node left a job whose
    node 0 was fine (exit 2; the others then took it for lost, 75)."""
    from test_cohort_faults import _SlowStore

    store = _SlowStore()
    clock0, clock1 = Clock(), Clock(start=5000.0)
    n0, n1 = _node(store, 0, clock=clock0), _node(store, 1, clock=clock1)
    errors: list[Exception] = []

    def join0() -> None:
        try:
            n0.join(timeout=1e6)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    leader = threading.Thread(target=join0)
    leader.start()
    deadline = time.monotonic() + 10
    while store.data.get(n0._root("leader")) is None:  # node 0 is up and waiting for node 1
        assert time.monotonic() < deadline
        time.sleep(0.01)
    store.clocks = [clock0, clock1]
    store.misses = 2  # two calls in a row past their deadline: less than the lease
    n1.join(timeout=1e6)
    leader.join(timeout=20)
    assert not errors, errors
    assert n0.others == [1] and n1._generation == n0._generation
    for n in (n0, n1):
        n.close(linger_cap=0)


def test_a_finish_said_while_the_store_misses_a_reply_is_still_a_finish():
    """Node 1's trainer finished while the store missed a reply: its finished record was lost, and the
    record its close wrote said only that it left, so node 0, still saving, stopped with 75."""
    from test_cohort_faults import _SlowStore

    store = _SlowStore()
    clock0, clock1 = Clock(), Clock(start=5000.0)
    n0, n1 = _node(store, 0, clock=clock0), _node(store, 1, clock=clock1)
    _join_all([n0, n1])
    store.clocks = [clock0, clock1]
    store.misses = 1
    n1.finish(1)
    n1.close()
    n0.renew()
    assert n0.problem is None, n0.problem
    n0.close(linger_cap=0)


def test_two_nodes_given_the_same_rank_the_others_join_timeout_says_so():
    """Two supervisors started as node 1 of 3 (no node 2): the second is refused, and nodes 0 and
    1 waited out their join timeout for node 2, saying only "nodes [2] did not join"."""
    from hangwatch.supervisor.cohort.errors import CohortRefused

    store = MemoryStore()
    n0, n1, twin = (_node(store, rank, 3) for rank in (0, 1, 1))
    errors: dict[int, Exception] = {}

    def join(i: int, node: Cohort) -> None:
        try:
            node.join(timeout=60)
        except Exception as exc:  # noqa: BLE001
            errors[i] = exc

    threads = [threading.Thread(target=join, args=(i, n)) for i, n in enumerate((n0, n1))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while not n1._generation or store.data.get(n1._key("join", 1)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(CohortRefused, match="node 1 already joined"):
        twin.join(timeout=60)
    for t in threads:
        t.join(timeout=20)
    for i in (0, 1):
        assert "nodes [2] did not join" in str(errors[i])
        assert "two nodes given --node-rank 1" in str(errors[i])
