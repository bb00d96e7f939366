"""A cohort of per-node supervisors that act as one: one incident, one agreement, one relaunch.

In a multi-node job one wedged rank hangs every node (the others block in a
collective), so the nodes' supervisors coordinate through a store (``store.Store``;
by default PyTorch's c10d ``TCPStore`` hosted by node 0's supervisor). ``Cohort`` is
one node's member of it:

* **Join** (``join.Join``). Every node publishes a fingerprint of the settings that must
  match (checkpoint layout, graph policy options, node count); a node whose settings
  differ from node 0's is refused with what differs (``CohortRefused``).
* **Leases** (``lease.Leases``). A background thread bumps this node's counter every
  ``lease_interval`` and watches everyone else's. A counter that has not moved
  for ``lease_timeout`` means that node's supervisor is gone (``MemberLost``);
  a store that keeps failing for ``lease_timeout`` means node 0 is gone
  (``StoreLost``). Counters, not timestamps: node clocks need not agree.
* **Stops and departures.** A stop on any node stops every node; a node that leaves
  (finished, stopped, gave up) says why in its record, and node 0, which hosts the
  store, keeps it up until the others have read it.
* **One incident per attempt, agreement before relaunch** (``incident.IncidentExchange``).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import Any, Callable, Mapping, Sequence

import structlog

from hangwatch.supervisor.decide.attempt import GraphPolicy
from hangwatch.supervisor.cohort.agreement import Agreement
from hangwatch.supervisor.cohort.errors import CohortError, CohortRefused, CohortStopped, MemberLeft, StoreLost, signal_name
from hangwatch.supervisor.cohort.incident import IncidentExchange
from hangwatch.supervisor.cohort.join import Join
from hangwatch.supervisor.cohort.lease import Leases, with_lost
from hangwatch.supervisor.cohort.likely import Hint
from hangwatch.supervisor.cohort.membership import Membership
from hangwatch.supervisor.cohort.records import Announcement, generation_of, json_object, left_finished, left_record, stop_record
from hangwatch.supervisor.cohort.store import Store, StoreError
from hangwatch.supervisor.cohort.values import Sealer
from hangwatch.supervisor.cohort.watched_store import WatchedStore

log = structlog.get_logger("hangwatch.cohort")


class Cohort:
    """One node's member of the cohort: its join, its lease, its stops and departures, and (through
    ``incidents``) what it exchanges with the others in an incident."""

    def __init__(self, store: Store, membership: Membership, fingerprint: Mapping[str, Any], *,
                 lease_interval: float = 1.0, lease_timeout: float = 15.0, barrier_timeout: float = 300.0,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 wall: Callable[[], float] = time.time, launcher: bool = True, secret: bytes | None = None) -> None:
        """``launcher``: this node's command runs a launcher (``launcher.runs_launcher``); told to the
        others at join, not compared (a rollout server's node runs none). ``secret``: the job's cohort
        secret (``values.load_secret``): every record is sealed with it; None: unauthenticated."""
        self.store = WatchedStore(store, clock, Sealer(secret))
        self.launcher = launcher
        self._launchers: int | None = None
        #: whether this node's checkpoints count in the agreement (``membership.check_resume_args``)
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
        #: names the culprit from every node's process rows (``diagnostics.across_nodes.culprit_across``,
        #: given by the CLI: the cohort does not read stacks itself); None: no culprit is named
        self.name_culprit: Callable[[Mapping[int, Sequence[Any]]], dict[str, Any] | None] | None = None
        self._stop_published = False
        self._stop_lock = threading.Lock()
        self._left: dict[int, dict[str, Any]] = {}  # nodes that left on purpose (finished, gave up, stopped)
        self._left_written = False
        self.why: str | None = None  # why this node gives up, for the others (its left record carries it)
        self._generation = ""  # this run's keys (see join): a rerun never reads an older run's records
        self._leases = Leases(lease_timeout)
        self._lease_count = 0  # this node's lease counter (its own record in the store)
        self.incidents = IncidentExchange(self)
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
                self.problem = StoreLost(f"node 0 unreachable: its supervisor stopped answering, or the network "
                                         f"between us failed (the cohort store at {self.me.endpoint} has been "
                                         f"unreachable for {self.clock() - since:.0f} s)")
                self._cut_if_lost()
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
        """Publish our fingerprint, check it against node 0's, wait (bounded) for every node (``join.Join``);
        start the lease thread.

        ``spent``: seconds of ``timeout`` already spent reaching the store (a node started
        before node 0 waits for it to come up first): the whole start is bounded by it.
        A store that goes away once node 0 was seen is node 0 that stopped waiting.
        """
        joining = Join(self, timeout, spent)
        try:
            joining.run()
        except StoreError as exc:
            if not joining.saw_leader:
                raise
            raise CohortRefused(f"node 0 closed the cohort store while this node was joining (node 0 stopped: its "
                                f"own message says why) ({exc})") from None
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
                    record = json_object(raw, f"node {n}'s join record") if raw is not None else {}
                    count += record.get("launcher", True) is not False
            except (StoreError, CohortError):
                return None
            self._launchers = count
        return self._launchers

    # -- the lease ---------------------------------------------------------------

    def renew(self) -> None:
        """Bump our lease and check everyone else's (one round; the lease thread loops on it).

        A counter that stopped moving is a supervisor that is gone, unless that node
        left on purpose (its record says so: a finished trainer is no loss). The leases are
        judged on the counters alone: the round's other reads (the store's identity, a stop,
        the left records) each fail on their own, and a value no node wrote in one of them
        (two bytes under ``stop``) no longer ends the round before the check.
        """
        now = self.clock()
        counts = self._lease_counts(now)
        if counts is None:
            return
        for part in (self._check_same_store, self._exchange_stop, lambda: self._read_unmoved_left(counts)):
            try:
                part()
            except (StoreError, ValueError, TypeError, ArithmeticError, RecursionError):
                continue  # the leases below are judged all the same
        for node in counts:
            left = self._left.get(node)
            if left is not None and not left.get("finished") and self.problem is None and self.stopped is None:
                self.problem = MemberLeft(node, left)
        expired = self._leases.observe({n: c for n, c in counts.items() if n not in self._left}, now)
        if expired:
            problem = with_lost(self.problem, expired)
            if problem is not self.problem:
                self.problem = problem
                self._cut_if_lost()

    def _lease_counts(self, now: float) -> dict[int, int] | None:
        """Bump this node's counter, read the others' (None: the store failed; lost after the whole lease).

        Each node's counter is its own record, written by it alone (a set, sealed like every record,
        not an atomic add: a counter cannot carry a MAC). One that reads as no node's (a stranger's
        value) keeps its last count: the node is judged on what it last wrote.
        """
        try:
            if not self._left_written:  # once we left, a still lease makes the others read why at once
                self._lease_count += 1  # (node 0 lingers, its thread runs on)
                self.store.set(self._key("lease", self.me.node_rank), str(self._lease_count))
            counts = {n: self._count_of(n) for n in self.others}
        except StoreError as exc:
            if self._failing_since is None:
                self._failing_since = now
            elif now - self._failing_since >= self.lease_timeout and self.problem is None:
                self.problem = StoreLost(f"node 0 unreachable: its supervisor stopped answering, or the network "
                                         f"between us failed (the cohort store at {self.me.endpoint} "
                                         f"has been unreachable for {now - self._failing_since:.0f} s: {exc})")
                self._cut_if_lost()
            return None
        self._failing_since = None
        return counts

    def _count_of(self, node: int) -> int:
        raw = self.store.get(self._key("lease", node))
        last = self._leases.seen.get(node)
        try:
            count = int(raw) if raw is not None else 0  # (none yet: 0, as a node that died before its first)
        except (ValueError, TypeError):
            count = None
        if count is None:
            return last[0] if last is not None else 0
        return count

    def _read_unmoved_left(self, counts: Mapping[int, int]) -> None:
        for n in [n for n in self._leases.unmoved(counts) if n not in self._left]:
            self._read_left(n)

    def _cut_if_lost(self) -> None:
        """Once the store is known lost no call goes out again: each would wait for its deadline and
        for the client, and this node's ranks stay hung meanwhile (``WatchedStore.cut``)."""
        if isinstance(self.problem, StoreLost):
            self.store.cut = True

    def _check_same_store(self) -> None:
        if not (self._generation and not self.me.is_leader and self.problem is None):
            return
        self._check_store_identity()

    def _check_store_identity(self) -> None:
        """The store answering is still the one this node joined: node 0's record there is this run's.

        Node 0's supervisor hosts the store, and each node's helper reconnects to whatever listens
        on its port after a broken connection (a reset is not a lost store). Once node 0 has died
        and another store is up there (node 0 started again, or another job's node 0), the calls
        succeed again but reach records that are not this run's: this node's job lost its node 0.
        """
        raw = self.store.get(self._root("leader"))
        if generation_of(raw) == self._generation:
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
        self._leases.unobserved(seconds)
        if self._failing_since is not None:
            self._failing_since += seconds

    # -- the store's calls, and the others' records ------------------------------

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
                                        f"({signal_name(self.local_stop)})") from None
                if self.store_lost() is not None or self.clock() - start >= self.lease_timeout:
                    raise
                self.sleep(min(0.5, self.lease_interval))

    def _read_left(self, node: int) -> dict[str, Any] | None:
        if node in self._left:
            return self._left[node]
        raw = self.store.get(self._key("left", node))
        if raw is None:
            return None
        self._left[node] = left_record(raw)
        return self._left[node]

    # -- stops and departures ------------------------------------------------------

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
        info = stop_record(self.store.get(self._key("stop")))
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
                recorded = stop_record(self.store.get(self._key("stop")))
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
        if self.store.cut:  # the store is gone: no left record, no wait for a helper stuck in a call
            self._stop.set()
            self.store.close(wait=False)
            return
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
            running = [n for n in self.others if self._read_left(n) is None and not self._leases.expired(n, now)]
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
        return left_finished(self.store.get(self._key("left", self.me.node_rank)))

    # -- incidents and agreement (``incident.IncidentExchange``) ---------------------

    def announce(self, attempt: int, kind: str, reason: str, evidence: Mapping[str, Any] | None = None) -> Announcement:
        """Claim the attempt's incident; returns the winner (ours, or an earlier node's)."""
        return self.incidents.announce(attempt, kind, reason, evidence)

    def poll(self, attempt: int) -> Announcement | None:
        """Another node's incident for this attempt, if one was announced."""
        return self.incidents.poll(attempt)

    def hint(self, attempt: int, rule: str, eta_s: float) -> None:
        """Tell the others a verdict is building here, expected in ``eta_s`` s (``likely``)."""
        self.incidents.hint(attempt, rule, eta_s)

    def read_hint(self, attempt: int) -> Hint | None:
        """The latest node's hint of a verdict building in this attempt, if any."""
        return self.incidents.read_hint(attempt)

    def mark_captured(self, attempt: int) -> None:
        """Nothing to capture here (our trainer crashed): no node should wait for us."""
        self.incidents.mark_captured(attempt)

    def all_captured(self, attempt: int, timeout: float) -> float | None:
        """Say our evidence is taken; wait (bounded) until every node's is. Seconds waited, or None."""
        return self.incidents.all_captured(attempt, timeout)

    def agree(self, attempt: int, steps: Sequence[int], policy: GraphPolicy,
              processes: Sequence[Mapping[str, Any]] = ()) -> Agreement:
        """Report (with this node's incident's process rows), then wait (bounded) for node 0's
        decision on checkpoint and policy."""
        return self.incidents.agree(attempt, steps, policy, processes=processes)

    def resume(self, attempts: int, steps: Sequence[int], policy: GraphPolicy) -> Agreement:
        """A job resumed on every node (``hangwatch run --resume``): before its first attempt,
        the attempt count, the checkpoint and the policy every node goes on from.

        Each node's journal holds its own view (a node killed in the backoff counts one
        attempt fewer; a node killed mid-incident missed the policy it decided); without
        this, each resumed alone from its own newest checkpoint, or, in a cohort, from none.
        Keys of attempt 0 (attempts count from 1), under the resumed run's new generation.
        """
        return self.incidents.agree(0, steps, policy, attempts=attempts)

    def settle(self, attempt: int, mine: Mapping[str, Any]) -> dict[str, Any]:
        """Every node's restart decision after this attempt, combined (``agreement.settled``); bounded."""
        return self.incidents.settle(attempt, mine)


def _call(call: Callable[..., Any], *args: Any) -> Any:
    return call(*args)
