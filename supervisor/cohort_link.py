"""The runner's side of a multi-node cohort: turning the cohort's state into verdicts and journal records.

``cohort.Cohort`` speaks to the store; ``CohortLink`` is what one attempt asks of
it, at four points of the attempt's lifecycle:

* every tick: ``verdict`` — another node's incident for this attempt, or a lost
  member or store, becomes this node's verdict too;
* at a verdict: ``incident`` — announce ours (first node wins) and journal the
  cohort's incident, or journal the loss;
* after the capture: ``captured`` — wait (bounded) for every node's capture;
* before a relaunch: ``agree`` — the checkpoint step and the policy every node
  relaunches with, or the exit code when the cohort cannot go on.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

import structlog

from hangwatch.contract.exitcodes import EXIT_COHORT
from hangwatch.contract.verdict import Verdict, VerdictKind
from hangwatch.supervisor.attempt import GraphPolicy
from hangwatch.supervisor.cohort import Agreement, Cohort

log = structlog.get_logger("hangwatch.cohort")

_HANGS = (VerdictKind.STALL.value, VerdictKind.SILENT_HANG.value)


class _Journal(Protocol):
    def append(self, event: str, **fields: Any) -> Any: ...


class CohortLink:
    def __init__(self, cohort: Cohort, journal: Callable[[], _Journal]) -> None:
        """``journal`` returns the runner's current journal (the CLI may wrap it after start)."""
        self.cohort = cohort
        self._journal = journal

    @property
    def journal(self) -> _Journal:
        return self._journal()

    @property
    def node_rank(self) -> int:
        return self.cohort.me.node_rank

    def joined(self) -> None:
        me = self.cohort.me
        self.journal.append("cohort_joined", node_rank=me.node_rank, nnodes=me.nnodes, cohort_id=me.cohort_id,
                            store=f"{me.host}:{me.port}", hosts_store=me.is_leader)

    def verdict(self, attempt: int, now: float) -> Verdict | None:
        """Another node's incident for this attempt, or a lost member/store: our verdict too."""
        problem = self.cohort.problem
        if problem is not None:
            return Verdict(VerdictKind.COHORT_LOST, now, now, str(problem), evidence={"cohort": problem.reason})
        ann = self.cohort.poll(attempt)
        if ann is None or ann.node == self.node_rank:
            return None
        # A crash elsewhere leaves our ranks hung in a collective: capture them as a hang.
        kind = VerdictKind(ann.kind) if ann.kind in _HANGS else VerdictKind.SILENT_HANG
        return Verdict(kind, now, now, f"node {ann.node} announced {ann.kind}: {ann.reason}",
                       evidence={"cohort_incident": ann.to_json()})

    def incident(self, attempt: int, verdict: Verdict) -> None:
        """Announce a local incident (first node wins) and journal the cohort's incident."""
        if verdict.kind is VerdictKind.DONE:
            return
        if verdict.kind is VerdictKind.COHORT_LOST:
            self.journal.append("member_lost", attempt=attempt, reason=verdict.reason,
                                cause=verdict.evidence.get("cohort"))
            log.error("member_lost", message=f"cohort: {verdict.reason}; capturing, killing and stopping")
            return
        ann = verdict.evidence.get("cohort_incident") if verdict.evidence else None
        if ann is None:
            try:
                ann = self.cohort.announce(attempt, verdict.kind.value, verdict.reason, dict(verdict.evidence)).to_json()
            except Exception as exc:  # noqa: BLE001  (a store hiccup must not stop the local recovery)
                log.warning("cohort_announce_failed", message=f"could not announce the incident to the cohort: {exc}")
                return
        first = ann["node"] == self.node_rank
        self.journal.append("cohort_incident", attempt=attempt, announced_by=ann["node"], kind=ann["kind"],
                            reason=ann["reason"], suspect_node=ann["node"], this_node_first=first,
                            suspect_evidence=ann.get("evidence") or {})
        log.error("cohort_incident", message=(
            f"cohort incident in attempt {attempt}: node {ann['node']} {ann['kind']}" + (" (this node)" if first else "")))

    def captured(self, attempt: int, timeout: float) -> None:
        """Kill only once every node has its stacks: the first node's kill would otherwise
        wake its peers out of the collective they hang in, and their evidence with it."""
        if self.cohort.all_captured(attempt, timeout=timeout) is None:
            log.warning("cohort_capture_wait", message=(
                f"not every node reported its capture within {timeout:.0f} s; killing anyway"))

    def agree(self, attempt: int, verdict: Verdict, steps: Sequence[int],
              policy: GraphPolicy) -> tuple[Agreement | None, int | None]:
        """Before any node relaunches: node 0's decision, or the exit code when the cohort cannot go on."""
        if verdict.kind is VerdictKind.COHORT_LOST:
            return None, EXIT_COHORT
        try:
            agreed = self.cohort.agree(attempt, steps, policy)
        except Exception as exc:  # noqa: BLE001  (CohortError or any store failure ends the cohort)
            self.journal.append("member_lost", attempt=attempt, reason=f"no agreement before relaunch: {exc}",
                                cause=getattr(exc, "reason", "store_error"))
            log.error("member_lost", message=f"cohort: no agreement before relaunch: {exc}; stopping")
            return None, EXIT_COHORT
        self.journal.append("cohort_agreed", **agreed.to_json())
        return agreed, None
