"""Names and files another user chose, reaching what root runs or prints (docs/security.md).

Each test is a finding of a red-team probe run as root: a checkpoint folder the
trainer's user named, a venv part of which another user owns. The rule held:
what they chose is shown, never obeyed, and never runs as root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="files of another user need root")
NOBODY = 65534
HOSTILE = "checkpoint-5\x1b]0;PWNED\x07\x1b[2J\nFAKE [error    ] run_finished: all fine"


@pytest.mark.timeout(60)
def test_a_checkpoint_name_never_puts_terminal_escapes_or_lines_on_the_console(tmp_path):
    """The trainer's user names its checkpoint folders; the supervisor's own log lines
    ("resuming from ...") quote that name. With --quiet (the documented answer to an
    untrusted trainer's output) nothing it chose may reach the terminal raw."""
    ck = tmp_path / "ck"
    (ck / HOSTILE).mkdir(parents=True)
    (ck / HOSTILE / "trainer_state.json").write_text("{}")
    result = subprocess.run(
        [sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(tmp_path / "run"), "--quiet",
         "--gpu-probe", "none", "--checkpoint-dir", str(ck), "--resume-arg", "--resume={checkpoint}",
         "--max-restarts", "1", "--backoff", "0.01", "--", "sh", "-c", "exit 3"],
        capture_output=True, text=True, timeout=50, stdin=subprocess.DEVNULL)
    assert result.returncode == 71, result.stderr
    assert "resuming from" in result.stderr
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr, "raw escape sequence on the console"
    assert not any(line.startswith("FAKE") for line in result.stderr.splitlines()), "a forged console line"
    assert "\\x1b]0;PWNED\\x07" in result.stderr


@needs_root
@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["site-packages owned by another user", "site-packages writable by anyone",
                                 "a .pth of another user in root's site-packages"])
def test_doctor_never_runs_what_another_user_can_put_in_a_root_venv(how):
    """A venv root created, whose interpreter and folders are root's, but whose site-packages
    (or one .pth in it) another user can change, e.g. to let them pip install: starting
    the interpreter runs their .pth. It used to run as root (only the program's own path
    was checked)."""
    from hangwatch.cli.doctor import interpreter_versions

    base = Path(tempfile.mkdtemp(prefix="hw-doctor-"))  # not under pytest's 0700 folders: that user must reach it
    try:
        base.chmod(0o755)
        out = base / "out"
        out.mkdir(mode=0o777)
        out.chmod(0o777)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base / "venv")], check=True, timeout=30)
        site = next((base / "venv" / "lib").glob("python3.*/site-packages"))
        pth = site / "zz_probe.pth"
        pth.write_text(f"import os; open({str(out / 'ran')!r}, 'a').write('uid %d\\n' % os.getuid())\n")
        if how == "site-packages owned by another user":
            os.chown(site, NOBODY, NOBODY)
        elif how == "site-packages writable by anyone":
            site.chmod(0o777)
        else:
            os.chown(pth, NOBODY, NOBODY)
        try:
            interpreter_versions(str(base / "venv" / "bin" / "python"))
        except RuntimeError as exc:
            assert "not root" in str(exc)  # the base interpreter may be out of that user's reach
        ran = (out / "ran").read_text() if (out / "ran").exists() else ""
        assert "uid 0" not in ran, "root ran a .pth another user could change"
    finally:
        shutil.rmtree(base)
