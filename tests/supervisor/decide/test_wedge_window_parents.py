"""The wedge window on a node of several GPUs, with the process parentage the sampler keeps
while engines beat: a worker whose EngineCore child holds its GPU is judged on that GPU.
Pure: hand-built samples in, verdicts out; plus the sampler keeping the parents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from hangwatch.contract.heartbeat import Heartbeat, engine_beacon_file, engine_heartbeat_path
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.supervisor.decide.detector import Detector, DetectorConfig
from hangwatch.supervisor.watch.probes import NoProbe
from hangwatch.supervisor.watch.proctree import ProcessTree
from hangwatch.supervisor.watch.sampler import Sampler

pytestmark = pytest.mark.timeout(60)

CONFIG = DetectorConfig()  # interval 1 s, engine step timeout 30 s, wedge window 7.5 s
TRAINERS = (2000, 2100, 2200, 2300)
WORKER, CORE = 2001, 2002  # rank 0's worker (it beats) and its EngineCore child (it holds GPU 0)
PARENTS = {**{t: 1 for t in TRAINERS}, WORKER: TRAINERS[0], CORE: WORKER}
LAST_STEP = 10.0


def _sample(t: float, *, wedged: bool, parents: dict[int, int]) -> Sample:
    """Rank 0's EngineCore wedged (GPU 0 pinned, host asleep) from LAST_STEP on, or stepping;
    ranks 1-3 train meanwhile (their GPUs busy, their hosts busy)."""
    stuck = wedged and t >= LAST_STEP
    cpu = {TRAINERS[0]: 1.0, WORKER: 0.5 if stuck else 30.0, CORE: 1.0 if stuck else 100.0}
    devices = [DeviceSample(0, 100.0 if stuck else 90.0, 1000.0, (CORE,))]
    for rank in (1, 2, 3):
        cpu[TRAINERS[rank]] = 100.0
        devices.append(DeviceSample(rank, 97.0, 1000.0, (TRAINERS[rank],)))
    steps = int(min(t, LAST_STEP)) if wedged else int(t)
    engine = Heartbeat(WORKER, steps + 1, t, steps + 5, "generate")
    return Sample(t, t, cpu, tuple(devices), Heartbeat(TRAINERS[0], 1, 0.0, 3, "generate"), len(cpu), (engine,),
                  parents)


def _first_verdict(parents: dict[int, int], wedged: bool = True):
    detector = Detector(CONFIG, start=0.0)
    for k in range(80):
        verdict = detector.observe(_sample(float(k), wedged=wedged, parents=parents))
        if verdict is not None:
            return verdict
    return None


def test_a_v1_workers_wedge_on_a_node_of_busy_gpus_is_caught_at_the_wedge_window():
    """With the parents the sample links the EngineCore to the worker: its GPU alone is judged."""
    verdict = _first_verdict(PARENTS)
    assert verdict is not None and verdict.evidence.get("engine_wedge") is True
    assert verdict.evidence["engine_wedge_device"] == 0 and verdict.evidence["engine_pid"] == WORKER
    assert verdict.detected_at <= LAST_STEP + CONFIG.effective_engine_wedge_window + CONFIG.interval + 0.01


def test_without_the_parents_it_waits_for_the_plain_timeout():
    """A sample recorded before parents were kept cannot say which GPU is the worker's, and the
    other GPUs do not show the wedge: the plain timeout judges it."""
    verdict = _first_verdict({})
    assert verdict is not None and "engine_wedge" not in verdict.evidence
    assert verdict.detected_at >= LAST_STEP + CONFIG.engine_step_timeout - 0.01


def test_a_healthy_worker_is_not_judged_whatever_its_parents():
    assert _first_verdict(PARENTS, wedged=False) is None


def test_parents_survive_a_bundles_json():
    sample = _sample(12.0, wedged=True, parents=PARENTS)
    assert Sample.from_json(sample.to_json()).parents == PARENTS
    bare = _sample(12.0, wedged=True, parents={})
    assert "parents" not in bare.to_json() and Sample.from_json(bare.to_json()).parents == {}


def test_the_sampler_keeps_the_trees_parents_while_engines_beat(tmp_path):
    """A real tree: this process, a child, and its grandchild (as a worker and its EngineCore)."""
    heartbeat = tmp_path / "heartbeat.json"
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
            "print(p.pid, flush=True); time.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(child.stdout.readline())
        sampler = Sampler(ProcessTree(os.getpid()), NoProbe(), heartbeat)
        assert sampler.tick().parents == {}  # no engine beats: nothing kept
        # the child's engine beat, as its beacon writes it
        Path(engine_beacon_file(engine_heartbeat_path(heartbeat), child.pid)).write_text(json.dumps(
            {"pid": child.pid, "seq": 1, "ts": time.time(), "step": 3, "phase": "generate", "info": {}}))
        sample = sampler.tick()
        assert sample.parents.get(grandchild) == child.pid and sample.parents.get(child.pid) == os.getpid()
    finally:
        for grand in psutil.Process(child.pid).children():
            grand.kill()
        child.kill()
        child.wait(timeout=10)
