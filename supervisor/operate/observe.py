"""Observers: how side effects (status file, metrics, alerts) follow a run without
being part of its decisions.

The supervisor tells an injected ``RunObserver`` three things:

* ``record``: every journal record, right after it is on disk (through
  ``ObservedJournal``, so the runner needs no call of its own for these);
* ``phase``: each ``AttemptLifecycle`` transition (watching, capturing, killing,
  releasing, ended);
* ``tick``: each sample of the watch loop, with how far a stall has built.

Observers must be quick and must never raise into the supervisor: ``Observers``
catches and logs (once per observer) whatever one of them throws, so a broken
metrics exporter cannot stop a recovery. Anything slow (a webhook) belongs in
the observer's own thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

import structlog

from hangwatch.contract.journal import Journal
from hangwatch.contract.samples import Sample
from hangwatch.supervisor.decide.attempt import AttemptState

log = structlog.get_logger("hangwatch.observe")


@dataclass(frozen=True)
class Tick:
    """One watch-loop sample, with the detector's stall progress (monotonic seconds)."""

    attempt: int
    sample: Sample
    stall_onset: float | None  # first confirming sample of a building stall, or None
    stall_window: float  # the window that applies in the current trainer phase
    # The progress timeout in force when it is not the configured one (learned: --progress-timeout auto).
    progress_timeout: float | None = None

    @property
    def stall_held(self) -> float:
        return max(0.0, self.sample.t - self.stall_onset) if self.stall_onset is not None else 0.0


class RunObserver(Protocol):
    def record(self, record: Mapping[str, Any]) -> None: ...

    def phase(self, attempt: int, state: AttemptState) -> None: ...

    def tick(self, tick: Tick) -> None: ...


class NullObserver:
    def record(self, record: Mapping[str, Any]) -> None:
        pass

    def phase(self, attempt: int, state: AttemptState) -> None:
        pass

    def tick(self, tick: Tick) -> None:
        pass


class Observers:
    """Fan-out to several observers; one that raises is logged once and skipped for that call."""

    def __init__(self, observers: Sequence[Any] = ()) -> None:
        self.observers = list(observers)
        self._failed: set[int] = set()
        self._lock = threading.Lock()

    def add(self, observer: Any) -> None:
        self.observers.append(observer)

    def _each(self, method: str, *args: Any) -> None:
        for obs in self.observers:
            fn = getattr(obs, method, None)
            if fn is None:
                continue
            try:
                fn(*args)
            except Exception as exc:  # noqa: BLE001  (a side effect must never stop supervision)
                with self._lock:
                    first = id(obs) not in self._failed
                    self._failed.add(id(obs))
                if first:
                    log.warning("observer_failed", message=(
                        f"{type(obs).__name__}.{method} failed ({type(exc).__name__}: {exc}); supervision "
                        "goes on, this is reported once"))

    def record(self, record: Mapping[str, Any]) -> None:
        self._each("record", record)

    def phase(self, attempt: int, state: AttemptState) -> None:
        self._each("phase", attempt, state)

    def tick(self, tick: Tick) -> None:
        self._each("tick", tick)


class ObservedJournal(Journal):
    """A ``Journal`` that hands each record to an observer once it is written."""

    def __init__(self, path: Path, run_id: str, observer: RunObserver) -> None:
        super().__init__(path, run_id)
        self.observer = observer

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        record = super().append(event, **fields)
        self.observer.record(record)
        return record
