"""Capture never runs code that the trainer's user controls.

Root supervises a trainer that dropped to nobody (``setpriv``) and runs from a
venv whose ``.pth`` file executes on every interpreter start. Reading the
trainer's package versions used to run that interpreter as root; now they come
from the venv's metadata files. The venv is made with ``--copies`` (as conda
envs and many images are), so /proc/PID/exe is the venv's own interpreter.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from diag_helpers import _tree_process, make_request
from hangwatch.diagnostics.capture import CaptureConfig, capture_incident

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to drop the trainer's privileges")


@pytest.fixture
def nobody_venv():
    base = Path(tempfile.mkdtemp(prefix="hw-privdrop-"))
    try:
        os.chmod(base, 0o755)
        subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", "--copies", str(base / "venv")],
                       check=True, timeout=60)
        markers = base / "markers"
        markers.mkdir()
        os.chmod(markers, 0o777)
        site = next((base / "venv" / "lib").glob("python3*/site-packages"))
        (site / "evil.pth").write_text(
            f"import os; open(os.path.join({str(markers)!r}, 'ran-as-uid-%d' % os.getuid()), 'w').close()\n")
        dist = site / "torch-9.9.9.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 9.9.9\n\nbody\n")
        # A linked metadata folder must not be followed.
        (site / "vllm-1.0.dist-info").symlink_to(dist)
        yield base / "venv", markers
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.timeout(60)
def test_versions_of_a_dropped_privilege_trainer_never_run_its_pth_as_root(nobody_venv, tmp_path):
    venv, markers = nobody_venv
    ready = markers / "ready"
    proc = subprocess.Popen(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(venv / "bin" / "python"), "-c",
         f"import time; open({str(ready)!r}, 'w').close(); time.sleep(60)"],
        start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "trainer did not start"
            time.sleep(0.02)
        # The .pth does run in the trainer itself, as nobody: the trap is armed.
        assert (markers / "ran-as-uid-65534").exists()
        request = make_request(tmp_path / "run", None)
        request = dataclasses.replace(request, tree=[_tree_process(psutil.Process(proc.pid))])

        path = capture_incident(request, config=CaptureConfig(rounds=1, round_interval=0.0, pyspy_timeout=5.0))

        assert not (markers / "ran-as-uid-0").exists(), "the trainer's .pth ran as root"
        versions = json.loads((path / "versions.json").read_text())
        assert versions["trainer"]["torch"] == "9.9.9"
        assert versions["trainer"]["vllm"] is None  # the symlinked metadata was not followed
        assert versions["trainer"]["source"] == "metadata"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
