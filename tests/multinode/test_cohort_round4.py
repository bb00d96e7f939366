"""Multi-node scenarios probed in the fourth held-out round: a whole job resumed on every node.

The fast tests run whole supervisors against fake trees and the in-memory store; one
test runs real supervisors (each with its real store helper) around a small trainer.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hangwatch.contract.exitcodes import EXIT_COHORT
from hangwatch.contract.journal import read_journal
from hangwatch.contract.capture import TreeProcess
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.supervisor.decide.attempt import GraphPolicy, RunState
from hangwatch.supervisor.cohort.errors import CohortRefused
from hangwatch.supervisor.cohort.launcher import rendezvous_nodes, runs_launcher
from hangwatch.supervisor.cohort.membership import Membership
from hangwatch.supervisor.cohort.node import Cohort
from hangwatch.supervisor.cohort.link import CohortLink
from hangwatch.supervisor.config import SETTINGS, build
from hangwatch.supervisor.contain.killer import KillReport
from hangwatch.supervisor.runner import Supervisor
from hangwatch.supervisor.cohort.store import MemoryStore

HANGWATCH = str(Path(sys.executable).parent / "hangwatch")


class Clock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.001)
        time.sleep(0.0005)  # let the other node's thread run while fake time flies


@dataclass
class Trainer:
    pid: int
    create_time: float
    stdout_path: Path
    stderr_path: Path

    def join_output(self, timeout: float) -> None:
        pass


@dataclass
class Tree:
    """Each attempt's trainer trains for a (fake) while and exits 0."""

    clock: Clock
    launched: list[dict] = field(default_factory=list)
    started: float = 0.0
    trainer: Trainer | None = None
    workers: list = field(default_factory=list)  # what describe() lists (real processes, to read their environ)
    waits: bool = False  # the launcher waits (in its rendezvous) until killed
    killed: bool = False

    def launch(self, argv, env, attempt_dir):
        self.launched.append(dict(env))
        self.trainer = Trainer(5000 + len(self.launched), self.clock(), attempt_dir / "o", attempt_dir / "e")
        self.started = self.clock()
        return self.trainer

    def exit_code(self, trainer):
        if self.killed:
            return -9
        if self.waits:
            return None
        return 0 if self.clock() - self.started >= 3.0 else None

    def sample(self):
        return Sample(t=self.clock(), wall=self.clock(), cpu_pct={self.trainer.pid: 100.0},
                      gpu=(DeviceSample(0, 50.0, 1000.0, (self.trainer.pid,)),), heartbeat=None, tree_size=1)

    def describe(self):
        return list(self.workers)

    def watch(self, heartbeat):
        pass

    def forward(self, sig, trainer):
        pass

    def kill(self, grace, kill_timeout, launcher=None):
        self.killed = True
        target = {"pid": self.trainer.pid, "create_time": 0.0, "pgid": self.trainer.pid, "name": "t"}
        return KillReport((target,), (), (), (), 0.1)


class Probe:
    name = "fake"

    def sample(self):
        return (DeviceSample(0, 0.0, 0.0, ()),)

    def close(self):
        pass


def _resumed_node(tmp_path: Path, store: MemoryStore, rank: int, state: RunState | None, steps: list[int]):
    clock = Clock(start=1000.0 + 7200.0 * rank)  # clocks hours apart: nothing may compare them
    ckpt = tmp_path / f"local{rank}"  # node-local checkpoints: each node has the steps it saved
    for step in steps:
        (ckpt / f"checkpoint-{step}").mkdir(parents=True)
        (ckpt / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    values = {k: v[1] for k, v in SETTINGS.items()}
    values.update(run_dir=str(tmp_path / f"run{rank}"), interval=1.0, stall_window=10.0, progress_timeout=30.0,
                  backoff=2.0, gpu_probe="none", quiet=True, checkpoint_dir=str(ckpt))
    config = build(values, ["python", "train.py"])
    config.run_dir.mkdir(parents=True)
    cohort = Cohort(store, Membership(rank, 2, "127.0.0.1", 29600, "job"), {"resumed": True}, lease_interval=3600,
                    lease_timeout=60, barrier_timeout=300, clock=clock, sleep=clock.sleep, wall=clock)
    tree = Tree(clock)
    sup = Supervisor(config, Probe(), lambda request: None, state=state, tree=tree, clock=clock, sleep=clock.sleep,
                     wall=clock, cohort=cohort)
    return sup, tree, ckpt


@pytest.mark.timeout(60)
def test_a_job_resumed_on_every_node_goes_on_from_one_attempt_checkpoint_and_policy(tmp_path):
    """Each node's journal holds its own view: node 0 counted 3 attempts and turned graphs off
    after a stall; node 1's supervisor died before it launched attempt 3, and its last save
    (step 6) had not completed. Resumed, each node went on from its own view (attempt 4 and 3)
    and, in a cohort, from no checkpoint at all: the job's progress started over. Every node
    now goes on as attempt 4, from step 4 (the newest every node has), graphs off."""
    store = MemoryStore()
    s0, t0, ck0 = _resumed_node(tmp_path, store, 0, RunState("r0", attempt=3, policy=GraphPolicy(True, False)), [2, 4, 6])
    s1, t1, ck1 = _resumed_node(tmp_path, store, 1, RunState("r1", attempt=2), [2, 4])
    for s in (s0, s1):  # the CLI joins before running
        threading.Thread(target=s.cohort.cohort.join, kwargs={"timeout": 1e6}, daemon=True).start()
    deadline = time.monotonic() + 20
    while not all(s.cohort.cohort._thread for s in (s0, s1)) and time.monotonic() < deadline:
        time.sleep(0.01)
    codes: list[int | None] = [None, None]

    def run(i, sup):
        codes[i] = sup.run(resumed=True)

    threads = [threading.Thread(target=run, args=(i, s), daemon=True) for i, s in enumerate((s0, s1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=40)
    for s in (s0, s1):
        s.cohort.cohort.close(linger_cap=0)
    assert codes == [0, 0]
    for sup, tree, ckpt in ((s0, t0, ck0), (s1, t1, ck1)):
        assert len(tree.launched) == 1
        env = tree.launched[0]
        assert env["HANGWATCH_ATTEMPT"] == "4"
        assert env.get("HANGWATCH_RESUME_FROM") == str(ckpt / "checkpoint-4")
        assert env["HANGWATCH_CUDAGRAPHS"] == "0"
        agreed = [r for r in read_journal(sup.run_dir / "journal.jsonl") if r["event"] == "cohort_agreed"]
        assert len(agreed) == 1 and agreed[0]["resumed"] and agreed[0]["checkpoint_step"] == 4
        assert agreed[0]["attempt"] == 3 and agreed[0]["cudagraphs"] == "off"


def test_a_node_resumed_alone_into_a_running_or_new_job_is_refused_with_why():
    """A node whose supervisor died, resumed while node 0 still runs the job (or runs a new
    one): refused, saying that a job resumes on every node or on none."""
    for node0, node1, words in ((False, True, "this node resumes its run (--resume), node 0 does not"),
                                (True, False, "node 0 resumes its run (--resume), this node starts a new one")):
        store = MemoryStore()
        nodes = [Cohort(store, Membership(i, 2, "127.0.0.1", 29600, "job"), {"resumed": resumed}, lease_timeout=5)
                 for i, resumed in ((0, node0), (1, node1))]
        errors: list[Exception] = []

        def lead():
            try:
                nodes[0].join(timeout=20)
            except CohortRefused as exc:
                errors.append(exc)

        leader = threading.Thread(target=lead, daemon=True)
        leader.start()
        deadline = time.monotonic() + 10
        while store.data.get("hangwatch/job/leader") is None and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(CohortRefused) as refused:
            nodes[1].join(timeout=20)
        assert words in str(refused.value) and "resumes on every node or on none" in str(refused.value)
        leader.join(timeout=20)  # node 0 reads why node 1 left and stops waiting for it
        assert not leader.is_alive() and errors and "node 1 was refused" in str(errors[0]), errors
        for n in nodes:
            n.close(linger_cap=0)


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
    s0, t0, _ = _resumed_node(tmp_path, store, 0, None, [])
    s1, t1, _ = _resumed_node(tmp_path, store, 1, None, [])
    t0.waits = True  # node 0's launcher waits for a rendezvous that never completes
    worker = _worker("1")
    try:
        t1.waits = True
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
    assert t0.killed and t1.killed


def test_a_launcher_in_the_cohorts_rendezvous_is_checked_once():
    """GROUP_WORLD_SIZE equal to the node count: nothing to say, and no more reads in that attempt."""
    store = MemoryStore()
    cohort = Cohort(store, Membership(1, 2, "127.0.0.1", 29600, "job"), {})
    link = CohortLink(cohort, lambda: None)
    worker = _worker("2")
    calls = []

    class Tree:
        def describe(self):
            calls.append(1)
            return [TreeProcess(worker.pid, 0.0, os.getpid(), worker.pid, worker.pid, "python")]

    try:
        assert [link.verdict(1, t, Tree()) for t in (0.0, 5.0, 10.0)] == [None, None, None]
        assert len(calls) == 1
        assert link.verdict(2, 11.0, Tree()) is None and len(calls) == 2, "a new attempt's workers are checked again"
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

    class Tree:
        def describe(self):
            return [TreeProcess(worker.pid, 0.0, os.getpid(), worker.pid, worker.pid, "python")]

    try:
        verdict = link.verdict(1, 0.0, Tree())
    finally:
        worker.kill()
        worker.wait(timeout=10)
        cohort.close(linger_cap=0)
    assert (verdict is not None) is stopped, verdict
    if stopped:
        assert "the cohort has 2" in verdict.reason


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Attempt 1 saves checkpoint-2 and trains on; an attempt given a checkpoint finishes.
_TRAINER = """
import os, pathlib, sys, time
ckpt = pathlib.Path(sys.argv[1])
if os.environ.get("HANGWATCH_RESUME_FROM"):
    sys.exit(0)
if os.environ["NODE"] == "0":
    (ckpt / "checkpoint-2").mkdir(parents=True, exist_ok=True)
    (ckpt / "checkpoint-2" / "trainer_state.json").write_text('{"global_step": 2}')
time.sleep(120)
"""


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_job_stopped_by_a_lost_node_is_resumed_on_every_node_from_its_checkpoint(tmp_path):
    """Node 1's supervisor SIGKILLed: node 0 stops with 75 as documented, "restart the job". Its
    run was refused by --resume ("already finished") and node 1's ("not supported for a
    multi-node cohort"), so the job could only start over as a new run, from step 0. Resumed on
    both nodes with their cohort options, both go on as attempt 2 from checkpoint-2 and finish."""
    ckpt = tmp_path / "ckpt"
    port = _free_port()

    def cohort(rank):
        return ["--cohort", f"127.0.0.1:{port}", "--node-rank", str(rank), "--nnodes", "2", "--lease-timeout", "3"]

    def start(rank, argv):
        env = dict(os.environ, NODE=str(rank))
        env.pop("HANGWATCH_CONFIG", None)
        return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)

    procs = [start(rank, [HANGWATCH, "run", "--quiet", "--run-dir", str(tmp_path / f"run{rank}"), "--gpu-probe", "none",
                          "--checkpoint-dir", str(ckpt), *cohort(rank), "--", sys.executable, "-c", _TRAINER,
                          str(ckpt)]) for rank in (0, 1)]
    try:
        journal1 = tmp_path / "run1" / "journal.jsonl"
        _wait_for(lambda: (ckpt / "checkpoint-2" / "trainer_state.json").exists() and journal1.exists()
                  and "attempt_started" in journal1.read_text(), 60, "both nodes training")
        os.kill(procs[1].pid, signal.SIGKILL)
        procs[1].wait(timeout=10)
        assert procs[0].wait(timeout=60) == EXIT_COHORT, procs[0].stderr.read()
        swapped = subprocess.run([HANGWATCH, "run", "--quiet", "--resume", str(tmp_path / "run0"), *cohort(1)],
                                 capture_output=True, text=True, timeout=60)
        assert swapped.returncode == 2 and "this run was node 0 of 2" in swapped.stderr, swapped.stderr
        procs = [start(rank, [HANGWATCH, "run", "--quiet", "--resume", str(tmp_path / f"run{rank}"), *cohort(rank)])
                 for rank in (0, 1)]
        outs = [p.communicate(timeout=90) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
        for rank in (0, 1):
            records = read_journal(tmp_path / f"run{rank}" / "journal.jsonl")
            starts = [r for r in records if r["event"] == "attempt_started"]
            assert [s["attempt"] for s in starts] == [1, 2]
            assert starts[1]["resume_from"] == str(ckpt / "checkpoint-2")
            agreed = next(r for r in records if r["event"] == "cohort_agreed")
            assert agreed["resumed"] and agreed["checkpoint_step"] == 2
            assert records[-1]["event"] == "run_finished" and records[-1]["outcome"] == "success"
        status = json.loads(subprocess.run([HANGWATCH, "status", "--json", str(tmp_path / "run0")],
                                           capture_output=True, text=True, timeout=30).stdout)
        assert status["finished"]["exit_code"] == 0
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
