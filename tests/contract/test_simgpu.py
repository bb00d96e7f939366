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
