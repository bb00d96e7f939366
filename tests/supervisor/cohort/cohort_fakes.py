"""Shared by the in-process cohort tests: fake clocks, a journal, nodes joined on one store, and
whole supervisors over a fake tree (importable: this directory is on sys.path)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.supervisor.cohort.membership import Membership
from hangwatch.supervisor.cohort.node import Cohort
from hangwatch.supervisor.cohort.store import MemoryStore
from hangwatch.supervisor.config import SETTINGS, build
from hangwatch.supervisor.contain.killer import KillReport
from hangwatch.supervisor.decide.attempt import RunState
from hangwatch.supervisor.runner import Supervisor


class Clock:
    """Fake time; each sleep yields a moment so the other nodes' threads run while it flies."""

    def __init__(self, start: float = 0.0, rate: float = 1.0) -> None:
        self.now = start
        self.rate = rate

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s * self.rate
        time.sleep(0.002)  # lets the other nodes' threads run while fake time flies


class InstantClock:
    """Fake time that never yields: a wait on it passes at once, however long (fake time runs fast)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


class Journal:
    """A run's journal in memory: what a CohortLink appends."""

    def __init__(self) -> None:
        self.records: list[dict] = []

    def append(self, event: str, **fields):
        self.records.append({"event": event, **fields})
        return self.records[-1]


def node(store, i, nnodes=2, clock=None, **kw) -> Cohort:
    # lease_interval: the lease thread never wakes in the test (its judgement is renew's, called there)
    clock = clock or Clock()
    return Cohort(store, Membership(i, nnodes, "127.0.0.1", 29600, "job"), {"a": 1}, lease_interval=3600,
                  lease_timeout=10, barrier_timeout=30, clock=clock, sleep=clock.sleep, wall=clock, **kw)


def pair(store=None, fp0=None, fp1=None, nnodes=2):
    store = store or MemoryStore()
    clock = InstantClock()
    nodes = [Cohort(store, Membership(i, nnodes, "127.0.0.1", 29600, "job"), (fp0 if i == 0 else fp1) or {"a": 1},
                    lease_interval=3600, lease_timeout=10, barrier_timeout=30, clock=clock, sleep=clock.sleep,
                    wall=clock)
             for i in range(nnodes)]
    return store, clock, nodes


def join_all(nodes: list[Cohort]) -> None:
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
    assert all(n._generation for n in nodes)


# Whole supervisors over a fake tree: each attempt's trainer trains a (fake) while and exits 0.
class SupervisorClock:
    """A whole supervisor's fake time (each node its own: they never agree, on purpose)."""

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

    clock: SupervisorClock
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


def resumed_node(tmp_path: Path, store: MemoryStore, rank: int, state: RunState | None, steps: list[int]):
    clock = SupervisorClock(start=1000.0 + 7200.0 * rank)  # clocks hours apart: nothing may compare them
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
