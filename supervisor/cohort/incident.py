"""An incident across the cohort: one announcement, a capture barrier, an agreement, one restart decision.

* **One incident per attempt.** The first node to announce (compare-and-set on the
  attempt's key) wins; every node polls the key each tick, so all capture while the
  ranks are still hung. An announcement for another attempt is ignored.
* **A heads-up while one builds** (``hint``, ``likely.py``): the others take their early
  py-spy round at once and poll the incident key between ticks near the expected verdict.
* **Kill once every node has its stacks** (``all_captured``).
* **Agreement before relaunch.** Each node reports its complete checkpoint steps and
  its graph policy; node 0 decides (``agreement.decide``) and publishes it; the others
  wait for it with a deadline (``BarrierTimeout``).
* **One restart decision** (``agreement.settled``) from every node's own.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Protocol, Sequence

from hangwatch.supervisor.decide.attempt import GraphPolicy
from hangwatch.supervisor.cohort.agreement import Agreement, agreement_from, decide, report, resumed_attempts, settled
from hangwatch.supervisor.cohort.errors import (BarrierTimeout, CohortError, CohortStopped, MemberLeft, StoreLost,
                                                signal_name)
from hangwatch.supervisor.cohort.likely import Hint, hint
from hangwatch.supervisor.cohort.membership import Membership
from hangwatch.supervisor.cohort.records import Announcement, announcement, json_object
from hangwatch.supervisor.cohort.store import Store, StoreError

#: seconds between the reads of a barrier's wait (capture, agreement, restart decision): each node's
#: relaunch waits for the last read that sees every node, so short, and only while a barrier is open
BARRIER_POLL_S = 0.05


class IncidentNode(Protocol):
    """What an incident's exchanges need of their node (``node.Cohort``)."""

    store: Store
    me: Membership
    barrier_timeout: float
    needs_checkpoint: bool
    stopped: dict[str, Any] | None
    local_stop: int | None
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    wall: Callable[[], float]

    @property
    def others(self) -> list[int]: ...

    def store_lost(self) -> CohortError | None: ...

    def refresh_stop(self) -> dict[str, Any] | None: ...

    def _key(self, *parts: object) -> str: ...

    def _patient(self, call: Callable[..., Any], *args: Any) -> Any: ...

    def _read_left(self, node: int) -> dict[str, Any] | None: ...


class IncidentExchange:
    """What the nodes exchange through the store in an incident, every wait bounded."""

    def __init__(self, node: IncidentNode) -> None:
        self.node = node

    # -- the incident and the capture ---------------------------------------------

    def announce(self, attempt: int, kind: str, reason: str, evidence: Mapping[str, Any] | None = None) -> Announcement:
        """Claim the attempt's incident; returns the winner (ours, or an earlier node's)."""
        node = self.node
        text = json.dumps(dict(evidence or {}), default=str)
        bounded = json.loads(text) if len(text) <= 8192 else {"omitted": f"{len(text)} bytes of evidence"}
        mine = Announcement(attempt, node.me.node_rank, kind, reason, node.wall(), bounded)
        stored = node._patient(node.store.compare_set, node._key("incident", attempt), "", json.dumps(mine.to_json()))
        return announcement(stored) or mine  # a malformed record in the store: ours stands

    def poll(self, attempt: int) -> Announcement | None:
        """Another node's incident for this attempt, if one was announced."""
        try:
            raw = self.node.store.get(self.node._key("incident", attempt))
        except StoreError:
            return None  # the lease thread decides when failures mean the store is lost
        if raw is None:
            return None
        ann = announcement(raw)
        if ann is None:
            return None  # not a record we wrote: ignore it rather than act on it
        return ann if ann.attempt == attempt else None

    def hint(self, attempt: int, rule: str, eta_s: float) -> None:
        """Tell the others a verdict is building here, expected in ``eta_s`` s (``likely``): one call,
        no retry (a hint that does not get through leaves the others to learn at their ticks)."""
        node = self.node
        record = Hint(attempt, node.me.node_rank, rule, node.wall(), eta_s)
        try:
            node.store.set(node._key("likely", attempt), json.dumps(record.to_json()))
        except StoreError:
            pass  # the lease thread decides when failures mean the store is lost

    def read_hint(self, attempt: int) -> Hint | None:
        """The latest node's hint of a verdict building in this attempt, if any."""
        try:
            found = hint(self.node.store.get(self.node._key("likely", attempt)))
        except StoreError:
            return None
        return found if found is not None and found.attempt == attempt else None

    def mark_captured(self, attempt: int) -> None:
        """Nothing to capture here (our trainer crashed): no node should wait for us."""
        try:
            self.node.store.set(self.node._key("captured", attempt, self.node.me.node_rank), "1")
        except StoreError:
            pass

    def all_captured(self, attempt: int, timeout: float) -> float | None:
        """Say our evidence is taken; wait (bounded) until every node's is. Seconds waited, or None.

        Nodes that left (a finished trainer) capture nothing and are not waited for. One key
        per node, set (idempotent), not a shared counter: a call that missed its deadline is
        retried (``Cohort._patient``) though the store may have done it, and a retried add counted
        this node twice, so the others killed before every node had its stacks.
        """
        node = self.node
        start = node.clock()
        captured = {node.me.node_rank}
        try:
            node._patient(node.store.set, node._key("captured", attempt, node.me.node_rank), "1")
            while True:
                waiting = [n for n in node.others if n not in captured and node._patient(node._read_left, n) is None]
                captured.update(n for n in waiting
                                if node._patient(node.store.get, node._key("captured", attempt, n)) is not None)
                if all(n in captured for n in waiting):
                    break
                if node.store_lost() is not None or node.stopped is not None or node.local_stop is not None \
                        or node.clock() - start >= timeout:  # a stop, here or elsewhere, ends the run: no wait
                    return None
                node.sleep(BARRIER_POLL_S)
        except (CohortStopped, StoreError, ValueError, TypeError, ArithmeticError):
            return None  # the lease thread decides whether the store is lost; the kill goes on
        return node.clock() - start

    # -- agreement ---------------------------------------------------------------

    def agree(self, attempt: int, steps: Sequence[int], policy: GraphPolicy, attempts: int | None = None,
              processes: Sequence[Mapping[str, Any]] = ()) -> Agreement:
        """Report, then wait (bounded) for node 0's decision on checkpoint and policy (node 0 decides it).

        ``attempts``: a resumed job's count on this node (``Cohort.resume``), agreed too.
        """
        try:
            return self._agree(attempt, steps, policy, attempts, processes)
        except StoreError as exc:
            raise self._unreachable(exc) from exc

    def _agree(self, attempt: int, steps: Sequence[int], policy: GraphPolicy, attempts: int | None,
               processes: Sequence[Mapping[str, Any]]) -> Agreement:
        node = self.node
        mine = report(steps, policy, attempts, node.needs_checkpoint, processes)
        node._patient(node.store.set, node._key("done", attempt, node.me.node_rank), json.dumps(mine))
        deadline = node.clock() + node.barrier_timeout
        if node.me.is_leader:
            reports = self._gather("done", attempt, {}, deadline, "node {}'s report", "reports from nodes {}")
            step, agreed = decide(reports)
            decision = Agreement(attempt, step, agreed, {str(k): v for k, v in reports.items()},
                                 resumed_attempts(reports) if attempts is not None else None)
            node._patient(node.store.set, node._key("agreed", attempt), json.dumps(decision.to_json()))
            return decision
        while True:
            raw = node._patient(node.store.get, node._key("agreed", attempt))
            if raw is not None:
                return agreement_from(json_object(raw, "node 0's decision"), attempt, attempts)
            self._check(deadline, "node 0's decision", [0])
            node.sleep(BARRIER_POLL_S)

    def settle(self, attempt: int, mine: Mapping[str, Any]) -> dict[str, Any]:
        """Every node's restart decision after this attempt, combined (``settled``); bounded."""
        node = self.node
        try:
            node._patient(node.store.set, node._key("decision", attempt, node.me.node_rank),
                          json.dumps(dict(mine), default=str))
            deadline = node.clock() + node.barrier_timeout
            decisions = self._gather("decision", attempt, {node.me.node_rank: mine}, deadline,
                                     "node {}'s restart decision", "the restart decisions of nodes {}")
        except StoreError as exc:
            raise self._unreachable(exc) from exc
        return settled(decisions)

    def _gather(self, kind: str, attempt: int, have: dict[int, Any], deadline: float,
                what: str, waiting_for: str) -> dict[int, Any]:
        """Every node's ``kind`` record for ``attempt`` (``have``: those already known), waited for until
        ``deadline``; ``what`` and ``waiting_for`` name a record and the missing nodes' ({} is filled in)."""
        node = self.node
        everyone = set(range(node.me.nnodes))
        while True:
            for n in sorted(everyone - set(have)):
                raw = node._patient(node.store.get, node._key(kind, attempt, n))
                if raw is not None:
                    have[n] = json_object(raw, what.format(n))
            missing = sorted(everyone - set(have))
            if not missing:
                return have
            self._check(deadline, waiting_for.format(missing), missing)  # read first: one that decided
            node.sleep(BARRIER_POLL_S)  # and left is not missing

    def _check(self, deadline: float, waiting_for: str, nodes: Sequence[int] = ()) -> None:
        """End a wait for ``nodes`` that cannot end well: a lost store, a stop, a node that left, the deadline."""
        node = self.node
        problem = node.store_lost()
        if problem is not None:
            raise problem
        if node.local_stop is not None:  # this node's own stop ends its waits at once, as it does alone
            raise CohortStopped(f"node {node.me.node_rank}'s supervisor was stopped ({signal_name(node.local_stop)})")
        stopped = node.refresh_stop()
        if stopped is not None:  # a node that left because it was stopped is that stop, not a loss
            raise CohortStopped(f"node {stopped['node']}'s supervisor was stopped "
                                f"({signal_name(stopped['signal'])})")
        for n in nodes:
            left = node._patient(node._read_left, n)
            if left is not None:
                raise MemberLeft(n, left)
        if node.clock() >= deadline:
            raise BarrierTimeout(f"waited {node.barrier_timeout:g} s for {waiting_for} before relaunch")

    def _unreachable(self, exc: StoreError) -> StoreLost:
        judged = self.node.store_lost()
        if isinstance(judged, StoreLost):  # the lease's judgement says it best (how long, and what it means)
            return judged
        return StoreLost(f"node 0 unreachable: its supervisor stopped answering, or the network between us failed "
                         f"(the cohort store at {self.node.me.endpoint}: {exc})")
