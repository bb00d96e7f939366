"""Faults during evidence capture: py-spy hanging / missing / refused, the disk failing
under the bundle, a SIGINT to the supervisor mid-capture. Recovery must happen anyway."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(90)


def _wedge_then_recover(hw, faults, **overrides):
    faults.make_checkpoints(hw.ckpt)
    trainer = hw.trainer("--beats", "5", "--wedge", "--wedge-unless-graphs-off", "--escape")
    return hw.fast_args(**{"--checkpoint-dir": str(hw.ckpt), **overrides}) + ["--", *trainer]


def _recovered(hw, faults, records):
    assert [r["kind"] for r in records if r["event"] == "incident"] == ["stall"]
    starts = [r for r in records if r["event"] == "attempt_started"]
    assert len(starts) == 2 and starts[1]["resume_from"].endswith("checkpoint-3")
    assert next(r for r in records if r["event"] == "kill")["confirmed"] is True
    assert records[-1]["outcome"] == "success" and records[-1]["exit_code"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("pyspy, problem", [
    ("hang", "timeout"),
    ("missing", "missing"),
    ("denied", "ptrace_denied"),
])
def test_pyspy_failure_is_recorded_and_recovery_goes_on(hw, faults, monkeypatch, pyspy, problem):
    """Case 7: py-spy hangs (a target in D state), is not installed, or ptrace is refused."""
    path = {"hang": faults.PYSPY_HANG, "missing": hw.tmp / "no-such-py-spy", "denied": faults.PYSPY_DENIED}[pyspy]
    monkeypatch.setenv("HANGWATCH_PYSPY", str(path))
    since = time.time() - 1
    capture_timeout = 4.0
    args = _wedge_then_recover(hw, faults, **{"--capture-timeout": str(capture_timeout)})
    before = faults.snapshot(hw.ckpt)
    result = hw.run(args)
    assert result.returncode == 0, result.stderr
    records = faults.check_journal(hw.run_dir)
    _recovered(hw, faults, records)
    capture = next(r for r in records if r["event"] == "capture")
    assert capture["ok"] is True and capture["evidence_path"], "the bundle is written without stacks"
    assert capture["duration_s"] <= capture_timeout + 0.5, "within --capture-timeout"
    manifest = json.loads((Path(capture["evidence_path"]) / "manifest.json").read_text())
    assert problem in manifest["failed"]["stacks"], manifest["failed"]
    assert "stacks" not in manifest.get("captured", [])
    assert not faults.strays("sleep 3600", since), "a hung py-spy outlived its deadline"
    assert faults.snapshot(hw.ckpt) == before


@pytest.mark.slow
def test_incidents_dir_unwritable_capture_fails_recovery_goes_on(hw, faults):
    """Case 8 (simulated): RUN_DIR/incidents is a regular file, so no bundle can be created
    (as root, chmod would not stop us). Both the capture and its samples-only fallback fail."""
    hw.run_dir.mkdir(mode=0o700)  # whatever the umask: a group-writable run dir is refused
    (hw.run_dir / "incidents").write_text("not a directory\n")
    args = _wedge_then_recover(hw, faults)
    before = faults.snapshot(hw.ckpt)
    result = hw.run(args)
    assert result.returncode == 0, result.stderr
    records = faults.check_journal(hw.run_dir)
    _recovered(hw, faults, records)
    capture = next(r for r in records if r["event"] == "capture")
    assert capture["ok"] is False and capture["evidence_path"] is None
    assert "fallback failed too" in capture["error"], capture["error"]
    assert (hw.run_dir / "incidents").read_text() == "not a directory\n"
    assert faults.snapshot(hw.ckpt) == before


@pytest.mark.slow
def test_disk_full_while_writing_the_bundle(hw_faulty, faults):
    """Case 8 (simulated in-process): every bundle file write fails with ENOSPC after 512
    bytes. No half bundle is left; the journal's capture event says what failed."""
    hw = hw_faulty
    args = _wedge_then_recover(hw, faults)
    before = faults.snapshot(hw.ckpt)
    proc = hw.start_faulty("enospc", args)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    records = faults.check_journal(hw.run_dir)
    _recovered(hw, faults, records)
    capture = next(r for r in records if r["event"] == "capture")
    assert capture["ok"] is False and capture["evidence_path"] is None
    assert "No space left on device" in capture["error"], capture["error"]
    incidents = hw.run_dir / "incidents"
    assert not incidents.exists() or not any(incidents.iterdir()), (
        f"no half-written bundle left behind: {sorted(str(p.relative_to(incidents)) for p in incidents.rglob('*'))}")
    assert faults.snapshot(hw.ckpt) == before


@pytest.mark.slow
def test_sigint_during_capture_abandons_it_and_kills_the_tree(hw, faults, monkeypatch):
    """Case 13: the supervisor gets SIGINT while py-spy hangs in the capture."""
    monkeypatch.setenv("HANGWATCH_PYSPY", str(faults.PYSPY_HANG))
    faults.make_checkpoints(hw.ckpt)
    before = faults.snapshot(hw.ckpt)
    since = time.time() - 1
    proc = hw.start(hw.fast_args(**{"--checkpoint-dir": str(hw.ckpt), "--capture-timeout": "30"})
                    + ["--", *hw.trainer("--beats", "3", "--wedge", "--escape")])

    def in_capture():
        events = [r["event"] for r in hw.journal()]
        return "incident" in events and "capture" not in events

    faults.wait_for(in_capture, timeout=30, what="incident journalled, capture under way")
    time.sleep(0.5)
    assert [r["event"] for r in hw.journal()].count("capture") == 0
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    elapsed = time.monotonic() - t0
    assert elapsed < 5, f"capture was not abandoned promptly ({elapsed:.1f} s)"
    records = faults.check_journal(hw.run_dir)
    capture = next(r for r in records if r["event"] == "capture")
    assert capture["abandoned"] is True and capture["ok"] is False
    assert "interrupted by a signal" in capture["error"]
    kill = next(r for r in records if r["event"] == "kill")
    assert kill["confirmed"] is True
    assert hw.reported_pids()["escaped"][0] in kill["escalated"]
    ended = next(r for r in records if r["event"] == "attempt_ended")
    finished = records[-1]
    assert finished["outcome"] == "interrupted" and "SIGINT" in finished["reason"]
    # Documented: on SIGINT/SIGTERM the exit is 128+N when the trainer did not exit on its
    # own. Here the trainer was killed by the tree kill's SIGTERM: the supervisor reports
    # that status (128 + 15), as for a forwarded signal (tests/e2e/test_run.py).
    assert ended["exit_code"] == -signal.SIGTERM
    # The hung tree's status is our own kill's, not the trainer's answer to the stop: 128 + SIGINT.
    assert proc.returncode == finished["exit_code"] == 128 + signal.SIGINT, err
    assert len([r for r in records if r["event"] == "attempt_started"]) == 1
    assert not faults.strays("sleep 3600", since), "the abandoned py-spy outlived the supervisor"
    assert faults.snapshot(hw.ckpt) == before
