"""The simulated GPU's state file, written where another user may have planted links."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


pytestmark = pytest.mark.timeout(60)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")
def test_the_simulated_gpu_writer_never_follows_another_users_links(tmp_path: Path) -> None:
    """``--gpu-probe file:/tmp/gpu.json`` (the documented example) puts the simulated GPU in a
    shared directory. Another user's ``gpu.json.lock`` link made a root trainer create the file
    it named, and their ``gpu.json.<pid>.tmp`` links made it overwrite a root-only file with the
    GPU's JSON (reproduced as a second user). Nothing is followed, nothing of theirs is written."""
    from hangwatch.contract import simgpu

    shared = tmp_path / "tmp"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    victim = tmp_path / "root-only"
    victim.write_text("root's own data\n")
    victim.chmod(0o600)
    target = shared / "gpu.json"
    links = [shared / "gpu.json.lock", shared / f"gpu.json.{os.getpid()}.tmp"]
    for link in links:
        link.symlink_to(tmp_path / "created-by-root" if link.name.endswith(".lock") else victim)
        os.lchown(link, 65534, 65534)  # planted by another user
    simgpu.hold(100.0, 1000.0, path=str(target))
    assert victim.read_text() == "root's own data\n"
    assert not (tmp_path / "created-by-root").exists()
    # Without anyone's links, the simulated GPU works as before.
    for link in links:
        link.unlink()
    assert simgpu.hold(100.0, 1000.0, path=str(target))
    assert json.loads(target.read_text())["devices"][0]["pids"] == [os.getpid()]


def test_a_simulated_gpu_reports_power_and_sm_clock_to_the_file_probe(tmp_path: Path) -> None:
    """The simulated GPU carries NVML's power draw and SM clock, as the real probe reads them;
    a holder that declares none leaves them unknown."""
    from hangwatch.contract import simgpu
    from hangwatch.supervisor.watch.probes import FileProbe

    target = tmp_path / "gpu.json"
    assert simgpu.hold(100.0, 2048.0, path=str(target), power_w=61.5, sm_clock_mhz=1410)
    assert simgpu.hold(50.0, 1024.0, index=1, path=str(target), pid=os.getppid())
    data = json.loads(target.read_text())
    assert data["devices"][0]["power_w"] == 61.5 and data["devices"][0]["sm_clock_mhz"] == 1410.0
    d0, d1 = FileProbe(target).sample()
    assert (d0.util_pct, d0.power_w, d0.sm_clock_mhz) == (100.0, 61.5, 1410.0)
    assert (d1.power_w, d1.sm_clock_mhz) == (None, None)


def test_samples_carry_power_and_clock_and_older_samples_without_them_still_load() -> None:
    from hangwatch.contract.samples import DeviceSample, Sample

    device = DeviceSample(0, 100.0, 4096.0, (42,), power_w=61.5, sm_clock_mhz=1410.0)
    sample = Sample(1.0, 2.0, {42: 0.5}, (device,))
    again = Sample.from_json(json.loads(json.dumps(sample.to_json())))
    assert again.gpu == (device,)
    old = {"t": 1.0, "wall": 2.0, "cpu_pct": {"42": 0.5},
           "gpu": [{"index": 0, "util_pct": 100.0, "mem_used_mib": 4096.0, "pids": [42]}]}
    loaded = Sample.from_json(old)
    assert loaded.gpu is not None and (loaded.gpu[0].power_w, loaded.gpu[0].sm_clock_mhz) == (None, None)
    assert "power_w" not in loaded.gpu[0].to_json(), "a sample without the readings is written as before"
