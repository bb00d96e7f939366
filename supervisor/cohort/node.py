"""A cohort of per-node supervisors that act as one: one incident, one agreement, one relaunch.

In a multi-node job one wedged rank hangs every node (the others block in a
collective), so the nodes' supervisors coordinate through a store (``store.Store``;
by default PyTorch's c10d ``TCPStore`` hosted by node 0's supervisor):

* **Join.** Every node publishes a fingerprint of the settings that must match
  (checkpoint layout, graph policy options, node count); a node whose settings
  differ from node 0's is refused with what differs (``CohortRefused``).
* **Leases.** A background thread bumps this node's counter every
  ``lease_interval`` and watches everyone else's. A counter that has not moved
  for ``lease_timeout`` means that node's supervisor is gone (``MemberLost``);
  a store that keeps failing for ``lease_timeout`` means node 0 is gone
  (``StoreLost``). Counters, not timestamps: node clocks need not agree.
* **One incident per attempt.** The first node to announce (compare-and-set on
  the attempt's key) wins; every node polls the key each tick, so all capture
  while the ranks are still hung. An announcement for another attempt is ignored.
* **Agreement before relaunch.** Each node reports its complete checkpoint
  steps and its graph policy; node 0 decides the newest step every node has
  and graphs off if any node turned them off, and publishes it; the others wait
  for it with a deadline (``BarrierTimeout``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import structlog

from hangwatch.contract.journal import iter_journal
from hangwatch.supervisor.decide.attempt import GraphPolicy
from hangwatch.supervisor.cohort.store import Store, StoreError

log = structlog.get_logger("hangwatch.cohort")


class CohortError(RuntimeError):
    """The cohort cannot go on; ``reason`` is the journal's word for it."""

    reason = "cohort_error"


class CohortRefused(CohortError):
    reason = "refused"


class MemberLost(CohortError):
    reason = "member_lost"

    def __init__(self, node: int, waited: float, also: Sequence[int] = ()) -> None:
        # Nodes lost in the same lease round (a rack, a switch): each is named, not only the first.
        more = f" (and so did nodes {list(also)})" if also else ""
        super().__init__(f"node {node}'s supervisor stopped renewing its lease {waited:.0f} s ago{more}")
        self.node, self.waited, self.also = node, waited, tuple(also)


class StoreLost(CohortError):
    reason = "store_lost"


class BarrierTimeout(CohortError):
    reason = "barrier_timeout"


class MemberLeft(CohortError):
    """A node left the cohort on purpose (its record in the store says how)."""

    reason = "member_left"

    def __init__(self, node: int, record: Mapping[str, Any]) -> None:
        if record.get("finished"):
            text = (f"node {node}'s trainer finished (attempt {record.get('attempt')}): the job cannot be "
                    "restarted without it")
        elif record.get("stopped"):
            text = f"node {node}'s supervisor was stopped ({_signal_name(record['stopped'])})"
            text += " while it was joining the cohort" if record.get("joining") else ""
        elif record.get("refused"):
            text = f"node {node} was refused: {record['refused']}"
        elif record.get("why"):
            text = f"node {node}'s supervisor gave up: {str(record['why'])[:300]}"
        else:
            text = f"node {node}'s supervisor stopped (it left the cohort)"
        super().__init__(text)
        self.node = node


class LauncherMismatch(CohortError):
    """This node's launcher formed a rendezvous of another node count than the cohort's: it trains apart."""

    reason = "launcher_mismatch"


class JoinStopped(BaseException):
    """SIGINT/SIGTERM/SIGHUP while this node joins (it may wait minutes for the others): raised by the
    signal handler, so it ends a wait on the store too. A BaseException, as KeyboardInterrupt is:
    no retry loop of the join takes it for a store failure."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped ({_signal_name(signum)}) while joining the cohort")
        self.signum = signum


class CohortStopped(CohortError):
    """Another node's supervisor was stopped (SIGINT/SIGTERM/SIGHUP): every node stops."""

    reason = "stopped"


@dataclass(frozen=True)
class Membership:
    node_rank: int
    nnodes: int
    host: str
    port: int
    cohort_id: str = "hangwatch"

    def __post_init__(self) -> None:
        if self.nnodes < 1 or not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"--node-rank {self.node_rank} must be in [0, --nnodes {self.nnodes})")
        if not 0 < self.port < 65536:
            raise ValueError(f"--cohort port {self.port} is not a TCP port")

    @property
    def is_leader(self) -> bool:
        return self.node_rank == 0

    @property
    def endpoint(self) -> str:
        """HOST:PORT as it is written, an IPv6 address in brackets ('fd00::5:29600' reads as a port 5)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def membership_from(env: Mapping[str, str], *, endpoint: str | None = None, node_rank: int | None = None,
                    nnodes: int | None = None, cohort_id: str | None = None, default_port: int = 29600) -> Membership | None:
    """The cohort this node belongs to, from options first, then Slurm, then torchrun-style variables.

    None for a single-node run (nothing says there is more than one node).
    """
    def first(*names: str) -> str | None:
        return next((env[n] for n in names if env.get(n)), None)

    rank = node_rank if node_rank is not None else _int(first("SLURM_NODEID", "NODE_RANK", "GROUP_RANK"), "node rank")
    count = nnodes if nnodes is not None else _int(first("SLURM_NNODES", "NNODES"), "node count")
    if count is None or count <= 1:
        if endpoint is None:
            if node_rank is None and nnodes is None and rank:  # (--node-rank alone: the CLI says so in its words)
                # NODE_RANK=1 with no node count (Lightning-style variables: NODE_RANK and WORLD_SIZE): this
                # node ran alone, unwatched by the others, the very split a cohort exists to prevent.
                name = next(n for n in ("SLURM_NODEID", "NODE_RANK", "GROUP_RANK") if env.get(n))
                raise ValueError(f"the environment's {name}={env[name]} says this is node {rank} of a multi-node job, "
                                 f"but no node count above 1 is set (SLURM_NNODES, NNODES or --nnodes): this node would "
                                 f"be watched alone; add --nnodes N --cohort HOST:PORT, or unset {name}")
            return None
        if count is None:  # a cohort of one: this node would run alone, its peers refused for their node count
            raise ValueError(f"--cohort {endpoint}: a multi-node run needs the node count too: --nnodes N "
                             "(or SLURM_NNODES / NNODES in the environment)")
    host = None
    port = default_port
    if endpoint:
        host, _, port_text = endpoint.rpartition(":")
        if not host or not port_text.isdigit():
            raise ValueError(f"--cohort {endpoint!r}: expected HOST:PORT (for example node0:29600)")
        if ":" in host and not (host.startswith("[") and host.endswith("]")):
            raise ValueError(f"--cohort {endpoint!r}: an IPv6 address goes in brackets, [ADDRESS]:PORT "
                             "(for example [fd00::5]:29600)")
        port = int(port_text)
    else:
        nodelist = first("SLURM_JOB_NODELIST", "SLURM_NODELIST")
        host = first_host(nodelist) if nodelist else first("MASTER_ADDR")
    if host is not None and host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # [fd00::5]:29600 as torchrun's endpoints are written; the store wants the bare address
    if host is None:
        raise ValueError("a multi-node run needs the store's address: --cohort HOST:PORT (or SLURM_JOB_NODELIST / MASTER_ADDR)")
    if rank is None:
        raise ValueError("a multi-node run needs this node's rank: --node-rank N (or SLURM_NODEID / NODE_RANK)")
    job = cohort_id or first("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID") or "hangwatch"
    return Membership(rank, count or 1, host, port, job)


def settings_fingerprint(config: Any, nnodes: int, checkpoint_given: str | None = None) -> dict[str, Any]:
    """The settings every node must share (``config``: the run's ``RunConfig``); ``Cohort`` adds the lease.

    Only what would make the nodes act apart: options each node may set for itself (its
    detector's windows, its restart limits: every node counts the same attempts, and every
    node's decision is exchanged, ``settled``)
    are left out.

    ``checkpoint_given``: --checkpoint-dir as the user wrote it. The folder is the same on two
    nodes when either its resolved path or that path, made absolute without resolving links,
    matches: ``/scratch/ckpt`` on every node, with ``/scratch`` a link to each node's own disk,
    is one setting (it was refused, the resolved paths differ).
    """
    checkpoint = config.checkpoint
    given = os.path.abspath(os.path.expanduser(checkpoint_given)) if checkpoint and checkpoint_given else None
    return {
        "nnodes": nnodes,
        "checkpoint_dir": str(checkpoint.directory) if checkpoint else None,
        "checkpoint_dir_given": given,
        "checkpoint_glob": checkpoint.glob if checkpoint else None,
        "checkpoint_marker": checkpoint.marker if checkpoint else None,
        # A node without --resume-arg relaunches its ranks from step 0 while the others resume
        # from the agreed checkpoint: their step counters and data order part, silently.
        "resume_arg_given": bool(config.resume_arg),
        # The node whose trainer crashed judges the crash; the others saw their ranks hang. With
        # --on-crash stop on some nodes only, a crash stopped the job or restarted it by where it was.
        "on_crash": config.restart.on_crash,
        "cudagraphs_after_stall": config.cudagraphs_after_stall,
        "eager_escalation": config.eager_escalation,
        # Each node waits this long for the others' capture before it kills: a shorter wait on one
        # node would kill its ranks, and wake the others', in the middle of their capture.
        "capture_timeout": config.capture_timeout,
        # The barrier before relaunch waits for it (``barrier_timeout``): a node that waits longer for
        # its GPU release than the others' barrier allows is taken for gone by them (75, 75).
        "gpu_release_timeout": config.kill.gpu_release_timeout,
    }


def barrier_timeout(config: Any) -> float:
    """How long a node waits for the others' reports and decisions before relaunch.

    Every node reports only after its kill and its wait for the GPU release, both bounded
    by options; a fixed deadline (it was 300 s) under a longer ``--gpu-release-timeout``, or
    with a GPU probe that stopped answering (the release cannot be seen, so it is waited
    out), ended a healthy job with 75 on every node.
    """
    kill = config.kill
    return BARRIER_BASE_S + kill.gpu_release_timeout + kill.grace + kill.kill_timeout


BARRIER_BASE_S = 300.0


def joined_before(journal: Path) -> Mapping[str, Any] | None:
    """The cohort a run's journal says it joined (its ``cohort_joined`` record), or None.

    ``--resume`` takes a run's settings from its run dir, and the cohort options are
    not among them: without this a cohort node resumed alone ran as a single node,
    its launcher waiting for a rendezvous that would never complete.
    """
    try:
        return next((r for r in iter_journal(journal) if r.get("event") == "cohort_joined"), None)
    except (OSError, ValueError):
        return None  # no readable journal: --resume itself says so


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: ``gpu[07-09,12],cpu1`` gives ``gpu07``."""
    head = nodelist.split(",")[0] if "[" not in nodelist.split(",")[0] else nodelist[: nodelist.index("]") + 1]
    if "[" not in head:
        return head.strip()
    prefix, _, ranges = head.partition("[")
    first_range = ranges.rstrip("]").split(",")[0]
    return prefix + first_range.split("-")[0]


def _int(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"the environment's {what} {text!r} is not a number") from None


@dataclass(frozen=True)
class Announcement:
    attempt: int
    node: int
    kind: str
    reason: str
    wall: float
    evidence: Mapping[str, Any] = field(default_factory=dict)  # the announcing node's verdict numbers

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "evidence": dict(self.evidence)}


@dataclass(frozen=True)
class Agreement:
    attempt: int
    checkpoint_step: int | None
    policy: GraphPolicy
    reports: Mapping[str, Any]
    #: a resumed job's agreement (``Cohort.resume``): the attempts every node counts so far
    attempts: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "checkpoint_step": self.checkpoint_step,
                "cudagraphs": "off" if self.policy.cudagraphs_off else "on",
                "enforce_eager": self.policy.enforce_eager, "reports": dict(self.reports),
                **({"attempts": self.attempts} if self.attempts is not None else {})}


def decide(reports: Mapping[int, Mapping[str, Any]]) -> tuple[int | None, GraphPolicy]:
    """Node 0's decision (pure): the newest step every node has complete, and the strictest policy."""
    common: set[int] | None = None
    for r in reports.values():
        if r.get("needs_checkpoint") is False:
            continue  # a node relaunched without --resume-arg while the trainers resume by it (a rollout server)
        steps = _steps(r.get("steps"))
        common = steps if common is None else common & steps
    step = max(common) if common else None
    policy = GraphPolicy(any(r.get("cudagraphs_off") for r in reports.values()),
                         any(r.get("enforce_eager") for r in reports.values()))
    return step, policy


def settled(decisions: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """The cohort's restart decision from every node's own (pure).

    Each node applies its restart policy to its own history; the histories can
    differ at the edges (a crash here is a hang there, an hour's window read on two
    clocks, options that are not part of the fingerprint), and nodes that decided
    differently would split the job (one relaunches into a rendezvous that never
    completes). So: the job restarts only if every node would; otherwise every node
    stops with the code of the lowest-ranked node that stops. The backoff is the
    longest any node asked for, so no node relaunches before another is ready.
    """
    stopping = sorted(n for n, d in decisions.items() if not d.get("restart"))
    if not stopping:
        delay = max((_delay(d.get("delay_s")) for d in decisions.values()), default=0.0)
        return {"restart": True, "exit_code": None, "delay_s": delay, "node": None}
    node = stopping[0]
    d = decisions[node]
    return {"restart": False, "exit_code": _exit_code(d.get("exit_code")), "delay_s": 0.0, "node": node,
            "reason": str(d.get("reason") or "")[:2000]}


# Values read from the store are checked, never trusted: it is not authenticated (anyone who
# reaches its port can write), and a value that breaks a node must stop no node but its writer's.
_STOP_SIGNALS = frozenset({int(signal.SIGINT), int(signal.SIGTERM), int(signal.SIGHUP)})
#: the newest complete checkpoint steps a node reports for an agreement (``Cohort._agree``)
REPORTED_STEPS = 64
MAX_SETTLED_DELAY_S = 7 * 24 * 3600.0  # what run accepts for any wait (config.MAX_SECONDS): bounded, never 1e300


def resumed_attempts(reports: Mapping[int, Mapping[str, Any]]) -> int:
    """A resumed job's attempt count (pure): the most any node's journal holds.

    A node whose supervisor died just before it launched the next attempt counts one
    fewer than the others; every node must go on from the same number, past all of them.
    """
    return max((_count(r.get("attempts")) for r in reports.values()), default=0)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31 else 0


def _steps(value: Any) -> set[int]:
    """A report's complete checkpoint steps: whole, non-negative numbers only; anything else is
    no step (fewer common steps is safe: the nodes resume from an older one)."""
    if not isinstance(value, list):
        return set()
    return {v for v in value if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 62}


def _delay(value: Any) -> float:
    try:
        delay = float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return min(delay, MAX_SETTLED_DELAY_S) if math.isfinite(delay) and delay > 0 else 0.0


def _exit_code(value: Any) -> int:
    """A stopping node's exit code, as an exit status can carry it (1 when it cannot)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 255 else 1


_PROGRAMS = frozenset({"torchrun", "deepspeed", "accelerate", "accelerate-launch", "env", "uv"})


def runs_launcher(command: Sequence[str]) -> bool:
    """Whether ``command`` starts a launcher that joins the job's rendezvous (torchrun,
    ``python -m torch.distributed.run``/``launch``, ``accelerate launch``, ``deepspeed``), not
    standalone: the program after any ``env``/``VAR=value``, ``uv run`` and ``srun [options]``
    prefix, never a word among its arguments.

    Not every node of a cohort trains: one may serve rollouts (``trl vllm-serve``) or a reward
    model. Only the launchers' nodes make up the rendezvous (``CohortLink._launcher_apart``).
    A launcher behind a wrapper (a shell script) is not recognised; the check allows for that.
    """
    argv = [str(a) for a in command]
    i = 0
    while i < len(argv):  # the prefixes that run another program
        word, name = os.path.basename(argv[i]), argv[i].partition("=")[0]
        if word == "env" or ("=" in argv[i] and name.isidentifier()):
            i += 1
        elif word == "uv" and argv[i + 1:i + 2] == ["run"]:
            i += 2
        elif word == "srun":  # its options may take values ("-N 2"): on to the first known program
            i = next((k for k in range(i + 1, len(argv)) if os.path.basename(argv[k]) in _PROGRAMS
                      or os.path.basename(argv[k]).startswith("python")), len(argv))
        else:
            break
    if i >= len(argv):
        return False
    word, rest = os.path.basename(argv[i]), argv[i + 1:]
    if word.startswith("python"):
        while rest and rest[0].startswith("-") and not rest[0].startswith("-m"):
            rest = rest[1:]  # the interpreter's own flags (-u, -X dev, ... taken one word each)
        if not rest:
            return False
        module, rest = (rest[0][2:], rest[1:]) if rest[0] != "-m" else ((rest[1:2] or [""])[0], rest[2:])
        launcher = module in ("torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch")
    else:
        launcher = word in ("torchrun", "deepspeed", "accelerate-launch") or (word == "accelerate" and rest[:1] == ["launch"])
    # --standalone is the launcher's own option (a rendezvous of its own) only before its script.
    own = rest[:next((k for k, a in enumerate(rest) if a.endswith(".py")), len(rest))]
    return launcher and "--standalone" not in own


class _WatchedStore:
    """The cohort's store, noting when its calls began failing, whichever thread made them.

    The store client serves one call at a time, each with a deadline of a third of the lease.
    While the store did not answer (node 0's host cut off, a frozen helper), the main loop's
    poll at every tick, late and so without a sleep between ticks, took the client back at
    once, and the lease thread, the one that judged a failing store lost, waited its turn:
    a real node whose helper was frozen for 30 s under an 8 s lease was never taken for cut
    off (its node 0 had given it up at 8 s); it stopped only once the store answered again.
    Every call now says when the store was seen failing, so the lease is judged on all of them.
    From when the failure was seen, not when the call began: a call in flight while this node was
    not running (SIGSTOP, a job suspended as a whole) fails once it is continued, its deadline
    passed in the pause, though the store answers the next call; counted from its start, the
    pause alone was a lease of failure, and the node was taken for cut off.
    """

    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self.inner, self.clock = store, clock
        self.failing_since: float | None = None
        #: when a call was last seen failing: the streak is as long as what was seen of it (a job
        #: suspended after one miss, with no call in flight, saw no failure in the pause)
        self.failed_at: float | None = None

    def _do(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            result = call(*args)
        except StoreError:
            self.failed_at = self.clock()
            if self.failing_since is None:
                self.failing_since = self.failed_at
            raise
        self.failing_since = None  # it answered
        return result

    def set(self, key: str, value: str) -> None:
        self._do(self.inner.set, key, value)

    def get(self, key: str) -> str | None:
        return self._do(self.inner.get, key)

    def add(self, key: str, amount: int = 1) -> int:
        return self._do(self.inner.add, key, amount)

    def compare_set(self, key: str, expected: str, desired: str) -> str:
        return self._do(self.inner.compare_set, key, expected, desired)

    def close(self) -> None:
        self.inner.close()


class Cohort:
    def __init__(self, store: Store, membership: Membership, fingerprint: Mapping[str, Any], *,
                 lease_interval: float = 1.0, lease_timeout: float = 15.0, barrier_timeout: float = 300.0,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 wall: Callable[[], float] = time.time, launcher: bool = True) -> None:
        """``launcher``: this node's command runs a launcher (``runs_launcher``); told to the
        others at join, not compared (a rollout server's node runs none)."""
        self.store = _WatchedStore(store, clock)
        self.launcher = launcher
        self._launchers: int | None = None
        #: whether this node's checkpoints count in the agreement (``_check_resume_args``)
        self.needs_checkpoint = True
        self.me = membership
        # The lease must match too: a node renewing every lease/10 of a longer lease than another
        # node's is taken for lost by it, though it is alive (a job killed seconds in).
        self.fingerprint = {**fingerprint, "lease_timeout": lease_timeout}
        self.lease_interval = lease_interval
        self.lease_timeout = lease_timeout
        self.barrier_timeout = barrier_timeout
        self.clock, self.sleep, self.wall = clock, sleep, wall
        self.problem: CohortError | None = None
        # A stop (SIGINT/SIGTERM/SIGHUP) on any node stops every node: ``local_stop`` is
        # set by this node's signal handler (no I/O there: the lease thread publishes it),
        # ``stopped`` is another node's stop once seen, ``on_stop`` is told of it.
        self.local_stop: int | None = None
        self.stopped: dict[str, Any] | None = None
        self.on_stop: Callable[[dict[str, Any]], None] | None = None
        self._stop_published = False
        self._stop_lock = threading.Lock()
        self._left: dict[int, dict[str, Any]] = {}  # nodes that left on purpose (finished, gave up, stopped)
        self._left_written = False
        self.why: str | None = None  # why this node gives up, for the others (its left record carries it)
        self._generation = ""  # this run's keys (see join): a rerun never reads an older run's records
        self._seen: dict[int, tuple[int, float]] = {}
        self._saw_leader = False  # node 0's record was read while joining
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def _failing_since(self) -> float | None:
        """When the store's calls began failing (any thread's), None while it answers."""
        return self.store.failing_since

    @_failing_since.setter
    def _failing_since(self, value: float | None) -> None:
        self.store.failing_since = value

    def store_lost(self) -> CohortError | None:
        """The cohort's problem, judging first whether the store has failed for the whole lease (no store
        call: the main loop asks at every tick, whoever holds the client)."""
        since, seen = self._failing_since, self.store.failed_at
        if self.problem is None and since is not None and seen is not None and self._thread is not None:  # (joined)
            # Up to the last failure seen, not now: asked on the first tick after the whole job was
            # suspended, before any call (or the lease thread's discount, ``unobserved``), the pause
            # since one miss counted as failure, and a node whose store answered again stopped (75).
            if seen - since >= self.lease_timeout:
                self.problem = StoreLost(f"the cohort store (node 0's supervisor, {self.me.endpoint}) has been "
                                         f"unreachable for {self.clock() - since:.0f} s")
        return self.problem

    def _root(self, *parts: object) -> str:
        return "/".join(["hangwatch", self.me.cohort_id, *map(str, parts)])

    def _key(self, *parts: object) -> str:
        return self._root(*([self._generation] if self._generation else []), *parts)

    @property
    def others(self) -> list[int]:
        return [n for n in range(self.me.nnodes) if n != self.me.node_rank]

    # -- membership ------------------------------------------------------------

    def join(self, timeout: float = 120.0, spent: float = 0.0) -> None:
        """Publish our fingerprint, check it against node 0's, wait (bounded) for every node; start the lease thread.

        ``spent``: seconds of ``timeout`` already spent reaching the store (a node started
        before node 0 waits for it to come up first): the whole start is bounded by it.
        A store that goes away once node 0 was seen is node 0 that stopped waiting.
        """
        self._saw_leader = False
        try:
            self._join(timeout, spent)
        except StoreError as exc:
            if not self._saw_leader:
                raise
            raise CohortRefused(f"node 0 closed the cohort store while this node was joining (node 0 stopped: its "
                                f"own message says why) ({exc})") from None

    def _join(self, timeout: float, spent: float) -> None:
        """Node 0 opens a new generation of the cohort's keys (a counter in the store) and
        publishes it with its settings; every key of the run lives under it, so a rerun
        with the same cohort id on a store that outlived the last run never reads that
        run's incidents, agreements or leases. A second supervisor for a rank that
        already joined this generation (one restarted in the middle of the job) is
        refused: the cohort cannot take a node back mid-job.
        """
        deadline = self.clock() + max(0.0, timeout - spent)
        nonce = f"{id(self):x}-{self.wall():.6f}"
        # Outside every cohort id's keys: what lets a node started with another --cohort-id (or a
        # default one: $SLURM_JOB_ID on one node, none on another) say so, instead of waiting out
        # the join timeout for a node 0 that is there under another name.
        mine_id = json.dumps({"cohort_id": self.me.cohort_id, "node": self.me.node_rank})
        # A call that fails is retried while the store fails for less than the lease (a network blip
        # in a join that may last minutes): one failure said "node 0 closed the cohort store", and
        # this node left a job whose node 0 was fine (the others then took it for lost: 75).
        patient = self._patient
        patient(self.store.set, _IDS_KEY + ("leader" if self.me.is_leader else "joiner"), mine_id)
        if self.me.is_leader:  # (an add retried may skip a generation: only its newness matters)
            # The counter alone restarts at 1 in every new store: node 0's supervisor hosts it, so a node 0
            # started again on that port (resumed, or a new job under the same cohort id) opened the same
            # generation as the dead one's, and the dead one's other nodes, whose store helpers reconnect
            # to whatever listens there, took it for their own node 0: their incidents killed the new
            # job's healthy ranks, and they never stopped. A random part makes each store's run its own.
            generation = f"{patient(self.store.add, self._root('generation'), 1)}.{uuid.uuid4().hex[:12]}"
            patient(self.store.set, self._root("leader"), json.dumps({**self.fingerprint, "generation": generation,
                                                                      "nonce": nonce, "launcher": self.launcher},
                                                                     sort_keys=True))
        # A generation we were refused in may be a finished run's: wait (briefly) for a newer one.
        refused_in: str | None = None
        refused_until = self.clock() + min(timeout, self.lease_timeout)
        missing = list(range(self.me.nnodes))
        while True:
            raw = patient(self.store.get, self._root("leader"))
            theirs = _object(raw, "node 0's join record") if raw is not None else None
            self._saw_leader = self._saw_leader or theirs is not None
            if theirs is None and not self.me.is_leader:
                # The store is node 0's supervisor's own (one per host and port): a node 0 there under
                # another cohort id is this job's, started with other options, or another job's.
                other = _other_cohort(patient(self.store.get, _IDS_KEY + "leader"), self.me.cohort_id)
                if other is not None:
                    raise CohortRefused(f"node 0 at {self.me.endpoint} runs the cohort {other!r}, this "
                                        f"node {self.me.cohort_id!r}: {_SAME_ID}")
            generation = str(theirs.get("generation", "")) if theirs is not None else ""
            if theirs is not None and generation not in (refused_in, self._generation):
                self._generation = generation
                self._left.clear()  # what we read under another generation is not this run's
                try:
                    self._check_settings(theirs)
                except CohortRefused as exc:
                    # Node 0 stops waiting for us, and says why; but only while our rank's slot is
                    # free: a node of another job on the same store and port (same rank, other
                    # settings) must not write into this job's records that its node left.
                    if self.store.get(self._key("join", self.me.node_rank)) is None:
                        self._leave(finished=False, refused=str(exc))
                    raise
                mine = json.dumps({**self.fingerprint, "nonce": nonce, "launcher": self.launcher}, sort_keys=True)
                if patient(self.store.compare_set, self._key("join", self.me.node_rank), "", mine) != mine:
                    refused_in, self._generation = generation, ""
                    continue
            if self._generation:
                records = {n: patient(self.store.get, self._key("join", n)) for n in range(self.me.nnodes)}
                missing = [n for n, raw in records.items() if raw is None]
                if not missing:
                    try:
                        self._check_resume_args(records)
                    except CohortRefused as exc:
                        self._leave(finished=False, refused=str(exc))  # every node finds it; a node still waiting reads it
                        raise
                    break
                for n in self.others:  # one that joined and left (stopped while waiting) counts too
                    left = patient(self._read_left, n)
                    if left is not None:
                        why = str(MemberLeft(n, left))
                        self._leave(finished=False, why=why)  # node 0 keeps the store up until it reads this
                        raise CohortRefused(why)
            now = self.clock()
            if refused_in is not None and not self._generation and now >= refused_until:
                # The others wait for the rank nobody took: their join timeout says why (a hint only,
                # outside the generation's records: nothing else reads it).
                with contextlib.suppress(StoreError):
                    self.store.set(self._root("duplicate", refused_in), str(self.me.node_rank))
                raise CohortRefused(f"node {self.me.node_rank} already joined this cohort ({self.me.cohort_id}): two "
                                    f"nodes started with --node-rank {self.me.node_rank}, or one restarted in a running "
                                    "job, which a cohort cannot take back: stop every node and start the job again")
            if now >= deadline:
                if theirs is None:
                    raise CohortRefused(f"node 0 did not join within {timeout:g} s (is hangwatch run started on node 0, "
                                        f"with --cohort {self.me.endpoint}?)")
                stray = _other_cohort(self.store.get(_IDS_KEY + "joiner"), self.me.cohort_id) \
                    if self.me.is_leader else None
                hint = (f"; a node reached this store under the cohort {stray!r}, this node's is "
                        f"{self.me.cohort_id!r}: {_SAME_ID}") if stray is not None else ""
                twice = self.store.get(self._root("duplicate", self._generation)) if self._generation else None
                if twice is not None and twice.isdigit() and len(twice) < 10:
                    hint += (f"; a second supervisor started as node {twice} was refused, that rank had joined "
                             f"already: two nodes given --node-rank {twice} (check each node's rank)")
                raise CohortRefused(f"nodes {missing} did not join within {timeout:g} s (is hangwatch run started on "
                                    f"every node, with the same --nnodes, --cohort and --cohort-id?){hint}")
            self.sleep(0.2)
        self.renew()
        self._thread = threading.Thread(target=self._lease_loop, name="cohort-lease", daemon=True)
        self._thread.start()

    def launcher_nodes(self) -> int | None:
        """How many nodes run a launcher, from their join records (read once; a record that says
        nothing of it counts as one). None when the store cannot tell now (asked again later)."""
        if self._launchers is None:
            count = 0
            try:
                for n in range(self.me.nnodes):
                    raw = self.store.get(self._key("join", n))
                    record = _object(raw, f"node {n}'s join record") if raw is not None else {}
                    count += record.get("launcher", True) is not False
            except (StoreError, CohortError):
                return None
            self._launchers = count
        return self._launchers

    def _check_settings(self, theirs: dict[str, Any]) -> None:
        trains = self.launcher and theirs.get("launcher", True) is not False
        theirs = {k: v for k, v in theirs.items() if k not in ("nonce", "generation", "launcher")}
        differ = sorted(k for k in set(theirs) | set(self.fingerprint) if theirs.get(k) != self.fingerprint.get(k))
        if not trains:  # a node that runs no launcher resumes no ranks: compared once all joined (_check_resume_args)
            differ = [k for k in differ if k != "resume_arg_given"]
        given = self.fingerprint.get("checkpoint_dir_given")
        if given is not None and theirs.get("checkpoint_dir_given") == given:
            differ = [k for k in differ if k != "checkpoint_dir"]  # the same path, resolved through other links
        differ = [k for k in differ if k != "checkpoint_dir_given"]  # an alternative match only, never a refusal
        if "resumed" in differ:
            # Not an option that differs: one node resumes its run while node 0 runs another (a new job, or
            # still the job this node's dead supervisor left: node 0 stops with 75 within its lease).
            which = ("this node resumes its run (--resume), node 0 does not" if self.fingerprint.get("resumed") else
                     "node 0 resumes its run (--resume), this node starts a new one")
            raise CohortRefused(f"{which}: a job resumes on every node or on none; once every node has stopped, "
                                "resume each node's run with hangwatch run --resume RUN_DIR and its cohort options")
        if differ:
            what = "; ".join(f"{k}: node 0 has {theirs.get(k)!r}, this node {self.fingerprint.get(k)!r}" for k in differ)
            raise CohortRefused(f"settings differ from node 0's ({what}); start every node with the same options")

    def _check_resume_args(self, records: Mapping[int, str | None]) -> None:
        """Every node that runs a launcher takes --resume-arg, or none does; a node that runs none
        (a rollout or reward server) may go without it, and then needs no checkpoint.

        Such a node had to be given --resume-arg like the trainers (it was part of the settings
        every node must share), and its command was relaunched with it after every incident once
        a checkpoint existed: ``trl vllm-serve ... --resume_from_checkpoint=...`` is refused by
        vLLM's parser (exit 2), so the server never came back and the job crashed at each attempt
        until its restart budget ran out. Checked on the whole set of join records, once every node
        joined: node 0 may be that server, and then no trainer was compared with another.
        """
        joined: dict[int, dict[str, Any]] = {}
        for n, raw in records.items():
            try:
                record = json.loads(raw) if raw is not None else {}
            except ValueError:
                record = {}
            joined[n] = record if isinstance(record, dict) else {}
        trainers = {n: bool(r.get("resume_arg_given")) for n, r in joined.items() if r.get("launcher", True) is not False}
        with_arg = sorted(n for n, given in trainers.items() if given)
        without = sorted(n for n, given in trainers.items() if not given)
        if with_arg and without:
            raise CohortRefused(f"settings differ between the nodes that run a launcher: nodes {with_arg} were given "
                                f"--resume-arg, nodes {without} were not (their ranks would start from step 0 while the "
                                "others resume); start every training node with the same --resume-arg")
        # A node relaunched without the argument while the trainers resume by it takes no checkpoint: its own
        # (none on a server's node-local disk) must not hold the job back to an older common step, or none.
        self.needs_checkpoint = bool(self.launcher or self.fingerprint.get("resume_arg_given") or not with_arg)

    def renew(self) -> None:
        """Bump our lease and check everyone else's (one round; the lease thread loops on it).

        A counter that stopped moving is a supervisor that is gone, unless that node
        left on purpose (its record says so: a finished trainer is no loss).
        """
        now = self.clock()
        try:
            if not self._left_written:  # once we left, a still lease makes the others read why at once
                self.store.add(self._key("lease", self.me.node_rank), 1)  # (node 0 lingers, its thread runs on)
            counts = {n: self.store.add(self._key("lease", n), 0) for n in self.others}
            if self._generation and not self.me.is_leader and self.problem is None:
                self._check_same_store()
            self._exchange_stop()
            still = [n for n, c in counts.items() if n not in self._left and n in self._seen and self._seen[n][0] == c]
            for n in still:
                self._read_left(n)
        except (StoreError, ValueError, TypeError, ArithmeticError) as exc:
            if self._failing_since is None:
                self._failing_since = now
            elif now - self._failing_since >= self.lease_timeout and self.problem is None:
                self.problem = StoreLost(f"the cohort store (node 0's supervisor, {self.me.endpoint}) "
                                         f"has been unreachable for {now - self._failing_since:.0f} s: {exc}")
            return
        self._failing_since = None
        expired: list[tuple[int, float]] = []
        for node, count in counts.items():
            left = self._left.get(node)
            if left is not None:
                if not left.get("finished") and self.problem is None and self.stopped is None:
                    self.problem = MemberLeft(node, left)
                continue
            last = self._seen.get(node)
            if last is None or count != last[0]:
                self._seen[node] = (count, now)
            elif now - last[1] >= self.lease_timeout:
                expired.append((node, now - last[1]))
        if expired and self.problem is None:
            self.problem = MemberLost(expired[0][0], expired[0][1], [n for n, _ in expired[1:]])
        elif expired and isinstance(self.problem, MemberLost):
            # Killed together, their last renewals fell in different rounds: the second expires a
            # round later, while this node still captures and kills; the records to come name it.
            lost = self.problem
            new = [n for n, _ in expired if n != lost.node and n not in lost.also]
            if new:
                self.problem = MemberLost(lost.node, lost.waited, [*lost.also, *new])

    def _check_same_store(self) -> None:
        """The store answering is still the one this node joined: node 0's record there is this run's.

        Node 0's supervisor hosts the store, and each node's helper reconnects to whatever listens
        on its port after a broken connection (a reset is not a lost store). Once node 0 has died
        and another store is up there (node 0 started again, or another job's node 0), the calls
        succeed again but reach records that are not this run's: this node's job lost its node 0.
        """
        raw = self.store.get(self._root("leader"))
        try:
            theirs = json.loads(raw) if raw is not None else None
            generation = str(theirs.get("generation", "")) if isinstance(theirs, dict) else None
        except ValueError:
            generation = None
        if generation == self._generation:
            return
        now = "is empty" if raw is None else "holds another run's (node 0 was started again, or another job's node 0 " \
                                             f"under the cohort id {self.me.cohort_id!r})"
        self.problem = StoreLost(f"the cohort store at {self.me.endpoint} is not the one this node joined: node 0's "
                                 f"supervisor, which hosted it, stopped, and the store now listening there {now}")

    def _lease_loop(self) -> None:
        while True:
            slept_from = self.clock()
            if self._stop.wait(self.lease_interval):
                return
            try:
                late = self.clock() - slept_from - self.lease_interval
                if late > max(self.lease_interval, self.lease_timeout / 4):  # not a busy host's jitter
                    self.unobserved(late)
                self.store_lost()  # before this round's own calls, which may wait for the client
                self.renew()
            except Exception:  # noqa: BLE001  (the lease must outlive any one bad round)
                continue

    def unobserved(self, seconds: float) -> None:
        """This node was not running for ``seconds`` (SIGSTOP, a suspended job, a frozen
        host): what it did not watch is no one's silence.

        A job suspended as a whole (Slurm's suspend, a paused VM) stops every node's
        supervisor; the first to be continued saw the others' counters unchanged for
        the whole pause and took them for lost, though they were continued a moment
        later. Their leases are judged on the time this node was watching.
        """
        self._seen = {n: (count, t + seconds) for n, (count, t) in self._seen.items()}
        if self._failing_since is not None:
            self._failing_since += seconds

    def _patient(self, call: Callable[..., Any], *args: Any) -> Any:
        """One store call of an incident's waits, retried while the store fails for less than the lease.

        Each call has a deadline of a third of the lease; node 0's host under heavy load
        (or a network blip) misses one now and then. The lease thread tolerates that for
        the whole lease; the incident's waits gave up at the first miss (the capture wait
        ended, the kill woke the others' ranks mid-capture; the agreement or the restart
        decision ended the cohort, 75). A store still failing after the lease is lost.
        """
        start = self.clock()
        while True:
            try:
                return call(*args)
            except StoreError:
                if self.local_stop is not None:
                    raise CohortStopped(f"node {self.me.node_rank}'s supervisor was stopped "
                                        f"({_signal_name(self.local_stop)})") from None
                if self.store_lost() is not None or self.clock() - start >= self.lease_timeout:
                    raise
                self.sleep(min(0.5, self.lease_interval))

    def _read_left(self, node: int) -> dict[str, Any] | None:
        if node in self._left:
            return self._left[node]
        raw = self.store.get(self._key("left", node))
        if raw is None:
            return None
        try:
            record = json.loads(raw)
        except ValueError:
            record = None
        self._left[node] = record if isinstance(record, dict) else {"finished": False}
        return self._left[node]

    def _exchange_stop(self) -> None:
        """Publish this node's stop, or pick up another node's (first stop wins)."""
        if self.local_stop is not None:
            if not self._stop_published:
                self.store.compare_set(self._key("stop"), "", json.dumps(
                    {"node": self.me.node_rank, "signal": int(self.local_stop)}))
                self._stop_published = True
            return
        if self.stopped is not None:
            return
        info = _stop_record(self.store.get(self._key("stop")))
        if info is None:
            return  # none yet, or not a record we wrote
        if info["node"] == self.me.node_rank:
            return
        with self._stop_lock:  # the lease thread and the main thread (refresh_stop) may both read it
            if self.stopped is not None:
                return
            self.stopped = info
        if self.on_stop is not None:
            self.on_stop(info)

    def refresh_stop(self) -> dict[str, Any] | None:
        """Read another node's stop now, not at the next lease round; the stop, if any.

        A stop on one node ends its trainer at once, and the ranks on the other nodes
        fail with it: before this node takes that crash for an incident, or a node
        that left for a loss, it must know whether a stop caused it.
        """
        if self.stopped is None and self.local_stop is None:
            try:
                self._exchange_stop()
            except (StoreError, ValueError, TypeError, ArithmeticError):
                pass  # the lease thread decides when failures mean the store is lost
        return self.stopped

    def job_stop(self) -> dict[str, int] | None:
        """The stop the whole job exits with: the first the store recorded, this node's or another's.

        Two nodes stopped at about the same moment with different signals (Ctrl-C on
        one, the scheduler's SIGTERM on another) each saw its own signal first; every
        node must still exit alike, so the store's first stop decides. Without the
        store (node 0 gone) this node's own view stands.
        """
        local = {"node": self.me.node_rank, "signal": int(self.local_stop)} if self.local_stop is not None else None
        recorded = None
        if self._failing_since is None:  # a store already failing would only add a call's deadline to the exit
            try:
                if local is not None and not self._stop_published:
                    self._exchange_stop()  # publish ours now: the lease thread may not have yet
                recorded = _stop_record(self.store.get(self._key("stop")))
            except (StoreError, ValueError, TypeError, ArithmeticError):
                pass
        return recorded or self.stopped or local

    def leave(self, why: str) -> None:
        """Leave the cohort now, saying why: the others stop at their next lease round, not after
        this node's kill and its wait for the GPU release (``close`` then has nothing to add)."""
        self.why = self.why or why[:1000]
        self._leave(finished=False, why=self.why)

    def leave_joining(self, signum: int, wait: float = 3.0) -> bool:
        """This node was stopped while joining: tell the others, who stop at once naming it, instead
        of waiting out their join timeout (or their lease). Node 0 hosts the store: it keeps it up
        (at most ``wait`` s) until the nodes that had joined have read that and left themselves.
        Returns whether the others were told."""
        self._stop.set()  # a stop right after the join: its lease thread may have started
        if not self._generation:
            return False  # node 0's generation never read: nobody can be waiting for this node in it
        self._leave(finished=False, stopped=int(signum), joining=True)
        if not (self.me.is_leader and self._left_written):
            return self._left_written
        deadline = self.clock() + wait
        with contextlib.suppress(StoreError, ValueError, TypeError):
            while self.clock() < deadline:
                joined = [n for n in self.others if self.store.get(self._key("join", n)) is not None]
                if all(self._read_left(n) is not None for n in joined):
                    break
                self.sleep(0.1)
        return True

    def finish(self, attempt: int) -> None:
        """This node's trainer finished: the others must not take its silence for a loss.

        Retried while the store fails for less than the lease: without the record, ``close``
        wrote one that says nothing of the finish, and every node still saving or uploading
        read that this node had left and stopped its trainer with 75."""
        self._leave(finished=True, attempt=attempt, patient=True)

    def _leave(self, *, patient: bool = False, **record: Any) -> None:
        if self._left_written:
            return
        try:
            (self._patient if patient else _call)(self.store.set, self._key("left", self.me.node_rank),
                                                   json.dumps(record))
            self._left_written = True
        except (StoreError, CohortError):
            pass  # without the record the others fall back on the lease

    def close(self, linger_cap: float | None = None) -> None:
        """Leave the cohort: say so in the store (with a stop, if one is pending); node 0,
        which hosts the store, keeps it up until every other node has left or is lost.

        Node 0 waits without a deadline while its own trainer finished and the others are
        alive (their trainers may still be saving; their leases say they live); after a
        failure or a stop it waits at most ``linger_cap`` (default: twice the lease),
        long enough for the others to read why and stop themselves.
        """
        self.on_stop = None  # this node's run is over: a stop seen now has nothing left to stop
        try:
            if self.local_stop is not None and not self._stop_published:
                self._exchange_stop()
            self._leave(finished=False, **({"stopped": int(self.local_stop)} if self.local_stop is not None else
                                           {"why": self.why} if self.why else {}))
            if self.me.is_leader and self._generation:
                self._linger(2 * self.lease_timeout if linger_cap is None else linger_cap)
        except (StoreError, ValueError, TypeError, ArithmeticError):
            pass
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.lease_interval + 5.0)
        self.store.close()

    def _linger(self, cap: float) -> None:
        finished = bool(self._left_written and self._left_record_finished())
        deadline = None if finished and self.local_stop is None else self.clock() + cap
        said = False
        while True:
            now = self.clock()
            running = [n for n in self.others if self._read_left(n) is None
                       and not (n in self._seen and now - self._seen[n][1] >= self.lease_timeout)]
            if not running:
                return
            if self.local_stop is not None and deadline is None:
                self._exchange_stop()
                deadline = now + cap
            if deadline is not None and now >= deadline:
                log.warning("cohort_linger", message=(
                    f"nodes {running} are still running; closing the cohort store after {cap:g} s"))
                return
            if not said:
                log.info("cohort_linger", message=(
                    f"keeping the cohort store up until nodes {running} finish or stop"))
                said = True
            self.sleep(0.2)

    def _left_record_finished(self) -> bool:
        raw = self.store.get(self._key("left", self.me.node_rank))
        try:
            return bool(raw is not None and json.loads(raw).get("finished"))
        except (ValueError, AttributeError):
            return False

    # -- incidents ----------------------------------------------------------------

    def announce(self, attempt: int, kind: str, reason: str, evidence: Mapping[str, Any] | None = None) -> Announcement:
        """Claim the attempt's incident; returns the winner (ours, or an earlier node's)."""
        text = json.dumps(dict(evidence or {}), default=str)
        bounded = json.loads(text) if len(text) <= 8192 else {"omitted": f"{len(text)} bytes of evidence"}
        mine = Announcement(attempt, self.me.node_rank, kind, reason, self.wall(), bounded)
        stored = self._patient(self.store.compare_set, self._key("incident", attempt), "", json.dumps(mine.to_json()))
        return _announcement(stored) or mine  # a malformed record in the store: ours stands

    def poll(self, attempt: int) -> Announcement | None:
        """Another node's incident for this attempt, if one was announced."""
        try:
            raw = self.store.get(self._key("incident", attempt))
        except StoreError:
            return None  # the lease thread decides when failures mean the store is lost
        if raw is None:
            return None
        ann = _announcement(raw)
        if ann is None:
            return None  # not a record we wrote: ignore it rather than act on it
        return ann if ann.attempt == attempt else None

    def mark_captured(self, attempt: int) -> None:
        """Nothing to capture here (our trainer crashed): no node should wait for us."""
        try:
            self.store.set(self._key("captured", attempt, self.me.node_rank), "1")
        except StoreError:
            pass

    def all_captured(self, attempt: int, timeout: float) -> float | None:
        """Say our evidence is taken; wait (bounded) until every node's is. Seconds waited, or None.

        Nodes that left (a finished trainer) capture nothing and are not waited for. One key
        per node, set (idempotent), not a shared counter: a call that missed its deadline is
        retried (``_patient``) though the store may have done it, and a retried add counted
        this node twice, so the others killed before every node had its stacks.
        """
        start = self.clock()
        captured = {self.me.node_rank}
        try:
            self._patient(self.store.set, self._key("captured", attempt, self.me.node_rank), "1")
            while True:
                waiting = [n for n in self.others if n not in captured and self._patient(self._read_left, n) is None]
                captured.update(n for n in waiting
                                if self._patient(self.store.get, self._key("captured", attempt, n)) is not None)
                if all(n in captured for n in waiting):
                    break
                if self.store_lost() is not None or self.stopped is not None or self.local_stop is not None \
                        or self.clock() - start >= timeout:  # a stop, here or elsewhere, ends the run: no wait
                    return None
                self.sleep(0.05)
        except (CohortStopped, StoreError, ValueError, TypeError, ArithmeticError):
            return None  # the lease thread decides whether the store is lost; the kill goes on
        return self.clock() - start

    # -- agreement ---------------------------------------------------------------

    def agree(self, attempt: int, steps: Sequence[int], policy: GraphPolicy) -> Agreement:
        """Report, then wait (bounded) for node 0's decision on checkpoint and policy."""
        try:
            return self._agree(attempt, steps, policy)
        except StoreError as exc:
            raise StoreLost(f"the cohort store (node 0's supervisor, {self.me.endpoint}) is "
                            f"unreachable: {exc}") from exc

    def resume(self, attempts: int, steps: Sequence[int], policy: GraphPolicy) -> Agreement:
        """A job resumed on every node (``hangwatch run --resume``): before its first attempt,
        the attempt count, the checkpoint and the policy every node goes on from.

        Each node's journal holds its own view (a node killed in the backoff counts one
        attempt fewer; a node killed mid-incident missed the policy it decided); without
        this, each resumed alone from its own newest checkpoint, or, in a cohort, from none.
        Keys of attempt 0 (attempts count from 1), under the resumed run's new generation.
        """
        try:
            return self._agree(0, steps, policy, attempts=attempts)
        except StoreError as exc:
            raise StoreLost(f"the cohort store (node 0's supervisor, {self.me.endpoint}) is "
                            f"unreachable: {exc}") from exc

    def _agree(self, attempt: int, steps: Sequence[int], policy: GraphPolicy,
               attempts: int | None = None) -> Agreement:
        report = {"steps": sorted(set(steps))[-REPORTED_STEPS:], "cudagraphs_off": policy.cudagraphs_off,
                  "enforce_eager": policy.enforce_eager, **({"attempts": attempts} if attempts is not None else {}),
                  **({} if self.needs_checkpoint else {"needs_checkpoint": False})}
        self._patient(self.store.set, self._key("done", attempt, self.me.node_rank), json.dumps(report))
        deadline = self.clock() + self.barrier_timeout
        if self.me.is_leader:
            reports: dict[int, Any] = {}
            while True:
                for n in sorted(set(range(self.me.nnodes)) - set(reports)):
                    raw = self._patient(self.store.get, self._key("done", attempt, n))
                    if raw is not None:
                        reports[n] = _object(raw, f"node {n}'s report")
                missing = sorted(set(range(self.me.nnodes)) - set(reports))
                if not missing:
                    break
                self._check(deadline, f"reports from nodes {missing}", missing)
                self.sleep(0.1)
            step, agreed = decide(reports)
            decision = Agreement(attempt, step, agreed, {str(k): v for k, v in reports.items()},
                                 resumed_attempts(reports) if attempts is not None else None)
            self._patient(self.store.set, self._key("agreed", attempt), json.dumps(decision.to_json()))
            return decision
        while True:
            raw = self._patient(self.store.get, self._key("agreed", attempt))
            if raw is not None:
                d = _object(raw, "node 0's decision")
                try:
                    step = d["checkpoint_step"]
                    agreement = Agreement(int(d["attempt"]), None if step is None else int(step),
                                          GraphPolicy(d["cudagraphs"] == "off", bool(d["enforce_eager"])),
                                          dict(d["reports"]), None if attempts is None else _count(d.get("attempts")))
                    if agreement.attempt != attempt:
                        raise ValueError(f"it is for attempt {agreement.attempt}, not {attempt}")
                    return agreement
                except (KeyError, TypeError, ValueError) as exc:
                    raise CohortError(f"node 0's decision in the store is malformed ({exc!r})") from None
            self._check(deadline, "node 0's decision", [0])
            self.sleep(0.1)

    def settle(self, attempt: int, mine: Mapping[str, Any]) -> dict[str, Any]:
        """Every node's restart decision after this attempt, combined (``settled``); bounded."""
        try:
            self._patient(self.store.set, self._key("decision", attempt, self.me.node_rank),
                          json.dumps(dict(mine), default=str))
            deadline = self.clock() + self.barrier_timeout
            decisions: dict[int, Mapping[str, Any]] = {self.me.node_rank: mine}
            while True:
                for n in sorted(set(range(self.me.nnodes)) - set(decisions)):
                    raw = self._patient(self.store.get, self._key("decision", attempt, n))
                    if raw is not None:
                        decisions[n] = _object(raw, f"node {n}'s restart decision")
                missing = sorted(set(range(self.me.nnodes)) - set(decisions))
                if not missing:
                    break
                self._check(deadline, f"the restart decisions of nodes {missing}", missing)  # read first: one
                self.sleep(0.1)  # that decided and left is not missing
        except StoreError as exc:
            raise StoreLost(f"the cohort store (node 0's supervisor, {self.me.endpoint}) is "
                            f"unreachable: {exc}") from exc
        return settled(decisions)

    def _check(self, deadline: float, waiting_for: str, nodes: Sequence[int] = ()) -> None:
        problem = self.store_lost()
        if problem is not None:
            raise problem
        if self.local_stop is not None:  # this node's own stop ends its waits at once, as it does alone
            raise CohortStopped(f"node {self.me.node_rank}'s supervisor was stopped ({_signal_name(self.local_stop)})")
        if self.refresh_stop() is not None:  # a node that left because it was stopped is that stop, not a loss
            raise CohortStopped(f"node {self.stopped['node']}'s supervisor was stopped "
                                f"({_signal_name(self.stopped['signal'])})")
        for n in nodes:
            left = self._patient(self._read_left, n)
            if left is not None:
                raise MemberLeft(n, left)
        if self.clock() >= deadline:
            raise BarrierTimeout(f"waited {self.barrier_timeout:g} s for {waiting_for} before relaunch")


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _call(call: Callable[..., Any], *args: Any) -> Any:
    return call(*args)


_IDS_KEY = "hangwatch-cohort-ids/"  # + leader / joiner: the last of each to join this store, and its cohort id
_SAME_ID = ("start every node with the same --cohort-id (its default is $SLURM_JOB_ID, then $TORCHELASTIC_RUN_ID, "
            "then 'hangwatch': a node started outside the Slurm job, or with the option on one node only, differs)")


def _other_cohort(raw: str | None, mine: str) -> str | None:
    """The cohort id in an ids record when it is not ``mine`` (capped: it is only shown), else None."""
    if raw is None:
        return None
    try:
        other = json.loads(raw).get("cohort_id")
    except (ValueError, AttributeError):
        return None
    return other[:100] if isinstance(other, str) and other != mine else None


def _stop_record(raw: str | None) -> dict[str, int] | None:
    """The ``stop`` key's record (``node``, ``signal``), or None: none yet, or not one we wrote."""
    if raw is None:
        return None
    try:
        info = json.loads(raw)
        sig = int(info["signal"])
        # Only a stop's signals: the store is not authenticated, and whoever writes this key
        # must not choose what every node forwards to its trainer (SIGSTOP, SIGKILL, SIGSEGV).
        return {"node": int(info["node"]), "signal": sig if sig in _STOP_SIGNALS else int(signal.SIGTERM)}
    except (ValueError, TypeError, KeyError, ArithmeticError):
        return None


def _object(raw: str, what: str) -> dict[str, Any]:
    """A JSON object read from the store; anything else is the cohort's error, not a traceback."""
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise CohortError(f"{what} in the cohort store is not a JSON object: {raw[:80]!r}")
    return value


def _announcement(raw: str) -> Announcement | None:
    try:
        d = json.loads(raw)
        wall = float(d["wall"])
        if not math.isfinite(wall):
            return None
        return Announcement(int(d["attempt"]), int(d["node"]), str(d["kind"]), str(d["reason"]), wall,
                            dict(d.get("evidence") or {}))
    except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError):
        return None
