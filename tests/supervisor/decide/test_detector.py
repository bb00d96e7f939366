"""The stall detector as a pure function of samples and time.

Every stream here is built by hand (or by hypothesis) at a fixed interval;
``run`` feeds it and returns the first verdict, so each test states the time a
verdict must come at, to the sample.
"""

from __future__ import annotations

import math
import random
from typing import Iterable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hangwatch.contract.errors import ConfigError
from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.contract.verdict import Verdict, VerdictKind, classify_exit
from hangwatch.supervisor.decide.detector import DEFAULT_PHASE_TIMEOUTS, Detector, DetectorConfig, DetectorState

pytestmark = pytest.mark.timeout(60)

TRAINER, ENGINE, WORKER, STRANGER = 100, 101, 102, 999
MISSING = object()  # "gpu=None this tick"


def hb(seq: int, phase: str | None = "train", pid: int = TRAINER, step: int | None = None) -> Heartbeat:
    return Heartbeat(pid=pid, seq=seq, ts=0.0, step=step if step is not None else seq, phase=phase)


def tick(
    t: float,
    util: float | None = 100.0,
    cpu: float = 1.0,
    *,
    beat: Heartbeat | None = None,
    pids: tuple[int, ...] | None = (TRAINER,),
    others: dict[int, float] | None = None,
    devices: tuple[DeviceSample, ...] | None = None,
) -> Sample:
    """One tick: the trainer (holding GPU 0) at ``cpu`` %, GPU 0 at ``util`` % (None: probe missed)."""
    cpu_pct = {TRAINER: cpu, **(others or {})}
    if devices is None and util is not None:
        devices = (DeviceSample(0, util, 1000.0, pids),)
    return Sample(t=t, wall=t, cpu_pct=cpu_pct, gpu=devices, heartbeat=beat)


def stalled(t: float, beat: Heartbeat | None = None) -> Sample:
    return tick(t, 100.0, 1.0, beat=beat)


def healthy(t: float, beat: Heartbeat | None = None) -> Sample:
    return tick(t, 100.0, 100.0, beat=beat)


def run(samples: Iterable[Sample], config: DetectorConfig | None = None, start: float = 0.0) -> Verdict | None:
    detector = Detector(config or DetectorConfig(), start)
    for s in samples:
        verdict = detector.observe(s)
        if verdict is not None:
            return verdict
    return None


def ticks(n: int, interval: float = 1.0, start: float = 0.0) -> list[float]:
    return [start + i * interval for i in range(n)]


# -- the stall rule -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("interval", "window", "expected_latency"),
    [(1.0, 60.0, 60.0), (0.5, 3.0, 3.0), (2.0, 5.0, 6.0), (0.25, 1.1, 1.25)],
)
def test_sustained_stall_fires_after_the_window_rounded_up_to_a_tick(interval, window, expected_latency):
    cfg = DetectorConfig(interval=interval, stall_window=window)
    onset = 10 * interval
    stream = [healthy(t) if t < onset else stalled(t) for t in ticks(1000, interval)]
    verdict = run(stream, cfg)
    assert verdict is not None and verdict.kind is VerdictKind.STALL
    assert verdict.onset == onset
    assert verdict.detected_at - verdict.onset == pytest.approx(expected_latency)
    assert verdict.window == window
    assert "gpu_util=100%" in verdict.reason and f"window {window:.0f} s" in verdict.reason
    assert verdict.evidence["stalled_devices"] == [0]


def test_state_goes_watching_suspect_watching_suspect_fired():
    detector = Detector(DetectorConfig(noise_samples=0), 0.0)
    seen = []
    stream = [healthy(0), stalled(1), stalled(2), healthy(3)] + [stalled(t) for t in range(4, 70)]
    for s in stream:
        if detector.observe(s) is not None:
            seen.append(detector.state)
            break
        seen.append(detector.state)
    assert seen[:5] == [DetectorState.WATCHING, DetectorState.SUSPECT, DetectorState.SUSPECT,
                        DetectorState.WATCHING, DetectorState.SUSPECT]
    assert seen[-1] is DetectorState.FIRED
    assert detector.stall_onset == 4


@pytest.mark.parametrize("noise", ["gpu_dip", "cpu_spike"])
def test_one_noisy_sample_inside_a_stall_does_not_reset_it(noise):
    def at(t):
        if t == 30:
            return tick(t, 40.0, 1.0) if noise == "gpu_dip" else tick(t, 100.0, 250.0)
        return stalled(t)

    verdict = run([at(t) for t in range(200)])
    assert verdict is not None
    assert (verdict.onset, verdict.detected_at) == (0, 60)


@pytest.mark.parametrize("noise_samples", [0, 1, 2, 4])
def test_up_to_noise_samples_contrary_in_a_row_are_tolerated_one_more_resets(noise_samples):
    cfg = DetectorConfig(noise_samples=noise_samples)
    tolerated = [healthy(t) if 30 <= t < 30 + noise_samples else stalled(t) for t in range(300)]
    verdict = run(tolerated, cfg)
    assert verdict is not None and (verdict.onset, verdict.detected_at) == (0, 60)

    reset = [healthy(t) if 30 <= t <= 30 + noise_samples else stalled(t) for t in range(300)]
    verdict = run(reset, cfg)
    resumed = 31 + noise_samples
    assert verdict is not None and (verdict.onset, verdict.detected_at) == (resumed, resumed + 60)


def test_noise_at_the_end_of_the_window_delays_the_verdict_to_the_next_confirming_sample():
    stream = [healthy(t) if t in (60, 61) else stalled(t) for t in range(200)]
    verdict = run(stream)
    assert verdict is not None and (verdict.onset, verdict.detected_at) == (0, 62)


def test_heartbeat_progress_resets_the_stall_at_once():
    beat = hb(1)
    stream = [stalled(t, beat=beat if t >= 50 else None) for t in range(300)]
    verdict = run(stream)
    # The beat appears at t=50 (progress: reset); the sample that shows it already looks
    # stalled, so the new window starts there. The same beat after it is not progress.
    assert verdict is not None and (verdict.onset, verdict.detected_at) == (50, 110)


@pytest.mark.parametrize(
    ("first", "second", "progress"),
    [
        (hb(1), hb(1), False),  # same (pid, seq): the file was re-read, not rewritten
        (hb(1), hb(2), True),
        (hb(1), hb(1, pid=TRAINER + 1), True),  # a second process beating into the same file
        (hb(1, step=5), hb(1, step=6), False),  # only (pid, seq) identifies a beat
    ],
)
def test_progress_is_a_change_of_pid_and_seq(first, second, progress):
    stream = [stalled(t, beat=first if t < 40 else second) for t in range(200)]
    verdict = run(stream)
    assert verdict is not None
    # A beat's own sample already starts the new window when it looks stalled.
    assert verdict.onset == (40 if progress else 0)


def test_missing_gpu_samples_never_fake_a_stall():
    # No GPU probe at all, idle CPU, no heartbeat ever: nothing to conclude.
    assert run(tick(t, None, 0.0) for t in range(5000)) is None


def test_missing_gpu_samples_within_the_gap_tolerance_do_not_reset_a_stall():
    gap = range(20, 29)  # 9 ticks: last confirm 19, next 29, 10 s apart = the tolerance
    stream = [tick(t, None, 1.0) if t in gap else stalled(t) for t in range(200)]
    verdict = run(stream)
    assert verdict is not None and (verdict.onset, verdict.detected_at) == (0, 60)


def test_a_gap_longer_than_the_tolerance_restarts_the_window():
    gap = range(20, 31)  # last confirm 19, next 31: 12 s > 10 s
    stream = [tick(t, None, 1.0) if t in gap else stalled(t) for t in range(300)]
    verdict = run(stream)
    assert verdict is not None and (verdict.onset, verdict.detected_at) == (31, 91)


def test_explicit_gap_tolerance_is_used():
    cfg = DetectorConfig(gap_tolerance=30.0)
    gap = range(20, 45)
    stream = [tick(t, None, 1.0) if t in gap else stalled(t) for t in range(300)]
    verdict = run(stream, cfg)
    assert verdict is not None and verdict.onset == 0
    assert DetectorConfig().effective_gap_tolerance == 10.0
    assert DetectorConfig(interval=5.0).effective_gap_tolerance == 25.0


def test_a_gap_never_completes_a_window_on_its_own():
    stream = [stalled(t) if t < 50 else tick(t, None, 1.0) for t in range(3000)]
    assert run(stream) is None


def test_a_gap_at_the_end_of_the_window_delays_the_verdict_to_the_next_confirming_sample():
    stream = [tick(t, None, 1.0) if 55 <= t < 63 else stalled(t) for t in range(200)]
    verdict = run(stream)
    assert verdict is not None and (verdict.onset, verdict.detected_at) == (0, 63)


def test_gpu_busy_with_cpu_busy_is_healthy_training():
    assert run(tick(t, 100.0, 95.0) for t in range(4 * 3600)) is None


def test_cpu_idle_threshold_is_inclusive_and_gpu_busy_threshold_is_inclusive():
    cfg = DetectorConfig(gpu_busy_pct=90.0, cpu_idle_pct=10.0)
    assert run((tick(t, 90.0, 10.0) for t in range(100)), cfg) is not None
    assert run((tick(t, 89.9, 0.0) for t in range(100)), cfg) is None
    assert run((tick(t, 100.0, 10.1) for t in range(100)), cfg) is None


# -- phases ---------------------------------------------------------------------------------


def test_checkpoint_phase_stretches_the_window_and_leaving_it_restores_it():
    save = hb(1, "checkpoint")
    stream = [stalled(t, beat=save) for t in range(3000)]
    verdict = run(stream)
    assert verdict is not None
    assert (verdict.onset, verdict.detected_at) == (0, DEFAULT_PHASE_TIMEOUTS["checkpoint"])
    assert verdict.phase == "checkpoint" and verdict.window == 1800.0

    # The save ends at 1000 with a beat in phase "train": the default window again.
    train = hb(2, "train")
    stream = [stalled(t, beat=save if t < 1000 else train) for t in range(3000)]
    verdict = run(stream)
    assert verdict is not None
    assert (verdict.onset, verdict.detected_at, verdict.phase) == (1000, 1060, "train")


@pytest.mark.parametrize("phase", ["compile", "warmup"])
def test_compile_and_warmup_phases_are_stretched_by_default(phase):
    stream = [stalled(t, beat=hb(1, phase)) for t in range(1000)]
    assert run(stream) is None


def test_custom_phase_timeouts_and_unknown_phases():
    cfg = DetectorConfig(phase_timeouts={"eval": 120.0})
    assert run([stalled(t, beat=hb(1, "eval")) for t in range(500)], cfg).detected_at == 120
    assert run([stalled(t, beat=hb(1, "whatever")) for t in range(500)], cfg).detected_at == 60
    # A phase timeout shorter than the window never shortens it.
    cfg = DetectorConfig(phase_timeouts={"eval": 10.0})
    assert run([stalled(t, beat=hb(1, "eval")) for t in range(500)], cfg).detected_at == 60
    assert cfg.window_for(None) == 60.0 and cfg.progress_timeout_for("eval") == 600.0


# -- silent hang ----------------------------------------------------------------------------


def idle(t: float, beat: Heartbeat | None = None) -> Sample:
    return tick(t, 0.0, 0.5, beat=beat)


def test_silent_hang_needs_heartbeats_first():
    assert run(idle(t) for t in range(5000)) is None


def test_silent_hang_fires_after_the_progress_timeout_with_an_idle_tree():
    beat = hb(1)
    stream = [idle(t, beat=beat if t >= 100 else None) for t in range(5000)]
    verdict = run(stream)
    assert verdict is not None and verdict.kind is VerdictKind.SILENT_HANG
    assert (verdict.onset, verdict.detected_at, verdict.window) == (100, 700, 600.0)
    assert "no heartbeat progress for 600 s" in verdict.reason


def test_time_the_supervisor_did_not_run_is_not_silence():
    """The whole job (supervisor too) stopped for 20 min and continued: told so by the runner
    (its sleep overran), the detector does not read the stop as 20 min without progress on
    the first tick after it; a real hang after it still fires."""
    beat = hb(1)
    detector = Detector(DetectorConfig(), 0.0)
    assert not [v for t in range(0, 300) if (v := detector.observe(idle(t, beat=beat)))]
    detector.unobserved(1500 - 300)  # the runner reports its sleep's overrun
    assert detector.observe(idle(1500, beat=beat)) is None
    verdicts = [v for t in range(1501, 3000) if (v := detector.observe(idle(t, beat=hb(2))))]
    assert verdicts and verdicts[0].kind is VerdictKind.SILENT_HANG and verdicts[0].detected_at == 1501 + 600


def test_a_slow_tick_is_observed_time():
    """A probe that hangs inside the tick (no sleep overran, nothing reported): the silence counts."""
    beat = hb(1)
    verdict = run(idle(t, beat=beat) for t in range(0, 5000, 40))
    assert verdict is not None and verdict.kind is VerdictKind.SILENT_HANG and verdict.detected_at == 600


IDLE_ONLY = DetectorConfig(idle_only=True)


def test_a_busy_hang_fires_at_the_progress_timeout_whatever_the_cpu_does():
    beat = hb(1)
    for util, cpu in ((0.0, 100.0), (100.0, 60.0), (None, 400.0)):
        stream = [tick(t, util, cpu, beat=beat if t >= 100 else None) for t in range(5000)]
        verdict = run(stream)
        assert verdict is not None and verdict.kind is VerdictKind.SILENT_HANG
        assert (verdict.onset, verdict.detected_at) == (100, 700)
        assert verdict.evidence["rule"] == "progress" and verdict.evidence["tree"] == "busy"
        assert "tree busy" in verdict.reason


def test_a_busy_hang_waits_for_the_first_beat_and_a_long_phase():
    assert run(tick(t, 0.0, 100.0) for t in range(5000)) is None  # warm-up: never before a beat
    verdict = run(tick(t, 0.0, 100.0, beat=hb(1, "compile")) for t in range(5000))
    assert verdict is not None and verdict.detected_at == 1800


def test_a_busy_hang_while_a_stall_is_pending_is_named_a_stall():
    # Silent since 0; the GPU signature starts at 580: at 600 the progress rule fires
    # and names the wedge after the signature it sees, so cuda graphs go off.
    beat = hb(1)
    stream = [tick(t, 100.0, 100.0 if t < 580 else 1.0, beat=beat) for t in range(5000)]
    verdict = run(stream)
    assert verdict is not None and verdict.kind is VerdictKind.STALL and verdict.detected_at == 600
    assert verdict.evidence["stall_suspected_s"] == 20.0


def test_idle_only_keeps_the_stricter_rule():
    beat = hb(1)
    assert run((tick(t, 0.0, 60.0, beat=beat) for t in range(5000)), IDLE_ONLY) is None  # CPU busy: working
    assert run((tick(t, 100.0, 60.0, beat=beat) for t in range(5000)), IDLE_ONLY) is None  # GPU busy: working
    verdict = run((idle(t, beat=beat) for t in range(5000)), IDLE_ONLY)
    assert verdict is not None and verdict.detected_at == 600 and verdict.evidence["rule"] == "idle"


def test_silent_hang_idle_must_have_lasted_a_window_with_idle_only():
    beat = hb(1)
    # Busy until 590, then idle: the timeout has passed at 600 but the tree is idle
    # only since 591, so the verdict waits for 651.
    stream = [tick(t, 0.0, 60.0 if t < 591 else 0.5, beat=beat) for t in range(5000)]
    verdict = run(stream, IDLE_ONLY)
    assert verdict is not None and verdict.detected_at == 651
    assert run(stream).detected_at == 600  # the default rule does not wait for idleness


def test_building_reports_the_most_advanced_rule():
    cfg = DetectorConfig(stall_window=10.0, progress_timeout=100.0)
    detector = Detector(cfg, 0.0)
    detector.observe(healthy(0.0, beat=hb(1)))
    assert detector.building(0.0) == ("progress", 0.0, 0.0)
    for t in range(1, 6):
        detector.observe(stalled(float(t)))
    assert detector.building(5.0) == ("stall", 1.0, 0.4)
    detector.observe(healthy(6.0, beat=hb(2)))  # progress clears both
    assert detector.building(6.0) == ("progress", 6.0, 0.0)


def test_silent_hang_works_without_a_gpu_probe_and_can_be_switched_off():
    beat = hb(1)
    verdict = run(tick(t, None, 0.5, beat=beat) for t in range(2000))
    assert verdict is not None and verdict.kind is VerdictKind.SILENT_HANG and verdict.detected_at == 600
    off = DetectorConfig(progress_timeout=None)
    assert run((idle(t, beat=beat) for t in range(5000)), off) is None


def test_silent_hang_timeout_is_stretched_by_the_phase():
    beat = hb(1, "checkpoint")
    verdict = run(idle(t, beat=beat) for t in range(5000))
    # Silent for 1800 s at t=1800, idle since t=0 (the beat's own tick already looks
    # idle) and in this phase idleness must last min(window, timeout) = 1800 s too.
    assert verdict is not None and verdict.detected_at == 1800


# -- device ownership -----------------------------------------------------------------------


def test_a_busy_device_held_only_outside_the_tree_is_not_a_stall():
    assert run(tick(t, 100.0, 0.5, pids=(STRANGER,)) for t in range(3000)) is None


def test_a_device_with_unknown_holders_is_the_trees_and_uses_whole_tree_cpu():
    busy_worker = {WORKER: 50.0}
    for pids in (None, ()):
        # The trainer is idle but a data-loader worker is busy: whole-tree CPU says working.
        assert run(tick(t, 100.0, 0.5, pids=pids, others=busy_worker) for t in range(300)) is None
        verdict = run(tick(t, 100.0, 0.5, pids=pids, others={WORKER: 0.5}) for t in range(300))
        assert verdict is not None and verdict.detected_at == 60


def test_only_the_holders_cpu_counts_when_holders_are_known():
    # A busy data-loader worker that does not hold the GPU does not hide a wedge.
    verdict = run(tick(t, 100.0, 0.5, others={WORKER: 100.0}) for t in range(300))
    assert verdict is not None and verdict.evidence["holders_cpu_pct"] == 0.5
    # Trainer and engine both hold the GPU: their CPU is summed.
    stream = [tick(t, 100.0, 6.0, pids=(TRAINER, ENGINE), others={ENGINE: 6.0}) for t in range(300)]
    assert run(stream) is None


def test_one_wedged_rank_stalls_while_its_peers_spin_in_a_collective():
    def at(t):
        devices = (
            DeviceSample(0, 99.0, 1000.0, (TRAINER,)),  # wedged: host asleep
            DeviceSample(1, 100.0, 1000.0, (ENGINE,)),  # peer spinning in a collective
        )
        return Sample(t, t, {TRAINER: 0.5, ENGINE: 100.0}, devices)

    verdict = run(at(t) for t in range(300))
    assert verdict is not None and verdict.detected_at == 60
    assert verdict.evidence["stalled_devices"] == [0]
    assert verdict.evidence["busy_devices"] == [0, 1]
    assert "gpu_util=99% cpu=0.5%" in verdict.reason


def test_a_stranger_on_a_gpu_does_not_make_the_tree_look_busy_for_silent_hang():
    beat = hb(1)
    verdict = run(tick(t, 100.0, 0.5, pids=(STRANGER,), beat=beat) for t in range(2000))
    assert verdict is not None and verdict.kind is VerdictKind.SILENT_HANG


# -- lifecycle and exits --------------------------------------------------------------------


def test_fired_is_terminal():
    detector = Detector(DetectorConfig(), 0.0)
    verdicts = [detector.observe(stalled(t)) for t in range(61)]
    assert verdicts[-1] is not None and detector.state is DetectorState.FIRED
    later = [detector.observe(s) for s in [stalled(61), healthy(62, beat=hb(9)), idle(63)] + [stalled(t) for t in range(64, 400)]]
    assert later == [None] * len(later)
    assert detector.state is DetectorState.FIRED


@pytest.mark.parametrize(
    ("code", "kind", "exit_code", "signal_name", "reason"),
    [
        (0, VerdictKind.DONE, 0, None, "trainer exited 0"),
        (1, VerdictKind.CRASH, 1, None, "trainer exited with code 1"),
        (-9, VerdictKind.CRASH, 137, "SIGKILL", "trainer killed by SIGKILL"),
        (-15, VerdictKind.CRASH, 143, "SIGTERM", "trainer killed by SIGTERM"),
    ],
)
def test_classify_exit(code, kind, exit_code, signal_name, reason):
    verdict = classify_exit(code, 12.5)
    assert (verdict.kind, verdict.exit_code, verdict.signal, verdict.reason) == (kind, exit_code, signal_name, reason)
    assert verdict.detected_at == verdict.onset == 12.5
    assert not verdict.kind.is_hang
    assert verdict.to_json()["kind"] == kind.value


def test_hang_kinds():
    assert VerdictKind.STALL.is_hang and VerdictKind.SILENT_HANG.is_hang


# -- configuration --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"interval": 0}, "--interval"),
        ({"interval": math.nan}, "--interval"),
        ({"stall_window": -1}, "--stall-window"),
        ({"progress_timeout": 0}, "--progress-timeout"),
        ({"gpu_busy_pct": 0}, "--gpu-busy"),
        ({"gpu_busy_pct": 101}, "--gpu-busy"),
        ({"gpu_busy_pct": math.nan}, "--gpu-busy"),
        ({"cpu_idle_pct": -1}, "--cpu-idle"),
        ({"cpu_idle_pct": math.nan}, "--cpu-idle"),
        ({"noise_samples": -1}, "--noise-samples"),
        ({"noise_samples": 1.5}, "--noise-samples"),
        ({"gap_tolerance": 0}, "--gap-tolerance"),
        ({"phase_timeouts": {"checkpoint": 0}}, "--phase-timeout checkpoint=0"),
        ({"phase_timeouts": {"eval": math.nan}}, "--phase-timeout eval=nan"),
    ],
)
def test_config_errors_name_the_option_and_the_value(kwargs, named):
    with pytest.raises(ConfigError) as info:
        DetectorConfig(**kwargs)
    message = str(info.value)
    assert named in message
    value = next(iter(kwargs.values()))
    if not isinstance(value, dict):
        assert repr(value) in message


def test_config_round_trips_through_json():
    cfg = DetectorConfig(interval=0.5, stall_window=30.0, phase_timeouts={"eval": 90.0})
    again = DetectorConfig.from_json(cfg.to_json())
    assert again.to_json() == cfg.to_json()
    assert DetectorConfig.from_json({"stall_window": 5.0, "unknown": 1}).stall_window == 5.0


# -- properties -----------------------------------------------------------------------------
#
# Streams at interval 1 s with the default config (window 60 s, noise 2, gap tolerance 10 s).
# A healthy stream is a list of segments, each starting with a heartbeat (so silence never
# reaches the 600 s progress timeout: segments are at most 300 s):
#   busy   - GPU busy, holders' CPU busy; single stall-looking readings (CPU dip) at most
#            one in four samples, never in the last three of the segment;
#   beats  - GPU busy, holders' CPU idle (a save, a collective), but a beat every k < 60 s;
#   idle   - GPU idle, CPU anything (data-loader stall, host-side work);
#   gap    - the GPU probe returns nothing for up to 20 s.

PROPERTY_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

segment = st.one_of(
    st.tuples(st.just("busy"), st.integers(4, 300), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("beats"), st.integers(1, 300), st.integers(1, 59)),
    st.tuples(st.just("idle"), st.integers(1, 300), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("gap"), st.integers(1, 20), st.integers(0, 1)),
)


class StreamBuilder:
    def __init__(self) -> None:
        self.samples: list[Sample] = []
        self.seq = 0
        self.beat: Heartbeat | None = None

    @property
    def t(self) -> float:
        return float(len(self.samples))

    def new_beat(self) -> Heartbeat:
        self.seq += 1
        self.beat = hb(self.seq)
        return self.beat

    def add(self, kind: str, length: int, arg: int) -> None:
        rng = random.Random(arg)
        self.new_beat()
        for i in range(length):
            t = self.t
            if kind == "busy":
                dip = i % 4 == 1 and i < length - 3 and rng.random() < 0.5
                cpu = rng.uniform(0.0, 10.0) if dip else rng.uniform(11.0, 300.0)
                self.samples.append(tick(t, rng.uniform(90.0, 100.0), cpu, beat=self.beat))
            elif kind == "beats":
                if i and i % arg == 0:
                    self.new_beat()
                self.samples.append(tick(t, 100.0, 1.0, beat=self.beat))
            elif kind == "idle":
                self.samples.append(tick(t, rng.uniform(0.0, 89.0), rng.uniform(0.0, 300.0), beat=self.beat))
            else:
                self.samples.append(tick(t, None, 0.5 if arg else 80.0, beat=self.beat))


@PROPERTY_SETTINGS
@given(st.lists(segment, min_size=1, max_size=12))
def test_property_healthy_streams_never_get_a_verdict(segments):
    builder = StreamBuilder()
    for seg in segments:
        builder.add(*seg)
    assert run(builder.samples) is None


# A wedge at T: from T on every tick reads GPU >= busy, holders' CPU <= idle, no new beat.
# Before T the stream is healthy and ends with three clean busy ticks (more than
# noise_samples contrary in a row), so no stall is pending when the wedge starts.
#
# What holds, exactly: the verdict is a stall with onset T, at the first confirming
# sample at or after T + window. A clean wedge therefore fires at T + window (here
# within [T + window, T + window + interval] for any grid). Inside the wedge we may inject
# runs of at most noise_samples contrary readings and GPU gaps shorter than the gap
# tolerance (never at T); each such run of length L that covers T + window delays the
# verdict by at most L intervals, never resets the onset.

wedge_noise = st.lists(
    st.tuples(st.integers(1, 80), st.sampled_from(["gpu_dip", "cpu_spike", "missing"]), st.integers(1, 9)),
    max_size=6,
)


def run_length(kind: str, length: int) -> int:
    """Contrary readings are cut to noise_samples; gaps stay (<= 9 ticks: under the 10 s tolerance)."""
    return length if kind == "missing" else min(length, DetectorConfig().noise_samples)


def wedge_tail(builder: StreamBuilder, noise: list[tuple[int, str, int]], layout: str, seed: int) -> set[float]:
    """Append a wedge; return the times of the confirming samples."""
    rng = random.Random(seed)
    start = builder.t
    # Runs are kept apart by at least one confirming sample: two tolerated runs back
    # to back would be one run too long (that resets, as tested above).
    marks: dict[int, str] = {}
    free_from = 1
    for offset, kind, length in sorted(noise):
        first = max(offset, free_from)
        for j in range(run_length(kind, length)):
            marks[first + j] = kind
        free_from = first + run_length(kind, length) + 1
    confirming: set[float] = set()
    for i in range(200):
        t = start + i
        util, holder_cpu = rng.uniform(96.0, 100.0), rng.uniform(0.0, 5.0)
        kind = marks.get(i)
        if kind == "gpu_dip":
            util = 40.0
        elif kind == "cpu_spike":
            holder_cpu = 150.0
        if layout == "unknown-holders":
            devices = (DeviceSample(0, util, 1000.0, None),) if kind != "missing" else None
            others = {WORKER: rng.uniform(0.0, 4.0)}
        elif layout == "two-ranks":
            # GPU 1 belongs to a peer spinning in a collective (CPU busy): only GPU 0 is wedged.
            devices = (
                (DeviceSample(0, util, 1000.0, (TRAINER,)), DeviceSample(1, 100.0, 1000.0, (ENGINE,)))
                if kind != "missing" else None
            )
            others = {ENGINE: 100.0}
        else:
            devices = (DeviceSample(0, util, 1000.0, (TRAINER,)),) if kind != "missing" else None
            others = {WORKER: rng.uniform(0.0, 100.0)}
        builder.samples.append(
            Sample(t, t, {TRAINER: holder_cpu, **others}, devices, builder.beat)
        )
        if kind is None:
            confirming.add(t)
    return confirming


@PROPERTY_SETTINGS
@given(
    st.lists(segment, max_size=6),
    wedge_noise,
    st.sampled_from(["holders-known", "unknown-holders", "two-ranks"]),
    st.integers(0, 2**32 - 1),
)
def test_property_an_injected_wedge_is_detected_one_window_after_it_starts(prefix, noise, layout, seed):
    cfg = DetectorConfig()
    builder = StreamBuilder()
    for seg in prefix:
        builder.add(*seg)
    builder.add("busy", 3, 0)  # i % 4 == 1 with i < 0: no dip possible in these three
    wedge_at = builder.t
    confirming = wedge_tail(builder, noise, layout, seed)
    verdict = run(builder.samples, cfg)
    assert verdict is not None and verdict.kind is VerdictKind.STALL
    assert verdict.onset == wedge_at
    expected = min(c for c in confirming if c >= wedge_at + cfg.stall_window)
    assert verdict.detected_at == expected
    longest_run = max((run_length(kind, length) for _, kind, length in noise), default=0)
    assert wedge_at + cfg.stall_window <= verdict.detected_at <= wedge_at + cfg.stall_window + longest_run


@PROPERTY_SETTINGS
@given(
    st.sampled_from([0.25, 0.5, 1.0, 2.0]),
    st.integers(1, 40),
    st.integers(0, 50),
)
def test_property_clean_wedge_latency_is_the_window_rounded_up_to_the_grid(interval, window_ticks_x4, wedge_tick):
    window = window_ticks_x4 / 4 + 0.5  # often not a multiple of the interval
    cfg = DetectorConfig(interval=interval, stall_window=window)
    n = wedge_tick + int(window / interval) + 5
    stream = [healthy(t) if i < wedge_tick else stalled(t) for i, t in enumerate(ticks(n, interval))]
    verdict = run(stream, cfg)
    wedge_at = wedge_tick * interval
    assert verdict is not None and verdict.onset == wedge_at
    assert wedge_at + window <= verdict.detected_at < wedge_at + window + interval


def test_sample_time_jitter_does_not_delay_the_verdict_by_a_tick():
    # Real ticks land a few ms off the schedule; a window of exactly 60 ticks must
    # not slip to 61 because the 60th sample came 3 ms early.
    def jitter(k: int) -> float:
        return 0.003 if k == 0 else (-0.002 if k % 2 == 0 else 0.001)

    stream = [stalled(k + jitter(k)) for k in range(200)]
    verdict = run(stream)
    assert verdict is not None and round(verdict.detected_at) == 60


def test_the_progress_timeout_runs_from_when_the_beat_was_written():
    """A beat written 0.96 s before the tick that reads it (interval 1 s): the timeout runs from the
    beat, so the verdict comes a tick sooner; a beat whose clock says it is older than one interval,
    or from the future (a clock step), gets no such credit."""
    config = DetectorConfig(interval=1.0, stall_window=60.0, progress_timeout=5.0, engine_step_timeout=None)

    def fired_at(beat_ts: float) -> float:
        detector = Detector(config, start=0.0)
        beat = Heartbeat(pid=TRAINER, seq=1, ts=beat_ts, step=1, phase="train")
        for i in range(40):
            t = float(i)
            s = Sample(t=t, wall=t, cpu_pct={TRAINER: 50.0}, gpu=None, heartbeat=beat if t >= 10 else None)
            verdict = detector.observe(s)
            if verdict is not None:
                return verdict.detected_at
        raise AssertionError("no verdict")

    assert fired_at(9.04) == 14.0
    assert fired_at(10.0) == 15.0
    assert fired_at(5.0) == 15.0, "older than one interval: read late or stale, no credit"
    assert fired_at(10.5) == 15.0, "from the future: a clock step, no credit"


def test_nvml_host_pids_in_a_container_are_unknown_holders_so_a_wedge_still_stalls(monkeypatch):
    """NVML names holders by host pid: in a container without the host PID namespace they are
    not ours to see. Taken as they were, the wedged device read as held only by strangers and
    never stalled; as unknown holders it is the tree's, judged by the whole tree's CPU."""
    import os
    import sys
    import types

    from hangwatch.supervisor.watch.probes import NvmlProbe

    class NVMLError(Exception):
        pass

    invisible = 4_000_000  # above any pid_max: no process of ours has it
    listed = {"pids": [invisible]}
    fake = types.SimpleNamespace(
        NVMLError=NVMLError, nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=100),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=8 << 30),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [types.SimpleNamespace(pid=p) for p in listed["pids"]],
        nvmlDeviceGetGraphicsRunningProcesses=lambda h: [],
        nvmlDeviceGetPowerUsage=lambda h: 300_000, NVML_CLOCK_SM=1, nvmlDeviceGetClockInfo=lambda h, kind: 1980)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    probe = NvmlProbe()
    devices = probe.sample()
    assert devices is not None and devices[0].pids is None, "host pids we cannot see are unknown holders"
    config = DetectorConfig(stall_window=5.0, engine_step_timeout=None)
    stream = [Sample(t=float(t), wall=float(t), cpu_pct={TRAINER: 0.5}, gpu=probe.sample(), heartbeat=None)
              for t in range(10)]
    verdict = run(stream, config)
    assert verdict is not None and verdict.kind is VerdictKind.STALL and verdict.detected_at == 5.0
    listed["pids"] = [os.getpid()]  # on the host (or with its PID namespace): kept as named
    assert probe.sample()[0].pids == (os.getpid(),)
