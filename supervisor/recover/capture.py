"""An incident's evidence: the injected capture hook, bounded by its deadline, and its early round.

The hook (``hangwatch.contract.capture.CaptureHook``; the diagnostics capture in a real
run) runs in a daemon thread, so a hook that hangs itself cannot hold the recovery: past
its deadline and a small slack, or at a stop signal, it is abandoned and the tree is killed
anyway. A hook that fails leaves the samples-only bundle (``fallback_capture``), so an
incident always leaves evidence.

The early round: while a verdict is building (from half its window or timeout on), the
first evidence round is taken ahead, so that at the verdict the capture needs only the
final round. It is handed to the capture only if it belongs to that incident. In a
cohort, another node's heads-up (``cohort.likely``) starts it at once (``early_round_now``).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

import structlog

from hangwatch.contract.capture import CaptureHook, CaptureRequest
from hangwatch.contract.journal import Journal
from hangwatch.contract.verdict import Verdict
from hangwatch.supervisor.decide.attempt import CAPTURE_SLACK_S
from hangwatch.supervisor.decide.detector import Detector
from hangwatch.supervisor.recover.fallback_capture import SamplesOnlyCapture

log = structlog.get_logger("hangwatch.run")

# The early evidence round: from this fraction of the window (or timeout) on, bounded,
# and waited for at the verdict at most this long (it normally finished long before).
EARLY_ROUND_AT = 0.5
EARLY_ROUND_BUDGET_S = 10.0
EARLY_ROUND_JOIN_S = 2.0
#: the early round's rule when another node's heads-up started it (``early_round_now``)
COHORT_RULE = "cohort"


class BoundedCapture:
    """Runs the capture hook for one incident at a time, within ``timeout`` (the ``--capture-timeout``).

    ``clock``: the runner's (monotonic, injected); ``sleep``: the runner's injected sleep, called
    with 0 while waiting so that a test's clock moves; ``stopping``: a stop signal came.
    """

    def __init__(self, hook: CaptureHook, *, journal: Callable[[], Journal], clock: Callable[[], float],
                 sleep: Callable[[float], None], stopping: Callable[[], bool], timeout: float) -> None:
        self.hook = hook
        self.journal = journal
        self.clock = clock
        self.sleep = sleep
        self.stopping = stopping
        self.timeout = timeout
        self._early: _EarlyRound | None = None  # the early py-spy round of the building incident

    # -- the capture ---------------------------------------------------------------

    def take(self, request: CaptureRequest) -> Path | None:
        """Run the hook on ``request`` (bounded), journal ``capture``; the bundle, or None."""
        timeout = self.timeout
        result: dict[str, Any] = {}
        hook = self.hook

        def work() -> None:
            try:
                result["path"] = hook(request)
            except Exception as exc:  # noqa: BLE001  (a failed capture must not stop recovery)
                result["error"] = f"{type(exc).__name__}: {exc}"
                try:
                    # Keep at least the verdict and the samples that triggered it.
                    result["path"] = SamplesOnlyCapture()(request)
                except Exception as fallback_exc:  # noqa: BLE001
                    result["error"] += f"; samples-only fallback failed too: {fallback_exc}"

        started = self.clock()
        thread = threading.Thread(target=work, name="capture", daemon=True)
        thread.start()
        # Small slack beyond the hook's own deadline for it to finish its rename.
        hard_deadline = started + timeout + CAPTURE_SLACK_S
        while thread.is_alive() and self.clock() < hard_deadline and not self.stopping():
            thread.join(timeout=0.05)
            if thread.is_alive():
                self.sleep(0)  # lets an injected clock move in tests; a no-op for the real one
        duration = self.clock() - started
        if thread.is_alive():
            why = "interrupted by a signal" if self.stopping() else f"deadline of {timeout:.0f} s passed"
            self.journal().append("capture", attempt=request.attempt, ok=False, abandoned=True,
                                  error=f"capture abandoned: {why}", duration_s=round(duration, 3))
            log.warning("capture_abandoned", message=f"evidence capture abandoned ({why}); killing anyway")
            return None
        path = result.get("path")
        self.journal().append("capture", attempt=request.attempt, ok="error" not in result,
                              error=result.get("error"), evidence_path=str(path) if path else None,
                              duration_s=round(duration, 3))
        if path:
            log.info("evidence_captured", message=f"evidence in {path} ({duration:.1f} s)")
        return path

    # -- the early round -------------------------------------------------------------

    def forget_early_round(self) -> None:
        """A new watch: no early round belongs to it yet."""
        self._early = None

    def maybe_early_round(self, detector: Detector, t: float, tree: Callable[[], Any]) -> None:
        """Take the first evidence round while a verdict is building (from half its
        window or timeout on), so that at the verdict the capture needs only the final
        round. Only while the condition holds, once per incident (a new onset is a new
        incident), in a daemon thread bounded by its own deadline: ticks go on.
        Only when the injected capture hook offers ``early_round(tree, deadline)``.
        ``tree``: describes the process tree (called only when a round is taken)."""
        take = getattr(self.hook, "early_round", None)
        if take is None:
            return
        building = detector.building(t)
        if building is None or building[2] < EARLY_ROUND_AT:
            return
        early = self._early
        if early is not None and (early.t >= building[1] or early.thread.is_alive()):
            return
        budget = min(EARLY_ROUND_BUDGET_S, self.timeout / 2)
        self._early = _EarlyRound(take, tree(), t, building[0], time.monotonic() + budget)

    def early_round_now(self, t: float, tree: Callable[[], Any], until: float) -> bool:
        """Take the first evidence round now: another node of the cohort told that a verdict is
        building there (``cohort.likely``), and this node's ranks hang with it. The round belongs
        to a verdict of this watch up to ``until`` (this clock), whatever its onset (a verdict
        taken from the other node's announcement has its onset when this node learns of it).
        Not while a round is still running, nor when one was taken lately (this node's own detector
        saw the hang building too: its round is as good). Returns whether a round was started."""
        take = getattr(self.hook, "early_round", None)
        early = self._early
        if take is None or (early is not None and (early.thread.is_alive() or t - early.t <= until - t)):
            return False
        budget = min(EARLY_ROUND_BUDGET_S, self.timeout / 2)
        self._early = _EarlyRound(take, tree(), t, COHORT_RULE, time.monotonic() + budget, until)
        return True

    def early_extra(self, verdict: Verdict) -> dict[str, Any]:
        """The early round for the capture, if it belongs to this verdict (taken at or after its
        onset, or, taken on another node's heads-up, before the verdict and up to its ``until``)
        and finished; a round still running is waited for briefly."""
        early = self._early
        self._early = None
        if early is None or not early.belongs(verdict):
            return {}
        early.thread.join(timeout=max(0.0, min(EARLY_ROUND_JOIN_S, early.deadline - time.monotonic())))
        if early.thread.is_alive() or early.result is None:
            return {}
        return {"early_round": early.result, "early_round_rule": early.rule}


class _EarlyRound:
    """One early round in flight: the hook's opaque result (or error) once done."""

    def __init__(self, take: Callable[..., Any], tree: Any, t: float, rule: str, deadline: float,
                 until: float | None = None) -> None:
        self.t = t
        self.rule = rule
        self.deadline = deadline
        self.until = until  # a round on another node's heads-up: it belongs to a verdict up to then
        self.result: Any = None
        self.error: str | None = None
        self.thread = threading.Thread(target=self._run, args=(take, tree, deadline), name="early-round", daemon=True)
        self.thread.start()

    def belongs(self, verdict: Verdict) -> bool:
        if self.t >= verdict.onset:
            return True
        return self.until is not None and self.t <= verdict.detected_at <= self.until

    def _run(self, take: Callable[..., Any], tree: Any, deadline: float) -> None:
        try:
            self.result = take(tree, deadline)
        except Exception as exc:  # noqa: BLE001  (no early round: the capture takes its rounds itself)
            self.error = f"{type(exc).__name__}: {exc}"
