"""Leases: whether the other nodes' supervisors are still there, judged from their counters (pure).

Every node bumps its own counter in the store every ``lease_interval``; a counter that has
not moved for ``lease_timeout`` means that node's supervisor is gone (``MemberLost``).
Counters, not timestamps: node clocks need not agree; when a counter last moved is read on
this node's clock alone. ``Cohort.renew`` reads the counters; ``Leases`` judges them.
"""

from __future__ import annotations

from typing import Mapping

from hangwatch.supervisor.cohort.errors import CohortError, MemberLost


class Leases:
    """The others' lease counters as this node last saw them move."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.seen: dict[int, tuple[int, float]] = {}  # node: (its counter, when this node saw it move)

    def unmoved(self, counts: Mapping[int, int]) -> list[int]:
        """The nodes whose counter has not moved since this node last saw it (candidates for a loss)."""
        return [n for n, c in counts.items() if n in self.seen and self.seen[n][0] == c]

    def observe(self, counts: Mapping[int, int], now: float) -> list[tuple[int, float]]:
        """Note the counters read at ``now``; the nodes whose counter has not moved for the whole
        lease, each with how long it has been still."""
        expired: list[tuple[int, float]] = []
        for node, count in counts.items():
            last = self.seen.get(node)
            if last is None or count != last[0]:
                self.seen[node] = (count, now)
            elif now - last[1] >= self.timeout:
                expired.append((node, now - last[1]))
        return expired

    def expired(self, node: int, now: float) -> bool:
        """Whether ``node``'s lease had run out when its counter was last read."""
        return node in self.seen and now - self.seen[node][1] >= self.timeout

    def unobserved(self, seconds: float) -> None:
        """This node was not watching for ``seconds`` (``Cohort.unobserved``): no one's silence."""
        self.seen = {n: (count, t + seconds) for n, (count, t) in self.seen.items()}


def with_lost(problem: CohortError | None, expired: list[tuple[int, float]]) -> CohortError | None:
    """The cohort's problem once the ``expired`` leases are judged: the first node lost, or the
    loss already known naming the nodes lost since."""
    if not expired:
        return problem
    if problem is None:
        return MemberLost(expired[0][0], expired[0][1], [n for n, _ in expired[1:]])
    if isinstance(problem, MemberLost):
        # Killed together, their last renewals fell in different rounds: the second expires a
        # round later, while this node still captures and kills; the records to come name it.
        new = [n for n, _ in expired if n != problem.node and n not in problem.also]
        if new:
            return MemberLost(problem.node, problem.waited, [*problem.also, *new])
    return problem
