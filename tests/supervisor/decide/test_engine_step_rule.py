"""The engine step rule: the rollout engine's worker beats per engine step; a worker that
has stepped before, has a request in flight and then makes no step for the timeout is wedged,
whatever the CPU and the GPU do. Pure: samples and time in, verdicts out."""

from __future__ import annotations

import dataclasses
import os

import pytest

from hangwatch.contract.capture import TreeProcess
from hangwatch.contract.errors import ConfigError
from hangwatch.contract.heartbeat import Heartbeat, beat, engine_beacon_file, read_engine_beacons
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.contract.verdict import VerdictKind
from hangwatch.supervisor.decide.attempt import RecoverySituation, recovery_level
from hangwatch.supervisor.decide.detector import Detector, DetectorConfig

pytestmark = pytest.mark.timeout(60)

TRAINER, WORKER, STANDBY = 100, 200, 300
CONFIG = DetectorConfig(interval=0.5, stall_window=60.0, progress_timeout=600.0, engine_step_timeout=4.0)


def engine(seq: int, steps: int, phase: str = "generate", pid: int = WORKER) -> Heartbeat:
    return Heartbeat(pid=pid, seq=seq, ts=0.0, step=steps, phase=phase)


def sample(t: float, eng: Heartbeat | tuple[Heartbeat, ...] | None, *, worker_cpu: float = 0.0,
           worker_alive: bool = True, util: float = 30.0) -> Sample:
    cpu = {TRAINER: 2.0, **({WORKER: worker_cpu} if worker_alive else {}), STANDBY: 0.0}
    trainer_beat = Heartbeat(pid=TRAINER, seq=1, ts=0.0, step=16, phase="generate")
    engines = eng if isinstance(eng, tuple) else (eng,) if eng is not None else ()
    return Sample(t=t, wall=t, cpu_pct=cpu, gpu=(DeviceSample(0, util, 1000.0, (TRAINER, WORKER)),),
                  heartbeat=trainer_beat, engine=engines)


def first_verdict(samples, config: DetectorConfig = CONFIG):
    detector = Detector(config, start=0.0)
    for s in samples:
        verdict = detector.observe(s)
        if verdict is not None:
            return verdict
    return None


def stuck_after(t_last_step: float, *, until: float = 20.0, **kw):
    """Steps every tick up to ``t_last_step``, then the same in-flight beat forever."""
    out, seq, steps, t = [], 0, 10, 0.0
    while t <= until:
        if t <= t_last_step:
            seq, steps = seq + 1, steps + 5
        out.append(sample(t, engine(seq, steps), **kw))
        t += 0.5
    return out


def test_a_worker_that_stops_stepping_mid_request_is_a_stall_within_timeout_plus_one_interval():
    verdict = first_verdict(stuck_after(5.0))
    assert verdict is not None and verdict.kind is VerdictKind.STALL
    assert 9.0 - 0.01 <= verdict.detected_at <= 9.5 + 0.01
    assert verdict.onset == 5.0 and verdict.window == 4.0
    assert verdict.evidence["rule"] == "engine_step" and verdict.evidence["engine_pid"] == WORKER
    assert "made no step" in verdict.reason


def test_it_fires_whatever_the_cpu_does():
    """A busy-polling engine (vLLM's engine core spins on its queue) is as stuck as a sleeping one."""
    verdict = first_verdict(stuck_after(5.0, worker_cpu=100.0, util=100.0))
    assert verdict is not None and verdict.evidence["rule"] == "engine_step"


def test_a_steadily_stepping_engine_never_fires():
    assert first_verdict(stuck_after(1000.0, until=60.0)) is None


def test_an_idle_engine_between_requests_never_fires():
    """Training between rollouts: the worker's last beat says idle, for as long as it likes."""
    samples = [sample(t * 0.5, engine(3, 40, phase="idle")) for t in range(120)]
    assert first_verdict(samples) is None


def test_never_before_the_workers_first_step():
    """Warm-up: a fresh worker's first step may include lazy initialisation; the other rules cover it."""
    samples = [sample(t * 0.5, engine(1, 0)) for t in range(60)]
    assert first_verdict(samples) is None


def test_a_dead_workers_last_beat_is_stale_not_stuck():
    """After an engine-level kill the file still says 'in flight' from the dead worker."""
    samples = [sample(t * 0.5, engine(1, 50), worker_alive=False) for t in range(60)]
    assert first_verdict(samples) is None


def test_zero_turns_it_off_and_bad_values_are_refused():
    assert first_verdict(stuck_after(5.0), dataclasses.replace(CONFIG, engine_step_timeout=None)) is None
    with pytest.raises(ConfigError, match="engine-step-timeout"):
        DetectorConfig(engine_step_timeout=-1.0)


def test_the_early_evidence_round_sees_it_building():
    detector = Detector(CONFIG, start=0.0)
    for s in stuck_after(5.0, until=7.0):
        assert detector.observe(s) is None
    rule, onset, fraction = detector.building(7.0)
    assert rule == "engine_step" and onset == 5.0 and fraction == pytest.approx(0.5)


def test_the_sample_keeps_the_engine_beat_through_json():
    s = sample(1.0, engine(7, 70))
    assert Sample.from_json(s.to_json()) == s
    plain = dataclasses.replace(s, engine=())
    assert "engine" not in plain.to_json() and Sample.from_json(plain.to_json()) == plain


def test_engine_level_recovery_kills_the_stuck_worker_and_spares_the_standby():
    tree = [TreeProcess(pid, 0.0, 1, pgid, pgid, "python", tuple(cmd.split())) for pid, pgid, cmd in (
        (TRAINER, TRAINER, "python train.py"),
        (WORKER, WORKER, "python -P -u -m hangwatch.generator.worker"),
        (STANDBY, STANDBY, "python -P -u -m hangwatch.generator.worker"))]
    kw = dict(mode="auto", phase="generate", tree=tree, trainer_pgid=TRAINER, last_engine_restart=None, now=1.0,
              retry_window=600.0)
    stuck = {"rule": "engine_step", "engine_beats": 2, "engine_pid": WORKER, "engine_silent_s": 30.0}
    assert recovery_level(RecoverySituation(VerdictKind.STALL, evidence=stuck, **kw)).engine_pgids == {WORKER}
    assert recovery_level(RecoverySituation(VerdictKind.STALL, **kw)).engine_pgids == {WORKER, STANDBY}, "no beacon: every engine group"


def test_a_stuck_worker_already_gone_is_not_a_licence_to_kill_the_others():
    """The generator's own timeout killed the stuck worker and promoted the standby before the
    supervisor decided: level 1 with nothing to kill, never every engine group."""
    tree = [TreeProcess(pid, 0.0, 1, pgid, pgid, "python", tuple(cmd.split())) for pid, pgid, cmd in (
        (TRAINER, TRAINER, "python train.py"), (STANDBY, STANDBY, "python -P -u -m hangwatch.generator.worker"))]
    gone = {"rule": "engine_step", "engine_beats": 1, "engine_pid": WORKER, "engine_silent_s": 30.0}
    level = recovery_level(RecoverySituation(VerdictKind.STALL, mode="auto", phase="generate", tree=tree, trainer_pgid=TRAINER,
                           last_engine_restart=None, now=1.0, retry_window=600.0, evidence=gone, window=30.0))
    assert level.level == 1 and level.engine_pgids == frozenset() and "gone already" in level.reason


def test_a_stall_elsewhere_while_the_engine_steps_is_a_job_restart():
    """Several ranks on one node: rank 3's own kernel is wedged while rank 5's engine is still
    generating (and rank 5's beat, saying generate, was the last). Its healthy worker must not
    be killed for rank 3's wedge."""
    tree = [TreeProcess(pid, 0.0, 1, pgid, pgid, "python", tuple(cmd.split())) for pid, pgid, cmd in (
        (TRAINER, TRAINER, "torchrun train.py"), (WORKER, WORKER, "python -P -u -m hangwatch.generator.worker"))]
    kw = dict(mode="auto", phase="generate", tree=tree, trainer_pgid=TRAINER, last_engine_restart=None, now=1.0,
              retry_window=600.0, window=60.0)
    stepping = {"engine_beats": 2, "engine_pid": WORKER, "engine_silent_s": 0.4}
    level = recovery_level(RecoverySituation(VerdictKind.STALL, evidence=stepping, **kw))
    assert level.level == 2 and "still stepping" in level.reason
    idle = {"engine_beats": 2}
    assert "no rollout engine had a request in flight" in recovery_level(RecoverySituation(VerdictKind.STALL, evidence=idle, **kw)).reason
    # The stall rule first (engine step timeout longer than the window) on an engine silent as long: level 1.
    silent = {"engine_beats": 2, "engine_pid": WORKER, "engine_silent_s": 58.0}
    assert recovery_level(RecoverySituation(VerdictKind.STALL, evidence=silent, **kw)).engine_pgids == {WORKER}
    # The progress rule first (its window is its 600 s timeout) with the stall it suspected: measured
    # against that stall, a wedged engine silent as long is still level 1.
    suspected = {"rule": "progress", "stall_suspected_s": 39.0, "engine_beats": 2, "engine_pid": WORKER,
                 "engine_silent_s": 40.0}
    assert recovery_level(RecoverySituation(VerdictKind.STALL, evidence=suspected, **{**kw, "window": 600.0})).engine_pgids == {WORKER}
    # The stuck worker's file already removed, the next one not beating yet: engines did beat in this
    # attempt, so no sample without beats may widen the kill to every engine group.
    assert recovery_level(RecoverySituation(VerdictKind.STALL, evidence={}, engines_beat=True, **kw)).level == 2


def test_an_in_process_engine_that_stops_stepping_is_a_job_restart():
    """TRL's colocate engine beats from the trainer's own pid: nothing to restart alone."""
    tree = [TreeProcess(TRAINER, 0.0, 1, TRAINER, TRAINER, "python", ("python", "train_grpo.py"))]
    level = recovery_level(RecoverySituation(VerdictKind.STALL, mode="auto", phase="generate", tree=tree, trainer_pgid=TRAINER,
                           last_engine_restart=None, now=1.0, retry_window=600.0,
                           evidence={"rule": "engine_step", "engine_beats": 1, "engine_pid": TRAINER}))
    assert level.level == 2 and "no isolated engine worker" in level.reason


def test_each_engine_is_judged_alone():
    """Two ranks' engines: rank 1's finished its batch and went idle (its trainer now waits in a
    collective), rank 0's is stuck mid-request. One shared beacon would show only rank 1's idle."""
    samples, t = [], 0.0
    for i in range(40):
        stuck = engine(min(i, 10) + 1, 10 + 5 * min(i, 10))  # no step after t=5
        other = engine(100 + i, 500 + i, phase="generate" if i < 12 else "idle", pid=STANDBY)
        samples.append(sample(t, (stuck, other)))
        t += 0.5
    verdict = first_verdict(samples)
    assert verdict is not None and verdict.evidence["engine_pid"] == WORKER and verdict.onset == 5.0


def test_engine_beacons_are_read_one_file_per_process(tmp_path):
    base = tmp_path / "engine-heartbeat.json"
    for pid, phase in ((11, "generate"), (12, "idle")):
        beat(step=3, phase=phase, path=engine_beacon_file(base, pid))
    (tmp_path / "engine-heartbeat-x.json").write_text("{}")  # not a pid: not ours
    (tmp_path / "engine-heartbeat-13.json").write_text("not json")
    beats = read_engine_beacons(base)
    assert sorted((b.pid, b.phase) for b in beats) == [(os.getpid(), "generate"), (os.getpid(), "idle")]
    assert read_engine_beacons(tmp_path / "missing" / "engine-heartbeat.json") == ()


def test_a_dead_workers_beat_left_behind_under_a_reused_pid_is_not_the_new_processs():
    """The file of a worker that died without its cleanup stays; a new process gets its pid.
    The sampler keeps only beats written since the pid's current process started, so the
    stale "in flight" is never judged (the detector alone cannot tell: it has no start times)."""
    import subprocess
    import sys
    import time

    import psutil

    from hangwatch.supervisor.watch.sampler import own_beats

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        proc = psutil.Process(child.pid)
        now = time.time()
        stale = Heartbeat(child.pid, 40, now - 3600, 300, "generate")  # written an hour before it started
        fresh = Heartbeat(child.pid, 2, now, 1, "generate")
        elsewhere = Heartbeat(4_194_000, 7, now - 3600, 3, "generate")  # not in the tree: the detector's call
        assert own_beats((stale, elsewhere), [proc]) == (elsewhere,)
        assert own_beats((fresh,), [proc]) == (fresh,)
    finally:
        child.kill()
        child.wait(5)


def test_one_tick_that_misses_the_engines_process_does_not_restart_its_clock():
    """A failed read of the tree (the engine's pid missing from one sample) forgets nothing."""
    samples = [sample(0.0, engine(1, 1))]
    for t in range(1, 20):
        s = sample(float(t), engine(1, 1))
        if t == 2:
            s = dataclasses.replace(s, cpu_pct={p: c for p, c in s.cpu_pct.items() if p != WORKER})
        samples.append(s)
    verdict = first_verdict(samples)
    assert verdict is not None and verdict.evidence["rule"] == "engine_step" and verdict.detected_at <= 4.0 + 1.0


# -- the wedge's signature: the engine step rule, sooner ------------------------------------

def test_the_wedge_itself_gpu_pinned_and_host_asleep_is_caught_at_the_wedge_window():
    """The cuda-graph wedge shows itself: no step, the engine's GPU pinned, its holders and
    the engine idle. That is caught at a quarter of the engine step timeout, not the whole."""
    assert CONFIG.effective_engine_wedge_window == 1.0
    verdict = first_verdict(stuck_after(5.0, util=100.0))
    assert verdict is not None and verdict.kind is VerdictKind.STALL
    assert 6.0 - 0.01 <= verdict.detected_at <= 6.5 + 0.01
    assert verdict.onset == 5.0 and verdict.window == 1.0
    assert verdict.evidence["rule"] == "engine_step" and verdict.evidence["engine_pid"] == WORKER
    assert verdict.evidence["engine_wedge"] is True and "signature" in verdict.reason


@pytest.mark.parametrize("why, kw", [
    ("the engine spins on its host (a busy-poll, a grammar compile)", dict(util=100.0, worker_cpu=100.0)),
    ("the GPU is not pinned (a first-use JIT compile, a starved host)", dict(util=30.0)),
])
def test_a_stuck_engine_without_the_signature_waits_for_the_whole_timeout(why, kw):
    verdict = first_verdict(stuck_after(5.0, **kw))
    assert verdict is not None and verdict.detected_at >= 9.0 - 0.01, why
    assert "engine_wedge" not in verdict.evidence and verdict.window == 4.0


def test_an_engine_that_steps_again_starts_the_signature_window_again():
    """A pinned GPU with an idle host between two steps is a long kernel, not a wedge: a step
    resets the window, so only a silence of the whole wedge window counts."""
    samples, seq, steps = [], 1, 10
    for k in range(40):
        t = k * 0.5
        if k % 2 == 0:  # a step once a second: never a second of silence
            seq, steps = seq + 1, steps + 1
        samples.append(sample(t, engine(seq, steps), util=100.0))
    assert first_verdict(samples) is None


def test_one_noisy_reading_does_not_reset_the_signature_but_a_busy_host_does():
    quiet = stuck_after(5.0, until=20.0, util=100.0)
    noisy = [dataclasses.replace(s, cpu_pct={**s.cpu_pct, WORKER: 80.0}) if s.t == 5.5 else s for s in quiet]
    verdict = first_verdict(noisy)
    assert verdict is not None and verdict.evidence.get("engine_wedge") and verdict.detected_at <= 6.5 + 0.01
    busy = [dataclasses.replace(s, cpu_pct={**s.cpu_pct, WORKER: 80.0}) if 5.5 <= s.t <= 8.0 else s for s in quiet]
    verdict = first_verdict(busy)
    assert verdict is not None and verdict.detected_at >= 8.5 - 0.01


@pytest.mark.parametrize("window, expected", [(0.0, None), (2.0, 2.0), (10.0, 4.0), (None, 1.0)])
def test_the_wedge_window_is_set_off_or_capped_at_the_engine_step_timeout(window, expected):
    config = dataclasses.replace(CONFIG, engine_wedge_window=window)
    assert config.effective_engine_wedge_window == expected
    verdict = first_verdict(stuck_after(5.0, util=100.0), config)
    assert verdict is not None
    assert verdict.window == (expected if expected is not None else 4.0)
    assert DetectorConfig.from_json(config.to_json()).effective_engine_wedge_window == expected  # a bundle keeps it
    assert dataclasses.replace(CONFIG, engine_step_timeout=None).effective_engine_wedge_window is None


@pytest.mark.parametrize("bad", [-1.0, float("nan"), True, "1"])
def test_a_bad_wedge_window_is_refused(bad):
    with pytest.raises(ConfigError, match="engine-wedge-window"):
        dataclasses.replace(CONFIG, engine_wedge_window=bad)


def test_the_early_evidence_round_starts_half_way_through_the_wedge_window():
    """At the wedge window the capture needs its final round only: the first is taken while
    the signature builds (the supervisor starts it from half the window on), counting the
    next tick, at which the verdict may already come."""
    detector = Detector(CONFIG, start=0.0)
    for s in stuck_after(5.0, until=5.0, util=100.0):
        assert detector.observe(s) is None
    rule, onset, fraction = detector.building(5.0)
    assert rule == "engine_step" and onset == 5.0 and fraction == pytest.approx(0.5)
