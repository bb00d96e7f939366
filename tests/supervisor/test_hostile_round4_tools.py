"""Round 4 of hostile inputs: tools the capture runs, found on a PATH that holds another user's folder."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.timeout(60), pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")]

NOBODY = 65534


def _planted(tmp_path, *names):
    """A folder of nobody's on PATH (after the system's), holding fakes that write who ran them."""
    theirs = tmp_path / "theirs-bin"
    theirs.mkdir()
    for name in names:
        fake = theirs / name
        fake.write_text(f"#!/bin/sh\nid -u > {tmp_path / (name + '.ran')}\nexit 1\n")
        fake.chmod(0o755)
        os.chown(fake, NOBODY, NOBODY)
    os.chown(theirs, NOBODY, NOBODY)
    return theirs


def test_the_capture_never_runs_a_pyspy_another_user_put_on_path(tmp_path, monkeypatch):
    """With another user's folder anywhere on PATH (the trainer's venv bin, appended after the
    system's), root's capture ran the py-spy they put there: it wrote uid 0. hangwatch's own
    py-spy sat next to its interpreter. Now a tool another user could change is passed over."""
    from hangwatch.diagnostics import pyspy

    theirs = _planted(tmp_path, "py-spy")
    monkeypatch.setenv("PATH", f"{os.environ.get('PATH', os.defpath)}{os.pathsep}{theirs}")
    monkeypatch.delenv("HANGWATCH_PYSPY", raising=False)
    found = pyspy.find_pyspy()
    assert found is None or not found.startswith(str(theirs))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.2)
        pyspy.dump_process(found, sleeper.pid, round_no=1, timeout=20)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not (tmp_path / "py-spy.ran").exists()
    monkeypatch.setenv("HANGWATCH_PYSPY", str(theirs / "py-spy"))  # named outright: passed over too, and said
    found = pyspy.find_pyspy()
    assert found is None or not found.startswith(str(theirs))
    assert any("owned by uid 65534" in why for why in pyspy.SKIPPED)


def test_the_gpu_state_never_runs_an_nvidia_smi_another_user_put_on_path(tmp_path, monkeypatch):
    from hangwatch.diagnostics.gpustate import gpu_state

    theirs = _planted(tmp_path, "nvidia-smi")
    monkeypatch.setenv("PATH", f"{os.environ.get('PATH', os.defpath)}{os.pathsep}{theirs}")
    gpu_state(nvidia_smi_timeout=10)
    assert not (tmp_path / "nvidia-smi.ran").exists()


def test_trusted_which_takes_the_first_match_nobody_else_can_change(tmp_path, monkeypatch):
    from hangwatch.contract.private import trusted_which

    theirs = _planted(tmp_path, "tool")
    ours = tmp_path / "ours-bin"
    ours.mkdir(mode=0o755)
    (ours / "tool").write_text("#!/bin/sh\n")
    (ours / "tool").chmod(0o755)
    monkeypatch.setenv("PATH", f"{theirs}{os.pathsep}{ours}")
    skipped: list[str] = []
    assert trusted_which("tool", skipped) == str(ours / "tool")
    assert len(skipped) == 1 and "uid 65534" in skipped[0]
    (ours / "tool").chmod(0o777)
    assert trusted_which("tool") is None
