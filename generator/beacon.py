"""The engine worker's step beacon: one beat per engine step while a request is in flight.

The supervisor's engine step rule reads it (``hangwatch.contract.heartbeat.
engine_heartbeat_path``, set for every attempt as ``HANGWATCH_ENGINE_HEARTBEAT``).
A beat says ``phase="generate"`` while a ``generate`` runs and ``"idle"`` after it;
``step`` counts the worker's engine steps over its whole life, so a worker that has
never stepped (``step`` 0: its warm-up) is never judged by the rule.

Writes are rate-limited (``min_interval``): a decode step takes milliseconds, and
the rule's timeout is seconds, so one rename per ``min_interval`` is enough and
costs the engine nothing measurable. The request's start and end are always written.
"""

from __future__ import annotations

import os
import time
from typing import Callable

from hangwatch.contract import env as names
from hangwatch.contract.heartbeat import beat


class EngineBeacon:
    def __init__(self, path: str | None = None, *, min_interval: float = 0.2,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path if path is not None else os.environ.get(names.ENGINE_HEARTBEAT)
        self.min_interval = min_interval
        self.clock = clock
        self.steps = 0
        self._last_write = float("-inf")
        self._written_steps = -1

    def begin(self) -> None:
        self._write("generate")

    def step(self) -> None:
        self.steps += 1
        if self.clock() - self._last_write >= self.min_interval:
            self._write("generate")

    def end(self) -> None:
        self._write("idle")

    def _write(self, phase: str) -> None:
        if not self.path:
            return
        self._last_write = self.clock()
        self._written_steps = self.steps
        beat(step=self.steps, phase=phase, path=self.path)
