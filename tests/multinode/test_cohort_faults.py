"""Cohort faults as decisions over the in-memory store, with fake clocks (no processes)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time

import pytest

from hangwatch.contract.exitcodes import EXIT_BUDGET, EXIT_COHORT
from hangwatch.contract.verdict import Verdict, VerdictKind
from hangwatch.supervisor.decide.attempt import GraphPolicy
from hangwatch.supervisor.cohort.node import (Cohort, CohortRefused, CohortStopped, MemberLeft, MemberLost, Membership, settled)
from hangwatch.supervisor.cohort.link import CohortLink
from hangwatch.supervisor.decide.restart import AttemptOutcome, Decision
from hangwatch.supervisor.cohort.store import MemoryStore, StoreError, TCPStoreClient

pytestmark = pytest.mark.timeout(30)


class Clock:
    def __init__(self, start: float = 0.0, rate: float = 1.0) -> None:
        self.now = start
        self.rate = rate

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s * self.rate
        time.sleep(0.002)  # lets the other nodes' threads run while fake time flies


class Journal:
    def __init__(self) -> None:
        self.records: list[dict] = []

    def append(self, event: str, **fields):
        self.records.append({"event": event, **fields})
        return self.records[-1]


def _node(store, i, nnodes=2, clock=None, **kw):
    clock = clock or Clock()
    return Cohort(store, Membership(i, nnodes, "127.0.0.1", 29600, "job"), {"a": 1}, lease_interval=3600,
                  lease_timeout=10, barrier_timeout=30, clock=clock, sleep=clock.sleep, wall=clock, **kw)


def _join_all(nodes):
    errors: list[Exception] = []

    def run(n):
        try:
            n.join(timeout=1e6)  # fake time flies: a busy host must not make a node give up on a peer's late thread
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert not errors, errors


def _tick(clock_nodes, seconds=1.0, rounds=1):
    for _ in range(rounds):
        for clock, node in clock_nodes:
            clock.now += seconds
            node.renew()


def test_a_finished_node_is_no_loss_but_a_node_that_left_otherwise_is_at_once():
    """A node whose trainer finished stops renewing its lease: that must not kill the others'
    trainers (they may still be saving). A node that left without finishing is lost at once."""
    store = MemoryStore()
    c0, c1, c2 = Clock(), Clock(), Clock()
    n0, n1, n2 = _node(store, 0, 3, c0), _node(store, 1, 3, c1), _node(store, 2, 3, c2)
    _join_all([n0, n1, n2])
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
    n0, n1 = _node(store, 0), _node(store, 1)
    _join_all([n0, n1])
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
    c0, c1 = Clock(start=1e9), Clock(start=5.0, rate=1.0)
    n0 = _node(store, 0, clock=c0)
    n1 = Cohort(store, Membership(1, 2, "127.0.0.1", 29600, "job"), {"a": 1}, lease_interval=3600, lease_timeout=10,
                clock=c1, sleep=c1.sleep, wall=lambda: -7200.0)  # its wall clock two hours behind
    _join_all([n0, n1])
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


def test_a_rerun_with_the_same_cohort_id_never_reads_the_previous_runs_records():
    store = MemoryStore()
    old0, old1 = _node(store, 0), _node(store, 1)
    _join_all([old0, old1])
    old1.announce(1, "stall", "the old run's wedge")
    old1.store.set(old1._key("done", 1, 1), json.dumps({"steps": [2], "cudagraphs_off": True}))
    old0.agree(1, [2], GraphPolicy(True))
    old0.close(linger_cap=0), old1.close()
    new0, new1 = _node(store, 0), _node(store, 1)
    _join_all([new1, new0])  # node 1 first: it may read the old run's join record before node 0 writes the new
    assert new0.poll(1) is None and new1.poll(1) is None, "the old attempt's incident is not this run's"
    assert new1._key("agreed", 1) != old1._key("agreed", 1)
    assert new0.problem is None and new1.problem is None


def test_a_stop_on_one_node_reaches_the_others_and_ends_their_barriers():
    store = MemoryStore()
    n0, n1 = _node(store, 0), _node(store, 1)
    _join_all([n0, n1])
    seen: list[dict] = []
    n0.on_stop = seen.append
    n1.local_stop = signal.SIGTERM  # node 1's signal handler noted it; its lease round publishes it
    n1.renew()
    n0.renew()
    assert seen == [{"node": 1, "signal": int(signal.SIGTERM)}]
    with pytest.raises(CohortStopped, match="node 1's supervisor was stopped \\(SIGTERM\\)"):
        n0.agree(1, [2], GraphPolicy())


def test_a_stop_announced_at_close_is_not_lost_when_no_lease_round_ran():
    store = MemoryStore()
    n0, n1 = _node(store, 0), _node(store, 1)
    _join_all([n0, n1])
    n1.local_stop = signal.SIGINT
    n1.close()  # exits before its next lease round
    seen: list[dict] = []
    n0.on_stop = seen.append
    n0.renew()
    assert seen and seen[0]["signal"] == int(signal.SIGINT)
    assert n0.problem is None, "a stopped node's departure is the stop, not a loss"


def test_the_crash_a_stop_elsewhere_causes_is_that_stop_not_an_incident_or_a_lost_member():
    """SIGTERM on node 0: its trainer dies at once and node 1's ranks crash with it, often
    before node 1's next lease round has read the stop. Node 1 must stop as interrupted, like
    node 0 (before: it announced a crash and exited 75 on "node 0 left the cohort")."""
    store = MemoryStore()
    n0, n1 = _node(store, 0), _node(store, 1)
    _join_all([n0, n1])
    journal, stops = Journal(), []
    link = CohortLink(n1, lambda: journal)
    link.bind_stop(lambda sig, frame=None: stops.append(sig))
    crash = Verdict(VerdictKind.CRASH, 0.0, 0.0, "trainer exited with code 1")
    n0.local_stop = signal.SIGTERM  # node 0's handler noted it; no lease round published it yet
    link.incident(1, crash)  # nothing says "stop" yet: a crash is announced
    n0.close(linger_cap=0)  # node 0 finished as interrupted: publishes its stop, leaves
    assert link.agree(1, crash, [2], GraphPolicy()) == (None, EXIT_COHORT)
    assert stops == [signal.SIGTERM], "node 1 stops as interrupted, with node 0's signal"
    assert [r["cause"] for r in journal.records if r["event"] == "member_lost"] == ["stopped"]
    # The same crash seen after the stop was published is no incident at all.
    n2, later = _node(store, 1), Journal()
    n2._generation = n1._generation
    CohortLink(n2, lambda: later).incident(1, crash)
    assert not [r for r in later.records if r["event"] == "cohort_incident"] and n2.stopped["node"] == 0
    assert "was stopped (SIGTERM)" in str(MemberLeft(0, json.loads(store.get(n1._key("left", 0)))))


def test_node_0_that_left_is_noticed_at_once_though_it_keeps_the_store_up():
    """Node 0 gave up alone (it took node 1, SIGSTOPped past the lease, for lost; or it hit an
    error) and keeps the store up for the others: its lease thread runs on while it lingers.
    Node 1 must read that node 0 left at its next lease round (before: only once node 0's
    linger ended and the store was gone, three leases later)."""
    store = MemoryStore()
    n0, n1 = (Cohort(store, Membership(i, 2, "127.0.0.1", 29600, "job"), {"a": 1}, lease_interval=0.02,
                     lease_timeout=10, barrier_timeout=30) for i in range(2))
    _join_all([n0, n1])
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


def test_a_node_of_another_job_refused_on_this_store_leaves_no_record_in_this_job():
    """Two jobs with the default cohort id whose node 0 share a host and port: the second
    job's node 0 cannot bind, its node 1 reaches the first job's store and is refused (other
    settings). Before: it wrote "node 1 left (refused)" into the running job's records, and
    that job's next incident skipped node 1's capture and ended with 75 at the barrier."""
    store = MemoryStore()
    n0, n1 = _node(store, 0), _node(store, 1)
    _join_all([n0, n1])
    clock = Clock()
    stranger = Cohort(store, Membership(1, 2, "127.0.0.1", 29600, "job"), {"a": 2}, lease_interval=3600,
                      lease_timeout=10, clock=clock, sleep=clock.sleep, wall=clock)
    with pytest.raises(CohortRefused, match="settings differ"):
        stranger.join(timeout=5)
    assert n0._read_left(1) is None
    n1.all_captured(1, timeout=0)  # node 1 captured
    assert n0.all_captured(1, timeout=15) is not None and n0.problem is None
    n1.store.set(n1._key("done", 1, 1), json.dumps({"steps": [2]}))  # node 1's report
    assert n0.agree(1, [2], GraphPolicy()).checkpoint_step == 2


def test_a_job_suspended_as_a_whole_loses_no_member_when_it_is_continued():
    """Slurm's suspend stops every process of the job; on resume node 0's lease thread ran
    before node 1's and took node 1's counter, unchanged for the whole pause, for a lost
    member: the job was killed with 75 (reproduced with the real job, 10 s pause, lease 4 s).
    Time this node was not running is not watched; a member that stays silent once the
    node watches again is still lost within the lease."""
    store = MemoryStore()
    c0 = Clock()
    n0 = Cohort(store, Membership(0, 2, "127.0.0.1", 29600, "job"), {"a": 1}, lease_interval=0.02,
                lease_timeout=10, clock=c0, sleep=c0.sleep, wall=c0)
    n1 = _node(store, 1)  # its lease thread never runs on its own: it is continued later
    _join_all([n0, n1])
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


def test_settled_restart_decision_is_the_same_on_every_node():
    go = {"restart": True, "delay_s": 1.5}
    assert settled({0: go, 1: {"restart": True, "delay_s": 4.0}}) == {"restart": True, "exit_code": None,
                                                                     "delay_s": 4.0, "node": None}
    stop = settled({0: go, 1: {"restart": False, "exit_code": EXIT_BUDGET, "reason": "budget"},
                    2: {"restart": False, "exit_code": 72, "reason": "crash"}})
    assert (stop["restart"], stop["exit_code"], stop["node"]) == (False, EXIT_BUDGET, 1)


def test_restart_limit_on_one_node_stops_every_node_with_its_code():
    store = MemoryStore()
    nodes = [_node(store, i) for i in range(2)]
    _join_all(nodes)
    links = [CohortLink(n, Journal) for n in nodes]
    outcome = AttemptOutcome(3, VerdictKind.STALL, 0.0, 2, 2)
    mine = [Decision(True, "restart after stall", None, 0.5),
            Decision(False, "restart budget exhausted", EXIT_BUDGET)]
    results: list = [None, None]

    def run(i):
        results[i] = links[i].settle(outcome, mine[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert [r.restart for r in results] == [False, False]
    assert [r.exit_code for r in results] == [EXIT_BUDGET, EXIT_BUDGET]
    assert results[0].reason.startswith("node 1: restart budget exhausted")
    done = AttemptOutcome(4, VerdictKind.DONE, 0.0, 2, 4)
    assert links[0].settle(done, Decision(False, "the trainer finished", 0)).exit_code == 0, "no barrier on success"


def test_a_crash_elsewhere_does_not_hold_up_the_others_capture():
    """The crashed node has nothing to capture: the hung nodes must not wait the whole
    capture timeout for it before killing."""
    store = MemoryStore()
    nodes = [_node(store, i) for i in range(2)]
    _join_all(nodes)
    crashed = CohortLink(nodes[1], Journal)
    crashed.incident(1, Verdict(VerdictKind.CRASH, 0.0, 0.0, "trainer exited with code 1"))
    assert nodes[0].all_captured(1, timeout=15) == 0.0


def test_a_finished_node_is_not_waited_for_and_the_job_cannot_restart_without_it():
    store = MemoryStore()
    nodes = [_node(store, i) for i in range(2)]
    _join_all(nodes)
    CohortLink(nodes[1], Journal).incident(1, Verdict(VerdictKind.DONE, 0.0, 0.0, "trainer exited 0"))
    assert nodes[0].all_captured(1, timeout=15) == 0.0
    journal = Journal()
    agreed, code = CohortLink(nodes[0], lambda: journal).agree(
        1, Verdict(VerdictKind.STALL, 0.0, 0.0, "x"), [2], GraphPolicy())
    assert agreed is None and code == EXIT_COHORT
    assert "node 1's trainer finished" in journal.records[-1]["reason"]
    assert nodes[0].clock() < 1.0, "at once, not after the barrier deadline"


def test_engine_level_recovery_is_off_in_a_cohort_and_the_journal_says_so():
    from hangwatch.supervisor.decide.attempt import RecoverySituation, recovery_level  # noqa: PLC0415

    level = recovery_level(RecoverySituation(VerdictKind.STALL, mode="auto", phase="generate", tree=[], trainer_pgid=1,
                           last_engine_restart=None, now=0.0, retry_window=60.0, in_cohort=True))
    assert level.level == 2 and "multi-node" in level.reason
    store = MemoryStore()
    journal = Journal()
    CohortLink(_node(store, 0), lambda: journal).joined()
    assert "desynchronise" in journal.records[-1]["engine_recovery"]


def test_a_late_reply_is_never_taken_for_the_answer_to_a_later_call():
    """A call that timed out leaves its reply in the pipe; the next call must skip it."""
    client = object.__new__(TCPStoreClient)
    read_fd, write_fd = os.pipe()

    class Proc:
        stdout = os.fdopen(read_fd, "rb", buffering=0)

    client.proc, client._buf = Proc(), b""
    os.write(write_fd, b'{"id": 1, "ok": true, "value": "stale"}\n{"id": 2, "ok": true, "value": 7}\n')
    assert client._read(1.0, want=2)["value"] == 7
    with pytest.raises(StoreError, match="did not answer"):
        client._read(0.05, want=3)
    os.close(write_fd)
    Proc.stdout.close()


class _Blip:
    """A TCP relay between a node and the store whose connections can be cut (a switch failover,
    a firewall or NAT that dropped its state), the store itself staying up."""

    def __init__(self, target: int) -> None:
        self.target, self.conns, self.lock = target, [], threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:  # the store is gone: so is this connection
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        with self.lock:
            for s in self.conns:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            self.conns = []

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept; close alone leaves it listening
        self.listener.close()
        self.cut()


@pytest.mark.slow
def test_a_store_blip_shorter_than_the_lease_leaves_every_later_call_right():
    """node 0's store stalls (a frozen host, a network blip) for longer than one call's
    deadline, then comes back: calls that timed out get their replies late, and those must
    not answer later calls (before: the next reads were off by one or two lines, and both
    supervisors died of a JSON error, exit 70).

    Then the connection is cut by the network, the store staying up: a c10d client never
    reconnects, so one reset failed every later call ("Broken pipe") and the node took the
    live store for lost after its lease (75 on every node: a blip ended the job). Now the call
    in flight fails and the next ones connect again; with node 0 really gone, calls still fail
    at once rather than each waiting out its deadline behind a reconnect."""
    import socket  # noqa: PLC0415

    import psutil  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    host = TCPStoreClient("127.0.0.1", port, master=True, timeout=1.0, connect_timeout=30)
    blip = _Blip(port)
    peer = TCPStoreClient("127.0.0.1", blip.port, master=False, timeout=1.0, connect_timeout=30)
    try:
        peer.set("k", "v")
        frozen = psutil.Process(host.proc.pid)
        frozen.suspend()
        deadline = time.monotonic() + 5
        while frozen.status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.01)  # SIGSTOP lands asynchronously
        try:
            for _ in range(2):
                with pytest.raises(StoreError, match="did not answer"):
                    peer.add("lease", 1)
        finally:
            frozen.resume()
        assert peer.get("k") == "v"
        assert peer.add("lease", 0) == 2, "both timed-out adds landed; this answer is this call's"
        assert peer.get("missing") is None
        blip.cut()  # the network resets the connection; the store stays up
        deadline, errors = time.monotonic() + 20, []
        while True:
            try:
                value = peer.add("lease", 1)
                break
            except StoreError as exc:
                errors.append(str(exc))
                assert time.monotonic() < deadline, errors
                time.sleep(0.2)
        assert value >= 3 and len(errors) <= 3, errors  # before: "Broken pipe" for good
        assert peer.get("k") == "v"
        host.close()  # node 0 gone for good: its port refuses
        blip.close()
        failures = []
        for _ in range(3):  # one reconnect tried in between (at most one a second)
            with pytest.raises(StoreError) as info:
                peer.get("k")
            failures.append(str(info.value))
            time.sleep(0.6)
        assert not any("did not answer" in f for f in failures), failures
        # This node's own helper killed (out of memory, a stray kill): it says so, not "node 0 is gone".
        psutil.Process(peer.proc.pid).kill()
        peer.proc.wait(timeout=10)
        with pytest.raises(StoreError, match=f"this node's cohort store helper \\(pid {peer.proc.pid}\\) exited"):
            peer.get("k")
    finally:
        blip.close()
        peer.close()
        host.close()


def test_two_nodes_announcing_at_the_same_moment_make_one_incident():
    store = MemoryStore()
    nodes = [_node(store, i, 3) for i in range(3)]
    _join_all(nodes)
    journals = [Journal() for _ in nodes]
    links = [CohortLink(n, (lambda j=j: j)) for n, j in zip(nodes, journals)]
    gate = threading.Barrier(2)

    def detect(i):
        gate.wait(timeout=5)
        links[i].incident(2, Verdict(VerdictKind.STALL, 0.0, 0.0, f"node {i}'s detector"))

    threads = [threading.Thread(target=detect, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    winners = {j.records[-1]["announced_by"] for j in journals[1:]}
    assert len(winners) == 1, "one incident, the same winner on both"
    assert links[0].verdict(2, 0.0).evidence["cohort_incident"]["node"] in winners
    assert links[0].verdict(1, 0.0) is None and links[0].verdict(3, 0.0) is None, "other attempts are not this one"


def test_a_stop_on_this_node_ends_its_own_cohort_waits_at_once():
    """Ctrl-C on a node waiting for the others (their capture, node 0's decision, the restart
    decisions) while another node is frozen: the wait went on until the lease took that node
    for lost or the deadline passed (15 s, 300 s), then journaled a lost member. A stop here
    ends this node's waits at once, as a single-node run stops at once."""
    store = MemoryStore()
    n0, n1 = _node(store, 0), _node(store, 1)  # node 0 never answers: frozen
    _join_all([n0, n1])
    n1.local_stop = signal.SIGINT
    assert n1.all_captured(1, timeout=15) is None
    with pytest.raises(CohortStopped, match="node 1's supervisor was stopped \\(SIGINT\\)"):
        n1.agree(1, [2], GraphPolicy())
    decision = CohortLink(n1, Journal).settle(AttemptOutcome(1, VerdictKind.CRASH, 0.0, None, 2),
                                              Decision(True, "restart after crash", None, 0.5))
    assert (decision.restart, decision.exit_code) == (False, 128 + signal.SIGINT)
    assert n1.clock() < 1.0, "at once, not after the capture timeout or the barrier deadline"


def test_nodes_lost_in_the_same_lease_round_are_all_named():
    """4 nodes, nodes 1 and 2 SIGKILLed at once (a rack lost): node 0's journal named node 1 only."""
    store, clock = MemoryStore(), Clock()
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


class _SlowStore(MemoryStore):
    """Node 0's host under heavy load: the next ``misses`` calls time out (each after its
    deadline, a third of the lease), then the store answers again."""

    def __init__(self) -> None:
        super().__init__()
        self.misses = 0
        self.clocks: list[Clock] = []

    def _check(self) -> None:
        super()._check()
        if self.misses > 0:
            self.misses -= 1
            for c in self.clocks:
                c.now += 10 / 3
            raise StoreError("no reply within 3.3 s")


def test_a_store_slower_than_one_call_but_not_the_lease_costs_no_barrier():
    """Node 0's host under heavy CPU load answered late for ~7 s of a 10 s lease (two calls
    past their deadline) while the nodes captured, agreed and settled: one missed reply
    ended the capture wait (the kill woke the others' ranks mid-capture) and, at the
    agreement or the restart decision, the cohort itself ("the cohort store is unreachable",
    75 on every node but 0). A store that stalls for less than the lease costs nothing
    there too; one that fails for the whole lease is still lost."""
    store = _SlowStore()
    clock0, clock1 = Clock(), Clock(start=5000.0)
    store.clocks = [clock0, clock1]
    n0, n1 = _node(store, 0, clock=clock0), _node(store, 1, clock=clock1)
    _join_all([n0, n1])
    n1.mark_captured(1)  # node 1 has its stacks
    store.misses = 2
    assert n0.all_captured(1, timeout=60) is not None, "the kill waited for every node's capture"
    n0.store.set(n0._key("done", 1, 1), json.dumps({"steps": [4], "cudagraphs_off": True, "enforce_eager": False}))
    store.misses = 2
    assert n0.agree(1, [4], GraphPolicy(True)).checkpoint_step == 4  # node 1's report: above, by node 0's hand
    store.misses = 2
    assert n1.agree(1, [4], GraphPolicy()).checkpoint_step == 4
    n0.store.set(n0._key("decision", 1, 0), json.dumps({"restart": True, "delay_s": 1.0}))
    store.misses = 2
    assert n1.settle(1, {"restart": True, "delay_s": 2.0})["restart"] is True
    store.misses = 100  # gone for good: lost within the lease, not the barrier's 30 s deadline
    started = clock1.now
    with pytest.raises(Exception, match="unreachable"):
        n1.agree(2, [4], GraphPolicy())
    assert clock1.now - started < 20
    for n in (n0, n1):
        n.close(linger_cap=0)
