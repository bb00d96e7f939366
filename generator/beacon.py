"""The engine worker's step beacon: one beat per engine step while a request is in flight.

The supervisor's engine step rule reads it: each engine process beats into its own file
(``hangwatch.contract.heartbeat.engine_beacon_file``) under the base name set for every
attempt as ``HANGWATCH_ENGINE_HEARTBEAT``, so the engines of several ranks are judged
one by one.
A beat says ``phase="prepare"`` from a request's arrival to its first step (not judged:
input processing), ``"generate"`` while its steps run, and ``"idle"`` after it; ``"load"``
or ``"sleep"`` while the worker wakes and loads weights or sleeps (no steps: never judged by
the rule, but they name the worker a stall in those calls is in);
``step`` counts the worker's engine steps over its whole life, so a worker that has
never stepped (``step`` 0: its warm-up) is never judged by the rule.

Writes are rate-limited (``min_interval``): a decode step takes milliseconds, and
the rule's timeout is seconds, so one rename per ``min_interval`` is enough and
costs the engine nothing measurable. The request's start and end are always written.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any, Callable

from hangwatch.contract import env as names
from hangwatch.contract.heartbeat import beat, engine_beacon_file


class EngineBeacon:
    def __init__(self, path: str | None = None, *, min_interval: float = 0.2,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``path``: the file to beat into; default: this process's own file under
        ``HANGWATCH_ENGINE_HEARTBEAT`` (none outside hangwatch: every beat a no-op)."""
        base = os.environ.get(names.ENGINE_HEARTBEAT)
        self.path = path if path is not None else (engine_beacon_file(base, os.getpid()) if base else None)
        self.min_interval = min_interval
        self.clock = clock
        self.steps = 0
        self._last_write = float("-inf")
        self._depth = 0
        self._stepping = False  # the current request's first step has started

    def begin(self) -> None:
        """A request arrived. ``prepare`` until its first step starts: rendering and
        tokenising a large batch (or preprocessing images) can take longer than the
        rule's timeout without being a stuck step, so it is not judged."""
        self._depth += 1
        if self._depth == 1:
            self._stepping = False
            self._write("prepare")

    def step_started(self) -> None:
        """A step is about to run: the first of the request says ``generate`` at once, so a
        request whose very first step never returns is judged too."""
        if not self._stepping and self._depth:
            self._stepping = True
            self._write("generate")

    def step(self) -> None:
        """A step returned."""
        self.steps += 1
        if self.clock() - self._last_write >= self.min_interval:
            # A step outside any request (someone drives the engine directly) is never judged.
            self._write("generate" if self._stepping else "prepare" if self._depth else "idle")

    def end(self) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth == 0:  # a generate inside a chat: idle only when the outer call ends
            self._stepping = False
            self._write("idle")

    def call(self, phase: str) -> None:
        """A request that runs no engine steps started (``load``: the wake and weight load;
        ``sleep``): the supervisor names this worker as the stuck one if it never answers."""
        self._write(phase)

    def call_done(self) -> None:
        self._write("generate" if self._stepping else "prepare" if self._depth else "idle")

    def _write(self, phase: str) -> None:
        if not self.path:
            return
        self._last_write = self.clock()
        beat(step=self.steps, phase=phase, path=self.path)


#: the ``LLM`` methods that run requests to completion through ``LLMEngine.step()``
LLM_REQUEST_METHODS = ("generate", "chat")


def instrument_llm(llm: Any, beacon: EngineBeacon | None = None) -> bool:
    """Beat the engine steps of an in-process vLLM ``LLM`` (TRL's colocate engine).

    Instance attributes shadow ``llm.generate``/``llm.chat`` (request in flight) and
    ``llm.llm_engine.step`` (one beat per step): ``LLM._run_engine`` calls
    ``self.llm_engine.step()`` in its loop, so every step is seen. The engine then runs
    in the trainer's process, so a stuck step is still caught by the engine step rule,
    and the recovery is a job restart (there is no isolated worker to restart alone).
    Returns False (and changes nothing) when there is no path to beat into or the object
    does not look like vLLM's ``LLM``.
    """
    beacon = beacon or EngineBeacon()
    if not beacon.path or count_steps(getattr(llm, "llm_engine", None), beacon.step, beacon.step_started) is None:
        return False
    for name in LLM_REQUEST_METHODS:
        method = getattr(llm, name, None)
        if callable(method):
            setattr(llm, name, _in_flight(method, beacon))
    return True


def count_steps(engine: Any, on_step: Callable[[], None],
                before_step: Callable[[], None] | None = None) -> Callable[[], None] | None:
    """Call ``before_step`` and ``on_step`` around every ``engine.step()`` (an ``LLMEngine``);
    returns the undo, or None when ``engine`` has no ``step`` or already counts. The wrapper
    is an instance attribute, so undoing it (deleting it) restores the class's method."""
    step = getattr(engine, "step", None)
    if not callable(step) or getattr(step, "_hangwatch_wrapped", False):
        return None

    def counted_step(*args: Any, **kwargs: Any) -> Any:
        if before_step is not None:
            before_step()
        out = step(*args, **kwargs)
        on_step()
        return out

    counted_step._hangwatch_wrapped = True  # type: ignore[attr-defined]
    engine.step = counted_step

    def undo() -> None:
        if getattr(engine, "__dict__", {}).get("step") is counted_step:
            del engine.step

    return undo


def _in_flight(method: Callable[..., Any], beacon: EngineBeacon) -> Callable[..., Any]:
    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> Any:
        beacon.begin()
        try:
            return method(*args, **kwargs)
        finally:
            beacon.end()

    return run
