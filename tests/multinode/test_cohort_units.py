"""The cohort's decisions over the in-memory store, with a fake clock."""

from __future__ import annotations

import json
import time

import pytest

from hangwatch.supervisor.decide.attempt import GraphPolicy
from hangwatch.supervisor.cohort.agreement import decide
from hangwatch.supervisor.cohort.errors import CohortError, CohortRefused, MemberLost, StoreLost
from hangwatch.supervisor.cohort.membership import Membership, first_host, membership_from
from hangwatch.supervisor.cohort.node import Cohort
from hangwatch.supervisor.cohort.store import MemoryStore

pytestmark = pytest.mark.timeout(30)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def _pair(store=None, fp0=None, fp1=None, nnodes=2):
    store = store or MemoryStore()
    clock = Clock()
    nodes = [Cohort(store, Membership(i, nnodes, "127.0.0.1", 29600, "job"), (fp0 if i == 0 else fp1) or {"a": 1},
                    lease_interval=3600, lease_timeout=10, barrier_timeout=30, clock=clock, sleep=clock.sleep,
                    wall=clock)
             for i in range(nnodes)]
    return store, clock, nodes


def test_first_announcement_wins_and_other_attempts_are_ignored():
    _, _, (n0, n1) = _pair()
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
    store, clock, (n0, n1) = _pair()
    n1.store.set(n1._key("done", 1, 1), '{"steps": [2, 4], "cudagraphs_off": true, "enforce_eager": false}')
    agreed = n0.agree(1, [2, 4, 6], GraphPolicy())
    assert agreed.checkpoint_step == 4 and agreed.policy.cudagraphs_off
    follower = n1.agree(1, [2, 4], GraphPolicy(True))
    assert follower.to_json() == agreed.to_json()


def test_barrier_has_a_deadline():
    _, clock, (n0, _) = _pair()
    with pytest.raises(Exception, match="waited 30 s for reports from nodes \\[1\\]"):
        n0.agree(1, [2], GraphPolicy())


def test_a_node_with_other_settings_is_refused_with_what_differs():
    store, _, (n0, n1) = _pair(fp0={"checkpoint_dir": "/shared/ckpt", "nnodes": 2},
                               fp1={"checkpoint_dir": "/local/ckpt", "nnodes": 2})
    import threading  # noqa: PLC0415

    failed: list[Exception] = []

    def lead() -> None:
        try:
            n0.join(timeout=1e9)  # fake time runs fast
        except CohortRefused as exc:
            failed.append(exc)

    leader = threading.Thread(target=lead)
    leader.start()
    deadline = time.monotonic() + 10
    while store.get(n0._root("leader")) is None and time.monotonic() < deadline:
        time.sleep(0.01)  # fake time runs fast: node 1 must not give up on node 0 before it opened the cohort
    with pytest.raises(CohortRefused, match="checkpoint_dir: node 0 has '/shared/ckpt', this node '/local/ckpt'"):
        n1.join(timeout=1e9)
    leader.join(timeout=10)
    assert failed and "node 1 was refused: settings differ" in str(failed[0]), "node 0 stops waiting, and says why"


def test_every_node_must_join_and_a_rank_cannot_join_twice():
    store, clock, (n0, n1) = _pair()
    with pytest.raises(CohortRefused, match=r"nodes \[1\] did not join within 5 s"):
        n0.join(timeout=5)
    n1.join(timeout=5)
    again = Cohort(store, Membership(1, 2, "127.0.0.1", 29600, "job"), {"a": 1}, lease_interval=3600, lease_timeout=10,
                   clock=clock, sleep=clock.sleep, wall=clock)
    with pytest.raises(CohortRefused, match="node 1 already joined this cohort"):
        again.join(timeout=5)
    n1.close()


def test_a_member_that_stops_renewing_is_lost_within_the_lease():
    _, clock, (n0, n1) = _pair()
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
    store, clock, (_, n1) = _pair()
    n1.renew()
    store.down = True
    n1.renew()
    clock.now += 5
    n1.renew()
    assert n1.problem is None, "a blip is tolerated"
    clock.now += 6
    n1.renew()
    assert isinstance(n1.problem, StoreLost) and "unreachable" in str(n1.problem)


def test_membership_from_options_slurm_and_torchrun_style():
    assert membership_from({}) is None, "single node: unchanged"
    slurm = membership_from({"SLURM_NODEID": "2", "SLURM_NNODES": "4", "SLURM_JOB_NODELIST": "gpu[07-10]",
                             "SLURM_JOB_ID": "991"})
    assert (slurm.node_rank, slurm.nnodes, slurm.host, slurm.cohort_id) == (2, 4, "gpu07", "991")
    k8s = membership_from({"NODE_RANK": "1", "NNODES": "2", "MASTER_ADDR": "trainer-0"})
    assert (k8s.node_rank, k8s.host, k8s.port) == (1, "trainer-0", 29600)
    explicit = membership_from({"NODE_RANK": "1", "NNODES": "2"}, endpoint="10.0.0.5:31000", node_rank=0, nnodes=3)
    assert (explicit.node_rank, explicit.nnodes, explicit.host, explicit.port) == (0, 3, "10.0.0.5", 31000)
    assert first_host("a01,b02") == "a01" and first_host("n[3,5-7]") == "n3"
    with pytest.raises(ValueError, match="HOST:PORT"):
        membership_from({}, endpoint="nohost", node_rank=0, nnodes=2)
    with pytest.raises(ValueError, match="node-rank 5 must be in"):
        membership_from({}, endpoint="h:1", node_rank=5, nnodes=2)
    # IPv6 as torchrun's endpoints are written: c10d's TCPStore wants the bare address (with the
    # brackets, node 1 never connected and waited out --join-timeout); unbracketed is ambiguous.
    v6 = membership_from({}, endpoint="[fd00::5]:31000", node_rank=1, nnodes=2)
    assert (v6.host, v6.port) == ("fd00::5", 31000)
    assert membership_from({"NODE_RANK": "1", "NNODES": "2", "MASTER_ADDR": "[fd00::5]"}).host == "fd00::5"
    with pytest.raises(ValueError, match="IPv6 address goes in brackets"):
        membership_from({}, endpoint="fd00::5:31000", node_rank=1, nnodes=2)


def test_nodes_wait_for_each_others_capture_before_killing_bounded():
    _, clock, (n0, n1) = _pair()
    assert n0.all_captured(1, timeout=3) is None, "node 1 never captured: give up after the timeout"
    assert clock.now >= 3
    assert n1.all_captured(1, timeout=3) == 0.0, "both have captured: no wait"


def test_malformed_store_records_are_ignored_or_refused_not_a_traceback():
    store, _, (n0, n1) = _pair()
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


def test_a_node_with_another_lease_timeout_is_refused():
    """--lease-timeout 40 on node 1, 3 on node 0: node 1 renewed every 4 s, and node 0 took it for
    lost 3 s into a healthy job (a real 2-node job ended 75, 75). The lease is part of the settings."""
    store, clock = MemoryStore(), Clock()
    n0, n1 = (Cohort(store, Membership(i, 2, "127.0.0.1", 29600, "job"), {"a": 1}, lease_interval=3600,
                     lease_timeout=lease, clock=clock, sleep=clock.sleep, wall=clock) for i, lease in ((0, 3.0), (1, 40.0)))
    import threading  # noqa: PLC0415

    leader = threading.Thread(target=lambda: pytest.raises(CohortRefused, n0.join, timeout=1e9))
    leader.start()
    deadline = time.monotonic() + 10
    while store.get(n0._root("leader")) is None and time.monotonic() < deadline:
        time.sleep(0.01)  # node 0 opened the cohort (fake time runs fast: node 1 must not give up on it first)
    with pytest.raises(CohortRefused, match="lease_timeout: node 0 has 3.0, this node 40.0"):
        n1.join(timeout=1e9)
    leader.join(timeout=10)
    assert not leader.is_alive(), "node 0 stops waiting for the refused node"


def test_the_join_timeout_bounds_the_whole_start_and_a_vanished_store_says_node_0_stopped():
    """A node started before node 0 spent most of --join-timeout reaching the store, then waited the
    whole timeout again for the other nodes (--join-timeout 8: 20 s in a real 3-node start); and when
    node 0 gave up first and closed its store, the node said only "DistNetworkError: Failed to recv"."""
    store, clock, (n0, n1) = _pair()
    with pytest.raises(CohortRefused, match=r"node 0 did not join within 8 s"):
        n1.join(timeout=8, spent=6)
    assert clock.now < 3, "what was left of the 8 s, not 8 s more"

    class Vanishing(MemoryStore):
        def get(self, key):
            value = super().get(key)
            self.down = self.down or key.endswith("/leader")  # node 0 was seen, then gave up with its store
            return value

    _, _, (n0, n1) = _pair(store=Vanishing())
    n0.store.set(n0._root("leader"), json.dumps({**n0.fingerprint, "generation": "1", "nonce": "x"}))
    with pytest.raises(CohortRefused, match="node 0 closed the cohort store while this node was joining"):
        n1.join(timeout=8)


def test_a_node_started_under_another_cohort_id_is_told_so_not_left_waiting():
    """Node 1 started with --cohort-id B (or outside the Slurm job: another default id) against node 0's
    store of cohort A: it waited out --join-timeout, then said "DistNetworkError: Failed to recv" when node
    0 gave up first, and node 0 said only "nodes [1] did not join" (a real 2-node start: 2 and 2, no word
    of the id)."""
    store = MemoryStore()

    def node(rank: int, cohort_id: str) -> tuple[Cohort, Clock]:
        clock = Clock()
        return Cohort(store, Membership(rank, 2, "127.0.0.1", 29600, cohort_id), {"a": 1}, lease_interval=3600,
                      lease_timeout=10, clock=clock, sleep=clock.sleep, wall=clock), clock

    early, _ = node(1, "B")
    with pytest.raises(CohortRefused, match="node 0 did not join within 5 s"):
        early.join(timeout=5)  # before node 0 is up: nothing to tell yet
    leader, _ = node(0, "A")
    with pytest.raises(CohortRefused, match=r"nodes \[1\] did not join within 5 s .*under the cohort 'B', this "
                                            r"node's is 'A': start every node with the same --cohort-id"):
        leader.join(timeout=5)
    late, clock = node(1, "B")
    with pytest.raises(CohortRefused, match="node 0 at 127.0.0.1:29600 runs the cohort 'A', this node 'B'"):
        late.join(timeout=1e6)
    assert clock.now < 1, "refused at once, not after the join timeout"


def test_the_fingerprint_holds_resume_arg_and_on_crash_and_leaves_per_node_options_out(tmp_path):
    """A node without --resume-arg relaunched its ranks from step 0 while the others resumed from the
    agreed checkpoint (the fingerprint did not hold it): step counters and data order parted, silently.
    And --on-crash stop on node 0 only: a crash on node 0 stopped the job, one on node 1 restarted it
    (node 0 saw its ranks hang, and judged a hang)."""
    from hangwatch.supervisor.cohort.membership import settings_fingerprint  # noqa: PLC0415
    from hangwatch.supervisor.config import SETTINGS, build  # noqa: PLC0415

    def fingerprint(**given):
        values = {**{k: d for k, (_t, d) in SETTINGS.items()}, "checkpoint_dir": str(tmp_path), **given}
        return settings_fingerprint(build(values, ["python", "train.py"]), 2)

    plain = fingerprint()
    resuming = fingerprint(resume_arg="--resume_from_checkpoint={checkpoint}")
    assert plain["resume_arg_given"] is False and resuming["resume_arg_given"] is True
    # Options each node may set for itself (its detector, its restart limits: decisions are exchanged).
    assert fingerprint(on_crash="stop")["on_crash"] == "stop" != plain["on_crash"]
    assert fingerprint(gpu_release_timeout=400.0)["gpu_release_timeout"] == 400.0 != plain["gpu_release_timeout"]
    assert fingerprint(stall_window=90.0, max_restarts=2, backoff=5.0, grace=3.0, recovery="job",
                       interval=2.0) == plain
    store, _, (n0, n1) = _pair(fp0=resuming, fp1=plain)
    n0.store.set(n0._root("leader"), json.dumps({**n0.fingerprint, "generation": "1", "nonce": "x"}))
    with pytest.raises(CohortRefused, match="resume_arg_given: node 0 has True, this node False"):
        n1.join(timeout=5)


def test_a_node_rank_from_the_environment_without_a_node_count_is_refused_not_run_alone():
    """NODE_RANK=1 with no NNODES (Lightning-style variables: NODE_RANK and WORLD_SIZE) made node 1 a
    single-node run: every node watched alone, the split a cohort exists to prevent."""
    with pytest.raises(ValueError, match="NODE_RANK=1 says this is node 1 of a multi-node job, but no node count"):
        membership_from({"NODE_RANK": "1", "WORLD_SIZE": "16", "MASTER_ADDR": "trainer-0"})
    with pytest.raises(ValueError, match="SLURM_NODEID=2"):
        membership_from({"SLURM_NODEID": "2", "SLURM_NNODES": "1"})
    assert membership_from({"NODE_RANK": "0", "MASTER_ADDR": "trainer-0"}) is None, "node 0 alone: a single run"
    assert membership_from({"NODE_RANK": "1"}, nnodes=1) is None, "--nnodes 1 given: the user said single-node"


def test_a_cohort_without_a_node_count_is_refused_and_an_ipv6_store_is_written_in_brackets():
    """`--cohort H:P --node-rank 0` without --nnodes made a cohort of one: node 0 trained alone (its
    launcher waiting for a rendezvous) while its peers were refused for their node count; and an IPv6
    store read 'fd00::5:29600' in every message."""
    with pytest.raises(ValueError, match="--cohort 10.0.0.5:29600: a multi-node run needs the node count too"):
        membership_from({}, endpoint="10.0.0.5:29600", node_rank=0)
    assert membership_from({"NNODES": "2"}, endpoint="10.0.0.5:29600", node_rank=1).nnodes == 2
    assert membership_from({}, endpoint="h:1", node_rank=0, nnodes=1).nnodes == 1, "--nnodes 1 said so"
    assert membership_from({}, endpoint="[fd00::5]:29600", node_rank=1, nnodes=2).endpoint == "[fd00::5]:29600"
    assert membership_from({}, endpoint="node0:29600", node_rank=1, nnodes=2).endpoint == "node0:29600"


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
