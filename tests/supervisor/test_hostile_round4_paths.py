"""Round 4 of hostile inputs: names with bytes that are not UTF-8."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)


def test_the_run_report_of_a_run_dir_or_command_that_is_not_utf8_is_written(tmp_path):
    """A run dir or a command argument with a byte that is not UTF-8 (Python's lone surrogate,
    journaled as \\udcff) made `hangwatch report RUN_DIR` an internal error, exit 70."""
    from hangwatch.cli.run_page import write_run_report

    run_dir = tmp_path / os.fsdecode(b"run-\xff")
    run_dir.mkdir(mode=0o700)
    records = [
        {"event": "run_started", "ts": 1000.0, "run_id": "r", "pid": 1, "run_dir": str(run_dir),
         "command": ["python", "train.py", os.fsdecode(b"data-\xff.bin")]},
        {"event": "attempt_started", "ts": 1001.0, "run_id": "r", "attempt": 1, "pid": 2},
        {"event": "attempt_ended", "ts": 1010.0, "run_id": "r", "attempt": 1, "kind": "exited", "exit_code": 0},
        {"event": "run_finished", "ts": 1011.0, "run_id": "r", "outcome": "success", "exit_code": 0},
    ]
    (run_dir / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    path, _ = write_run_report(run_dir)
    assert "\\udcff" in path.read_text()


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


def test_status_on_a_utf8_terminal_shows_a_checkpoint_name_that_is_not_utf8(tmp_path):
    """The trainer's user named a checkpoint folder with a byte that is not UTF-8
    (``checkpoint-5\\xff``); the next attempt resumed from it and the journal kept it. On a
    UTF-8 terminal (stdout strict outside the C locale) `hangwatch status` of that run was an
    internal error, exit 70. Now such a byte is shown as \\udcff, like control characters."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    resumed = os.fsdecode(str(tmp_path).encode() + b"/ckpt/checkpoint-5\xff")
    records = [
        {"event": "run_started", "ts": 1000.0, "run_id": "r", "pid": 1, "run_dir": str(run_dir), "command": ["x"]},
        {"event": "attempt_started", "ts": 1001.0, "run_id": "r", "attempt": 1, "pid": 2},
        {"event": "attempt_ended", "ts": 1002.0, "run_id": "r", "attempt": 1, "kind": "crash", "exit_code": 1},
        {"event": "attempt_started", "ts": 1003.0, "run_id": "r", "attempt": 2, "pid": 3, "resume_from": resumed},
        {"event": "attempt_ended", "ts": 1004.0, "run_id": "r", "attempt": 2, "kind": "crash", "exit_code": 1},
        {"event": "run_finished", "ts": 1005.0, "run_id": "r", "outcome": "gave_up", "exit_code": 71, "reason": "budget"},
    ]
    (run_dir / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    done = subprocess.run([sys.executable, "-m", "hangwatch.cli", "status", str(run_dir)], capture_output=True,
                          env=dict(os.environ, PYTHONIOENCODING="utf-8:strict"), timeout=60)
    assert done.returncode == 0, done.stderr
    assert b"checkpoint-5\\udcff" in done.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_a_planted_name_never_forges_a_line_in_an_error(tmp_path):
    """The refusal of a run dir holding another user's entry quoted its name with the newline
    in it: 'hangwatch: all good ...' came out as a line of its own."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    planted = run_dir / "a\nhangwatch: all good"
    planted.touch()
    os.chown(planted, 65534, 65534)
    done = subprocess.run([sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(run_dir), "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "a\\nhangwatch: all good" in done.stderr, done.stderr
