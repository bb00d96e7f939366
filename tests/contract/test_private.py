"""What root runs or imports on the trainer's user's behalf: a ``PYTHONPATH`` entry or a tool on
``PATH`` another user could change is refused, one of the user's own legitimate setup is accepted."""

from __future__ import annotations

import os
import stat
from pathlib import Path
import subprocess
import sys
import time

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


NOBODY = 65534


def _planting_run(tmp_path, wrapper: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Root supervises a trainer dropped to nobody, with nobody's folder on PYTHONPATH (so the
    trainer finds its modules). The trainer puts a ``json.py`` there and crashes; the run's
    alert helper (``--notify-command``) then starts as root."""
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(dir="/tmp"))  # root's, 0700: opened to let nobody reach its own folder
    os.chmod(top, 0o755)
    theirs = top / "proj"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    module = f"import os\nopen({str(theirs / 'PWNED')!r}, 'w').write(str(os.getuid()))\n"
    plant = f"open({str(theirs / 'json.py')!r}, 'w').write({module!r}); raise SystemExit(1)"
    cmd = ["run", "--run-dir", str(tmp_path / "run"), "--gpu-probe", "none", "--max-restarts", "0", "--interval", "0.2",
           "--notify-command", "cat >/dev/null", "--",
           shutil.which("setpriv"), f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3", "-c", plant]
    done = subprocess.run([sys.executable, "-c", wrapper, *cmd], env=dict(os.environ, PYTHONPATH=str(theirs)), capture_output=True, text=True,
                          timeout=120, cwd="/")
    return done, theirs / "PWNED"


@pytest.mark.timeout(60)
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop a trainer to another user")
def test_a_pythonpath_folder_another_user_can_write_is_refused(tmp_path):
    """PYTHONPATH is the supervisor's own import path too: with the trainer's user's folder on
    it, the module the trainer put there was imported as root by the alert helper (uid 0 written
    by a planted json.py), and would be by any lazy import in the supervisor. Refused at start."""
    done, pwned = _planting_run(tmp_path, "import sys; from hangwatch.cli.main import main; sys.exit(main(sys.argv[1:]))")
    try:
        assert done.returncode == 2, done.stderr
        assert "PYTHONPATH entry" in done.stderr and "env PYTHONPATH=" in done.stderr
        assert not pwned.exists()
        assert not (tmp_path / "run").exists()  # refused before anything was made
    finally:
        import shutil

        shutil.rmtree(pwned.parent.parent, ignore_errors=True)


@pytest.mark.timeout(60)
@pytest.mark.skipif(os.geteuid() != 0, reason="the check guards root only")
def test_a_pythonpath_of_our_own_is_accepted(tmp_path, monkeypatch):
    from hangwatch.contract.private import UnsafePathError, check_import_path

    ours = tmp_path / "lib"
    ours.mkdir(mode=0o755)
    check_import_path(f"{ours}{os.pathsep}{tmp_path / 'not-yet'}")
    os.chmod(ours, 0o775)
    with pytest.raises(UnsafePathError, match="writable by group or others"):
        check_import_path(str(ours))
    os.chmod(ours, 0o755)
    monkeypatch.chdir("/tmp")
    with pytest.raises(UnsafePathError, match="working directory"):
        check_import_path(f"{ours}{os.pathsep}")  # an empty entry is the working directory


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


@pytest.mark.timeout(60)
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
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


@pytest.mark.timeout(60)
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_the_gpu_state_never_runs_an_nvidia_smi_another_user_put_on_path(tmp_path, monkeypatch):
    from hangwatch.diagnostics.gpustate import gpu_state

    theirs = _planted(tmp_path, "nvidia-smi")
    monkeypatch.setenv("PATH", f"{os.environ.get('PATH', os.defpath)}{os.pathsep}{theirs}")
    gpu_state(nvidia_smi_timeout=10)
    assert not (tmp_path / "nvidia-smi.ran").exists()


@pytest.mark.timeout(60)
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
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
