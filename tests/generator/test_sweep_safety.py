"""Sweepers decide an owner is dead only when certain, and never follow a symlink."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hangwatch.generator.protocol import private_runtime_dir, sweep_runtime_dirs
from hangwatch.generator.staging import sweep_orphans

HOLD = "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_SH); print('held', flush=True); time.sleep(60)"


def _dead_pid() -> int:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    return dead.pid


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["staging", "runtime"])
def test_a_live_owner_in_another_pid_namespace_keeps_its_file(tmp_path, kind):
    """The pid in the name is dead *here*; the owner (holding the lock) is alive elsewhere."""
    pid = _dead_pid()
    if kind == "staging":
        path = tmp_path / f".hangwatch-weights-{pid}-abc.safetensors"
        path.write_bytes(b"x")
    else:
        path = tmp_path / f"hangwatch-gen-{pid}-abc"
        path.mkdir(mode=0o700)
        (path / "control.sock").write_text("")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        removed = sweep_orphans(str(tmp_path)) if kind == "staging" else sweep_runtime_dirs(base=str(tmp_path))
        assert removed == [] and path.exists()
    finally:
        holder.kill()
        holder.wait(10)
    removed = sweep_orphans(str(tmp_path)) if kind == "staging" else sweep_runtime_dirs(base=str(tmp_path))
    assert removed == [path.name], "once the lock is free and the pid dead, it is swept"


def test_runtime_sweep_never_follows_a_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "control.sock").write_text("someone else's socket")
    base = tmp_path / "tmp"
    base.mkdir()
    (base / f"hangwatch-gen-{_dead_pid()}-evil").symlink_to(victim)
    (base / f".hangwatch-weights-{_dead_pid()}-evil.safetensors").symlink_to(victim / "control.sock")
    assert sweep_runtime_dirs(base=str(base)) == []
    assert sweep_orphans(str(base)) == []
    assert (victim / "control.sock").read_text() == "someone else's socket"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_sweep_leaves_other_users_files(tmp_path):
    path = tmp_path / f".hangwatch-weights-{_dead_pid()}-x.safetensors"
    path.write_bytes(b"x")
    os.chown(path, 65534, 65534)
    assert sweep_orphans(str(tmp_path)) == [] and path.exists()


def test_our_own_runtime_dir_is_locked_while_we_live(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    path = private_runtime_dir()
    # Even named after a dead pid, a directory whose owner holds the lock stays.
    fake = tmp_path / f"hangwatch-gen-{_dead_pid()}-moved"
    os.rename(path, fake)
    assert sweep_runtime_dirs(base=str(tmp_path)) == [] and fake.exists()
