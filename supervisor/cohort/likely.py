"""Learning of another node's incident between ticks: a heads-up while it builds, a short poll near it (pure).

A node whose detector sees a verdict building (from ``HINT_AT`` of its window or timeout
on, when it takes its own early py-spy round) writes a ``Hint`` under the attempt's
``likely`` key: its rule and how many seconds it expects until the verdict (``eta_s``).
The others read that key at each tick, with the incident key. A new hint makes each take
its own early round at once (so that at the announcement its capture needs only the
final round, as the detecting node's does) and opens a short poll of the incident key
around the expected verdict (``IncidentWatch``): the runner's sleep between ticks is
woken within ``fast`` seconds of the announcement, not at the next tick.

Every part is bounded: the poll runs only from ``lead`` seconds before the expected
verdict to ``slack`` seconds after it (at most ``cap`` seconds in all); a hint that no
announcement follows (the hang cleared) ends it, and the node polls at its ticks again.
Times are this node's monotonic clock, passed in; the hint carries a duration, never a
time of the other node's clock (node clocks need not agree).
"""

from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass

from hangwatch.supervisor.cohort.values import parse

#: the fraction of its window or timeout from which a building verdict is announced as likely
#: (``capture.EARLY_ROUND_AT``: when the detecting node takes its own early round)
HINT_AT = 0.5
#: longest heads-up a hint may ask for (a progress timeout of hours is polled at the ticks until near it)
MAX_ETA_S = 7 * 24 * 3600.0


@dataclass(frozen=True)
class Hint:
    """A verdict building on ``node`` in ``attempt``: ``rule``, expected in ``eta_s`` seconds after
    ``wall`` (the writer's wall clock: only an identity of this hint, never compared with ours)."""

    attempt: int
    node: int
    rule: str
    wall: float
    eta_s: float

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def hint(raw: str | None) -> Hint | None:
    """A ``likely`` record, or None: none there, or not one a node wrote."""
    if raw is None:
        return None
    try:
        d = parse(raw)
        h = Hint(int(d["attempt"]), int(d["node"]), str(d["rule"])[:40], float(d["wall"]), float(d["eta_s"]))
    except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError):
        return None
    if not (math.isfinite(h.wall) and math.isfinite(h.eta_s)):
        return None
    return h


def eta(building: tuple[str, float, float], t: float) -> float | None:
    """Seconds until a building verdict fires (``Detector.building``'s rule, onset, fraction at ``t``),
    or None when it has not reached ``HINT_AT`` (nothing to tell the others yet)."""
    _, onset, fraction = building
    if not (math.isfinite(fraction) and fraction >= HINT_AT) or not math.isfinite(onset):
        return None
    return min(MAX_ETA_S, max(0.0, (t - onset) * (1.0 - fraction) / fraction))


class HintOnce:
    """Which building verdicts this node already told the others of: one hint per (attempt, onset)."""

    def __init__(self) -> None:
        self._told: tuple[int, float] | None = None

    def due(self, attempt: int, building: tuple[str, float, float] | None, t: float) -> float | None:
        """The ``eta_s`` to publish now for ``building`` at ``t``, or None (none building, not far
        enough yet, or told already). Marks it told."""
        if building is None:
            return None
        seconds = eta(building, t)
        if seconds is None or self._told == (attempt, building[1]):
            return None
        self._told = (attempt, building[1])
        return seconds


class WatchState(enum.Enum):
    """Where this node's look-out for another node's incident of the current attempt stands.

    IDLE -> LIKELY      another node's hint (``hinted``): poll fast around its expected verdict
    LIKELY -> LIKELY    a newer hint (another node, or the same node's next building verdict)
    LIKELY -> IDLE      the window passed with no announcement (``due``): the ticks poll again
    IDLE/LIKELY -> OPEN the attempt's incident is known (``announced``): nothing left to poll for
    any -> IDLE         a new attempt (``start``)
    """

    IDLE = "idle"
    LIKELY = "likely"
    OPEN = "open"


class IllegalWatchTransition(RuntimeError):
    """A move of the look-out that its lifecycle does not have (a bug, never a store's value)."""


_EDGES = {
    WatchState.IDLE: {WatchState.LIKELY, WatchState.OPEN, WatchState.IDLE},
    WatchState.LIKELY: {WatchState.LIKELY, WatchState.IDLE, WatchState.OPEN},
    WatchState.OPEN: {WatchState.IDLE},
}


class IncidentWatch:
    """When to poll the incident key between ticks (``due``), given the hints seen.

    ``fast``: seconds between polls in the window; ``lead``/``slack``: the window opens that
    long before the expected verdict and closes that long after it; ``cap``: longest window.
    """

    def __init__(self, *, fast: float = 0.05, lead: float = 2.0, slack: float = 5.0, cap: float = 30.0) -> None:
        if not (fast > 0 and lead >= 0 and slack >= 0 and cap > 0):
            raise ValueError(f"IncidentWatch needs fast > 0, lead >= 0, slack >= 0, cap > 0 "
                             f"(got fast={fast!r}, lead={lead!r}, slack={slack!r}, cap={cap!r})")
        self.fast, self.lead, self.slack, self.cap = fast, lead, slack, cap
        self.state = WatchState.IDLE
        self.attempt = 0
        self.window: tuple[float, float] | None = None  # (from, until) of the fast poll, this node's clock
        self._last_poll: float | None = None
        self._seen: set[tuple[int, float]] = set()  # (node, wall) of the hints already taken

    def _enter(self, state: WatchState) -> None:
        if state not in _EDGES[self.state]:
            raise IllegalWatchTransition(f"incident watch: {self.state.value} -> {state.value}")
        self.state = state

    def start(self, attempt: int) -> None:
        """A new attempt: no hint of it seen yet (a no-op for the attempt already watched)."""
        if attempt == self.attempt:
            return
        self._enter(WatchState.IDLE)
        self.attempt, self.window, self._last_poll = attempt, None, None
        self._seen.clear()

    def hinted(self, h: Hint, me: int, now: float) -> float | None:
        """Take another node's hint read at ``now``; returns until when an early round taken now
        belongs to the coming incident (this node's clock), or None: not new, ours, another
        attempt's, or the incident is already known."""
        key = (h.node, h.wall)
        if h.node == me or h.attempt != self.attempt or self.state is WatchState.OPEN or key in self._seen:
            return None
        if self.window is not None and now <= self.window[1]:
            return None  # one heads-up at a time: a hint rewritten every tick starts no py-spy round each tick
        if len(self._seen) < 1024:  # (a store flooded with hints must not grow this node's memory)
            self._seen.add(key)
        expected = now + min(max(0.0, h.eta_s), MAX_ETA_S)
        opens = max(now, expected - self.lead)
        until = min(expected + self.slack, opens + self.cap)
        self._enter(WatchState.LIKELY)
        self.window, self._last_poll = (opens, until), None
        return until

    def due(self, now: float) -> bool:
        """Whether to poll the incident key now (and note that it is polled). Ends a window that
        has passed."""
        if self.state is not WatchState.LIKELY or self.window is None:
            return False
        opens, until = self.window
        if now > until:
            self._enter(WatchState.IDLE)
            self.window = None
            return False
        if now < opens or (self._last_poll is not None and now - self._last_poll < self.fast):
            return False
        self._last_poll = now
        return True

    def announced(self) -> None:
        """The attempt's incident is known: no more polling for it."""
        self._enter(WatchState.OPEN)
        self.window = None
