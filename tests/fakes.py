"""The tests' one shared set of fakes: a clock, a supervised tree and its trainer, a GPU probe, a
journal, a capture hook, a killer's process list, the cohort's store, and a whole ``Supervisor``
built over them.

Each imitates one real interface (named in its docstring) and records what was asked of it, so a
test drives the real decisions with no process started and no time passing. ``tests/test_fakes.py``
checks that they keep the real interfaces' method names and signatures. Importable from any test
as ``fakes`` (the tests folder is on ``sys.path``: its ``conftest.py`` is there).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from hangwatch.contract.capture import TreeProcess
from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.journal import EVENTS
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.supervisor.cohort.authstore import Table
from hangwatch.supervisor.cohort.store import StoreError
from hangwatch.supervisor.config import SETTINGS, RunConfig, build
from hangwatch.supervisor.contain.killer import KillReport
from hangwatch.supervisor.runner import Supervisor


# -- time -----------------------------------------------------------------------------------------

class FakeClock:
    """Monotonic time that moves only when asked: what the runner, the cohort and the killer take
    as ``clock`` (call it: ``now``) and ``sleep``.

    ``sleep(s)`` records ``s`` in ``sleeps`` and moves time by it, and by at least 1 ms so that
    even a ``sleep(0)`` loop moves on; it answers True (nothing interrupted the wait, as an
    interruptible sleep such as ``EngineLevel``'s says). ``yield_s``: real seconds each sleep
    yields, so that other threads (a cohort's other nodes) run while fake time flies.
    ``advance(s)`` moves time without a sleep (time that passed elsewhere)."""

    def __init__(self, start: float = 1000.0, *, yield_s: float = 0.0) -> None:
        self.now = start
        self.yield_s = yield_s
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> bool:
        self.sleeps.append(seconds)
        self.now += max(seconds, 0.001)
        if self.yield_s:
            time.sleep(self.yield_s)
        return True


# -- the supervised tree --------------------------------------------------------------------------

@dataclass
class FakeTrainer:
    """A launched trainer (``tree_ops.Trainer``; the real one is ``launcher.TrainerProcess``), with
    the behaviour its ``FakeTree`` scripted for it."""

    pid: int
    create_time: float
    stdout_path: Path
    stderr_path: Path
    behaviour: str = "train"

    def join_output(self, timeout: float) -> None:
        pass


def engine_worker_kill_report() -> KillReport:
    """What ``kill_groups`` reports: an engine worker (pid 20) killed at once, without grace."""
    return KillReport(targets=({"pid": 20, "create_time": 1.0, "pgid": 20, "name": "worker"},),
                      signals=({"target": "pgid 20", "signal": "SIGKILL", "t": 0.0},), escalated=(),
                      survivors=(), duration_s=0.01, grace_rule="none", grace_s=0.0)


@dataclass
class FakeTree:
    """The supervised tree (``tree_ops.TreeOps``) with one scripted trainer per attempt; no process.

    ``script[n]`` is attempt n+1's behaviour (past its end, ``default``'s):
      "train"  healthy ticks (GPU 50 %, CPU 100 %, a beat each tick unless ``beats`` is off);
               exits 0 once it has run ``train_for`` (fake) seconds
      "wedge"  a hang: GPU 100 %, CPU idle, no beat; never exits
      "hang"   healthy-looking ticks but never exits (a launcher waiting in its rendezvous)
      "crash"  exits 1 at once
    A killed trainer exits -15; with ``survivors`` one process of the tree survives SIGKILL.
    ``kill_groups`` kills an engine worker (``engine_worker_kill_report``), or finds none with
    ``groups_gone``. ``describe`` lists ``workers``.

    Records: ``launched`` (argv, env) per launch, ``kills`` (count), ``group_kills`` (pgids, grace)
    per ``kill_groups``, ``forwarded`` signals, ``describes`` (count)."""

    clock: FakeClock = field(default_factory=FakeClock)
    script: list[str] = field(default_factory=list)
    train_for: float = 5.0
    default: str = "train"
    beats: bool = True
    survivors: bool = False
    groups_gone: bool = False
    workers: list[TreeProcess] = field(default_factory=list)
    launched: list[tuple[list[str], dict[str, str]]] = field(default_factory=list)
    kills: int = 0
    group_kills: list[tuple[frozenset[int], float]] = field(default_factory=list)
    forwarded: list[int] = field(default_factory=list)
    describes: int = 0
    trainer: FakeTrainer | None = None
    started_at: float = 0.0
    seq: int = 0

    @property
    def envs(self) -> list[dict[str, str]]:
        """Each launch's environment."""
        return [env for _, env in self.launched]

    def launch(self, argv, env, attempt_dir):
        self.launched.append((list(argv), dict(env)))
        n = len(self.launched)
        behaviour = self.script[n - 1] if n <= len(self.script) else self.default
        self.trainer = FakeTrainer(4000 + n, self.clock(), attempt_dir / "stdout.log", attempt_dir / "stderr.log",
                                   behaviour)
        self.started_at = self.clock()
        return self.trainer

    def exit_code(self, trainer):
        if trainer.behaviour == "crash":
            return 1
        if trainer.behaviour == "train" and self.clock() - self.started_at >= self.train_for:
            return 0
        if trainer.behaviour == "killed":
            return -15
        return None

    def watch(self, heartbeat):
        pass

    def sample(self):
        t = self.trainer
        wedged = t.behaviour == "wedge"
        self.seq += 1
        hb = None if wedged or not self.beats else Heartbeat(t.pid, self.seq, self.clock(), self.seq, "train")
        return Sample(t=self.clock(), wall=self.clock(), cpu_pct={t.pid: 0.0 if wedged else 100.0},
                      gpu=(DeviceSample(0, 100.0 if wedged else 50.0, 1000.0, (t.pid,)),), heartbeat=hb, tree_size=1)

    def describe(self):
        self.describes += 1
        return list(self.workers)

    def forward(self, sig, trainer):
        self.forwarded.append(sig)

    def kill(self, grace, kill_timeout, launcher=None):
        self.kills += 1
        target = {"pid": self.trainer.pid, "create_time": self.trainer.create_time, "pgid": self.trainer.pid, "name": "t"}
        survivors = (dict(target, state="disk-sleep"),) if self.survivors else ()
        self.trainer.behaviour = "killed"
        return KillReport((target,), (), (), survivors, 0.5)

    def kill_groups(self, pgids, grace, kill_timeout):
        self.group_kills.append((pgids, grace))
        return None if self.groups_gone else engine_worker_kill_report()


class FakeProcessTree:
    """What ``TreeKiller`` walks (``proctree.ProcessTree.members``): a fixed list of processes,
    those ``keep`` still accepts (all of them by default; e.g. only the running ones)."""

    def __init__(self, procs: Iterable[Any], keep: Callable[[Any], bool] = lambda proc: True) -> None:
        self.procs = list(procs)
        self.keep = keep

    def members(self) -> list[Any]:
        return [p for p in self.procs if self.keep(p)]


# -- the GPU, the journal, the capture ------------------------------------------------------------

class FakeProbe:
    """A GPU probe (``probes.GpuProbe``) whose every sample reads ``devices``: by default one idle
    device holding no memory (released after a kill). Records whether it was closed."""

    name = "fake"

    def __init__(self, devices: tuple[DeviceSample, ...] = (DeviceSample(0, 0.0, 0.0, ()),)) -> None:
        self.devices = devices
        self.closed = False

    def sample(self):
        return self.devices

    def close(self):
        self.closed = True


class FakeJournal:
    """A run's journal in memory (``contract.journal.Journal.append``): each record, without the
    real one's timestamp and run id, in ``records``. An unknown event is refused as the real one
    refuses it."""

    def __init__(self) -> None:
        self.records: list[dict] = []

    @property
    def events(self) -> list[str]:
        return [r["event"] for r in self.records]

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        if event not in EVENTS:
            raise ValueError(f"unknown journal event {event!r}")
        self.records.append({"event": event, **fields})
        return self.records[-1]


class FakeCapture:
    """The runner's capture hook (``Supervisor.capture_hook``): records each request and writes an
    empty bundle directory for it, whose path it answers."""

    def __init__(self) -> None:
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        path = request.run_dir / "incidents" / f"bundle-{request.attempt}"
        path.mkdir(parents=True)
        return path


# -- the cohort's store ------------------------------------------------------------------------

class MemoryStore(Table):
    """The cohort's key-value store (``cohort.store.Store``; the real ones are c10d's ``TCPStore``
    through ``TCPStoreClient``, and with a secret the authenticated store's ``Table``) in memory:
    that ``Table`` itself, with c10d's semantics (``compare_set`` with ``expected=""`` creates).
    Holds what was written in ``data``; ``down``: every call raises ``StoreError``, as when node 0
    is lost."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False  # a test sets this to simulate node 0 lost

    def _check(self) -> None:
        if self.down:
            raise StoreError("store unreachable (simulated)")

    def set(self, key: str, value: str) -> None:
        self._check()
        super().set(key, value)

    def get(self, key: str) -> str | None:
        self._check()
        return super().get(key)

    def add(self, key: str, amount: int = 1) -> int:
        self._check()
        return super().add(key, amount)

    def compare_set(self, key: str, expected: str, desired: str) -> str:
        self._check()
        return super().compare_set(key, expected, desired)

    def close(self) -> None:
        pass


# -- a whole supervisor over the fakes --------------------------------------------------------------

def runner_config(tmp_path: Path, **over: Any) -> RunConfig:
    """A run's settings for fake time: a 1 s tick, a 10 s stall window, a 30 s progress timeout, a
    2 s backoff, no GPU probe; its run directory under ``tmp_path`` (not created)."""
    values = {k: v[1] for k, v in SETTINGS.items()}
    values.update(run_dir=str(tmp_path / "run"), interval=1.0, stall_window=10.0, progress_timeout=30.0,
                  backoff=2.0, gpu_probe="none", quiet=True)
    values.update(over)
    return build(values, ["python", "train.py"])


def fake_supervisor(tmp_path: Path, script: list[str], **over: Any
                    ) -> tuple[Supervisor, FakeTree, FakeClock, FakeCapture]:
    """The real runner over a ``FakeTree`` running ``script``, a ``FakeProbe``, a ``FakeCapture``
    and one ``FakeClock`` (its clock, sleep and wall); ``over``: settings (``survivors``: the tree's)."""
    clock = FakeClock()
    tree = FakeTree(clock, script, survivors=over.pop("survivors", False))
    capture = FakeCapture()
    config = runner_config(tmp_path, **over)
    config.run_dir.mkdir(parents=True)
    sup = Supervisor(config, FakeProbe(), capture, tree=tree, clock=clock, sleep=clock.sleep, wall=clock)
    return sup, tree, clock, capture
