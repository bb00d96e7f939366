"""Values read from the cohort store are checked, never trusted.

The store is not authenticated (docs/multinode.md): anyone who reaches its port can write a
key. A hostile or corrupt value must not crash a node (exit 70), hold every node in a restart
delay that never ends, or choose the signal every node forwards to its trainer."""

from __future__ import annotations

import signal

import pytest

from hangwatch.supervisor.cohort.agreement import MAX_SETTLED_DELAY_S, decide, settled
from hangwatch.supervisor.cohort.membership import Membership
from hangwatch.supervisor.cohort.node import Cohort

from fakes import MemoryStore


def _node_1() -> tuple[Cohort, MemoryStore]:
    store = MemoryStore()
    member = Membership(node_rank=1, nnodes=2, host="127.0.0.1", port=1, cohort_id="x")
    return Cohort(store, member, {}), store


@pytest.mark.parametrize("raw", ['{"node": Infinity, "signal": 15}', '{"node": 0, "signal": 1e999}'])
def test_a_stop_record_with_numbers_out_of_range_is_no_stop_not_a_crash(raw):
    cohort, store = _node_1()
    store.set(cohort._key("stop"), raw)
    assert cohort.refresh_stop() is None  # before: OverflowError, the supervisor's internal error (70)


@pytest.mark.parametrize("sig", [signal.SIGSTOP, signal.SIGKILL, signal.SIGSEGV, signal.SIGQUIT])
def test_a_stop_record_cannot_choose_what_every_node_forwards(sig):
    cohort, store = _node_1()
    store.set(cohort._key("stop"), f'{{"node": 0, "signal": {int(sig)}}}')
    assert cohort.refresh_stop() == {"node": 0, "signal": int(signal.SIGTERM)}


@pytest.mark.parametrize("raw", [
    '{"attempt": Infinity, "node": 0, "kind": "stall", "reason": "x", "wall": 1}',
    '{"attempt": 1, "node": 1e999, "kind": "stall", "reason": "x", "wall": 1}',
    '{"attempt": 1, "node": 0, "kind": "stall", "reason": "x", "wall": Infinity}',
])
def test_an_incident_announcement_with_numbers_out_of_range_is_ignored(raw):
    cohort, store = _node_1()
    store.set(cohort._key("incident", 1), raw)
    assert cohort.poll(1) is None


@pytest.mark.parametrize("bad", [{"steps": [1e999]}, {"steps": 5}, {"steps": ["x"]}, {"steps": [True]},
                                 {"steps": [10 ** 30]}, {"steps": [-3]}])
def test_node_0_decides_past_a_malformed_report(bad):
    step, _ = decide({0: {"steps": [4, 8]}, 1: bad})
    assert step is None  # that node has no usable step: none is common (before: a crash in node 0's decision)
    assert decide({0: {"steps": [4, 8]}, 1: {"steps": [4, 8, 12]}})[0] == 8


@pytest.mark.parametrize("bad, code", [({"exit_code": "x"}, 1), ({"exit_code": 1e999}, 1), ({"exit_code": 10 ** 6}, 1),
                                       ({"exit_code": True}, 1), ({"exit_code": 73}, 73)])
def test_a_stopping_nodes_exit_code_is_one_an_exit_status_can_carry(bad, code):
    assert settled({0: {"restart": True}, 1: {"restart": False, **bad}})["exit_code"] == code


@pytest.mark.parametrize("delay, expected", [("nan", 0.0), (float("inf"), 0.0), (-5, 0.0), ("x", 0.0),
                                             (1e300, MAX_SETTLED_DELAY_S), (2.5, 2.5)])
def test_the_settled_backoff_is_bounded(delay, expected):
    together = settled({0: {"restart": True, "delay_s": 0.0}, 1: {"restart": True, "delay_s": delay}})
    assert together["restart"] and together["delay_s"] == expected  # before: 1e300 s, every node asleep for good


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_an_oversized_value_is_cut_by_the_helper_refused_by_the_reader_and_the_next_calls_read_clean():
    """A value over the readers' bound written by someone who reached the store: the helper hands
    it cut (a failing call counted toward a lost store), the bounded reader refuses it, and the
    calls after it read clean (before the cut: the rest of a line over the 1 MiB reply cap was left
    in the buffer, every later call failed and the node was taken for lost after --lease-timeout).
    Bytes that are not UTF-8 come as lone surrogates, refused the same way, never a failed call."""
    import socket

    from hangwatch.supervisor.cohort.store import TCPStoreClient
    from hangwatch.supervisor.cohort.values import MAX_VALUE_CHARS, BadValue, parse

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    host = TCPStoreClient("127.0.0.1", port, master=True, timeout=10.0, connect_timeout=30)
    try:
        host.set("small", "v")
        host.set("huge", "x" * (3 << 20))
        cut = host.get("huge")
        assert MAX_VALUE_CHARS < len(cut) < 1 << 20
        with pytest.raises(BadValue, match="too large"):
            parse(cut)
        assert host.get("small") == "v"
        host.set("small", "w")
        assert host.get("small") == "w"
    finally:
        host.close()


@pytest.mark.slow
def test_a_value_that_is_not_utf8_is_read_as_one_the_reader_refuses_not_a_failed_call():
    """Two bytes under ``stop`` that are not UTF-8 failed every read of it in the helper (its decode),
    a failure that counted toward a lost store and ended the lease round before its check."""
    import datetime
    import socket

    torch_distributed = pytest.importorskip("torch.distributed")

    from hangwatch.supervisor.cohort.store import TCPStoreClient
    from hangwatch.supervisor.cohort.values import BadValue, parse

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    host = TCPStoreClient("127.0.0.1", port, master=True, timeout=10.0, connect_timeout=30)
    try:
        stranger = torch_distributed.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=10),
                                              wait_for_workers=False)
        stranger.set("stop", b"\xff\xfe")
        raw = host.get("stop")
        with pytest.raises(BadValue, match="UTF-8"):
            parse(raw)
        host.set("small", "v")
        assert host.get("small") == "v"
    finally:
        host.close()
