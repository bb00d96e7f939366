"""What a watch concluded: the vocabulary shared by the detector, the journal and diagnostics.

A ``Verdict`` is data (frozen, JSON-able). The detector produces hang verdicts;
``classify_exit`` turns a trainer's exit status into one.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass, field
from typing import Any, Mapping


class VerdictKind(str, enum.Enum):
    STALL = "stall"
    SILENT_HANG = "silent_hang"
    CRASH = "crash"
    DONE = "done"
    COHORT_LOST = "cohort_lost"  # multi-node: another node's supervisor or the store is gone
    STOPPED = "stopped"  # the user stopped the run (SIGINT/SIGTERM/SIGHUP): the trainer's end is no crash

    @property
    def is_hang(self) -> bool:
        """The tree is (or is about to be) stuck: capture evidence before killing it."""
        return self in (VerdictKind.STALL, VerdictKind.SILENT_HANG, VerdictKind.COHORT_LOST)


@dataclass(frozen=True)
class Verdict:
    """What the detector (or the exit status) concluded, with its numbers."""

    kind: VerdictKind
    detected_at: float
    onset: float
    reason: str
    window: float | None = None
    phase: str | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    signal: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "detected_at": round(self.detected_at, 4),
            "onset": round(self.onset, 4),
            "latency_s": round(self.detected_at - self.onset, 4),
            "reason": self.reason,
            "window": self.window,
            "phase": self.phase,
            "evidence": dict(self.evidence),
            "exit_code": self.exit_code,
            "signal": self.signal,
        }


def classify_exit(returncode: int, t: float) -> Verdict:
    """A finished trainer: exit 0 is done, anything else a crash.

    ``returncode`` follows subprocess: negative means death by that signal.
    """
    if returncode == 0:
        return Verdict(VerdictKind.DONE, t, t, "trainer exited 0", exit_code=0)
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return Verdict(
            VerdictKind.CRASH, t, t, f"trainer killed by {name}", exit_code=128 - returncode, signal=name
        )
    return Verdict(VerdictKind.CRASH, t, t, f"trainer exited with code {returncode}", exit_code=returncode)


def stopped(verdict: Verdict) -> Verdict:
    """The trainer's end after a stop was asked for: a death by the forwarded signal (or any
    other non-zero status) is the stop, not a crash; a clean exit stays ``done``."""
    if verdict.kind is not VerdictKind.CRASH:
        return verdict
    return Verdict(VerdictKind.STOPPED, verdict.detected_at, verdict.onset, f"stopped: {verdict.reason}",
                   exit_code=verdict.exit_code, signal=verdict.signal)
