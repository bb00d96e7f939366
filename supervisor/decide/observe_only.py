"""Observe-only mode (``--on-hang observe``): one incident per stall episode, and its end.

In observe-only mode a hang verdict is journaled, captured and alerted as usual, but nothing
is killed: the supervisor watches the same trainer on. The verdict opens a *stall episode*;
while it is open no new incident is raised for it (a trainer that stays hung would otherwise
fire once every window), and each tick asks whether the trainer has moved on by itself:

    a trainer beat that is new (another ``(pid, seq)``) and, where both carry a step, at a newer
        step than the last beat before the verdict (a beat at the same step is not progress:
        the step rule fires on exactly that);
    or, for an engine verdict (``evidence["engine_pid"]``), that engine stepping again.

Then the episode closes (``recovered_by_itself``) and a fresh detector watches for the next
one. The trainer's own exit ends the attempt as usual. Pure: samples in, a decision out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.samples import Sample


@dataclass(frozen=True)
class Recovered:
    """The trainer moved on by itself: how long after the verdict, and the beat that said so."""

    after_s: float
    step: int | None
    how: str  # "trainer" (a newer beat) or "engine" (the stuck engine stepped again)


class StallEpisode:
    """A hang verdict not acted on, followed until the trainer moves on by itself.

    ``last_beat``: the trainer's newest beat at the verdict (None: it never beat);
    ``evidence``: the verdict's (it names the stuck engine, for an engine verdict).
    """

    def __init__(self, incident: int, detected_at: float, last_beat: Heartbeat | None,
                 evidence: Mapping[str, Any], engines: tuple[Heartbeat, ...] = ()) -> None:
        self.incident = incident
        self.detected_at = detected_at
        self._beat = last_beat.token if last_beat is not None else None
        self._step = last_beat.step if last_beat is not None else None
        pid = evidence.get("engine_pid")
        self._engine_pid = pid if isinstance(pid, int) else None
        self._engine_token = next((e.token for e in engines if e.pid == self._engine_pid), None)

    def observe(self, sample: Sample) -> Recovered | None:
        """A recovery when this sample shows the trainer (or its stuck engine) moving on."""
        hb = sample.heartbeat
        if hb is not None and hb.token != self._beat and self._newer_step(hb.step):
            return Recovered(max(0.0, sample.t - self.detected_at), hb.step, "trainer")
        if self._engine_pid is not None:
            engine = next((e for e in sample.engine if e.pid == self._engine_pid), None)
            if engine is not None and engine.token != self._engine_token:
                return Recovered(max(0.0, sample.t - self.detected_at), hb.step if hb else None, "engine")
        return None

    def _newer_step(self, step: int | None) -> bool:
        return self._step is None or step is None or step > self._step
