"""Restart policy: small stop rules, composed with ``|``, over plain history.

Each rule looks at the history of ended attempts and either says why to stop
(with the exit code that reason maps to) or nothing. ``decide`` asks every
rule, then computes the backoff with tenacity's wait strategies.

A one-off hang (a stall or silent hang that is the only failed attempt of the
last ``INCIDENT_WINDOW_S``) is relaunched at once: the tree is already confirmed
dead and the GPU released, and a backoff there only delays training. Backoff
with jitter stays for crash loops and repeated incidents, where it spreads the
retries out.

History times are wall-clock seconds on purpose: they come back from the
journal when a run is resumed by a new supervisor process, where the old
monotonic clock means nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Sequence

import tenacity

from hangwatch.contract.exitcodes import EXIT_BUDGET, EXIT_CRASH_STOP, EXIT_NO_PROGRESS, EXIT_OK
from hangwatch.contract.verdict import VerdictKind

# Failures this close together are a loop, not a one-off (the per-hour cap's window).
INCIDENT_WINDOW_S = 3600.0


@dataclass(frozen=True)
class AttemptOutcome:
    attempt: int
    kind: VerdictKind
    ended_at: float
    start_step: int | None
    end_step: int | None

    @property
    def made_progress(self) -> bool:
        if self.end_step is None:
            return False
        return self.start_step is None or self.end_step > self.start_step


@dataclass(frozen=True)
class StopReason:
    reason: str
    exit_code: int


@dataclass(frozen=True)
class Decision:
    restart: bool
    reason: str
    exit_code: int | None = None
    delay_s: float = 0.0


StopRuleFn = Callable[[Sequence[AttemptOutcome], float], "StopReason | None"]


@dataclass(frozen=True)
class StopRule:
    check: StopRuleFn
    name: str

    def __call__(self, history: Sequence[AttemptOutcome], now: float) -> StopReason | None:
        return self.check(history, now)

    def __or__(self, other: "StopRule") -> "StopRule":
        def either(history: Sequence[AttemptOutcome], now: float) -> StopReason | None:
            return self(history, now) or other(history, now)

        return StopRule(either, f"{self.name} | {other.name}")


def max_restarts(limit: int) -> StopRule:
    def check(history: Sequence[AttemptOutcome], now: float) -> StopReason | None:
        restarts = len(history) - 1 if history else 0
        if restarts >= limit:
            return StopReason(f"restart budget exhausted: {restarts} restarts (--max-restarts {limit})", EXIT_BUDGET)
        return None

    return StopRule(check, f"max_restarts({limit})")


def max_restarts_per_hour(limit: int) -> StopRule:
    def check(history: Sequence[AttemptOutcome], now: float) -> StopReason | None:
        recent = sum(1 for o in history if now - o.ended_at < 3600.0)
        if recent > limit:
            return StopReason(
                f"{recent} attempts ended within the last hour (--max-restarts-per-hour {limit}): a crash loop",
                EXIT_BUDGET,
            )
        return None

    return StopRule(check, f"max_restarts_per_hour({limit})")


def no_checkpoint_progress(limit: int) -> StopRule:
    def check(history: Sequence[AttemptOutcome], now: float) -> StopReason | None:
        tail = history[-limit:]
        if len(tail) == limit and not any(o.made_progress for o in tail):
            step = tail[-1].end_step
            return StopReason(
                f"{limit} attempts in a row made no checkpoint progress (newest complete checkpoint step: {step})",
                EXIT_NO_PROGRESS,
            )
        return None

    return StopRule(check, f"no_checkpoint_progress({limit})")


def stop_on_crash() -> StopRule:
    def check(history: Sequence[AttemptOutcome], now: float) -> StopReason | None:
        if history and history[-1].kind is VerdictKind.CRASH:
            return StopReason("the trainer crashed and --on-crash is stop", EXIT_CRASH_STOP)
        return None

    return StopRule(check, "stop_on_crash")


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int = 10
    max_restarts_per_hour: int = 6
    no_progress_limit: int = 3
    on_crash: str = "restart"
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    backoff_jitter: float = 1.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def rules(self) -> StopRule:
        rule = max_restarts(self.max_restarts) | max_restarts_per_hour(self.max_restarts_per_hour)
        if self.no_progress_limit > 0:
            rule = rule | no_checkpoint_progress(self.no_progress_limit)
        if self.on_crash == "stop":
            rule = stop_on_crash() | rule
        return rule

    def decide(self, history: Sequence[AttemptOutcome], now: float) -> Decision:
        last = history[-1]
        if last.kind is VerdictKind.DONE:
            return Decision(False, "the trainer finished", EXIT_OK)
        stop = self.rules()(history, now)
        if stop is not None:
            return Decision(False, stop.reason, stop.exit_code)
        if last.kind.is_hang and _failures_within(history, now, INCIDENT_WINDOW_S) <= 1:
            return Decision(True, f"restart after {last.kind.value} (attempt {last.attempt}); "
                            "a one-off hang: no backoff", None, 0.0)
        # Back off by consecutive failures: a long healthy attempt resets nothing
        # here because every restart follows a failure; the cap bounds the wait.
        failures = _consecutive_failures(history)
        # tenacity's exponential strategy gives the base; the jitter comes from our
        # own seedable generator so a test can pin it.
        base = tenacity.wait_exponential(multiplier=self.backoff_initial, max=self.backoff_max)(
            _RetryState(attempt_number=failures)  # type: ignore[arg-type]
        )
        delay = min(self.backoff_max, float(base) + self.rng.uniform(0.0, self.backoff_jitter))
        return Decision(True, f"restart after {last.kind.value} (attempt {last.attempt})", None, delay)


@dataclass
class _RetryState:
    """The one field of tenacity's RetryCallState that its wait strategies read."""

    attempt_number: int


def _failures_within(history: Sequence[AttemptOutcome], now: float, window: float) -> int:
    return sum(1 for o in history if o.kind is not VerdictKind.DONE and now - o.ended_at < window)


def _consecutive_failures(history: Sequence[AttemptOutcome]) -> int:
    count = 0
    for outcome in reversed(history):
        if outcome.kind is VerdictKind.DONE:
            break
        count += 1
    return max(1, count)
