"""The agreement before a relaunch, and the restart decision every node takes (pure).

Each node reports its complete checkpoint steps and its graph policy; node 0 decides the
newest step every node has and the strictest policy (``decide``) and publishes it as an
``Agreement``. After the restart policy, every node's own decision is combined into one
(``settled``). Values read from the store are checked, never trusted: it is not
authenticated (anyone who reaches its port can write), and a value that breaks a node
must stop no node but its writer's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from hangwatch.supervisor.decide.attempt import GraphPolicy
from hangwatch.supervisor.cohort.errors import CohortError

#: the newest complete checkpoint steps a node reports for an agreement (``report``)
REPORTED_STEPS = 64
#: a node's process rows in its report (``report``): at most this many, in at most this many characters
REPORTED_PROCESSES = 64
REPORTED_PROCESS_CHARS = 24_000
MAX_SETTLED_DELAY_S = 7 * 24 * 3600.0  # what run accepts for any wait (config.MAX_SECONDS): bounded, never 1e300


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


def report(steps: Sequence[int], policy: GraphPolicy, attempts: int | None, needs_checkpoint: bool,
           processes: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """What a node tells node 0 before a relaunch: its newest complete steps and its policy (and, for a
    resumed job, its attempt count; a node that takes no checkpoint says so). ``processes``: the rows
    of its incident's processes (``Classification.process_rows``), which every node reads back from
    the agreement to name the culprit on whichever node it runs (``processes_of``)."""
    rows = bounded_rows(processes)
    return {"steps": sorted(set(steps))[-REPORTED_STEPS:], "cudagraphs_off": policy.cudagraphs_off,
            "enforce_eager": policy.enforce_eager, **({"attempts": attempts} if attempts is not None else {}),
            **({} if needs_checkpoint else {"needs_checkpoint": False}),
            **({"processes": rows} if rows else {})}


def bounded_rows(processes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """At most ``REPORTED_PROCESSES`` rows in at most ``REPORTED_PROCESS_CHARS`` characters: frames are
    dropped first (the rank and state still name a culprit), then rows."""
    rows = [dict(r) for r in list(processes)[:REPORTED_PROCESSES] if isinstance(r, Mapping)]
    if len(json.dumps(rows, default=str)) > REPORTED_PROCESS_CHARS:
        rows = [{k: v for k, v in r.items() if k not in ("evidence", "top_frames")} for r in rows]
    while rows and len(json.dumps(rows, default=str)) > REPORTED_PROCESS_CHARS:
        rows.pop()
    return rows


def processes_of(reports: Mapping[str, Any]) -> dict[int, list[Any]]:
    """Each node's process rows in an agreement's reports (keyed by node rank as text in the store)."""
    out: dict[int, list[Any]] = {}
    for node, r in reports.items():
        rows = r.get("processes") if isinstance(r, Mapping) else None
        if isinstance(rows, list) and str(node).isdigit():
            out[int(node)] = rows[:REPORTED_PROCESSES]
    return out


def agreement_from(d: Mapping[str, Any], attempt: int, attempts: int | None) -> Agreement:
    """Node 0's decision as read from the store, for ``attempt`` (a resumed job's when ``attempts`` is given);
    a malformed one is the cohort's error."""
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
