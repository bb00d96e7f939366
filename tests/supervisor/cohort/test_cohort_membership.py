"""Joining the cohort: who may join, with which settings, and what a node (and its status) says
while it joins or when it is refused. Decisions over the in-memory store, with fake clocks."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hangwatch.supervisor.cohort.errors import CohortRefused
from hangwatch.supervisor.cohort.membership import Membership, first_host, membership_from
from hangwatch.supervisor.cohort.node import Cohort
from hangwatch.supervisor.decide.attempt import GraphPolicy

from cohort_helpers import join_all, node, node_clock, pair
from fakes import FakeClock, MemoryStore

pytestmark = pytest.mark.timeout(30)

HANGWATCH = str(Path(sys.executable).with_name("hangwatch"))


def test_a_node_with_other_settings_is_refused_with_what_differs():
    store, _, (n0, n1) = pair(fp0={"checkpoint_dir": "/shared/ckpt", "nnodes": 2},
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
    store, clock, (n0, n1) = pair()
    with pytest.raises(CohortRefused, match=r"nodes \[1\] did not join within 5 s"):
        n0.join(timeout=5)
    n1.join(timeout=5)
    again = Cohort(store, Membership(1, 2, "127.0.0.1", 29600, "job"), {"a": 1}, lease_interval=3600, lease_timeout=10,
                   clock=clock, sleep=clock.sleep, wall=clock)
    with pytest.raises(CohortRefused, match="node 1 already joined this cohort"):
        again.join(timeout=5)
    n1.close()


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


def test_a_node_with_another_lease_timeout_is_refused():
    """--lease-timeout 40 on node 1, 3 on node 0: node 1 renewed every 4 s, and node 0 took it for
    lost 3 s into a healthy job (a real 2-node job ended 75, 75). The lease is part of the settings."""
    store, clock = MemoryStore(), FakeClock(0.0)
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
    store, clock, (n0, n1) = pair()
    with pytest.raises(CohortRefused, match=r"node 0 did not join within 8 s"):
        n1.join(timeout=8, spent=6)
    assert clock.now < 3, "what was left of the 8 s, not 8 s more"

    class Vanishing(MemoryStore):
        def get(self, key):
            value = super().get(key)
            self.down = self.down or key.endswith("/leader")  # node 0 was seen, then gave up with its store
            return value

    _, _, (n0, n1) = pair(store=Vanishing())
    n0.store.set(n0._root("leader"), json.dumps({**n0.fingerprint, "generation": "1", "nonce": "x"}))
    with pytest.raises(CohortRefused, match="node 0 closed the cohort store while this node was joining"):
        n1.join(timeout=8)


def test_a_node_started_under_another_cohort_id_is_told_so_not_left_waiting():
    """Node 1 started with --cohort-id B (or outside the Slurm job: another default id) against node 0's
    store of cohort A: it waited out --join-timeout, then said "DistNetworkError: Failed to recv" when node
    0 gave up first, and node 0 said only "nodes [1] did not join" (a real 2-node start: 2 and 2, no word
    of the id)."""
    store = MemoryStore()

    def node(rank: int, cohort_id: str) -> tuple[Cohort, FakeClock]:
        clock = FakeClock(0.0)
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
    store, _, (n0, n1) = pair(fp0=resuming, fp1=plain)
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


def test_a_node_of_another_job_refused_on_this_store_leaves_no_record_in_this_job():
    """Two jobs with the default cohort id whose node 0 share a host and port: the second
    job's node 0 cannot bind, its node 1 reaches the first job's store and is refused (other
    settings). Before: it wrote "node 1 left (refused)" into the running job's records, and
    that job's next incident skipped node 1's capture and ended with 75 at the barrier."""
    store = MemoryStore()
    n0, n1 = node(store, 0), node(store, 1)
    join_all([n0, n1])
    clock = node_clock()
    stranger = Cohort(store, Membership(1, 2, "127.0.0.1", 29600, "job"), {"a": 2}, lease_interval=3600,
                      lease_timeout=10, clock=clock, sleep=clock.sleep, wall=clock)
    with pytest.raises(CohortRefused, match="settings differ"):
        stranger.join(timeout=5)
    assert n0._read_left(1) is None
    n1.all_captured(1, timeout=0)  # node 1 captured
    assert n0.all_captured(1, timeout=15) is not None and n0.problem is None
    n1.store.set(n1._key("done", 1, 1), json.dumps({"steps": [2]}))  # node 1's report
    assert n0.agree(1, [2], GraphPolicy()).checkpoint_step == 2


@pytest.mark.timeout(60)
def test_two_nodes_given_the_same_rank_the_others_join_timeout_says_so():
    """Two supervisors started as node 1 of 3 (no node 2): the second is refused, and nodes 0 and
    1 waited out their join timeout for node 2, saying only "nodes [2] did not join"."""
    from hangwatch.supervisor.cohort.errors import CohortRefused

    store = MemoryStore()
    n0, n1, twin = (node(store, rank, 3) for rank in (0, 1, 1))
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


def _until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def _joining(nodes: list[Cohort]) -> tuple[dict[int, BaseException], list[threading.Thread]]:
    errors: dict[int, BaseException] = {}

    def join(node: Cohort) -> None:
        try:
            node.join(timeout=60)
        except BaseException as exc:  # noqa: BLE001
            errors[node.me.node_rank] = exc

    threads = [threading.Thread(target=join, args=(n,), daemon=True) for n in nodes]
    for t in threads:
        t.start()
    return errors, threads


@pytest.mark.timeout(60)
@pytest.mark.parametrize("victim", [0, 1])
def test_a_node_stopped_while_joining_is_named_by_the_others_at_once(victim):
    """Nodes 0 and 1 of 3 wait for node 2; one of them is stopped (SIGTERM). It was killed unsaid:
    the other waited out its join timeout (minutes) and said only "nodes [2] did not join"."""
    store = MemoryStore()
    nodes = [node(store, rank, 3) for rank in (0, 1)]
    errors, threads = _joining(nodes)
    _until(lambda: all(n._generation for n in nodes)
           and all(store.data.get(nodes[0]._key("join", r)) for r in (0, 1)), 10, "nodes 0 and 1 joined")
    nodes[victim].leave_joining(signal.SIGTERM)  # what the supervisor's stop does while it joins
    other = nodes[1 - victim]
    threads[1 - victim].join(timeout=10)
    assert not threads[1 - victim].is_alive(), "the other node still waits for node 2"
    assert isinstance(errors[other.me.node_rank], CohortRefused)
    assert f"node {victim}'s supervisor was stopped (SIGTERM) while it was joining" in str(errors[other.me.node_rank])
    for n in nodes:
        n._stop.set()


@pytest.mark.timeout(60)
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_supervisor_stopped_while_joining_exits_with_the_signal_and_status_says_so(tmp_path):
    """Node 0 waiting for node 1, and node 1 waiting for a node 0 not up yet, are stopped: both were
    killed by the signal (no word on stderr; status said "refused at start")."""
    procs = {}
    for rank, sig in ((0, signal.SIGTERM), (1, signal.SIGINT)):
        env = dict(os.environ)
        env.pop("HANGWATCH_CONFIG", None)
        argv = [HANGWATCH, "run", "--quiet", "--run-dir", str(tmp_path / f"run{rank}"), "--gpu-probe", "none",
                "--cohort", f"127.0.0.1:{_free_port()}", "--node-rank", str(rank), "--nnodes", "2",
                "--join-timeout", "60", "--", "true"]
        procs[rank] = (subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                        start_new_session=True), sig)
    try:
        for rank, (proc, sig) in procs.items():
            log = tmp_path / f"run{rank}" / "hangwatch.log"  # its "cohort" line: the join's handlers are set
            _until(lambda: log.exists() and '"cohort"' in log.read_text(), 30, f"node {rank} joining")
            proc.send_signal(sig)
        for rank, (proc, sig) in procs.items():
            _, err = proc.communicate(timeout=30)
            assert proc.returncode == 128 + sig, err
            assert f"stopped by {sig.name} while joining the cohort" in err
            status = subprocess.run([HANGWATCH, "status", "--json", str(tmp_path / f"run{rank}")],
                                    capture_output=True, text=True, timeout=30)
            state = json.loads(status.stdout)["state"]
            assert f"stopped by {sig.name} while joining the cohort" in state and f"exit {128 + sig}" in state
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@pytest.mark.timeout(60)
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


def _fingerprint(checkpoint_dir: str) -> dict:
    from hangwatch.supervisor.cohort.membership import settings_fingerprint
    from hangwatch.supervisor.config import SETTINGS, build

    values = {**{k: d for k, (_t, d) in SETTINGS.items()}, "checkpoint_dir": checkpoint_dir}
    return settings_fingerprint(build(values, ["python", "train.py"]), 2, checkpoint_dir)


def _join_pair(fp0: dict, fp1: dict) -> dict[int, BaseException]:
    from hangwatch.supervisor.cohort.membership import Membership

    store = MemoryStore()
    nodes = [Cohort(store, Membership(i, 2, "127.0.0.1", 29600, "job"), fp, lease_interval=3600, lease_timeout=10,
                    barrier_timeout=30) for i, fp in enumerate((fp0, fp1))]
    errors, threads = _joining(nodes)
    for t in threads:
        t.join(timeout=20)
    for n in nodes:
        n._stop.set()
    return errors


@pytest.mark.timeout(60)
def test_the_same_checkpoint_path_resolved_through_other_links_on_each_node_is_one_setting(tmp_path):
    """``--checkpoint-dir /scratch/ckpt`` on every node, /scratch a link to each node's own disk: the
    nodes were refused ("settings differ", the resolved paths). Either match is one folder; two
    paths that match neither way are still refused."""
    (tmp_path / "disk0").mkdir()
    (tmp_path / "disk1").mkdir()
    scratch = tmp_path / "scratch"
    scratch.symlink_to(tmp_path / "disk0")
    on_node0 = _fingerprint(str(scratch / "ckpt"))
    scratch.unlink()
    scratch.symlink_to(tmp_path / "disk1")  # node 1's /scratch
    on_node1 = _fingerprint(str(scratch / "ckpt"))
    assert on_node0["checkpoint_dir"] != on_node1["checkpoint_dir"]
    assert _join_pair(on_node0, on_node1) == {}
    # Two spellings of one folder (a link to it) still match by the resolved path.
    assert _join_pair(on_node0, _fingerprint(str(tmp_path / "disk0" / "ckpt"))) == {}
    other = _join_pair(on_node0, _fingerprint(str(tmp_path / "disk0" / "other")))
    assert "settings differ" in str(other[1]) and "checkpoint_dir" in str(other[1])
    assert "checkpoint_dir_given" not in str(other[1])


def _joined(fingerprints: list[dict], launchers: list[bool]) -> list[object]:
    """Every node's join: its Cohort, or the error it was refused with."""
    clock, store = node_clock(), MemoryStore()
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
