"""A cohort store that is alive but unreliable, or not the one this node joined: replies that come
after their call gave up (the call was done all the same), connections cut by the network, a store
too slow for one call but not the lease, a store restarted on the same port, a rerun or another job
on the same store. Over the in-memory store with fake clocks, and the real store helper."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time

import pytest

from hangwatch.supervisor.cohort.errors import StoreLost
from hangwatch.supervisor.cohort.store import StoreError, TCPStoreClient
from hangwatch.supervisor.decide.attempt import GraphPolicy

from cohort_helpers import join_all, node, node_clock
from fakes import FakeClock, MemoryStore

pytestmark = pytest.mark.timeout(30)


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
@pytest.mark.parametrize("secret", [None, b"0123456789abcdef0123456789abcdef"], ids=["c10d", "authenticated"])
def test_a_store_blip_shorter_than_the_lease_leaves_every_later_call_right(secret):
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
    host = TCPStoreClient("127.0.0.1", port, master=True, timeout=1.0, connect_timeout=30, secret=secret)
    blip = _Blip(port)
    peer = TCPStoreClient("127.0.0.1", blip.port, master=False, timeout=1.0, connect_timeout=30, secret=secret)
    try:
        peer.set("k", "v")
        frozen = psutil.Process(host.proc.pid)
        frozen.suspend()
        deadline = time.monotonic() + 5
        while frozen.status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.01)  # SIGSTOP lands asynchronously
        try:
            for _ in range(2):
                with pytest.raises(StoreError, match="did not answer" if secret is None else "did not answer|timed out|reconnecting"):
                    peer.add("lease", 1)
        finally:
            frozen.resume()
        if secret is None:
            assert peer.get("k") == "v"
            assert peer.add("lease", 0) == 2, "both timed-out adds landed; this answer is this call's"
        else:
            # With a secret a call that missed its deadline gives up its connection (its late reply is
            # never read as another call's): the next calls connect again (at most once a second), and
            # the second add, tried on a new connection to the frozen store, may never have been sent.
            deadline = time.monotonic() + 10
            while True:
                try:
                    assert peer.get("k") == "v"
                    break
                except StoreError:
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
            assert peer.add("lease", 0) in (1, 2)  # (the next add counts from here)
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
        assert value >= (3 if secret is None else 2) and len(errors) <= 3, errors  # before: "Broken pipe" for good
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


class _SlowStore(MemoryStore):
    """Node 0's host under heavy load: the next ``misses`` calls time out (each after its
    deadline, a third of the lease), then the store answers again."""

    def __init__(self) -> None:
        super().__init__()
        self.misses = 0
        self.clocks: list[FakeClock] = []

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
    clock0, clock1 = node_clock(), node_clock(5000.0)
    store.clocks = [clock0, clock1]
    n0, n1 = node(store, 0, clock=clock0), node(store, 1, clock=clock1)
    join_all([n0, n1])
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


class _LateStore(MemoryStore):
    """Node 0's host under load: the next ``late`` calls are done, but their replies come after the
    call's deadline (a third of the lease), so the caller sees a failure and retries. The real
    store does exactly that (``test_a_store_blip_shorter_than_the_lease_leaves_every_later_call_right``:
    both timed-out adds landed)."""

    def __init__(self) -> None:
        super().__init__()
        self.late = 0
        self.clocks: list[FakeClock] = []

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


@pytest.mark.timeout(60)
def test_a_late_reply_to_this_nodes_capture_does_not_count_it_twice():
    """Node 1 says it has its stacks while the store answers late: its call is retried, and the
    retried add counted node 1 twice (2 of 2 nodes), so node 1 stopped waiting and killed its
    ranks, waking node 0's out of their collective in the middle of node 0's capture."""
    store = _LateStore()
    clock0, clock1 = node_clock(), node_clock(5000.0)
    store.clocks = [clock0, clock1]
    n0, n1 = node(store, 0, clock=clock0), node(store, 1, clock=clock1)
    join_all([n0, n1])
    store.late = 1
    assert n1.all_captured(1, timeout=8) is None, "node 0 never captured: node 1 waits out its capture timeout"
    assert clock1.now - 5000.0 >= 8
    n0.mark_captured(1)  # node 0 has its stacks now
    assert n1.all_captured(1, timeout=8) is not None
    for n in (n0, n1):
        n.close(linger_cap=0)


@pytest.mark.timeout(60)
def test_a_store_blip_while_the_nodes_join_is_waited_out():
    """The join may last minutes (every node waits for the last one): one failed call there said
    "node 0 closed the cohort store while this node was joining", and the node left a job whose
    node 0 was fine (exit 2; the others then took it for lost, 75)."""
    store = _SlowStore()
    clock0, clock1 = node_clock(), node_clock(5000.0)
    n0, n1 = node(store, 0, clock=clock0), node(store, 1, clock=clock1)
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


@pytest.mark.timeout(60)
def test_a_finish_said_while_the_store_misses_a_reply_is_still_a_finish():
    """Node 1's trainer finished while the store missed a reply: its finished record was lost, and the
    record its close wrote said only that it left, so node 0, still saving, stopped with 75."""
    store = _SlowStore()
    clock0, clock1 = node_clock(), node_clock(5000.0)
    n0, n1 = node(store, 0, clock=clock0), node(store, 1, clock=clock1)
    join_all([n0, n1])
    store.clocks = [clock0, clock1]
    store.misses = 1
    n1.finish(1)
    n1.close()
    n0.renew()
    assert n0.problem is None, n0.problem
    n0.close(linger_cap=0)


def test_a_rerun_with_the_same_cohort_id_never_reads_the_previous_runs_records():
    store = MemoryStore()
    old0, old1 = node(store, 0), node(store, 1)
    join_all([old0, old1])
    old1.announce(1, "stall", "the old run's wedge")
    old1.store.set(old1._key("done", 1, 1), json.dumps({"steps": [2], "cudagraphs_off": True}))
    old0.agree(1, [2], GraphPolicy(True))
    old0.close(linger_cap=0), old1.close()
    new0, new1 = node(store, 0), node(store, 1)
    join_all([new1, new0])  # node 1 first: it may read the old run's join record before node 0 writes the new
    assert new0.poll(1) is None and new1.poll(1) is None, "the old attempt's incident is not this run's"
    assert new1._key("agreed", 1) != old1._key("agreed", 1)
    assert new0.problem is None and new1.problem is None


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
    clock = node_clock()
    old_store = MemoryStore()
    old1_link = Reconnecting(old_store)
    old0, old1 = node(old_store, 0, clock=clock), node(old1_link, 1, clock=clock)
    join_all([old0, old1])
    old0._stop.set()  # node 0's supervisor is SIGKILLed: its store goes with it
    old_store.down = True

    new_store = MemoryStore()  # node 0 started again on the port: a fresh store, the same cohort id
    new0, new1 = node(new_store, 0, clock=clock), node(new_store, 1, clock=clock)
    join_all([new0, new1])
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
    clock = node_clock()
    store = MemoryStore()
    link = Reconnecting(store)
    n0, n1 = node(store, 0, clock=clock), node(link, 1, clock=clock)
    join_all([n0, n1])
    n1.renew()
    assert n1.problem is None, "the store it joined: nothing to say"
    link.target = MemoryStore()
    n1.renew()
    assert isinstance(n1.problem, StoreLost) and "is empty" in str(n1.problem)
    for n in (n0, n1):
        n._stop.set()
