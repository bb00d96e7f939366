"""Stall detection as a pure state machine: samples and time in, verdicts out.

Lifecycle of one ``Detector`` (one per attempt)::

    WATCHING --(stall condition confirmed)--> SUSPECT
    SUSPECT  --(condition held for the window)--> FIRED      (verdict: stall)
    SUSPECT  --(heartbeat progress, or > noise_samples contrary samples in a row,
                or no confirming sample for gap_tolerance seconds)--> WATCHING
    WATCHING/SUSPECT --(no progress for progress_timeout, tree idle)--> FIRED
                                                             (verdict: silent_hang)
    FIRED is terminal: the supervisor acts once per attempt.

The conditions:
* **stall**: some GPU used by the tree reads >= ``gpu_busy_pct`` while the tree's
  processes holding that GPU use <= ``cpu_idle_pct`` (percent of one core, summed)
  and the heartbeat makes no progress. That is the cuda-graph wedge: a kernel
  that never finishes, host threads asleep in a synchronize.
* **silent hang**: the trainer has sent heartbeats, then none for
  ``progress_timeout``, while GPU and CPU are idle.

Robustness rules (the reason this is more than an ``if``):
* one contrary sample (a noisy reading) does not reset a sustained stall; only
  more than ``noise_samples`` in a row do, or real heartbeat progress;
* a missing GPU sample (``gpu is None``) neither confirms nor resets: it is
  unknown, not idle; if confirmations stop for ``gap_tolerance`` seconds the
  window starts again, so a gap never completes a window on its own;
* a phase announced through the heartbeat (``checkpoint``, ``compile``, ...) may
  stretch both timeouts (``phase_timeouts``), so a long save is not a wedge.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass, field
from typing import Any, Mapping

from supervisor.samples import Sample

DEFAULT_PHASE_TIMEOUTS: Mapping[str, float] = {
    "checkpoint": 1800.0,
    "compile": 1800.0,
    "warmup": 1800.0,
}


class ConfigError(ValueError):
    """A setting is out of range; the message names it and the value."""


class VerdictKind(str, enum.Enum):
    STALL = "stall"
    SILENT_HANG = "silent_hang"
    CRASH = "crash"
    DONE = "done"

    @property
    def is_hang(self) -> bool:
        return self in (VerdictKind.STALL, VerdictKind.SILENT_HANG)


class DetectorState(str, enum.Enum):
    WATCHING = "watching"
    SUSPECT = "suspect"
    FIRED = "fired"


@dataclass(frozen=True)
class DetectorConfig:
    interval: float = 1.0
    gpu_busy_pct: float = 90.0
    cpu_idle_pct: float = 10.0
    stall_window: float = 60.0
    progress_timeout: float | None = 600.0
    noise_samples: int = 2
    gap_tolerance: float | None = None
    phase_timeouts: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_PHASE_TIMEOUTS))

    def __post_init__(self) -> None:
        _positive("interval", self.interval)
        _positive("stall-window", self.stall_window)
        if self.progress_timeout is not None:
            _positive("progress-timeout", self.progress_timeout)
        if not 0 < self.gpu_busy_pct <= 100:
            raise ConfigError(f"--gpu-busy must be in (0, 100], got {self.gpu_busy_pct!r}")
        if self.cpu_idle_pct < 0:
            raise ConfigError(f"--cpu-idle must be >= 0 (percent of one core), got {self.cpu_idle_pct!r}")
        if self.noise_samples < 0:
            raise ConfigError(f"--noise-samples must be >= 0, got {self.noise_samples!r}")
        if self.gap_tolerance is not None:
            _positive("gap-tolerance", self.gap_tolerance)
        for phase, seconds in self.phase_timeouts.items():
            _positive(f"phase timeout for {phase!r}", seconds)

    @property
    def effective_gap_tolerance(self) -> float:
        # Five missed ticks, and never less than 10 s: NVML can hiccup for a few
        # seconds under load without the wedge having cleared.
        if self.gap_tolerance is not None:
            return self.gap_tolerance
        return max(5 * self.interval, 10.0)

    def window_for(self, phase: str | None) -> float:
        return max(self.stall_window, self.phase_timeouts.get(phase or "", 0.0))

    def progress_timeout_for(self, phase: str | None) -> float | None:
        if self.progress_timeout is None:
            return None
        return max(self.progress_timeout, self.phase_timeouts.get(phase or "", 0.0))

    def to_json(self) -> dict[str, Any]:
        return {
            "interval": self.interval,
            "gpu_busy_pct": self.gpu_busy_pct,
            "cpu_idle_pct": self.cpu_idle_pct,
            "stall_window": self.stall_window,
            "progress_timeout": self.progress_timeout,
            "noise_samples": self.noise_samples,
            "gap_tolerance": self.effective_gap_tolerance,
            "phase_timeouts": dict(self.phase_timeouts),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "DetectorConfig":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"--{name} must be a positive number of seconds, got {value!r}")


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


class _Sustained:
    """A condition that must hold, give or take noise, for a span of time."""

    def __init__(self, noise_samples: int, gap_tolerance: float) -> None:
        self.noise_samples = noise_samples
        self.gap_tolerance = gap_tolerance
        self.onset: float | None = None
        self.last_confirm: float | None = None
        self.contrary = 0

    def confirm(self, t: float) -> None:
        if self.onset is None or self.last_confirm is None or t - self.last_confirm > self.gap_tolerance:
            self.onset = t
        self.last_confirm = t
        self.contrary = 0

    def contradict(self) -> None:
        if self.onset is None:
            return
        self.contrary += 1
        if self.contrary > self.noise_samples:
            self.reset()

    def reset(self) -> None:
        self.onset = None
        self.last_confirm = None
        self.contrary = 0

    def held_for(self, t: float) -> float:
        """How long the condition has held, as of a confirming sample at ``t``."""
        if self.onset is None or self.last_confirm != t:
            return 0.0
        return t - self.onset


class Detector:
    """Feed it samples in time order; it returns at most one hang verdict."""

    def __init__(self, config: DetectorConfig, start: float) -> None:
        self.config = config
        self.state = DetectorState.WATCHING
        self._stall = _Sustained(config.noise_samples, config.effective_gap_tolerance)
        self._idle = _Sustained(config.noise_samples, config.effective_gap_tolerance)
        self._last_token: tuple[int, int] | None = None
        self._last_progress = start
        self._heartbeats_seen = False
        self.phase: str | None = None
        self.step: int | None = None

    @property
    def stall_onset(self) -> float | None:
        return self._stall.onset

    def observe(self, sample: Sample) -> Verdict | None:
        if self.state is DetectorState.FIRED:
            return None
        t = sample.t
        progressed = self._note_heartbeat(sample)
        busy = _busy_devices(sample, self.config.gpu_busy_pct)

        if progressed:
            self._stall.reset()
        elif sample.gpu is not None:
            holders_cpu = _holders_cpu(sample, busy)
            if busy and holders_cpu <= self.config.cpu_idle_pct:
                self._stall.confirm(t)
            else:
                self._stall.contradict()

        tree_cpu = sum(sample.cpu_pct.values())
        if progressed:
            self._idle.reset()
        elif not busy and tree_cpu <= self.config.cpu_idle_pct:
            # A missing GPU sample counts as "not busy" here: silent-hang detection
            # must work without any GPU probe; progress silence is the real signal.
            self._idle.confirm(t)
        else:
            self._idle.contradict()

        self.state = DetectorState.SUSPECT if self._stall.onset is not None else DetectorState.WATCHING

        window = self.config.window_for(self.phase)
        if self._stall.held_for(t) >= window:
            self.state = DetectorState.FIRED
            assert self._stall.onset is not None
            return Verdict(
                VerdictKind.STALL,
                detected_at=t,
                onset=self._stall.onset,
                window=window,
                phase=self.phase,
                reason=(
                    f"gpu_util={_max_util(busy):.0f}% cpu={_holders_cpu(sample, busy):.1f}% "
                    f"no heartbeat progress for {t - self._stall.onset:.0f} s (window {window:.0f} s)"
                ),
                evidence=self._evidence(sample, busy),
            )

        timeout = self.config.progress_timeout_for(self.phase)
        if self._heartbeats_seen and timeout is not None:
            silent_for = t - self._last_progress
            idle_needed = min(window, timeout)
            if silent_for >= timeout and self._idle.held_for(t) >= idle_needed:
                self.state = DetectorState.FIRED
                return Verdict(
                    VerdictKind.SILENT_HANG,
                    detected_at=t,
                    onset=self._last_progress,
                    window=timeout,
                    phase=self.phase,
                    reason=(
                        f"no heartbeat progress for {silent_for:.0f} s (timeout {timeout:.0f} s), "
                        f"tree cpu={tree_cpu:.1f}%, gpu idle"
                    ),
                    evidence=self._evidence(sample, busy),
                )
        return None

    def _note_heartbeat(self, sample: Sample) -> bool:
        hb = sample.heartbeat
        if hb is None or hb.token == self._last_token:
            return False
        self._last_token = hb.token
        self._heartbeats_seen = True
        self._last_progress = sample.t
        self.phase = hb.phase
        self.step = hb.step
        return True

    def _evidence(self, sample: Sample, busy: list) -> dict[str, Any]:
        return {
            "gpu_util_pct": _max_util(busy),
            "holders_cpu_pct": round(_holders_cpu(sample, busy), 2),
            "tree_cpu_pct": round(sum(sample.cpu_pct.values()), 2),
            "busy_devices": [d.index for d in busy],
            "tree_size": len(sample.cpu_pct),
            "step": self.step,
            "phase": self.phase,
            "last_progress_t": round(self._last_progress, 4),
        }


def _busy_devices(sample: Sample, threshold: float) -> list:
    if sample.gpu is None:
        return []
    tree = sample.tree_pids()
    return [
        d
        for d in sample.gpu
        if d.util_pct >= threshold and (d.pids is None or not d.pids or tree.intersection(d.pids))
    ]


def _holders_cpu(sample: Sample, busy: list) -> float:
    """CPU of the tree processes that hold a busy device.

    When a device does not say who holds it, every tree process might: use the
    whole tree's CPU, the conservative choice (a busy host means no stall).
    """
    tree = sample.tree_pids()
    holders: set[int] = set()
    for device in busy:
        if not device.pids:
            return sum(sample.cpu_pct.values())
        holders.update(tree.intersection(device.pids))
    return sum(sample.cpu_pct.get(pid, 0.0) for pid in holders)


def _max_util(busy: list) -> float:
    return max((d.util_pct for d in busy), default=0.0)
