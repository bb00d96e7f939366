"""The engine step rule's wedge window, checked against situations its first version got wrong:
the wedge's signature must be on the stuck engine's own GPU, not on any GPU of the tree.
Pure: hand-built samples in, verdicts out."""

from __future__ import annotations

import pytest

from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.supervisor.decide.detector import Detector, DetectorConfig

pytestmark = pytest.mark.timeout(60)

CONFIG = DetectorConfig()  # interval 1 s, engine step timeout 30 s, wedge window 7.5 s
# Rank r's trainer; rank 0's engine worker (it beats) and the worker's EngineCore child (it holds the GPU).
TRAINERS = (2000, 2100, 2200, 2300)
WORKER, CORE = 1001, 1002
LAST_STEP = 10.0


def _engine_beat(t: float) -> Heartbeat:
    steps = int(min(t, LAST_STEP))
    return Heartbeat(WORKER, steps + 1, t, steps + 5, "generate")


def _peers_asleep_in_a_collective(cpu: dict[int, float]) -> tuple[DeviceSample, ...]:
    """Ranks 1-3 are done with their rollouts and wait in a collective for rank 0: their GPUs
    read busy (the collective's kernel spins on the device) while their hosts sleep."""
    for rank in (1, 2, 3):
        cpu[TRAINERS[rank]] = 1.0
    return tuple(DeviceSample(rank, 99.0, 1000.0, (TRAINERS[rank],)) for rank in (1, 2, 3))


def _first_verdict(build, until: float = 60.0):
    detector = Detector(CONFIG, start=0.0)
    t = 0.0
    while t <= until:
        verdict = detector.observe(build(t))
        if verdict is not None:
            return verdict
        t += CONFIG.interval
    return None


def test_another_ranks_gpu_pinned_with_idle_holders_is_not_this_workers_wedge():
    """Rank 0's worker waits on a healthy 20 s step of its EngineCore (a kernel's first-use JIT:
    the core compiles, its GPU idle, the worker asleep on the core's output queue) while ranks 1-3
    sit in a collective. The wedge's signature is on their GPUs, not on the worker's: no verdict
    (before the fix: an engine-level kill of the healthy worker at 8 s)."""
    def build(t: float) -> Sample:
        jit = LAST_STEP <= t < LAST_STEP + 20.0
        cpu = {TRAINERS[0]: 1.0, WORKER: 0.5 if jit else 30.0, CORE: 100.0}
        devices = (DeviceSample(0, 2.0 if jit else 95.0, 1000.0, (TRAINERS[0], CORE)),) + _peers_asleep_in_a_collective(cpu)
        # the JIT over, the engine steps again
        beat = _engine_beat(t) if t < LAST_STEP + 20.0 else Heartbeat(WORKER, int(t) + 100, t, int(t) + 100, "generate")
        return Sample(t, t, cpu, devices, Heartbeat(TRAINERS[0], 1, 0.0, 3, "generate"), len(cpu), (beat,))

    assert _first_verdict(build, until=LAST_STEP + 35.0) is None  # the JIT over, and 15 s of steps after it


def test_an_engine_that_holds_its_gpu_is_judged_on_that_gpu_alone():
    """TRL's colocate engine steps in the trainer, which holds its GPU itself. Starved of CPU (its
    host reads idle, its GPU not pinned) while the other ranks wait in a collective: a slow step
    for a host-side reason, the plain timeout's to judge, not the wedge window's."""
    engine = TRAINERS[0]

    def build(t: float) -> Sample:
        stalled = t >= LAST_STEP
        cpu = {engine: 2.0 if stalled else 100.0}
        devices = (DeviceSample(0, 3.0 if stalled else 95.0, 1000.0, (engine,)),) + _peers_asleep_in_a_collective(cpu)
        steps = int(min(t, LAST_STEP))
        beat = Heartbeat(engine, steps + 1, t, steps + 5, "generate")
        return Sample(t, t, cpu, devices, Heartbeat(engine, 1, 0.0, 3, "generate"), len(cpu), (beat,))

    verdict = _first_verdict(build)
    assert verdict is not None and verdict.detected_at >= LAST_STEP + CONFIG.engine_step_timeout - 0.01
    assert "engine_wedge" not in verdict.evidence


@pytest.mark.parametrize("topology", ["worker holds it", "core holds it", "core on a GPU of its own",
                                      "core holds it, peers asleep", "no holders named"])
def test_the_wedge_on_the_engines_own_gpu_is_still_caught_at_the_wedge_window(topology):
    """The worker's EngineCore wedged (GPU pinned, core and worker asleep), the trainer waiting."""
    holder = WORKER if topology == "worker holds it" else CORE

    def build(t: float) -> Sample:
        wedged = t >= LAST_STEP
        cpu = {TRAINERS[0]: 1.0, WORKER: 0.5 if wedged else 30.0}
        if holder == CORE:
            cpu[CORE] = 0.5 if wedged else 100.0
        util = 99.0 if wedged else 95.0
        pids = None if topology == "no holders named" else (TRAINERS[0], holder)
        if topology == "core on a GPU of its own":  # the trainer's own GPU idle while it waits
            devices: tuple[DeviceSample, ...] = (DeviceSample(0, 1.0, 1000.0, (TRAINERS[0],)),
                                                 DeviceSample(1, util, 1000.0, (CORE,)))
        else:
            devices = (DeviceSample(0, util, 1000.0, pids),)
        if topology == "core holds it, peers asleep":  # the peers wait on rank 0 in a collective
            devices += _peers_asleep_in_a_collective(cpu)
        return Sample(t, t, cpu, devices, Heartbeat(TRAINERS[0], 1, 0.0, 3, "generate"), len(cpu),
                      (_engine_beat(t),))

    verdict = _first_verdict(build)
    assert verdict is not None and verdict.evidence.get("engine_wedge") is True, topology
    assert verdict.detected_at <= LAST_STEP + CONFIG.effective_engine_wedge_window + CONFIG.interval + 0.01
    own = 1 if topology == "core on a GPU of its own" else 0
    assert verdict.evidence["engine_wedge_device"] == own and f"its GPU {own} at 99%" in verdict.reason


def _worker_wedged(t: float) -> Sample:
    wedged = t >= LAST_STEP
    cpu = {TRAINERS[0]: 1.0, WORKER: 0.5 if wedged else 30.0}
    devices = (DeviceSample(0, 99.0 if wedged else 95.0, 1000.0, (TRAINERS[0], WORKER)),)
    return Sample(t, t, cpu, devices, Heartbeat(TRAINERS[0], 1, 0.0, 3, "generate"), len(cpu), (_engine_beat(t),))


def test_replay_of_a_bundle_recorded_before_the_wedge_window_keeps_that_runs_rules():
    """A bundle's thresholds are the detector's settings (``DetectorConfig.to_json``), which name the wedge
    window since it exists (null for the default). One without it was recorded by a supervisor without it:
    replayed under its recorded settings with today's default, it fired at 8 s where the run fired at 30 s."""
    from hangwatch.cli.commands.replay import _whatif

    samples = [_worker_wedged(float(t)) for t in range(45)]
    recorded = {k: v for k, v in CONFIG.to_json().items() if k != "engine_wedge_window"}
    verdict, used = _whatif(samples, recorded)
    assert verdict is not None and "engine_wedge" not in verdict.evidence
    assert verdict.detected_at == LAST_STEP + CONFIG.engine_step_timeout and used["engine_wedge_window"] == 0.0
    verdict, used = _whatif(samples, CONFIG.to_json())  # recorded since: null, the default window
    assert verdict is not None and verdict.evidence.get("engine_wedge") is True and used["engine_wedge_window"] is None


def test_a_wedge_window_with_the_engine_step_rule_off_is_refused_not_ignored():
    from hangwatch.contract.errors import ConfigError
    from hangwatch.supervisor.config import SETTINGS, build

    values = {k: v[1] for k, v in SETTINGS.items()}
    values.update(engine_wedge_window=5.0, engine_step_timeout=0.0)
    with pytest.raises(ConfigError, match="--engine-wedge-window 5 needs the engine step rule"):
        build(values, ["true"], explicit={"engine_wedge_window", "engine_step_timeout"})
    values.update(engine_wedge_window=0.0)  # both off: nothing contradicts
    assert build(values, ["true"], explicit={"engine_wedge_window"}).detector.effective_engine_wedge_window is None
    values.update(engine_wedge_window=-1.0, engine_step_timeout=30.0)
    with pytest.raises(ConfigError, match=r"0 turns its shortcut off"):
        build(values, ["true"], explicit={"engine_wedge_window"})


@pytest.mark.parametrize("interval, window", [(1.0, 1.0), (1.0, 0.5), (10.0, None)])
def test_one_reading_of_the_signature_is_not_enough_whatever_the_window(interval, window):
    """A healthy step of two intervals, and one noisy reading in it (the worker's CPU reading
    0 %, its GPU 99 %). With a wedge window of an interval or less, or an interval longer than the
    window, 'held for the window less one interval' asked for no second reading: that one fired."""
    config = DetectorConfig(interval=interval, engine_wedge_window=window)
    noisy_at = 6 * interval

    def healthy(t: float) -> Sample:
        slow = noisy_at - interval <= t <= noisy_at  # one step spans these readings
        steps = int(round((noisy_at - interval if slow else t) / interval))
        noisy = t == noisy_at
        cpu = {TRAINERS[0]: 1.0, WORKER: 0.5 if noisy else 40.0}
        devices = (DeviceSample(0, 99.0 if noisy else 95.0, 1000.0, (TRAINERS[0], WORKER)),)
        beat = Heartbeat(WORKER, steps + 1, t, steps + 5, "generate")
        return Sample(t, t, cpu, devices, Heartbeat(TRAINERS[0], 1, 0.0, 3, "generate"), len(cpu), (beat,))

    detector = Detector(config, start=0.0)
    assert [v for v in (detector.observe(healthy(k * interval)) for k in range(20)) if v is not None] == []
    # and the wedge itself is still caught by its signature, two readings into it
    detector = Detector(config, start=0.0)
    samples = (_worker_wedged(k * interval) for k in range(60))
    verdict = next(v for v in map(detector.observe, samples) if v is not None)
    assert verdict.evidence.get("engine_wedge") is True
