"""Round 7: multi-node cases found with real jobs, checked here in process over the in-memory store."""

from __future__ import annotations

import threading

import pytest

from hangwatch.contract.verdict import VerdictKind
from hangwatch.supervisor.decide.attempt import GraphPolicy
from hangwatch.supervisor.cohort.errors import CohortRefused, StoreLost
from hangwatch.supervisor.cohort.membership import Membership
from hangwatch.supervisor.cohort.node import Cohort
from hangwatch.supervisor.cohort.link import CohortLink
from hangwatch.supervisor.cohort.store import MemoryStore

from cohort_fakes import Clock, join_all as _join_all, node as _node

pytestmark = pytest.mark.timeout(30)


class Reconnecting:
    """A node's store client: its helper reconnects to whatever store listens on the port now."""

    def __init__(self, target: MemoryStore) -> None:
        self.target = target

    def __getattr__(self, name: str):
        return getattr(self.target, name)


def test_a_node_whose_node_0_died_never_acts_in_the_store_a_new_node_0_hosts_on_its_port():
    """Node 0's supervisor hosts the store. It died, and a node 0 was started again on that port
    (resumed, or a new job under the same cohort id) while the old job's node 1 still ran: node 1's
    helper reconnected to the new store, where the new node 0 had opened generation 1 again. Node 1
    took the new node 0 for its own (their lease counters moved), never stopped, and its trainer's
    crash was announced as the new job's incident: the new job's nodes captured and killed healthy
    ranks, twice in a real run (before: every store's first generation was "1")."""
    clock = Clock()
    old_store = MemoryStore()
    old1_link = Reconnecting(old_store)
    old0, old1 = _node(old_store, 0, clock), _node(old1_link, 1, clock)
    _join_all([old0, old1])
    old0._stop.set()  # node 0's supervisor is SIGKILLed: its store goes with it
    old_store.down = True

    new_store = MemoryStore()  # node 0 started again on the port: a fresh store, the same cohort id
    new0, new1 = _node(new_store, 0, clock), _node(new_store, 1, clock)
    _join_all([new0, new1])
    old1_link.target = new_store  # the old node 1's next call reconnects, to the new store

    old1.announce(1, "crash", "trainer exited with code 1")  # its ranks lost their peers
    assert new0.poll(1) is None and new1.poll(1) is None, "the old job's incident is not the new job's"
    old1.renew()
    assert isinstance(old1.problem, StoreLost), "the old node stops: its node 0 is gone (75)"
    assert "is not the one this node joined" in str(old1.problem) and "another run's" in str(old1.problem)
    old1.close()  # it leaves, saying why: not into the new job's records
    assert new0._read_left(1) is None
    new0.renew(), new1.renew()
    assert new0.problem is None and new1.problem is None
    for n in (new0, new1):
        n._stop.set()


def test_a_store_restarted_empty_on_the_port_is_not_the_one_this_node_joined():
    """Node 0's store came back empty (its supervisor started again, not joined yet): the node's
    calls succeed again, but nothing there is this run's; it stops at once, not a lease later."""
    clock = Clock()
    store = MemoryStore()
    link = Reconnecting(store)
    n0, n1 = _node(store, 0, clock), _node(link, 1, clock)
    _join_all([n0, n1])
    n1.renew()
    assert n1.problem is None, "the store it joined: nothing to say"
    link.target = MemoryStore()
    n1.renew()
    assert isinstance(n1.problem, StoreLost) and "is empty" in str(n1.problem)
    for n in (n0, n1):
        n._stop.set()


def _joined(fingerprints: list[dict], launchers: list[bool]) -> list[object]:
    """Every node's join: its Cohort, or the error it was refused with."""
    clock, store = Clock(), MemoryStore()
    nodes = [Cohort(store, Membership(i, len(fingerprints), "127.0.0.1", 29600, "job"), fp, lease_interval=3600,
                    lease_timeout=10, barrier_timeout=30, clock=clock, sleep=clock.sleep, wall=clock, launcher=launcher)
             for i, (fp, launcher) in enumerate(zip(fingerprints, launchers))]
    results: list[object] = [None] * len(nodes)

    def join(i: int) -> None:
        try:
            nodes[i].join(timeout=1e6)
            results[i] = nodes[i]
        except Exception as exc:  # noqa: BLE001
            results[i] = exc

    threads = [threading.Thread(target=join, args=(i,)) for i in range(len(nodes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    for n in nodes:
        n._stop.set()
    return results


ARG, NO_ARG = {"a": 1, "resume_arg_given": True}, {"a": 1, "resume_arg_given": False}


def test_a_rollout_server_node_joins_without_resume_arg_and_its_checkpoints_do_not_hold_the_job_back():
    """A node that runs no launcher (``trl vllm-serve`` serving the trainers' rollouts) had to be given
    --resume-arg like the trainers, and after every incident its command was relaunched with
    ``--resume_from_checkpoint=...`` appended, which vLLM's parser refuses (exit 2): the server never
    came back and the job crashed at each attempt. Now it joins without the argument, and its own
    checkpoint directory (empty on its node-local disk) no longer sends every node back to step 0."""
    trainer, server = _joined([ARG, NO_ARG], [True, False])
    assert isinstance(trainer, Cohort) and isinstance(server, Cohort), (trainer, server)
    assert trainer.needs_checkpoint and not server.needs_checkpoint
    agreed: dict[int, object] = {}
    threads = [threading.Thread(target=lambda n=n, steps=steps: agreed.__setitem__(n.me.node_rank, n.agree(
        1, steps, GraphPolicy()))) for n, steps in ((trainer, [2, 4, 6]), (server, []))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert agreed[0].checkpoint_step == 6 and agreed[1].checkpoint_step == 6


def test_training_nodes_still_share_resume_arg_whichever_node_runs_no_launcher():
    """Node 0 is the rollout server: nodes 1 and 2 train, only node 1 with --resume-arg. Every node
    is refused, naming them (node 1 was compared with node 0 only, which may go without it)."""
    results = _joined([NO_ARG, ARG, NO_ARG], [False, True, True])
    assert all(isinstance(r, CohortRefused) for r in results), results
    assert "nodes [1] were given --resume-arg, nodes [2] were not" in str(results[1])
    # A trainer without it, next to node 0 training with it: refused as before, at once.
    results = _joined([ARG, NO_ARG], [True, True])
    assert isinstance(results[1], CohortRefused) and "resume_arg_given" in str(results[1])


def test_a_store_that_stops_answering_is_lost_within_the_lease_whichever_thread_saw_it_fail():
    """The store client serves one call at a time. While the store did not answer, the main loop's
    poll at each tick took it back at once (a late tick does not sleep), and the lease thread, the
    only one that judged a failing store lost, seldom had a call of its own: a real node whose
    store helper was frozen for 30 s under an 8 s lease was taken for cut off by nobody, itself
    included; it stopped only once the store answered again. Every call's failure counts now."""
    clock = Clock()
    store = MemoryStore()
    link = Reconnecting(store)
    n0, n1 = _node(store, 0, clock), _node(link, 1, clock)
    _join_all([n0, n1])
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
    m0, m1 = _node(store2, 0, clock), _node(link2, 1, clock)
    _join_all([m0, m1])
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

    def __init__(self, store: MemoryStore, clock: Clock) -> None:
        self.store, self.clock = store, clock

    def get(self, key: str):
        from hangwatch.supervisor.cohort.store import StoreError

        self.clock.now += 30
        raise StoreError("the cohort store did not answer within 2.66667 s")

    def __getattr__(self, name: str):
        return getattr(self.store, name)


def test_a_call_that_failed_across_a_pause_of_this_node_is_not_a_lease_of_failure():
    """The job suspended as a whole with a call in flight: the call fails once continued, the store
    answers the next one. Judged from the call's start, the pause alone made the store lost (75)."""
    clock = Clock()
    store = MemoryStore()
    link = Reconnecting(store)
    n0, n1 = _node(store, 0, clock), _node(link, 1, clock)
    _join_all([n0, n1])
    link.target = _FrozenInFlight(store, clock)
    assert n1.poll(1) is None  # the call in flight across the pause
    link.target = store
    assert CohortLink(n1, lambda: None).verdict(1, clock.now) is None and n1.problem is None
    for n in (n0, n1):
        n._stop.set()
