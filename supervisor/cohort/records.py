"""The cohort's records in the store, and how a node reads them.

The store is not authenticated (anyone who reaches its port can write), so a value read
from it is checked, never trusted: a record that is not one a node wrote is ignored or
becomes the cohort's error, never a traceback, and a value that breaks a node must stop
no node but its writer's.
"""

from __future__ import annotations

import math
import signal
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from hangwatch.supervisor.cohort.errors import CohortError
from hangwatch.supervisor.cohort.values import parse

IDS_KEY = "hangwatch-cohort-ids/"  # + leader / joiner: the last of each to join this store, and its cohort id
SAME_ID = ("start every node with the same --cohort-id (its default is $SLURM_JOB_ID, then $TORCHELASTIC_RUN_ID, "
           "then 'hangwatch': a node started outside the Slurm job, or with the option on one node only, differs)")
_STOP_SIGNALS = frozenset({int(signal.SIGINT), int(signal.SIGTERM), int(signal.SIGHUP)})


@dataclass(frozen=True)
class Announcement:
    """An attempt's incident, as the node that announced it first wrote it."""

    attempt: int
    node: int
    kind: str
    reason: str
    wall: float
    evidence: Mapping[str, Any] = field(default_factory=dict)  # the announcing node's verdict numbers

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "evidence": dict(self.evidence)}


def announcement(raw: str) -> Announcement | None:
    """An incident record, or None for one no node wrote."""
    try:
        d = parse(raw)
        wall = float(d["wall"])
        if not math.isfinite(wall):
            return None
        return Announcement(int(d["attempt"]), int(d["node"]), str(d["kind"]), str(d["reason"]), wall,
                            dict(d.get("evidence") or {}))
    except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError):
        return None


def json_object(raw: str, what: str) -> dict[str, Any]:
    """A JSON object read from the store; anything else is the cohort's error, not a traceback."""
    try:
        value = parse(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise CohortError(f"{what} in the cohort store is not a JSON object: {raw[:80]!r}")
    return value


def other_cohort(raw: str | None, mine: str) -> str | None:
    """The cohort id in an ids record when it is not ``mine`` (capped: it is only shown), else None."""
    if raw is None:
        return None
    try:
        other = parse(raw).get("cohort_id")
    except (ValueError, AttributeError):
        return None
    return other[:100] if isinstance(other, str) and other != mine else None


def stop_record(raw: str | None) -> dict[str, int] | None:
    """The ``stop`` key's record (``node``, ``signal``), or None: none yet, or not one we wrote."""
    if raw is None:
        return None
    try:
        info = parse(raw)
        sig = int(info["signal"])
        # Only a stop's signals: the store is not authenticated, and whoever writes this key
        # must not choose what every node forwards to its trainer (SIGSTOP, SIGKILL, SIGSEGV).
        return {"node": int(info["node"]), "signal": sig if sig in _STOP_SIGNALS else int(signal.SIGTERM)}
    except (ValueError, TypeError, KeyError, ArithmeticError):
        return None


def left_record(raw: str) -> dict[str, Any]:
    """A node's ``left`` record (why it left: finished, stopped, refused, gave up); one that is not an
    object says only that it left, not that its trainer finished."""
    try:
        record = parse(raw)
    except ValueError:
        record = None
    return record if isinstance(record, dict) else {"finished": False}


def left_finished(raw: str | None) -> bool:
    """Whether a ``left`` record says its node's trainer finished."""
    try:
        return bool(raw is not None and parse(raw).get("finished"))
    except (ValueError, AttributeError):
        return False


def generation_of(raw: str | None) -> str | None:
    """The generation in node 0's join record, or None: no record, or not one a node 0 wrote."""
    try:
        theirs = parse(raw) if raw is not None else None
        return str(theirs.get("generation", "")) if isinstance(theirs, dict) else None
    except ValueError:
        return None
