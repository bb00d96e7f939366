"""/metrics and the textfile show the trainer's phase redacted as alerts do, and the textfile is the job owner's."""

from __future__ import annotations

import stat

import pytest

from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.supervisor.decide.attempt import AttemptState
from hangwatch.supervisor.decide.detector import DetectorConfig
from hangwatch.supervisor.operate.livestatus import LiveStatus
from hangwatch.supervisor.operate.observe import ObservedJournal, Observers, Tick

from fakes import FakeClock

SECRETS = ["https://alice:hunter2-password@hub.example.com/x", "hf_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z"]


@pytest.mark.parametrize("phase", [f"upload {SECRETS[0]}", f"push token={SECRETS[1]}", f"push {SECRETS[1]}"])
def test_a_phase_naming_a_secret_is_redacted_in_metrics_and_the_textfile_is_0600(tmp_path, phase):
    pytest.importorskip("prometheus_client")
    from prometheus_client import generate_latest

    from hangwatch.supervisor.operate.metrics import MetricsExporter

    clock = FakeClock()
    wall = lambda: 1_700_000_000.0 + clock()  # noqa: E731
    status = LiveStatus(tmp_path / "status.json", detector=DetectorConfig(stall_window=60.0), gpu_probe="nvml",
                        heartbeat_warning=300.0, clock=clock, wall=wall, warn=lambda e, m: None)
    obs = Observers([status])
    ObservedJournal(tmp_path / "journal.jsonl", "run1", obs)
    textfile = tmp_path / "hangwatch.prom"
    metrics = MetricsExporter(status, textfile=textfile, clock=clock, wall=wall)
    obs.add(metrics)
    obs.phase(1, AttemptState.WATCHING)
    hb = Heartbeat(pid=1, seq=1, ts=wall() - 1.0, step=1, phase=phase)
    sample = Sample(t=clock(), wall=wall(), cpu_pct={11: 0.0}, gpu=(DeviceSample(0, 100.0, 1.0, (11,)),),
                    heartbeat=hb, tree_size=1)
    obs.tick(Tick(1, sample, clock() - 1.0, 60.0))
    metrics.close()
    scraped = generate_latest(metrics.registry).decode()
    text = textfile.read_text()
    for secret in ("hunter2-password", SECRETS[1]):
        assert secret not in scraped and secret not in text  # before: the phase went out in clear
    assert "hangwatch_heartbeat_phase" in scraped
    assert stat.S_IMODE(textfile.stat().st_mode) == 0o600
