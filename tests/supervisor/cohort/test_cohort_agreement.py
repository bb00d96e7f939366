"""Agreeing across nodes: one incident however many nodes announce it, every node's capture before
the kill, one checkpoint and policy to restart from, one restart decision, and a stop on any node
stopping every node. Decisions over the in-memory store, with fake clocks (no processes)."""

from __future__ import annotations

import json
import signal
import threading

import pytest

from hangwatch.contract.exitcodes import EXIT_BUDGET, EXIT_COHORT
from hangwatch.contract.verdict import Verdict, VerdictKind
from hangwatch.supervisor.cohort.link import CohortLink
from hangwatch.supervisor.cohort.agreement import decide, settled
from hangwatch.supervisor.cohort.errors import CohortError, CohortStopped, MemberLeft
from hangwatch.supervisor.cohort.membership import Membership
from hangwatch.supervisor.cohort.node import Cohort
from hangwatch.supervisor.decide.attempt import GraphPolicy
from hangwatch.supervisor.decide.restart import AttemptOutcome, Decision

from cohort_helpers import join_all, node, node_clock, pair
from fakes import FakeJournal, MemoryStore

pytestmark = pytest.mark.timeout(30)


def test_first_announcement_wins_and_other_attempts_are_ignored():
    _, _, (n0, n1) = pair()
    assert n1.poll(1) is None
    won = n1.announce(1, "stall", "gpu busy, cpu idle")
    assert won.node == 1
    late = n0.announce(1, "silent_hang", "no progress")
    assert late.node == 1 and late.kind == "stall", "an incident announced twice is one incident"
    assert n0.poll(1).node == 1
    assert n0.poll(2) is None, "an announcement for another attempt is ignored"


def test_agreement_is_the_newest_common_checkpoint_and_graphs_off_if_any_node_turned_them_off():
    assert decide({0: {"steps": [2, 4, 6], "cudagraphs_off": False}, 1: {"steps": [2, 4], "cudagraphs_off": True}}) == (
        4, GraphPolicy(True, False))
    assert decide({0: {"steps": [2]}, 1: {"steps": []}}) == (None, GraphPolicy())
    store, clock, (n0, n1) = pair()
    n1.store.set(n1._key("done", 1, 1), '{"steps": [2, 4], "cudagraphs_off": true, "enforce_eager": false}')
    agreed = n0.agree(1, [2, 4, 6], GraphPolicy())
    assert agreed.checkpoint_step == 4 and agreed.policy.cudagraphs_off
    follower = n1.agree(1, [2, 4], GraphPolicy(True))
    assert follower.to_json() == agreed.to_json()


def test_barrier_has_a_deadline():
    _, clock, (n0, _) = pair()
    with pytest.raises(Exception, match="waited 30 s for reports from nodes \\[1\\]"):
        n0.agree(1, [2], GraphPolicy())


def test_nodes_wait_for_each_others_capture_before_killing_bounded():
    _, clock, (n0, n1) = pair()
    assert n0.all_captured(1, timeout=3) is None, "node 1 never captured: give up after the timeout"
    assert clock.now >= 3
    assert n1.all_captured(1, timeout=3) == 0.0, "both have captured: no wait"


def test_malformed_store_records_are_ignored_or_refused_not_a_traceback():
    store, _, (n0, n1) = pair()
    store.set(n0._key("incident", 1), "not json")
    assert n0.poll(1) is None
    store.set(n0._key("incident", 2), '{"attempt": 2, "node": "x"}')
    assert n0.poll(2) is None
    store.set(n1._key("done", 1, 1), "[1, 2]")
    with pytest.raises(CohortError, match="node 1's report in the cohort store is not a JSON object"):
        n0.agree(1, [2], GraphPolicy())
    store.set(n1._key("agreed", 3), '{"attempt": 3}')
    store.set(n1._key("done", 3, 1), "{}")
    with pytest.raises(CohortError, match="decision in the store is malformed"):
        n1.agree(3, [2], GraphPolicy())


def test_the_barrier_outlasts_every_nodes_kill_and_gpu_release_wait(tmp_path):
    """--gpu-release-timeout 400 (or a GPU probe that stopped answering: the release is waited out):
    a node reported after its wait, and the others, whose barrier was a fixed 300 s, gave up on it
    (a 2-node job ended 75, 75 with nothing wrong but a slow release)."""
    from hangwatch.supervisor.cohort.membership import barrier_timeout  # noqa: PLC0415
    from hangwatch.supervisor.config import SETTINGS, build  # noqa: PLC0415

    def config(**given):
        return build({**{k: d for k, (_t, d) in SETTINGS.items()}, **given}, ["python", "train.py"])

    assert barrier_timeout(config()) >= 300 + 60 + 10 + 5, "the defaults: 300 s besides the kill's own waits"
    slow = config(gpu_release_timeout=400.0, grace=20.0, kill_timeout=10.0)
    assert barrier_timeout(slow) >= 400 + 20 + 10 + 300


def test_two_nodes_announcing_at_the_same_moment_make_one_incident():
    store = MemoryStore()
    nodes = [node(store, i, 3) for i in range(3)]
    join_all(nodes)
    journals = [FakeJournal() for _ in nodes]
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


def test_a_crash_elsewhere_does_not_hold_up_the_others_capture():
    """The crashed node has nothing to capture: the hung nodes must not wait the whole
    capture timeout for it before killing."""
    store = MemoryStore()
    nodes = [node(store, i) for i in range(2)]
    join_all(nodes)
    crashed = CohortLink(nodes[1], FakeJournal)
    crashed.incident(1, Verdict(VerdictKind.CRASH, 0.0, 0.0, "trainer exited with code 1"))
    assert nodes[0].all_captured(1, timeout=15) == 0.0


def test_a_finished_node_is_not_waited_for_and_the_job_cannot_restart_without_it():
    store = MemoryStore()
    nodes = [node(store, i) for i in range(2)]
    join_all(nodes)
    CohortLink(nodes[1], FakeJournal).incident(1, Verdict(VerdictKind.DONE, 0.0, 0.0, "trainer exited 0"))
    assert nodes[0].all_captured(1, timeout=15) == 0.0
    journal = FakeJournal()
    agreed, code = CohortLink(nodes[0], lambda: journal).agree(
        1, Verdict(VerdictKind.STALL, 0.0, 0.0, "x"), [2], GraphPolicy())
    assert agreed is None and code == EXIT_COHORT
    assert "node 1's trainer finished" in journal.records[-1]["reason"]
    assert nodes[0].clock() < 1.0, "at once, not after the barrier deadline"


@pytest.mark.timeout(60)
def test_the_capture_wait_skips_a_node_that_left_and_counts_a_crashed_one():
    store, clock = MemoryStore(), node_clock()
    nodes = [Cohort(store, Membership(i, 3, "127.0.0.1", 29600, "job"), {"a": 1}, lease_interval=3600,
                    lease_timeout=10, barrier_timeout=30, clock=clock, sleep=clock.sleep, wall=clock) for i in range(3)]
    join_all(nodes)
    nodes[1].finish(1)  # node 1's trainer finished: nothing to capture there
    nodes[2].mark_captured(1)  # node 2's trainer crashed: nothing to capture either
    assert nodes[0].all_captured(1, timeout=8) == 0.0
    for n in nodes:
        n.close(linger_cap=0)


def test_settled_restart_decision_is_the_same_on_every_node():
    go = {"restart": True, "delay_s": 1.5}
    assert settled({0: go, 1: {"restart": True, "delay_s": 4.0}}) == {"restart": True, "exit_code": None,
                                                                     "delay_s": 4.0, "node": None}
    stop = settled({0: go, 1: {"restart": False, "exit_code": EXIT_BUDGET, "reason": "budget"},
                    2: {"restart": False, "exit_code": 72, "reason": "crash"}})
    assert (stop["restart"], stop["exit_code"], stop["node"]) == (False, EXIT_BUDGET, 1)


def test_restart_limit_on_one_node_stops_every_node_with_its_code():
    store = MemoryStore()
    nodes = [node(store, i) for i in range(2)]
    join_all(nodes)
    links = [CohortLink(n, FakeJournal) for n in nodes]
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


def test_engine_level_recovery_is_off_in_a_cohort_and_the_journal_says_so():
    from hangwatch.supervisor.decide.attempt import RecoverySituation, recovery_level  # noqa: PLC0415

    level = recovery_level(RecoverySituation(VerdictKind.STALL, mode="auto", phase="generate", tree=[], trainer_pgid=1,
                           last_engine_restart=None, now=0.0, retry_window=60.0, in_cohort=True))
    assert level.level == 2 and "multi-node" in level.reason
    store = MemoryStore()
    journal = FakeJournal()
    CohortLink(node(store, 0), lambda: journal).joined()
    joined = next(r for r in journal.records if r["event"] == "cohort_joined")
    assert "desynchronise" in joined["engine_recovery"]
    assert "cohort_unauthenticated" in journal.events, "without a secret the start says the cohort is unauthenticated"


def test_a_stop_on_one_node_reaches_the_others_and_ends_their_barriers():
    store = MemoryStore()
    n0, n1 = node(store, 0), node(store, 1)
    join_all([n0, n1])
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
    n0, n1 = node(store, 0), node(store, 1)
    join_all([n0, n1])
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
    n0, n1 = node(store, 0), node(store, 1)
    join_all([n0, n1])
    journal, stops = FakeJournal(), []
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
    n2, later = node(store, 1), FakeJournal()
    n2._generation = n1._generation
    CohortLink(n2, lambda: later).incident(1, crash)
    assert not [r for r in later.records if r["event"] == "cohort_incident"] and n2.stopped["node"] == 0
    assert "was stopped (SIGTERM)" in str(MemberLeft(0, json.loads(store.get(n1._key("left", 0)))))


def test_a_stop_on_this_node_ends_its_own_cohort_waits_at_once():
    """Ctrl-C on a node waiting for the others (their capture, node 0's decision, the restart
    decisions) while another node is frozen: the wait went on until the lease took that node
    for lost or the deadline passed (15 s, 300 s), then journaled a lost member. A stop here
    ends this node's waits at once, as a single-node run stops at once."""
    store = MemoryStore()
    n0, n1 = node(store, 0), node(store, 1)  # node 0 never answers: frozen
    join_all([n0, n1])
    n1.local_stop = signal.SIGINT
    assert n1.all_captured(1, timeout=15) is None
    with pytest.raises(CohortStopped, match="node 1's supervisor was stopped \\(SIGINT\\)"):
        n1.agree(1, [2], GraphPolicy())
    decision = CohortLink(n1, FakeJournal).settle(AttemptOutcome(1, VerdictKind.CRASH, 0.0, None, 2),
                                              Decision(True, "restart after crash", None, 0.5))
    assert (decision.restart, decision.exit_code) == (False, 128 + signal.SIGINT)
    assert n1.clock() < 1.0, "at once, not after the capture timeout or the barrier deadline"


def _bundle_with_rows(tmp_path, name, rows):
    bundle = tmp_path / name
    bundle.mkdir()
    (bundle / "classification.json").write_text(json.dumps({"signature_id": "x", "process_rows": rows}))
    return bundle


def _naming_links(nodes, journals, bundles):
    """Links whose nodes name the culprit (as the CLI wires them), each with its bundle taken."""
    from hangwatch.diagnostics.across_nodes import culprit_across

    links = [CohortLink(n, (lambda j=j: j)) for n, j in zip(nodes, journals)]
    for n, link, bundle in zip(nodes, links, bundles):
        n.name_culprit = culprit_across
        link.evidence_taken(1, bundle)
    return links


def _agree_together(links):
    """Every link's ``agree`` on attempt 1 at once (node 0 waits for the others' reports)."""
    results = [None] * len(links)

    def agree(i):
        results[i] = links[i].agree(1, Verdict(VerdictKind.STALL, 0.0, 0.0, "x"), [4], GraphPolicy())

    threads = [threading.Thread(target=agree, args=(i,)) for i in range(len(links))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    return results


def test_every_node_names_the_rank_that_blocks_outside_the_collective_on_another_node(tmp_path):
    """Node 0 dumped only a rank waiting in the collective, and cannot name the culprit alone;
    with node 1's rows in the agreement, both nodes' journals name node 1's rank."""
    store = MemoryStore()
    nodes = [node(store, i) for i in range(2)]
    join_all(nodes)
    waiting = {"pid": 11, "rank": 0, "state": "stalled", "signature_id": "nccl-collective-wait", "collective": True,
               "evidence": ["all_reduce (torch/distributed/distributed_c10d.py:2501)"]}
    stuck = {"pid": 22, "rank": 1, "state": "stalled", "signature_id": "lock-wait", "collective": False,
             "evidence": ["acquire (threading.py:120)"], "top_frames": ["load (data.py:9)"]}
    bundles = [_bundle_with_rows(tmp_path, "b0", [waiting]), _bundle_with_rows(tmp_path, "b1", [stuck])]
    journals = [FakeJournal() for _ in nodes]
    links = _naming_links(nodes, journals, bundles)
    results = _agree_together(links)
    assert all(r is not None and r[1] is None for r in results), results
    for journal in journals:
        culprit = next(r for r in journal.records if r["event"] == "cohort_culprit")
        assert (culprit["node"], culprit["rank"], culprit["pid"]) == (1, 1, 22)
        assert culprit["signature_id"] == "lock-wait"
        agreed = next(r for r in journal.records if r["event"] == "cohort_agreed")
        assert all("processes" not in r for r in agreed["reports"].values()), "the journal keeps the agreement short"


def test_hostile_process_rows_in_a_report_name_no_culprit_and_stop_nothing(tmp_path):
    store = MemoryStore()
    nodes = [node(store, i) for i in range(2)]
    join_all(nodes)
    garbage = [1, "x", None, {"state": "stalled", "pid": "1" * 5000, "rank": -3, "collective": "yes"},
               {"state": {"deep": [[[]]]}}, {"state": "stalled", "evidence": [7, None, "x" * 10_000]}]
    bundles = [_bundle_with_rows(tmp_path, "b0", garbage), _bundle_with_rows(tmp_path, "b1", garbage[::-1])]
    journals = [FakeJournal() for _ in nodes]
    links = _naming_links(nodes, journals, bundles)
    results = _agree_together(links)
    assert all(r is not None and r[0] is not None for r in results), "the agreement stands"
