"""The live status (status.json, ``hangwatch status``) in each phase, with fake time;
the warnings when no hang can be detected; the metrics exporter's values."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from hangwatch.cli.run_summary import describe_exit, describe_live, render_status
from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.supervisor.decide.attempt import AttemptState
from hangwatch.supervisor.decide.detector import DetectorConfig
from hangwatch.supervisor.operate.livestatus import LiveStatus, read_status
from hangwatch.supervisor.operate.observe import ObservedJournal, Observers, Tick

from fakes import FakeClock

pytestmark = pytest.mark.timeout(30)


class Wall:
    """Wall-clock time moving with the fake clock, from now (journal records carry real time)."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.base = time.time() - clock.now

    def __call__(self) -> float:
        return self.base + self.clock.now


def _sample(clock: FakeClock, wall: Wall, *, util: float = 100.0, cpu: float = 0.0, step: int | None = None) -> Sample:
    hb = Heartbeat(pid=1, seq=step or 0, ts=wall() - 2.0, step=step, phase="train") if step is not None else None
    return Sample(t=clock(), wall=wall(), cpu_pct={11: cpu}, gpu=(DeviceSample(0, util, 40_000.0, (11,)),),
                  heartbeat=hb, tree_size=1)


@pytest.fixture
def live(tmp_path: Path):
    clock = FakeClock()
    wall = Wall(clock)
    warnings: list[tuple[str, str]] = []
    status = LiveStatus(tmp_path / "status.json", detector=DetectorConfig(stall_window=60.0), gpu_probe="nvml",
                        heartbeat_warning=300.0, clock=clock, wall=wall, warn=lambda e, m: warnings.append((e, m)))
    observers = Observers([status])
    journal = ObservedJournal(tmp_path / "journal.jsonl", "run1", observers)
    return status, observers, journal, clock, wall, warnings, tmp_path


def test_status_says_what_the_supervisor_is_doing_in_each_phase(live):
    status, obs, journal, clock, wall, _warnings, run_dir = live
    journal.append("run_started", pid=1)
    assert read_status(run_dir)["phase"] == "starting"

    obs.phase(1, AttemptState.WATCHING)
    journal.append("attempt_started", attempt=1, pid=11)
    obs.tick(Tick(1, _sample(clock, wall, util=50.0, cpu=300.0, step=7), None, 60.0))
    st = read_status(run_dir)
    assert st["phase"] == "watching" and st["heartbeat"]["step"] == 7 and st["heartbeat"]["phase"] == "train"
    assert describe_live(st, now=wall()).startswith("watching attempt 1")

    onset = clock()
    for _ in range(12):
        clock.advance(1.0)
        obs.tick(Tick(1, _sample(clock, wall), onset, 60.0))
    st = read_status(run_dir)
    assert st["phase"] == "stall_building" and st["stall"] == {"held_s": 12.0, "window_s": 60.0}
    assert describe_live(st, now=wall()).startswith("stall building: 12 of 60 s")
    assert st["gpu"] == [{"index": 0, "util_pct": 100.0, "mem_used_mib": 40000.0}]

    expected = {
        AttemptState.CAPTURING: "capturing evidence (attempt 1)",
        AttemptState.KILLING: "killing the process tree (attempt 1)",
        AttemptState.RELEASING: "waiting for GPU memory release (attempt 1)",
        AttemptState.ENDED: "attempt 1 ended; deciding what next",
    }
    for state, text in expected.items():
        obs.phase(1, state)
        st = read_status(run_dir)
        assert describe_live(st, now=wall()) == text
        assert st["stall"] is None

    journal.append("attempt_ended", attempt=1, kind="stall", exit_code=-9, signal=None, reason="r")
    journal.append("restart_scheduled", after_attempt=1, reason="r", delay_s=8.0, cudagraphs="off", enforce_eager=False)
    st = read_status(run_dir)
    assert st["phase"] == "backing_off" and st["last_exit"]["exit_code"] == -9
    record_ts = json.loads((run_dir / "journal.jsonl").read_text().splitlines()[-1])["ts"]
    assert describe_live(st, now=record_ts + 3.0) == "backing off: 5 s left of 8 s before attempt 2"

    obs.phase(2, AttemptState.WATCHING)
    assert read_status(run_dir)["phase"] == "watching" and read_status(run_dir)["backoff"] is None
    journal.append("run_finished", outcome="success", exit_code=0, reason="done")
    assert read_status(run_dir)["phase"] == "finished"


def test_ticks_rewrite_the_file_at_most_every_half_second(live):
    status, obs, journal, clock, wall, _w, run_dir = live
    obs.phase(1, AttemptState.WATCHING)
    writes = []
    real_write = status._write

    def counting_write():
        writes.append(clock())
        real_write()

    status._write = counting_write
    for _ in range(20):
        clock.advance(0.1)
        obs.tick(Tick(1, _sample(clock, wall, util=0.0, cpu=200.0, step=1), None, 60.0))
    assert len(writes) == 4, writes  # 2 s of 0.1 s ticks


def test_warnings_when_no_hang_can_be_detected(tmp_path):
    clock = FakeClock()
    wall = Wall(clock)
    warnings: list[tuple[str, str]] = []
    status = LiveStatus(tmp_path / "status.json", detector=DetectorConfig(), gpu_probe="none",
                        heartbeat_warning=120.0, clock=clock, wall=wall, warn=lambda e, m: warnings.append((e, m)))
    status.phase(1, AttemptState.WATCHING)
    assert [e for e, _ in warnings] == ["no_detection"]
    assert "NO HANG CAN BE DETECTED" in warnings[0][1] and "beat(" in warnings[0][1]
    sample = Sample(t=clock(), wall=wall(), cpu_pct={11: 0.0}, gpu=None, tree_size=1)
    status.tick(Tick(1, sample, None, 60.0))
    clock.advance(119.0)
    status.tick(Tick(1, sample, None, 60.0))
    assert len(warnings) == 1
    clock.advance(2.0)
    status.tick(Tick(1, sample, None, 60.0))
    status.tick(Tick(1, sample, None, 60.0))
    assert [e for e, _ in warnings] == ["no_detection", "no_heartbeat"], "once per attempt"
    assert "no heartbeat 121 s after launch" in warnings[1][1] and "only crashes" in warnings[1][1]
    assert [w["event"] for w in read_status(tmp_path)["warnings"]] == ["no_detection", "no_heartbeat"]


def test_a_heartbeat_in_time_means_no_warning(tmp_path):
    clock = FakeClock()
    wall = Wall(clock)
    warnings: list = []
    status = LiveStatus(tmp_path / "status.json", detector=DetectorConfig(), gpu_probe="nvml",
                        heartbeat_warning=120.0, clock=clock, wall=wall, warn=lambda e, m: warnings.append((e, m)))
    status.phase(1, AttemptState.WATCHING)
    status.tick(Tick(1, _sample(clock, wall, step=1), None, 60.0))
    clock.advance(500.0)
    status.tick(Tick(1, _sample(clock, wall, step=2), None, 60.0))
    assert warnings == []


def test_a_failing_observer_never_reaches_the_supervisor(live):
    status, obs, journal, clock, wall, _w, run_dir = live

    class Broken:
        calls = 0

        def record(self, r):
            Broken.calls += 1
            raise RuntimeError("boom")

    obs.add(Broken())
    journal.append("run_started", pid=1)
    journal.append("run_finished", outcome="success", exit_code=0, reason="ok")
    assert Broken.calls == 2 and read_status(run_dir)["phase"] == "finished"


def test_metrics_values_follow_the_run(live):
    pytest.importorskip("prometheus_client")
    from prometheus_client import generate_latest

    from hangwatch.supervisor.operate.metrics import MetricsExporter

    status, obs, journal, clock, wall, _w, run_dir = live
    textfile = run_dir / "hangwatch.prom"
    metrics = MetricsExporter(status, textfile=textfile, clock=clock, wall=wall)
    obs.add(metrics)

    def value(name: str, **labels) -> float:
        return metrics.registry.get_sample_value(name, labels or None)

    obs.phase(1, AttemptState.WATCHING)
    journal.append("attempt_started", attempt=1, pid=11)
    assert math.isnan(value("hangwatch_last_heartbeat_step"))
    obs.tick(Tick(1, _sample(clock, wall, util=100.0, step=41), clock() - 30.0, 60.0))
    assert value("hangwatch_phase", phase="stall_building") == 1 and value("hangwatch_phase", phase="watching") == 0
    assert value("hangwatch_attempt") == 1 and value("hangwatch_last_heartbeat_step") == 41
    assert value("hangwatch_last_heartbeat_age_seconds") == pytest.approx(2.0)
    assert value("hangwatch_heartbeat_phase", phase="train") == 1
    assert value("hangwatch_stall_building_seconds") == 30 and value("hangwatch_stall_window_seconds") == 60
    assert value("hangwatch_gpu_utilization_percent", gpu="0") == 100
    assert value("hangwatch_gpu_memory_used_bytes", gpu="0") == 40_000 * 1024 * 1024
    journal.append("incident", attempt=1, kind="stall", onset_wall=time.time() - 90.0, reason="r")
    journal.append("attempt_ended", attempt=1, kind="stall", exit_code=-9)
    journal.append("restart_scheduled", after_attempt=1, delay_s=0.0)
    journal.append("first_heartbeat", attempt=2, step=41)
    assert value("hangwatch_incidents_total", kind="stall") == 1 and value("hangwatch_restarts_total") == 1
    assert value("hangwatch_attempts_ended_total", kind="stall") == 1
    lost = value("hangwatch_seconds_lost_total")
    assert 90 <= lost < 100, lost  # onset 90 s before the incident (journal ts are wall-clock), recovered at once
    journal.append("run_finished", outcome="gave_up", exit_code=71, reason="budget")
    metrics.close()
    text = textfile.read_text()
    assert 'hangwatch_run_outcome{outcome="gave_up"} 1.0' in text and "hangwatch_supervisor_running 0.0" in text
    assert b"hangwatch_incidents_total" in generate_latest(metrics.registry)


def test_status_shows_the_learned_progress_timeout_where_it_is_in_force(live):
    """--progress-timeout auto: the live status's progress timeout is the learned one, not the configured 600 s."""
    status, obs, journal, clock, wall, _warnings, run_dir = live
    journal.append("run_started", pid=1)
    obs.phase(1, AttemptState.WATCHING)
    obs.tick(Tick(1, _sample(clock, wall, step=3), None, 60.0))
    assert read_status(run_dir)["progress"]["timeout_s"] == 600.0
    clock.advance(1.0)  # status.json is written at most every 0.5 s
    obs.tick(Tick(1, _sample(clock, wall, step=4), None, 60.0, 156.0))
    assert read_status(run_dir)["progress"]["timeout_s"] == 156.0
