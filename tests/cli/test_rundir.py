"""A run directory only its owner controls (docs/security.md).

Each test is an attack on a pre-created or tampered run directory, by a local
user who is not the one running hangwatch (often root).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest
from waiting import wait_for

from hangwatch.contract.exitcodes import EXIT_USAGE

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def _victim(tmp_path):
    victim = tmp_path / "root-only.txt"
    victim.write_text("untouched\n")
    victim.chmod(0o600)
    return victim


@pytest.mark.timeout(60)
def test_group_or_world_writable_run_dir_is_refused(hw):
    hw.run_dir.mkdir()
    hw.run_dir.chmod(0o777)
    result = hw.run(hw.fast_args() + ["--", *hw.trainer("--beats", "1")])
    assert result.returncode == EXIT_USAGE
    assert "hangwatch: error:" in result.stderr and "writable by group or others" in result.stderr
    assert "chmod go-w" in result.stderr  # how to fix it
    assert list(hw.run_dir.iterdir()) == [], "nothing is written into a directory others control"


@needs_root
@pytest.mark.timeout(60)
def test_run_dir_owned_by_another_user_is_refused(hw):
    hw.run_dir.mkdir(mode=0o700)
    os.chown(hw.run_dir, 65534, 65534)
    result = hw.run(hw.fast_args() + ["--", *hw.trainer("--beats", "1")])
    assert result.returncode == EXIT_USAGE
    assert "owned by uid 65534" in result.stderr and "new --run-dir" in result.stderr
    assert list(hw.run_dir.iterdir()) == []


@pytest.mark.timeout(60)
def test_symlinked_journal_is_never_followed(hw, tmp_path):
    victim = _victim(tmp_path)
    hw.run_dir.mkdir(mode=0o700)
    (hw.run_dir / "journal.jsonl").symlink_to(victim)
    result = hw.run(hw.fast_args() + ["--", *hw.trainer("--beats", "1")])
    assert result.returncode != 0
    assert victim.read_text() == "untouched\n", "the journal was appended through a planted symlink"
    assert not hw.alive()


@pytest.mark.timeout(60)
def test_symlinked_trainer_log_is_never_followed(hw, tmp_path):
    victim = _victim(tmp_path)
    attempt = hw.run_dir / "attempts" / "attempt-001"
    attempt.mkdir(parents=True)
    hw.run_dir.chmod(0o700)
    (attempt / "stdout.log").symlink_to(victim)
    result = hw.run(hw.fast_args() + ["--", *hw.trainer("--beats", "1")])
    assert result.returncode == EXIT_USAGE
    assert "cannot open the attempt's log files" in result.stderr
    assert victim.read_text() == "untouched\n"


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_everything_written_is_private_whatever_the_umask(hw):
    # A pre-created 0755 dir of ours is accepted, then tightened.
    hw.run_dir.mkdir(mode=0o755)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hangwatch.cli", *hw.fast_args(), "--", *hw.trainer("--beats", "1")],
        cwd=hw.tmp, preexec_fn=lambda: os.umask(0), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    hw.procs.append(proc)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    paths = [hw.run_dir, *hw.run_dir.rglob("*")]
    assert any(p.name == "stdout.log" for p in paths) and any(p.name == "journal.jsonl" for p in paths)
    loose = {str(p.relative_to(hw.tmp)): oct(stat.S_IMODE(p.lstat().st_mode)) for p in paths
             if stat.S_IMODE(p.lstat().st_mode) & 0o077}
    assert not loose, f"readable or writable by others: {loose}"


@pytest.mark.timeout(60)
def test_resume_refuses_settings_others_could_have_written(hw):
    hw.run_dir.mkdir(mode=0o700)
    (hw.run_dir / "journal.jsonl").write_text(json.dumps({"event": "run_started", "run_id": "x", "pid": 1}) + "\n")
    (hw.run_dir / "journal.jsonl").chmod(0o600)
    settings = hw.run_dir / "settings.json"
    settings.write_text(json.dumps({"values": {}, "command": ["touch", str(hw.tmp / "pwned")]}))
    settings.chmod(0o666)
    result = hw.run(["run", "--resume", str(hw.run_dir)])
    assert result.returncode == EXIT_USAGE
    assert "settings.json" in result.stderr and "writable by group or others" in result.stderr
    assert not (hw.tmp / "pwned").exists()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_guardian_kills_what_the_supervisor_said_not_what_tree_json_says(hw):
    """A forged tree.json naming an unrelated process must not make the guardian kill it."""
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        proc = hw.start(hw.fast_args(**{"--stall-window": "60"})
                        + ["--", *hw.trainer("--beats", "1000", "--step-time", "0.1")])
        tree_json = hw.run_dir / "tree.json"
        wait_for(lambda: json.loads(tree_json.read_text())["members"])
        create_time = __import__("psutil").Process(bystander.pid).create_time()
        tree_json.write_text(json.dumps({"members": [{"pid": bystander.pid, "create_time": create_time}]}))
        proc.kill()
        proc.wait(10)
        assert not hw.alive(timeout=10)
        time.sleep(0.5)  # the guardian has acted by now (it killed the trainer's tree)
        assert bystander.poll() is None, "the guardian killed a process named only in tree.json"
    finally:
        bystander.send_signal(signal.SIGKILL)
        bystander.wait(10)
