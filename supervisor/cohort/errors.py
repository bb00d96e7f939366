"""Why a cohort cannot go on: the exceptions a node raises, each with the journal's word for it (``reason``)."""

from __future__ import annotations

import signal
from typing import Any, Mapping, Sequence


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
        # What this node can know: a lease that stopped moving is a dead supervisor or a network cut
        # between the two; read alone, "stopped renewing" made a partition look like a death.
        super().__init__(f"node {node} unreachable: its supervisor stopped renewing, or the network between us "
                         f"failed (its lease has not moved for {waited:.0f} s){more}")
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
            text = f"node {node}'s supervisor was stopped ({signal_name(record['stopped'])})"
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
        super().__init__(f"stopped ({signal_name(signum)}) while joining the cohort")
        self.signum = signum


class CohortStopped(CohortError):
    """Another node's supervisor was stopped (SIGINT/SIGTERM/SIGHUP): every node stops."""

    reason = "stopped"


def signal_name(signum: int) -> str:
    """A signal as messages name it (``SIGTERM``), or ``signal N`` for a number that is none."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
