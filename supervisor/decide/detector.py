"""Stall detection as a pure state machine: samples and time in, verdicts out.

Lifecycle of one ``Detector`` (one per attempt)::

    WATCHING --(stall condition confirmed)--> SUSPECT
    SUSPECT  --(condition held for the window)--> FIRED      (verdict: stall)
    SUSPECT  --(heartbeat progress, or > noise_samples contrary samples in a row,
                or no confirming sample for gap_tolerance seconds)--> WATCHING
    WATCHING/SUSPECT --(no progress for progress_timeout)--> FIRED
                                          (verdict: silent_hang; stall if one is suspected)
    FIRED is terminal: the supervisor acts once per attempt.

The conditions:
* **stall**: some GPU used by the tree reads >= ``gpu_busy_pct`` while the tree's
  processes holding that GPU use <= ``cpu_idle_pct`` (percent of one core, summed)
  and the heartbeat makes no progress. That is the cuda-graph wedge: a kernel
  that never finishes, host threads asleep in a synchronize. The test is per
  device: with several ranks, one wedged rank stalls even while its peers spin
  at 100 % CPU in a collective waiting for it. A device that names no holders
  (``pids`` None or empty: NVML in a container) may be the tree's, and its
  holders' CPU is the whole tree's (the conservative choice: a busy host means
  no stall). A busy device held only by processes outside the tree is ignored.
* **hang (progress rule)**: the trainer has sent heartbeats, then none for
  ``progress_timeout``, whatever the CPU and the GPU do. A hang may sleep (a
  deadlock, a dead peer) or spin (vLLM's engine busy-polling its queue, NCCL
  proxy threads, a retry loop): no progress is the signal, not idleness. The
  verdict is ``silent_hang``, or ``stall`` when the stall condition is pending
  at that moment (the GPU signature says what it is, and the cuda-graph
  escalation must follow it). Before the first beat the rule never fires: that
  is the warm-up allowance (loading, first compile, data-loader warm-up).
* **per-rank progress rule**: every trainer process also beats into its own file
  (``Sample.beats``), and each is judged on its own: a process that has beaten, is alive
  in the tree, has not sent its final beat and has made no progress for the timeout of its
  own last beat's phase is a hang, whatever the other ranks do (one stuck rank is seen
  while another beats). ``silent_hang`` (``stall`` when the stall condition is pending)
  with ``rule: rank_progress`` and the process's rank and pid. A process that exits or
  sends its final beat is never judged. While another rank is in a phase other than train
  that began after a rank's last beat (rank 0 evaluates or saves alone), that rank's clock is held,
  and they run again from that phase's end: the other ranks wait for it in a collective,
  silent and healthy (``rank_progress`` says exactly when a clock is held).
* **learned timeout** (``auto_progress``): the progress timeout of phase ``train`` (or no
  phase) is learned from the intervals between beats (``learned_timeout``) once a warm-up
  of beats is seen; before that, and for every other phase, the fixed timeouts apply.
* **step rule** (opt-in, ``step_timeout``): beats go on but the step they carry has not
  changed for ``step_timeout`` (stretched by phase timeouts like the progress timeout): a
  livelock that beats each retry, or a side thread beating while the loop is stuck, which
  the progress rule cannot see (every beat is new). ``silent_hang`` with ``rule: step``.
  Off by default: a loop that beats each micro-batch repeats its step while healthy.
* **engine step rule**: each rollout engine process beats once per engine step
  (``Sample.engine``, a file per process, judged one by one). An engine that has
  stepped before, has a request in flight and has made no step for
  ``engine_step_timeout`` is wedged,
  whatever the CPU and the GPU do: one vLLM step is bounded by chunked prefill
  (at most ``max_num_batched_tokens`` tokens), so tens of seconds without one is
  not a slow step. It is far more specific than the trainer's silence (a batch
  of rollouts may legitimately take minutes), so it can fire much sooner. The
  verdict is ``stall`` with ``rule: engine_step`` and the worker's pid, so the
  graph policy escalates and engine-level recovery can target that worker. It
  needs the worker alive in the tree (a dead worker's last beat is stale, not
  stuck) and never fires before the worker's first step (its warm-up). It fires sooner, at
  ``engine_wedge_window``, when the engine's own GPU shows the wedge (busy, its holders and
  the engine idle): ``gpu_reading.engine_wedged_device`` says which GPU is the engine's.
* with ``idle_only`` the old, stricter rule instead: the silence must also
  come with no busy GPU and the whole tree's CPU <= ``cpu_idle_pct``, held for
  min(window, timeout).

Robustness rules (the reason this is more than an ``if``):
* one contrary sample (a noisy reading) does not reset a sustained stall; only
  more than ``noise_samples`` in a row do, or real heartbeat progress;
* a missing GPU sample (``gpu is None``) neither confirms nor resets: it is
  unknown, not idle; if confirmations stop for more than ``gap_tolerance``
  seconds the window starts again, so a gap never completes a window on its own;
* a phase announced through the heartbeat (``checkpoint``, ``compile``, ...) may
  stretch both timeouts (``phase_timeouts``), so a long save is not a wedge; the
  phase is the one named by the latest beat, so it lasts until the next beat.

Timing: the window is measured between confirming samples, so a stall whose
first confirming sample is at ``t0`` fires at the first confirming sample at or
after ``t0 + window``: ``t0 + window`` exactly when ticks are regular and the
window is a multiple of the interval. It is later only when the tick at
``t0 + window`` is contrary or missing: by at most ``noise_samples`` ticks, or
the length of a tolerated gap.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from hangwatch.contract.errors import ConfigError
from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.contract.verdict import Verdict, VerdictKind
from hangwatch.supervisor.decide.rank_progress import RankClocks
from hangwatch.supervisor.decide.learned_timeout import TRAIN_PHASES, AutoTimeout, IntervalLearner, LearnedTimeout
from hangwatch.supervisor.decide.gpu_reading import (NOT_BUSY, STALLED, DeviceScan, classify_devices,
                                                     engine_wedged_device, scan_devices)

DEFAULT_PHASE_TIMEOUTS: Mapping[str, float] = {
    "checkpoint": 1800.0,
    "compile": 1800.0,
    "warmup": 1800.0,
}


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
    # The progress rule fires only on an idle tree (the rule before busy hangs were caught).
    idle_only: bool = False
    # No engine step for this long with a request in flight: the engine is wedged (None: off).
    engine_step_timeout: float | None = 30.0
    # Beats go on but their step has not changed for this long: a hang (None: off, the default).
    step_timeout: float | None = None
    # The engine step rule, sooner when the sample shows the wedge itself (a busy GPU whose
    # holders are idle, the engine idle too): None, a quarter of engine_step_timeout; 0: off.
    engine_wedge_window: float | None = None
    # Learn the progress timeout of phase train from the run (None: the fixed one throughout),
    # and the value learned before (an earlier attempt's, a resumed run's), in force from the start.
    auto_progress: AutoTimeout | None = None
    learned_progress: LearnedTimeout | None = None

    def __post_init__(self) -> None:
        _positive("interval", self.interval)
        _positive("stall-window", self.stall_window)
        if self.progress_timeout is not None:
            _positive("progress-timeout", self.progress_timeout)
        if self.engine_step_timeout is not None:
            _positive("engine-step-timeout", self.engine_step_timeout)
        if self.step_timeout is not None:
            _positive("step-timeout", self.step_timeout)
        if self.engine_wedge_window is not None and (
                isinstance(self.engine_wedge_window, bool) or not isinstance(self.engine_wedge_window, (int, float))
                or not self.engine_wedge_window >= 0):
            raise ConfigError(f"--engine-wedge-window must be >= 0 seconds (0 turns it off), "
                              f"got {self.engine_wedge_window!r}")
        if not 0 < self.gpu_busy_pct <= 100:
            raise ConfigError(f"--gpu-busy must be in (0, 100], got {self.gpu_busy_pct!r}")
        # ``not x >= 0`` rather than ``x < 0``: NaN must be refused, it would
        # make every comparison false and the detector silently blind.
        if not self.cpu_idle_pct >= 0:
            raise ConfigError(f"--cpu-idle must be >= 0 (percent of one core), got {self.cpu_idle_pct!r}")
        if isinstance(self.noise_samples, bool) or not isinstance(self.noise_samples, int) or self.noise_samples < 0:
            raise ConfigError(f"--noise-samples must be a whole number >= 0, got {self.noise_samples!r}")
        if self.gap_tolerance is not None:
            _positive("gap-tolerance", self.gap_tolerance)
        if self.auto_progress is not None and self.progress_timeout is None:
            raise ConfigError("--progress-timeout auto needs a progress rule (the fixed timeout covers the warm-up)")
        if not isinstance(self.idle_only, bool):
            raise ConfigError(f"idle-only must be true or false, got {self.idle_only!r}")
        for phase, seconds in self.phase_timeouts.items():
            if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not seconds > 0:
                raise ConfigError(
                    f"--phase-timeout {phase}={seconds!r}: must be a positive number of seconds"
                )

    @property
    def effective_gap_tolerance(self) -> float:
        # Five missed ticks, and never less than 10 s: NVML can hiccup for a few
        # seconds under load without the wedge having cleared.
        if self.gap_tolerance is not None:
            return self.gap_tolerance
        return max(5 * self.interval, 10.0)

    @property
    def effective_engine_wedge_window(self) -> float | None:
        """How long the wedge's signature must hold on a stuck engine (None: the fast path is off).
        Never longer than the engine step timeout: past that the plain rule fires anyway."""
        if self.engine_step_timeout is None or self.engine_wedge_window == 0:
            return None
        if self.engine_wedge_window is None:
            return self.engine_step_timeout / 4
        return min(self.engine_wedge_window, self.engine_step_timeout)

    def window_for(self, phase: str | None) -> float:
        return max(self.stall_window, self.phase_timeouts.get(phase or "", 0.0))

    def progress_timeout_for(self, phase: str | None) -> float | None:
        if self.progress_timeout is None:
            return None
        return max(self.progress_timeout, self.phase_timeouts.get(phase or "", 0.0))

    def step_timeout_for(self, phase: str | None) -> float | None:
        if self.step_timeout is None:
            return None
        return max(self.step_timeout, self.phase_timeouts.get(phase or "", 0.0))

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
            "idle_only": self.idle_only,
            "engine_step_timeout": self.engine_step_timeout,
            "step_timeout": self.step_timeout,
            "engine_wedge_window": self.engine_wedge_window,
            # Only when set: the settings of runs without them read as before.
            **({"auto_progress": self.auto_progress.to_json()} if self.auto_progress else {}),
            **({"learned_progress": self.learned_progress.to_json()} if self.learned_progress else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "DetectorConfig":
        known = {f for f in cls.__dataclass_fields__}
        kwargs = {k: v for k, v in data.items() if k in known}
        if isinstance(kwargs.get("auto_progress"), Mapping):
            kwargs["auto_progress"] = AutoTimeout.from_json(kwargs["auto_progress"])
        if isinstance(kwargs.get("learned_progress"), Mapping):
            kwargs["learned_progress"] = LearnedTimeout.from_json(kwargs["learned_progress"])
        return cls(**kwargs)


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"--{name} must be a positive number of seconds, got {value!r}")


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
        self._last_hb: object | None = None
        self._last_progress = start
        self._heartbeats_seen = False
        # The step rule: the last step a beat carried, and since when it has not changed.
        self._step_since: float | None = None
        self._step_value: int | None = None
        # Per engine process: (its last token, when it last changed), and the stuck one, if any.
        self._engines: dict[int, tuple[tuple[int, int], float]] = {}
        self._engine_stuck: tuple[float, Heartbeat] | None = None
        # The wedge's signature on the stuck engine (engine_wedge_window), and which engine and
        # silence it is about: another one starts it again.
        self._wedge = _Sustained(config.noise_samples, config.effective_gap_tolerance)
        self._wedge_of: tuple[int, float] | None = None
        self._wedge_device: DeviceSample | None = None  # the engine's GPU the last confirmation read
        self.phase: str | None = None
        self.step: int | None = None
        # The learned progress timeout (``auto_progress``), and the last beat it learns from.
        self.learner = IntervalLearner(config.auto_progress, config.learned_progress) if config.auto_progress else None
        self._prev_beat: tuple[float, str | None] | None = None
        # Per trainer process: its last progress (the per-rank rule), and the one closest to its timeout.
        self._ranks = RankClocks()
        self._rank_stuck: tuple[float, float, Heartbeat] | None = None  # (since, timeout, beat)
        # The window and timeout of the current phase, recomputed when it changes.
        self._window = config.window_for(None)
        self._timeout = self.progress_timeout_for(None)
        # Real sample times jitter by a few ms around the schedule (a tick takes time),
        # so a window of exactly N ticks may measure N ticks minus a hair: without
        # this slack the verdict would slip a whole interval.
        self._slack = 0.05 * config.interval

    @property
    def stall_onset(self) -> float | None:
        return self._stall.onset

    @property
    def learned(self) -> LearnedTimeout | None:
        """The progress timeout learned so far (or carried in), None without ``auto_progress``."""
        return self.learner.learned if self.learner is not None else None

    def progress_due(self) -> float | None:
        """When (sample time) the progress rule fires if no beat comes before, or None (no beat
        yet, no timeout, fired already): the caller may take a sample then, not a tick later."""
        if self.state is DetectorState.FIRED or not self._heartbeats_seen or self._timeout is None:
            return None
        return self._last_progress + self._timeout - self._slack

    def progress_timeout_for(self, phase: str | None) -> float | None:
        """The progress timeout in force after a beat in ``phase``: the learned one for phase
        train once learned, else the fixed one (stretched by the phase's own timeout)."""
        learned = self.learned
        if learned is not None and phase in TRAIN_PHASES and self.config.progress_timeout is not None:
            return learned.timeout
        return self.config.progress_timeout_for(phase)

    def _learn(self, key_prev: tuple[float, str | None] | None, t: float) -> None:
        """One interval between two beats of a process, when the first was in phase train."""
        if self.learner is None or key_prev is None or key_prev[1] not in TRAIN_PHASES:
            return
        if self.learner.add(t - key_prev[0]):
            self._timeout = self.progress_timeout_for(self.phase)

    def observe(self, sample: Sample) -> Verdict | None:
        if self.state is DetectorState.FIRED:
            return None
        cfg = self.config
        t = sample.t
        progressed = self._note_heartbeat(sample)
        tree_cpu = sum(sample.cpu_pct.values())
        gpu = classify_devices(sample, tree_cpu, cfg.gpu_busy_pct, cfg.cpu_idle_pct)

        # Progress resets both windows, but the progress happened *before* this
        # sample: if the sample itself already looks stalled, the new window starts
        # here, not one interval later (a wedge right after a beat is the common case).
        if progressed:
            self._stall.reset()
            self._idle.reset()
        if sample.gpu is not None:
            if gpu is STALLED:
                self._stall.confirm(t)
            elif not progressed:
                self._stall.contradict()

        if gpu is NOT_BUSY and tree_cpu <= cfg.cpu_idle_pct:
            # A missing GPU sample counts as "not busy" here: silent-hang detection
            # must work without any GPU probe; progress silence is the real signal.
            self._idle.confirm(t)
        elif not progressed:
            self._idle.contradict()

        self.state = DetectorState.SUSPECT if self._stall.onset is not None else DetectorState.WATCHING

        window = self._window
        if self._stall.held_for(t) >= window - self._slack:
            onset = self._stall.onset
            assert onset is not None  # held_for > 0 implies an onset
            scan = scan_devices(sample, tree_cpu, cfg.gpu_busy_pct, cfg.cpu_idle_pct)
            self.state = DetectorState.FIRED
            return Verdict(
                VerdictKind.STALL,
                detected_at=t,
                onset=onset,
                window=window,
                phase=self.phase,
                reason=(
                    f"gpu_util={scan.stalled_util:.0f}% cpu={scan.stalled_cpu:.1f}% "
                    f"no heartbeat progress for {t - onset:.0f} s (window {window:.0f} s)"
                ),
                evidence=self._evidence(sample, scan, tree_cpu),
            )

        stuck = self._engine_stuck = self._stuck_engine(sample)
        if stuck is not None:
            silent_for = t - stuck[0]
            if silent_for >= (cfg.engine_step_timeout or 0) - self._slack:
                return self._engine_verdict(sample, tree_cpu, stuck)
            wedge_window = cfg.effective_engine_wedge_window
            # Held for the window less the first reading (it still counts CPU from before the wedge),
            # but over two readings at least: with a window of an interval or less (or an interval
            # longer than the window) one noisy reading during a healthy slow step fired on its own.
            if self._note_wedge(sample, stuck, tree_cpu) and wedge_window is not None \
                    and silent_for >= wedge_window - self._slack \
                    and self._wedge.held_for(t) >= max(wedge_window - cfg.interval,
                                                       min(wedge_window, cfg.interval)) - self._slack:
                return self._engine_verdict(sample, tree_cpu, stuck, wedge_window)
        else:
            self._wedge.reset()

        timeout = self._timeout
        if self._heartbeats_seen and timeout is not None:
            silent_for = t - self._last_progress
            if silent_for >= timeout - self._slack:
                idle_held = self._idle.held_for(t)
                if cfg.idle_only and idle_held < min(window, timeout) - self._slack:
                    return None
                return self._progress_verdict(sample, tree_cpu, silent_for, timeout, idle_held > 0)
        rank = self._rank_stuck = self._stuck_rank(sample)
        if rank is not None and not cfg.idle_only and t - rank[0] >= rank[1] - self._slack:
            return self._progress_verdict(sample, tree_cpu, t - rank[0], rank[1], self._idle.held_for(t) > 0, rank)
        step_timeout = cfg.step_timeout_for(self.phase)
        if self._step_since is not None and step_timeout is not None \
                and t - self._step_since >= step_timeout - self._slack:
            return self._step_verdict(sample, tree_cpu, t - self._step_since, step_timeout)
        return None

    def _step_verdict(self, sample: Sample, tree_cpu: float, stuck_for: float, timeout: float) -> Verdict:
        """Beats went on, the step did not: a livelock that beats without progress, or a side
        thread that beats while the training loop is stuck. Opt-in (``step_timeout``): a loop that
        beats each micro-batch, or a long rollout, repeats its step for a while when healthy."""
        cfg = self.config
        scan = scan_devices(sample, tree_cpu, cfg.gpu_busy_pct, cfg.cpu_idle_pct)
        self.state = DetectorState.FIRED
        evidence = self._evidence(sample, scan, tree_cpu)
        evidence["rule"] = "step"
        evidence["tree"] = "idle" if tree_cpu <= cfg.cpu_idle_pct else "busy"
        assert self._step_since is not None
        return Verdict(
            VerdictKind.SILENT_HANG,
            detected_at=sample.t,
            onset=self._step_since,
            window=timeout,
            phase=self.phase,
            # The last beat's age, not "beats went on": the rule fires too when beats stopped
            # (before a longer progress timeout), and the reader must not look for a side thread.
            reason=(f"step {self._step_value} has not advanced for {stuck_for:.0f} s (step timeout {timeout:.0f} s), "
                    f"last beat {max(0.0, sample.t - self._last_progress):.0f} s ago, cpu={tree_cpu:.1f}%"),
            evidence=evidence,
        )

    def _stuck_rank(self, sample: Sample) -> tuple[float, float, Heartbeat] | None:
        """The per-rank rule's candidate (``rank_progress.RankClocks``): the judged process with the
        least time left, as (its clock's start, its timeout, its beat), or None."""
        return self._ranks.observe(sample, self.progress_timeout_for,
                                   lambda prev_t, prev_phase, t: self._learn((prev_t, prev_phase), t))

    def _progress_verdict(self, sample: Sample, tree_cpu: float, silent_for: float, timeout: float,
                          idle: bool, rank: tuple[float, float, Heartbeat] | None = None) -> Verdict:
        cfg = self.config
        t = sample.t
        scan = scan_devices(sample, tree_cpu, cfg.gpu_busy_pct, cfg.cpu_idle_pct)
        self.state = DetectorState.FIRED
        evidence = self._evidence(sample, scan, tree_cpu)
        evidence["rule"] = "idle" if cfg.idle_only else "progress"
        evidence["tree"] = "idle" if idle else "busy"
        if self.learned is not None:
            evidence["learned_timeout_s"] = round(self.learned.timeout, 3)
        who = "heartbeat progress"
        onset = self._last_progress
        if rank is not None:
            onset, _, hb = rank
            last = self._ranks.last_progress(hb.pid, onset)
            evidence.update(rule="rank_progress", stuck_pid=hb.pid, stuck_phase=hb.phase, stuck_step=hb.step,
                            stuck_silent_s=round(t - last, 3), others_last_progress_s=round(t - self._last_progress, 3))
            if hb.rank is not None:
                evidence["stuck_rank"] = hb.rank
            who = f"progress from {hb.who}"
            others = f"; other processes last beat {t - self._last_progress:.0f} s ago"
            if onset - last > 0.5 * cfg.interval:
                evidence["paused_s"] = round(onset - last, 3)
                others = (f" counted of {t - last:.0f} s silent ({onset - last:.0f} s paused while another process "
                          f"worked in a phase of its own){others}")
        else:
            others = ""
        stall_onset = self._stall.onset
        if stall_onset is not None and self._stall.last_confirm is not None:
            # The GPU signature of the cuda-graph wedge is already there, only its
            # window has not run out: name it a stall so the escalation follows.
            evidence["stall_suspected_s"] = round(t - stall_onset, 3)
            kind = VerdictKind.STALL
            what = f"gpu busy, holders idle for {t - stall_onset:.0f} s"
        else:
            kind = VerdictKind.SILENT_HANG
            gpu = f"gpu busy {scan.max_util:.0f}%" if scan.busy else "gpu idle"
            what = f"tree {'idle' if idle else 'busy'}, cpu={tree_cpu:.1f}%, {gpu}"
        return Verdict(
            kind,
            detected_at=t,
            onset=onset,
            window=timeout,
            phase=rank[2].phase if rank is not None else self.phase,
            reason=f"no {who} for {silent_for:.0f} s (timeout {timeout:.0f} s){others}, {what}",
            evidence=evidence,
        )

    def unobserved(self, seconds: float) -> None:
        """The supervisor was not running for ``seconds`` between two samples (its sleep
        overran by more than the gap tolerance: the whole job stopped and continued, a starved
        host), so that time is not silence of the trainer's or an engine's: the progress
        timeout's and the engine step rule's clocks move on by it. Told by the caller, who
        knows when it slept; a gap spent inside a tick (a hung probe) is observed and counts."""
        if not seconds > 0:
            return
        self._last_progress += seconds
        if self._step_since is not None:
            self._step_since += seconds
        self._engines = {pid: (token, since + seconds) for pid, (token, since) in self._engines.items()}
        self._ranks.shift(seconds)

    def _stuck_engine(self, sample: Sample) -> tuple[float, Heartbeat] | None:
        """The engine process silent the longest while the rule applies to it (a request in
        flight, stepped before, alive in the tree): (its last progress, its beat), or None.
        An engine whose beat is gone (its file removed: the worker is dead) is forgotten, so
        a new process under the same pid starts afresh and never inherits the dead one's last
        step. (Not on a tick that misses its process: one failed read of the tree must not
        restart a stuck engine's clock.)"""
        engines = self._engines
        if not sample.engine:  # the common case on a replay's hot path: nothing to build
            engines.clear()
            return None
        seen = {e.pid for e in sample.engine}
        for gone in [pid for pid in engines if pid not in seen]:
            del engines[gone]
        worst: tuple[float, Heartbeat] | None = None
        for engine in sample.engine:
            known = engines.get(engine.pid)
            if known is None or known[0] != engine.token:
                known = engines[engine.pid] = (engine.token, sample.t)
            if engine.step and _in_flight(engine, sample):  # stepped before: past its warm-up
                if worst is None or known[1] < worst[0]:
                    worst = (known[1], engine)
        if self.config.engine_step_timeout is None:
            return None
        return worst

    def _note_wedge(self, sample: Sample, stuck: tuple[float, Heartbeat], tree_cpu: float) -> bool:
        """Track whether the stuck engine shows the wedge itself: its GPU busy while the GPU's
        holders are idle (the graph's kernel that never ends, host threads asleep in a synchronize)
        and the engine is idle too. A healthy engine between two steps is busy on the host, or its
        GPU is not pinned; a slow step for a host-side reason (a grammar compile, a GC pause, a
        starved CPU) keeps the host busy. So this conjunction may fire well before the plain rule,
        whose timeout must also cover those. The engine's own GPU (``engine_wedged_device``), not
        any: another rank's peers asleep in a collective read the same while this engine waits on a
        healthy long step. Returns whether this sample confirms it."""
        since, engine = stuck
        if self._wedge_of != (engine.pid, since):  # another engine, or this one stepped since
            self._wedge_of = (engine.pid, since)
            self._wedge.reset()
        if sample.gpu is None:
            return False  # unknown, not contrary
        cfg = self.config
        device = None
        if sample.cpu_pct.get(engine.pid, 0.0) <= cfg.cpu_idle_pct:
            device = engine_wedged_device(sample, tree_cpu, engine.pid, cfg.gpu_busy_pct, cfg.cpu_idle_pct)
        if device is not None:
            self._wedge.confirm(sample.t)
            self._wedge_device = device
            return True
        self._wedge.contradict()
        return False

    def _engine_verdict(self, sample: Sample, tree_cpu: float, stuck: tuple[float, Heartbeat],
                        wedge_window: float | None = None) -> Verdict:
        """The engine step rule's verdict: at its timeout, or at ``wedge_window`` when the
        wedge's signature held that long."""
        since, engine = stuck
        silent_for = sample.t - since
        assert self.config.engine_step_timeout is not None
        scan = scan_devices(sample, tree_cpu, self.config.gpu_busy_pct, self.config.cpu_idle_pct)
        self.state = DetectorState.FIRED
        evidence = self._evidence(sample, scan, tree_cpu)
        evidence.update(rule="engine_step", engine_pid=engine.pid, engine_steps=engine.step,
                        engine_cpu_pct=round(sample.cpu_pct.get(engine.pid, 0.0), 2))
        timeout = self.config.engine_step_timeout
        if wedge_window is not None:
            device = self._wedge_device
            assert device is not None  # set by the confirmation this verdict rests on
            evidence["engine_wedge"] = True
            evidence["engine_wedge_device"] = device.index
            why = (f"its GPU {device.index} at {device.util_pct:.0f}% with idle holders (the wedge's signature, "
                   f"engine wedge window {wedge_window:g} s)")
        else:
            why = f"engine step timeout {timeout:g} s"
        return Verdict(
            VerdictKind.STALL,
            detected_at=sample.t,
            onset=since,
            window=wedge_window if wedge_window is not None else timeout,
            phase=self.phase,
            reason=(f"the rollout engine (pid {engine.pid}) made no step for {silent_for:.1f} s with a request "
                    f"in flight ({why}), cpu={evidence['engine_cpu_pct']:.1f}%"),
            evidence=evidence,
        )

    def building(self, t: float) -> tuple[str, float, float] | None:
        """The verdict that is building as of the sample at ``t``: (rule, onset,
        fraction of its window or timeout already elapsed), the most advanced one,
        or None. The runner takes an early evidence round from this."""
        if self.state is DetectorState.FIRED:
            return None
        best: tuple[str, float, float] | None = None
        held = self._stall.held_for(t)
        if held > 0 and self._stall.onset is not None:
            best = ("stall", self._stall.onset, held / self._window)
        timeout = self._timeout
        if self._heartbeats_seen and timeout is not None and not (self.config.idle_only and self._idle.held_for(t) <= 0):
            frac = (t - self._last_progress) / timeout
            if best is None or frac > best[2]:
                best = ("progress", self._last_progress, frac)
        rank = self._rank_stuck
        if rank is not None and not self.config.idle_only:
            frac = (t - rank[0]) / rank[1]
            if best is None or frac > best[2]:
                best = ("rank_progress", rank[0], frac)
        step_timeout = self.config.step_timeout_for(self.phase)
        if self._step_since is not None and step_timeout is not None:
            frac = (t - self._step_since) / step_timeout
            if best is None or frac > best[2]:
                best = ("step", self._step_since, frac)
        stuck = self._engine_stuck
        if stuck is not None and self.config.engine_step_timeout is not None:
            wedge_window = self.config.effective_engine_wedge_window
            # the wedge's signature, confirmed by this very sample (its first confirmation included)
            showing = wedge_window is not None and self._wedge.onset is not None and self._wedge.last_confirm == t
            if showing:  # its verdict may come at the very next tick: count that tick already
                frac = (t - stuck[0] + self.config.interval) / wedge_window
            else:
                frac = (t - stuck[0]) / self.config.engine_step_timeout
            if best is None or frac > best[2]:
                best = ("engine_step", stuck[0], frac)
        return best

    def _note_heartbeat(self, sample: Sample) -> bool:
        hb = sample.heartbeat
        # The same object again is the common case between beats; skip building the token.
        if hb is None or hb is self._last_hb:
            return False
        self._last_hb = hb
        token = hb.token
        if token == self._last_token:
            return False
        self._last_token = token
        self._heartbeats_seen = True
        # The beat happened when the trainer wrote it, up to one interval before this tick
        # read it: the timeout runs from then (on average half an interval sooner). Its
        # wall-clock age is trusted only within one interval: a clock step, or a beat
        # older than that (read late, or a stale file), gets no credit.
        age = sample.wall - hb.ts
        credit = age if 0.0 <= age <= self.config.interval else 0.0
        self._last_progress = max(self._last_progress, sample.t - credit)
        if not sample.beats:  # per-process beats teach the learned timeout themselves (_stuck_rank)
            self._learn(self._prev_beat, self._last_progress)
        self._prev_beat = (self._last_progress, hb.phase)
        if hb.step is not None and (hb.step != self._step_value or self._step_since is None):
            # A new step (a beat without one changes nothing): the step rule's clock starts again.
            self._step_value, self._step_since = hb.step, self._last_progress
        if hb.phase != self.phase:
            self.phase = hb.phase
            self._window = self.config.window_for(hb.phase)
            self._timeout = self.progress_timeout_for(hb.phase)
        self.step = hb.step
        return True

    def _evidence(self, sample: Sample, scan: DeviceScan, tree_cpu: float) -> dict[str, Any]:
        evidence = self._base_evidence(sample, scan, tree_cpu)
        if sample.engine:
            evidence["engine_beats"] = len(sample.engine)  # the engines say which one, if any, was in flight
        in_flight = [e for e in sample.engine if _in_flight(e, sample)]
        in_call = [e for e in sample.engine if e.phase in WORKER_CALLS and e.pid in sample.cpu_pct]
        if in_call and not in_flight:
            # A worker inside a wake, weight load or sleep says so itself: with ranks sharing the
            # heartbeat file, the file's last beat may be another rank's, naming its healthy worker.
            since = {e.pid: self._engines.get(e.pid, (None, sample.t))[1] for e in in_call}
            engine = min(in_call, key=lambda e: since[e.pid])
            evidence.update(waiting_on=engine.pid, waiting_on_phase=engine.phase,
                            waiting_on_silent_s=round(sample.t - since[engine.pid], 3))
        if in_flight:
            # Whichever rule fired, the engine with a request in flight (the longest silent of
            # them) is the engine suspect: engine-level recovery kills its group, and spares a
            # standby worker. How long it has been silent tells a stuck engine from one that
            # steps while something else is stalled.
            since = {e.pid: self._engines.get(e.pid, (None, sample.t))[1] for e in in_flight}
            engine = min(in_flight, key=lambda e: since[e.pid])
            evidence.update(engine_pid=engine.pid, engine_steps=engine.step,
                            engine_silent_s=round(sample.t - since[engine.pid], 3))
        return evidence

    def _base_evidence(self, sample: Sample, scan: DeviceScan, tree_cpu: float) -> dict[str, Any]:
        evidence: dict[str, Any] = {
            "gpu_util_pct": scan.stalled_util if scan.stalled else scan.max_util,
            # Of the stalled device, else of the busiest: a busy GPU whose holder spins (a synchronize
            # that spin-waits on a kernel that never ends) read "holders 0 %" beside "gpu 100 %".
            "holders_cpu_pct": round(scan.stalled_cpu if scan.stalled else scan.busy_cpu, 2),
            "tree_cpu_pct": round(tree_cpu, 2),
            "busy_devices": list(scan.busy),
            "stalled_devices": list(scan.stalled),
            "tree_size": len(sample.cpu_pct),
            "step": self.step,
            "phase": self.phase,
            "last_progress_t": round(self._last_progress, 4),
        }
        # The engine worker the trainer's generator waits on (its beats say which): a stall in a
        # weight load or a sleep is that worker's, restarted alone (a standby beside it is spared).
        # Only from a beat in such a call: with several ranks sharing the file, another rank's later
        # beat (its generate, its restore) names its own healthy worker.
        hb = sample.heartbeat
        info = (hb.info or {}) if hb is not None and hb.phase in WORKER_CALLS else {}
        waits_on = info.get("engine_worker_pid")
        if isinstance(waits_on, int) and not isinstance(waits_on, bool) and 0 < waits_on < 2**31:
            evidence["waiting_on"] = waits_on
        return evidence


#: the engine worker's calls that run no steps (``EngineBeacon.call``)
WORKER_CALLS = frozenset({"load", "sleep"})


def _in_flight(engine: Heartbeat, sample: Sample) -> bool:
    """The engine is stepping a request and is alive in the tree (a dead one's beat is stale)."""
    return engine.phase == "generate" and engine.pid in sample.cpu_pct


def replay_detector(samples: "Sequence[Sample]", config: DetectorConfig) -> tuple[Verdict | None, dict[str, Any]]:
    """Run a fresh detector over recorded samples (``hangwatch replay``'s what-if).

    Returns the first verdict, if any, and the settings it ran with.
    """
    verdict = None
    if samples:
        detector = Detector(config, start=samples[0].t)
        for sample in samples:
            verdict = detector.observe(sample)
            if verdict is not None:
                break
    return verdict, config.to_json()
