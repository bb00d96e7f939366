"""Every value read from the cohort store goes through one bounded reader, and with a job secret every
record is authenticated: a stranger who reaches the store's port cannot end, stall or misdirect the job.

A value that fails (too large, too deep, not UTF-8, a non-finite number, a MAC that does not match) is
ignored and reported once per key; it never raises, and it never turns off lost-node detection."""

from __future__ import annotations

import json
import os
import stat

import pytest

from cohort_helpers import join_all, node
from fakes import MemoryStore

from hangwatch.supervisor.cohort.errors import MemberLost
from hangwatch.supervisor.cohort.values import BadValue, Sealer, load_secret, parse

SECRET = b"0123456789abcdef0123456789abcdef"

HOSTILE = {
    "deep": "[" * 400_000 + "]" * 400_000,  # before: RecursionError in every node's reader, exit 70
    "deep object": '{"a":' * 5000 + "1" + "}" * 5000,
    "huge": json.dumps({"x": "y" * 200_000}),
    "not UTF-8": "{\"node\": 0, \"signal\": 15}\udcff\udcfe",  # as the store helper hands bytes that are not
    "non-finite": '{"node": 0, "signal": NaN}',
    "overflowing float": '{"node": 0, "signal": 15, "x": 1e999}',
    "huge integer": '{"node": ' + "9" * 5000 + ', "signal": 15}',
}


@pytest.mark.parametrize("raw", list(HOSTILE.values()), ids=list(HOSTILE))
def test_the_bounded_reader_refuses_a_hostile_value_without_raising_anything_else(raw):
    with pytest.raises(BadValue):
        parse(raw)


def test_the_bounded_reader_reads_a_nodes_own_records():
    assert parse('{"a": [1, {"b": 2.5}], "c": "[[[[[[[[[[[[[[[[[[[[[["}') == {"a": [1, {"b": 2.5}], "c": "[" * 22}


def _joined(**kw):
    store = MemoryStore()
    n0, n1 = node(store, 0, **kw), node(store, 1, **kw)
    join_all([n0, n1])
    return store, n0, n1


@pytest.mark.parametrize("raw", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_incident_record_is_ignored_and_reported_once(raw):
    store, n0, n1 = _joined()
    seen = []
    n0.store.on_ignored = lambda key, why: seen.append((key, why))
    store.data[n0._key("incident", 1)] = raw
    assert n0.poll(1) is None and n0.poll(1) is None  # before: RecursionError (both nodes exit 70)
    assert [k for k, _ in seen] == [n0._key("incident", 1)], "journaled once per key"


@pytest.mark.parametrize("raw", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_stop_value_does_not_turn_off_lost_node_detection(raw):
    store, n0, n1 = _joined()
    store.data[n0._key("stop")] = raw
    for _ in range(12):  # node 1's supervisor is gone: its lease never moves again
        n0.clock.now += 1
        n0.renew()
    assert isinstance(n0.problem, MemberLost) and n0.problem.node == 1, n0.problem  # before: never reported
    assert n0.refresh_stop() is None


def test_a_hostile_stop_value_never_raises_at_the_jobs_stop():
    store, n0, n1 = _joined()
    store.data[n1._key("stop")] = HOSTILE["deep"]
    assert n1.job_stop() is None  # before: RecursionError at the trainer's next crash (exit 70)


def test_records_are_sealed_with_the_jobs_secret_and_still_read_by_every_node():
    store, n0, n1 = _joined(secret=SECRET)
    assert all(v.startswith("hw1:") for k, v in store.data.items() if "/lease/" in k or k.endswith("/leader"))
    n0.announce(1, "stall", "wedged")
    ann = n1.poll(1)
    assert ann is not None and ann.node == 0 and ann.reason == "wedged"


def test_with_a_secret_a_forged_incident_or_stop_is_ignored_and_every_node_keeps_training():
    store, n0, n1 = _joined(secret=SECRET)
    seen = []
    n1.store.on_ignored = lambda key, why: seen.append(why)
    forged_incident = json.dumps({"attempt": 1, "node": 0, "kind": "stall", "reason": "forged", "wall": 1.0})
    store.data[n1._key("incident", 1)] = forged_incident
    store.data[n1._key("stop")] = json.dumps({"node": 0, "signal": 15})
    for _ in range(30):
        for n in (n0, n1):
            n.clock.now += 1
            n.renew()
    assert n1.poll(1) is None and n1.refresh_stop() is None
    assert n0.problem is None and n1.problem is None and n1.stopped is None
    assert any("MAC" in why for why in seen)
    # A record sealed for another key (a replayed one) is no record of this key either.
    store.data[n1._key("incident", 2)] = Sealer(SECRET).seal_text(n1._key("incident", 1), forged_incident)
    assert n1.poll(2) is None
    # A real node's incident still wins the key the stranger took.
    assert n0.announce(1, "stall", "real").reason == "real"
    assert n1.poll(1).reason == "real"


def test_without_the_secret_a_node_reads_no_record_of_the_job():
    store, n0, n1 = _joined(secret=SECRET)
    n0.announce(1, "stall", "wedged")
    other = node(store, 1, secret=b"another-secret-of-sixteen-bytes")
    other._generation = n0._generation
    assert other.poll(1) is None


def test_the_secret_comes_from_a_private_file_or_the_environment(tmp_path):
    path = tmp_path / "secret"
    path.write_bytes(SECRET + b"\n")
    os.chmod(path, 0o600)
    assert load_secret(str(path), {}) == SECRET
    assert load_secret(None, {"HANGWATCH_COHORT_SECRET": SECRET.decode()}) == SECRET
    assert load_secret(None, {}) is None
    os.chmod(path, 0o640)
    with pytest.raises(ValueError, match="chmod 600"):
        load_secret(str(path), {})
    with pytest.raises(ValueError, match="cannot read"):
        load_secret(str(tmp_path / "missing"), {})
    short = tmp_path / "short"
    short.write_bytes(b"abc")
    os.chmod(short, stat.S_IRUSR)
    with pytest.raises(ValueError, match="16 or more"):
        load_secret(str(short), {})


def test_once_the_store_is_lost_no_further_call_goes_out():
    store, n0, n1 = _joined()
    calls = []
    real_get = store.get
    store.down = True
    for _ in range(15):
        n1.clock.now += 1
        n1.renew()
    assert n1.store_lost() is not None and n1.store.cut
    store.get = lambda key: calls.append(key) or real_get(key)
    store.down = False
    assert n1.poll(1) is None and n1.all_captured(1, timeout=5) is None
    n1.close()
    assert calls == [] and n1._left_written is False  # no left record, no call: the store is gone


class _CutStore(MemoryStore):
    """A store behind a link that is cut: the call in flight waits for its deadline, the ones after fail
    within a second (the helper's reconnect attempt), as c10d's client through the store helper does."""

    timeout = 10 / 3  # the client's deadline, a third of the lease

    def __init__(self, clock) -> None:
        super().__init__()
        self.clock, self.cut_at, self.calls_after_cut = clock, None, 0

    def _check(self) -> None:
        if self.cut_at is None:
            return
        self.calls_after_cut += 1
        self.clock.now += self.timeout if self.calls_after_cut == 1 else 1.0
        from hangwatch.supervisor.cohort.store import StoreError
        raise StoreError("timed out")


def test_a_cut_off_node_judges_its_store_lost_within_the_lease_and_two_intervals_of_the_cut():
    """Counted from when the first failure was seen, the cut was judged a third of the lease late
    (the first call's deadline); counted from that call's start, within the lease and two intervals."""
    from cohort_helpers import node_clock

    clock = node_clock()
    store = _CutStore(clock)
    n0, n1 = node(store, 0, clock=node_clock()), node(store, 1, clock=clock)
    join_all([n0, n1])
    cut = store.cut_at = clock.now
    while n1.store_lost() is None and clock.now - cut < 60:
        clock.now += 1.0  # the lease interval
        n1.renew()
    assert n1.store_lost() is not None and n1.store.cut
    assert clock.now - cut <= 10 + 2 * 1.0 + 1.0, clock.now - cut  # before: 15 s and more after the cut
    assert "node 0 unreachable: its supervisor stopped answering, or the network between us failed" in str(n1.problem)


def test_a_node_with_another_secret_is_refused_saying_so_not_left_waiting_for_node_0():
    from hangwatch.supervisor.cohort.errors import CohortRefused

    store = MemoryStore()
    n0 = node(store, 0, secret=SECRET)
    n1 = node(store, 1, secret=b"another-secret-of-sixteen-bytes")
    import threading
    threading.Thread(target=lambda: pytest.raises(Exception, n0.join, timeout=5), daemon=True).start()
    with pytest.raises(CohortRefused, match="same --cohort-secret-file"):
        n1.join(timeout=5)
