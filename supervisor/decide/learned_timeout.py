"""Progress timeouts learned from the run (``--progress-timeout auto``): pure functions and state.

A fixed progress timeout is either slow (a GRPO step of seconds watched with 600 s) or risky (a
step of many minutes watched with less). With ``auto`` the detector keeps the intervals between a
process's consecutive beats in phase ``train`` (or no phase), and once ``warmup_beats`` of them are
seen it sets the timeout to a high quantile of them times a safety factor, clamped to a floor and a
ceiling. Before that the fixed timeout applies, so a first-step compile is covered by it; a beat in
any other phase (``checkpoint``, ``eval``, ...) keeps the fixed and phase timeouts, so a save that
takes longer than anything seen before is no verdict either.

The value is learned again every ``warmup_beats`` new intervals (over the last ``window`` of
them), so it follows a run whose steps grow; each new value is journaled by the runner
(``timeout_learned``) and carried to the next attempt and across ``--resume``.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from hangwatch.contract.errors import ConfigError

#: Phases whose intervals teach the timeout and which the learned timeout watches.
TRAIN_PHASES = frozenset({None, "train"})


@dataclass(frozen=True)
class AutoTimeout:
    """How a progress timeout is learned. The defaults: 20 beats of warm-up, p99 x 3, 120 s to 3600 s."""

    warmup_beats: int = 20
    quantile: float = 0.99
    factor: float = 3.0
    floor: float = 120.0
    ceiling: float = 3600.0
    window: int = 2000  # the newest intervals learned from

    def __post_init__(self) -> None:
        if isinstance(self.warmup_beats, bool) or not isinstance(self.warmup_beats, int) or self.warmup_beats < 2:
            raise ConfigError(f"--auto-warmup-beats must be a whole number >= 2, got {self.warmup_beats!r}")
        if not 0 < self.quantile <= 1:
            raise ConfigError(f"auto timeout quantile must be in (0, 1], got {self.quantile!r}")
        if not self.factor >= 1:
            raise ConfigError(f"auto timeout factor must be >= 1, got {self.factor!r}")
        if not 0 < self.floor <= self.ceiling or not math.isfinite(self.ceiling):
            raise ConfigError(f"auto timeout floor and ceiling must satisfy 0 < floor <= ceiling, "
                              f"got {self.floor!r} and {self.ceiling!r}")
        if self.window < self.warmup_beats:
            raise ConfigError(f"auto timeout window must hold the warm-up, got {self.window!r}")

    def to_json(self) -> dict[str, Any]:
        return {"warmup_beats": self.warmup_beats, "quantile": self.quantile, "factor": self.factor,
                "floor": self.floor, "ceiling": self.ceiling, "window": self.window}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "AutoTimeout":
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class LearnedTimeout:
    """One learned value and what it was learned from (what the journal records)."""

    timeout: float
    intervals: int  # how many intervals
    quantile_s: float  # the quantile of them
    max_s: float  # the longest of them
    settings: AutoTimeout

    def to_json(self) -> dict[str, Any]:
        return {"timeout_s": round(self.timeout, 3), "intervals": self.intervals,
                "quantile_s": round(self.quantile_s, 3), "max_interval_s": round(self.max_s, 3),
                **self.settings.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "LearnedTimeout":
        """Raises ValueError/TypeError/KeyError when ``data`` is not one (a journal line from elsewhere)."""
        timeout = float(data["timeout_s"])
        if not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"learned timeout is not a positive number: {timeout!r}")
        return cls(timeout, int(data.get("intervals", 0)), float(data.get("quantile_s", 0.0)),
                   float(data.get("max_interval_s", 0.0)), AutoTimeout.from_json(data))


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank, so it is always an observed value)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def learn_timeout(intervals: Sequence[float], settings: AutoTimeout) -> LearnedTimeout | None:
    """The timeout learned from ``intervals`` (seconds between beats), or None during the warm-up."""
    if len(intervals) < settings.warmup_beats:
        return None
    high = quantile(intervals, settings.quantile)
    timeout = min(settings.ceiling, max(settings.floor, high * settings.factor))
    return LearnedTimeout(timeout, len(intervals), high, max(intervals), settings)


class IntervalLearner:
    """The intervals seen so far and the value in force. Pure: the detector feeds it."""

    def __init__(self, settings: AutoTimeout, carried: LearnedTimeout | None = None) -> None:
        self.settings = settings
        self.intervals: collections.deque[float] = collections.deque(maxlen=settings.window)
        # Carried from an earlier attempt (or a resumed run): in force from the start.
        self.learned = carried
        self.changes = 0  # how many values this learner set (the runner journals each)
        self._since = 0

    def add(self, interval: float) -> bool:
        """Record one interval; returns whether a new value was learned."""
        if not interval >= 0:
            return False
        self.intervals.append(interval)
        self._since += 1
        if self.learned is not None and self._since < self.settings.warmup_beats:
            return False
        value = learn_timeout(self.intervals, self.settings)
        if value is None:
            return False
        self._since = 0
        if self.learned is not None and abs(value.timeout - self.learned.timeout) < 0.01 * self.learned.timeout:
            return False  # the same, give or take 1 %: not worth a journal line
        self.learned = value
        self.changes += 1
        return True


def carried_timeout(record: Mapping[str, Any] | None, settings: AutoTimeout | None) -> LearnedTimeout | None:
    """The value a journal's last ``timeout_learned`` record carries to a new attempt (or a resumed
    run), learned again under today's ``settings``; None without auto timeouts or a readable record."""
    if settings is None or not record:
        return None
    try:
        value = LearnedTimeout.from_json(record)
    except (ValueError, TypeError, KeyError, ConfigError):
        return None  # an edited or foreign line: learn afresh
    return LearnedTimeout(min(settings.ceiling, max(settings.floor, value.timeout)), value.intervals,
                          value.quantile_s, value.max_s, settings)
