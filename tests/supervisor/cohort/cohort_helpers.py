"""Shared by the in-process cohort tests: nodes on one store, with their fake time, joined, and
whole supervisors over a fake tree (importable: this directory is on sys.path). The fakes
themselves are the shared ones (``tests/fakes.py``)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from fakes import FakeClock, FakeProbe, FakeTree, MemoryStore, runner_config

from hangwatch.supervisor.cohort.membership import Membership
from hangwatch.supervisor.cohort.node import Cohort
from hangwatch.supervisor.decide.attempt import RunState
from hangwatch.supervisor.runner import Supervisor


def node_clock(start: float = 0.0) -> FakeClock:
    """A node's fake time; each sleep yields a moment so the other nodes' threads run while it flies."""
    return FakeClock(start, yield_s=0.002)


def node(store, i, nnodes=2, clock=None, **kw) -> Cohort:
    # lease_interval: the lease thread never wakes in the test (its judgement is renew's, called there)
    clock = clock or node_clock()
    return Cohort(store, Membership(i, nnodes, "127.0.0.1", 29600, "job"), {"a": 1}, lease_interval=3600,
                  lease_timeout=10, barrier_timeout=30, clock=clock, sleep=clock.sleep, wall=clock, **kw)


def pair(store=None, fp0=None, fp1=None, nnodes=2):
    store = store or MemoryStore()
    clock = FakeClock(0.0)  # never yields: a wait on it passes at once, however long
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


def resumed_node(tmp_path: Path, store: MemoryStore, rank: int, state: RunState | None, steps: list[int]):
    # Each node its own fake time, hours apart: they never agree, on purpose; nothing may compare them.
    clock = FakeClock(1000.0 + 7200.0 * rank, yield_s=0.0005)  # yields: the other node's thread runs
    ckpt = tmp_path / f"local{rank}"  # node-local checkpoints: each node has the steps it saved
    for step in steps:
        (ckpt / f"checkpoint-{step}").mkdir(parents=True)
        (ckpt / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    config = runner_config(tmp_path, run_dir=str(tmp_path / f"run{rank}"), checkpoint_dir=str(ckpt))
    config.run_dir.mkdir(parents=True)
    cohort = Cohort(store, Membership(rank, 2, "127.0.0.1", 29600, "job"), {"resumed": True}, lease_interval=3600,
                    lease_timeout=60, barrier_timeout=300, clock=clock, sleep=clock.sleep, wall=clock)
    # Each attempt's trainer trains for a (fake) 3 s and exits 0; it beats nothing.
    tree = FakeTree(clock, train_for=3.0, beats=False)
    sup = Supervisor(config, FakeProbe(), lambda request: None, state=state, tree=tree, clock=clock, sleep=clock.sleep,
                     wall=clock, cohort=cohort)
    return sup, tree, ckpt
