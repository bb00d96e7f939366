"""The launcher's rendezvous against the cohort: which commands join the job's rendezvous, and a
launcher whose rendezvous has another node count than the cohort stops the job, naming it (its
workers' GROUP_WORLD_SIZE says so). Stand-in workers, fake trees and the in-memory store."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest

from hangwatch.contract.capture import TreeProcess
from hangwatch.contract.exitcodes import EXIT_COHORT
from hangwatch.contract.journal import read_journal
from hangwatch.supervisor.cohort.launcher import rendezvous_nodes
from hangwatch.supervisor.cohort.link import CohortLink
from hangwatch.supervisor.cohort.launcher import rendezvous_port, runs_launcher
from hangwatch.supervisor.cohort.membership import Membership
from hangwatch.supervisor.cohort.node import Cohort

from cohort_helpers import resumed_node
from fakes import FakeTree, MemoryStore


def _worker(group_world_size: str) -> subprocess.Popen:
    """A stand-in for a torchrun worker: a process whose environment says its rendezvous's node count."""
    worker = subprocess.Popen(["sleep", "60"], env=dict(os.environ, GROUP_WORLD_SIZE=group_world_size))
    deadline = time.monotonic() + 10
    while rendezvous_nodes(worker.pid) != int(group_world_size):  # until it has exec'd
        assert time.monotonic() < deadline, "the stand-in worker never started"
        time.sleep(0.01)
    return worker


@pytest.mark.timeout(60)
def test_a_launcher_that_formed_its_own_rendezvous_stops_the_job_naming_it(tmp_path):
    """Node 1's torchrun was started with its own --rdzv-endpoint and --nnodes 1 (a copy-paste slip):
    it trained alone, saving into the shared checkpoints, and finished (0), while node 0's launcher
    waited in its rendezvous, unwatched, for torchrun's join timeout (600 s). Its workers say so
    at once (GROUP_WORLD_SIZE=1 in a cohort of 2): every node stops (75), naming the mismatch."""
    store = MemoryStore()
    s0, t0, _ = resumed_node(tmp_path, store, 0, None, [])
    s1, t1, _ = resumed_node(tmp_path, store, 1, None, [])
    t0.default = "hang"  # node 0's launcher waits for a rendezvous that never completes
    worker = _worker("1")
    try:
        t1.default = "hang"
        t1.workers = [TreeProcess(worker.pid, 0.0, os.getpid(), worker.pid, worker.pid, "python")]
        for s in (s0, s1):
            threading.Thread(target=s.cohort.cohort.join, kwargs={"timeout": 1e6}, daemon=True).start()
        deadline = time.monotonic() + 20
        while not all(s.cohort.cohort._thread for s in (s0, s1)) and time.monotonic() < deadline:
            time.sleep(0.01)
        codes: list[int | None] = [None, None]

        def run(i, sup):
            codes[i] = sup.run()

        threads = [threading.Thread(target=run, args=(i, s), daemon=True) for i, s in enumerate((s0, s1))]
        for t in threads:
            t.start()
        threads[1].join(timeout=30)
        s0.cohort.cohort.renew()  # node 0's next lease round reads why node 1 left, before node 1 closed
        threads[0].join(timeout=30)
        for s in (s0, s1):
            s.cohort.cohort.close(linger_cap=0)
    finally:
        worker.kill()
        worker.wait(timeout=10)
    assert codes == [EXIT_COHORT, EXIT_COHORT]
    records1 = read_journal(s1.run_dir / "journal.jsonl")
    assert not [r for r in records1 if r["event"] in ("incident", "capture")], "nothing hangs there: killed at once"
    last1 = records1[-1]
    assert "node 1's launcher formed a rendezvous of 1 node(s)" in last1["reason"], last1
    assert "but the cohort has 2" in last1["reason"]
    last0 = read_journal(s0.run_dir / "journal.jsonl")[-1]
    assert "node 1's supervisor gave up: node 1's launcher formed a rendezvous of 1 node(s)" in last0["reason"], last0
    assert t0.kills and t1.kills


def test_a_launcher_in_the_cohorts_rendezvous_is_checked_once():
    """GROUP_WORLD_SIZE equal to the node count: nothing to say, and no more reads in that attempt."""
    store = MemoryStore()
    cohort = Cohort(store, Membership(1, 2, "127.0.0.1", 29600, "job"), {})
    link = CohortLink(cohort, lambda: None)
    worker = _worker("2")
    tree = FakeTree(workers=[TreeProcess(worker.pid, 0.0, os.getpid(), worker.pid, worker.pid, "python")])
    try:
        assert [link.verdict(1, t, tree) for t in (0.0, 5.0, 10.0)] == [None, None, None]
        assert tree.describes == 1
        assert link.verdict(2, 11.0, tree) is None and tree.describes == 2, "a new attempt's workers are checked again"
    finally:
        worker.kill()
        worker.wait(timeout=10)


@pytest.mark.parametrize("command, launcher", [
    (["torchrun", "--nnodes", "2", "train.py"], True),
    (["/opt/venv/bin/torchrun", "--nproc-per-node", "8", "train.py"], True),
    (["python", "-m", "torch.distributed.run", "--nnodes", "2", "train.py"], True),
    (["accelerate", "launch", "--num_machines", "2", "train.py"], True),
    (["trl", "vllm-serve", "--model", "Qwen/Qwen2.5-7B"], False),
    (["torchrun", "--standalone", "--nproc-per-node", "1", "reward_server.py"], False),
    (["bash", "train.sh"], False),
    (["python", "train.py"], False),
    (["python3", "-u", "-mtorch.distributed.run", "--nnodes", "2", "t.py"], True),
    (["uv", "run", "torchrun", "t.py"], True),
    (["srun", "-N", "2", "torchrun", "t.py"], True),
    (["env", "NCCL_DEBUG=INFO", "torchrun", "t.py"], True),
    (["deepspeed", "t.py"], True),
    (["torchrun", "--nnodes", "2", "t.py", "--standalone"], True),  # the script's own option
    (["python", "serve.py", "--log-dir", "/logs/torchrun"], False),  # a word among the arguments
])
def test_which_commands_join_the_jobs_rendezvous(command, launcher):
    assert runs_launcher(command) is launcher


@pytest.mark.parametrize("command, port", [
    (["torchrun", "--rdzv-endpoint", "node0:29400", "t.py"], 29400),
    (["torchrun", "--rdzv_endpoint=[fd00::5]:29500", "t.py"], 29500),
    (["torchrun", "--master-port", "29501", "t.py"], 29501),
    (["accelerate", "launch", "--main_process_port=29502", "t.py"], 29502),
    (["torchrun", "--rdzv-endpoint", "node0", "t.py"], None),
    (["python", "train.py"], None),
])
def test_the_launchers_rendezvous_port_is_read_from_its_options(command, port):
    """With a cohort secret the cohort's port cannot be the launcher's too (its clients would be refused)."""
    assert rendezvous_port(command) == port


@pytest.mark.parametrize("size, node1_launcher, stopped", [
    ("1", False, False),  # node 1 serves rollouts (trl vllm-serve): node 0's torchrun alone is the rendezvous
    ("1", True, True),    # both run torchrun: a rendezvous of 1 is node 0 training apart
    ("2", True, False),
    ("2", False, False),  # node 1's torchrun is behind a wrapper script: not recognised, yet in the rendezvous
    ("3", True, True),    # more nodes than the cohort has
])
def test_a_node_that_runs_no_launcher_is_not_counted_in_the_rendezvous(size, node1_launcher, stopped):
    """TRL's server mode: training with torchrun on some nodes, ``trl vllm-serve`` on another. The
    trainers' rendezvous has fewer nodes than the cohort, by design: the job was stopped (75)."""
    store = MemoryStore()
    cohort = Cohort(store, Membership(0, 2, "127.0.0.1", 29600, "job"), {}, launcher=True)
    for n, launcher in ((0, True), (1, node1_launcher)):
        store.set(cohort._key("join", n), json.dumps({"launcher": launcher}))
    link = CohortLink(cohort, lambda: None)
    worker = _worker(size)
    tree = FakeTree(workers=[TreeProcess(worker.pid, 0.0, os.getpid(), worker.pid, worker.pid, "python")])
    try:
        verdict = link.verdict(1, 0.0, tree)
    finally:
        worker.kill()
        worker.wait(timeout=10)
        cohort.close(linger_cap=0)
    assert (verdict is not None) is stopped, verdict
    if stopped:
        assert "the cohort has 2" in verdict.reason
