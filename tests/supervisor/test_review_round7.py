"""Review round 7: hostile-case checks that must not refuse a user's own legitimate setup."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(30)

USER = 1001  # a plain user's uid, as root plays it


@pytest.fixture
def as_plain_user(monkeypatch):
    """Be a plain user: as root, files are given to USER and geteuid says USER."""
    if os.geteuid() != 0:
        return os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: USER)
    return USER


def _give(path: Path, uid: int, mode: int) -> None:
    if os.getuid() == 0:
        os.chown(path, uid, -1)
    os.chmod(path, mode)


def test_a_plain_users_shared_group_folder_on_pythonpath_is_accepted(tmp_path, as_plain_user):
    """A cluster's project folder shared by a group (setgid, 2775) on a plain user's PYTHONPATH
    was refused ('writable by group or others'): their supervisor runs the trainer as them
    with that same PYTHONPATH, so the check closed nothing and the run never started."""
    from hangwatch.contract.private import check_import_path

    os.chmod(tmp_path, 0o755)
    project = tmp_path / "proj"
    src = project / "src"
    src.mkdir(parents=True)
    for folder in (project, src):
        _give(folder, as_plain_user, 0o2775)
    mine = tmp_path / "home"
    mine.mkdir()
    _give(mine, as_plain_user, 0o775)  # made under umask 002
    check_import_path(f"{src}{os.pathsep}{mine}{os.pathsep}relative/dir{os.pathsep}")


def test_a_plain_users_pyspy_made_under_umask_002_is_found(tmp_path, as_plain_user, monkeypatch):
    """py-spy in ~/.local/bin under umask 002 (bin 775, group of one) was passed over as one
    another user could change: the plain user's captures had no stacks at all."""
    from hangwatch.contract.private import trusted_which
    from hangwatch.diagnostics.pyspy import SKIPPED, find_pyspy

    os.chmod(tmp_path, 0o755)
    local = tmp_path / ".local"
    bin_dir = local / "bin"
    bin_dir.mkdir(parents=True)
    tool = bin_dir / "py-spy"
    tool.write_text("#!/bin/sh\n")
    for path, mode in ((local, 0o775), (bin_dir, 0o775), (tool, 0o775)):
        _give(path, as_plain_user, mode)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("HANGWATCH_PYSPY", raising=False)
    assert trusted_which("py-spy") == str(tool)
    assert find_pyspy() == str(tool) and not SKIPPED
    assert stat.S_IMODE(tool.stat().st_mode) == 0o775


@pytest.mark.parametrize("shape", ["link loop", "name too long"])
def test_a_pythonpath_entry_that_cannot_be_checked_is_a_clear_refusal(tmp_path, monkeypatch, shape):
    """A stale PYTHONPATH entry Python itself passes over (a link loop, a name past NAME_MAX)
    made root's `hangwatch run` an internal error (exit 70, traceback file): the check's
    stat raised ELOOP/ENAMETOOLONG. Now a refusal that names the entry."""
    from hangwatch.contract import private

    monkeypatch.setattr(private, "_privileged", lambda: True, raising=False)
    if shape == "link loop":
        (tmp_path / "loop").symlink_to("loop")
        entry = str(tmp_path / "loop" / "lib")
    else:
        entry = str(tmp_path / ("a" * 300))
    with pytest.raises(private.UnsafePathError, match="cannot be checked"):
        private.check_import_path(entry)


def test_the_step_rule_does_not_say_beats_went_on_when_they_stopped():
    """With --step-timeout below the progress timeout, a trainer whose beats stopped at step 9
    got 'step 9 has not advanced ... while beats went on': the reader went looking for a side
    thread that beats. The reason now gives the last beat's age."""
    from hangwatch.contract.heartbeat import Heartbeat
    from hangwatch.contract.samples import Sample
    from hangwatch.supervisor.decide.detector import Detector, DetectorConfig

    detector, hb, verdict = Detector(DetectorConfig(interval=1.0, step_timeout=20.0), start=0.0), None, None
    for i in range(60):
        if i < 10:
            hb = Heartbeat(pid=100, seq=i + 1, ts=float(i), step=i, phase="train")  # then no new beat
        verdict = detector.observe(Sample(t=float(i), wall=float(i), cpu_pct={100: 100.0}, gpu=None, heartbeat=hb))
        if verdict is not None:
            break
    assert verdict is not None and verdict.evidence["rule"] == "step"
    assert "beats went on" not in verdict.reason and "last beat 20 s ago" in verdict.reason


def test_a_relative_pythonpath_entry_is_checked_where_the_interpreter_resolved_it(tmp_path, monkeypatch):
    """The interpreter makes PYTHONPATH's relative entries absolute at its start. Checked only
    after --resume entered the run's saved directory, root's `cd /tmp; PYTHONPATH=relsrc
    hangwatch run --resume RUN` passed (RUN's cwd/relsrc is root's) and its GPU probe imported
    the pynvml.py another user put in /tmp/relsrc, as uid 0 (reproduced). Checked at the start
    too now, then again where the helpers start."""
    from hangwatch.cli.commands import run as cli
    from hangwatch.contract import private

    monkeypatch.setattr(private, "_privileged", lambda: True, raising=False)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # /tmp-like, without the sticky bit keeping this simple
    saved = tmp_path / "saved"
    saved.mkdir(mode=0o700)
    monkeypatch.chdir(shared)
    monkeypatch.setenv("PYTHONPATH", "relsrc")

    class Entered(Exception):
        pass

    def resume_settings(args):
        os.chdir(saved)  # what --resume does: the run's saved working directory
        raise Entered

    monkeypatch.setattr(cli, "run_settings", resume_settings)
    with pytest.raises(private.UnsafePathError, match="PYTHONPATH entry .*shared"):
        cli.cmd_run(None)


def test_the_pythonpath_refusal_says_to_start_hangwatch_without_it(tmp_path, monkeypatch):
    """The fix it gave ('-- env PYTHONPATH=... COMMAND') failed when followed as written: the
    PYTHONPATH left in hangwatch's own environment was refused again."""
    from hangwatch.contract import private

    monkeypatch.setattr(private, "_privileged", lambda: True, raising=False)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chmod(theirs, 0o777)
    with pytest.raises(private.UnsafePathError, match="env -u PYTHONPATH hangwatch run"):
        private.check_import_path(str(theirs))
