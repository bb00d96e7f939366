"""Names and files another user chose, reaching what root runs or prints (docs/security.md).

Each test is a finding of a red-team probe run as root: a checkpoint folder the
trainer's user named, a venv part of which another user owns. The rule held:
what they chose is shown, never obeyed, and never runs as root.
"""

from __future__ import annotations

import json
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
         "--max-restarts", "1", "--backoff", "0.01", "--interval", "0.2", "--", "sh", "-c", "exit 3"],
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
    from hangwatch.cli.commands.doctor import interpreter_versions

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


# A root process that is a session leader without a terminal (a supervisor started by systemd)
# opens PATH; it prints the terminal it has afterwards (0: none) and what the read said.
_OPENER = r"""
import os, sys, time
from pathlib import Path
os.setsid()
from hangwatch.contract.capped import NotRegularFile, read_capped
from hangwatch.supervisor.decide.checkpoints import CheckpointSpec, scan

def tty_nr():
    return int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[4])

if sys.argv[1] == "read":
    try:
        read_capped(sys.argv[2], 1 << 20)
        said = "read"
    except NotRegularFile as exc:
        said = "refused"
    print(tty_nr(), said)
else:
    end, n = time.monotonic() + float(sys.argv[3]), 0
    while time.monotonic() < end and not tty_nr():
        scan(CheckpointSpec(Path(sys.argv[2])))
        n += 1
    print(tty_nr(), n)
"""

# Another user's process: flips checkpoint-9/trainer_state.json between a real file and a link
# to its own pseudo-terminal, as fast as it can.
_FLIPPER = r"""
import os, sys, time
ck = sys.argv[1]
tty = sys.argv[2]
open(ck + "/real.json", "w").write("{}")
end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    for target, tmp in (("real.json", "a"), (tty, "b")):
        os.symlink(target, f"{ck}/{tmp}")
        os.rename(f"{ck}/{tmp}", f"{ck}/trainer_state.json")
"""


def _opener(*args: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _OPENER, *args], capture_output=True, text=True, timeout=30,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.timeout(30)
def test_a_link_to_a_terminal_is_refused_without_opening_it():
    master, slave = os.openpty()
    try:
        tty, said = _opener("read", os.ttyname(slave))
    finally:
        os.close(master)
        os.close(slave)
    assert said == "refused"
    assert tty == "0", "opening the path made the terminal the supervisor's controlling terminal"


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_checkpoint_marker_flipped_to_a_terminal_never_becomes_the_supervisors(tmp_path):
    """The trainer's user owns the checkpoint folder. Checking the marker, then opening it,
    raced with a link flipped between a file and their pseudo-terminal: root's supervisor took
    it as its controlling terminal within a few hundred scans, and their ^C became a SIGINT
    to it (reproduced with a second user)."""
    ck = tmp_path / "ck"
    (ck / "checkpoint-9").mkdir(parents=True)
    master, slave = os.openpty()
    flipper = subprocess.Popen([sys.executable, "-c", _FLIPPER, str(ck / "checkpoint-9"), os.ttyname(slave), "20"])
    try:
        tty, scans = _opener("scan", str(ck), "4")
    finally:
        flipper.kill()
        flipper.wait()
        os.close(master)
        os.close(slave)
    assert tty == "0", f"the supervisor took the other user's terminal after {scans} scans"


@needs_root
@pytest.mark.timeout(60)
@pytest.mark.parametrize("answer", ["stderr", "versions"])
def test_doctor_never_puts_another_users_escapes_or_lines_on_the_console(tmp_path, answer):
    """doctor runs another user's interpreter as that user, and shows what it answered: its
    stderr when it fails, its package versions when it does not. Both reached root's
    terminal raw (a retitled window, a cleared screen, a forged "ok" line)."""
    base = Path(tempfile.mkdtemp(prefix="hw-doctor-"))  # not under pytest's 0700 folders: that user must reach it
    try:
        base.chmod(0o755)
        python = base / "python"
        hostile = "\x1b]0;PWNED\x07\x1b[2J fake\nok    everything fine"
        said = json.dumps({"python": [3, 11, 0], "packages": {hostile: "1.0"}})  # valid JSON: \u001b escapes
        python.write_text("#!/bin/sh\ncat <<'EOF'" + (" >&2\n" + hostile + "\nEOF\nexit 1\n" if answer == "stderr"
                                                      else "\n" + said + "\nEOF\n"))
        python.chmod(0o755)
        os.chown(python, NOBODY, NOBODY)
        result = subprocess.run([sys.executable, "-m", "hangwatch.cli", "doctor", "--python", str(python),
                                 "--run-dir", str(tmp_path)], capture_output=True, text=True, timeout=50,
                                stdin=subprocess.DEVNULL)
    finally:
        shutil.rmtree(base)
    line = next(x for x in result.stdout.splitlines() if "versions" in x)
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout, "raw escape sequence on the console"
    assert not any(x.startswith("ok    everything") for x in result.stdout.splitlines()), "a forged check line"
    assert "\\x1b]0;PWNED\\x07" in line


@needs_root
@pytest.mark.timeout(30)
def test_root_never_writes_a_run_report_where_another_user_points_it(tmp_path, monkeypatch, capsys):
    """Root runs `hangwatch report RUN_DIR` on another user's run. They watch their journal's
    access time and, once it was read, swap the run folder for a link to a root-only
    directory: root's report.html (0644) landed there (reproduced with a second user; here the
    swap is made right after the read)."""
    import hangwatch.cli.run_page as runreport
    from hangwatch.cli.main import main

    theirs = tmp_path / "theirs"
    run = theirs / "run"
    run.mkdir(parents=True)
    (run / "journal.jsonl").write_text(json.dumps({"event": "run_started", "ts": 1.7e9, "run_id": "r"}) + "\n")
    for path in (theirs, run, run / "journal.jsonl"):
        os.chown(path, NOBODY, NOBODY)
    target = tmp_path / "root-only"
    target.mkdir(mode=0o700)
    real_render = runreport.render_html

    def render_then_swap(*args, **kwargs):
        page = real_render(*args, **kwargs)
        run.rename(theirs / "real")
        run.symlink_to(target)
        return page

    monkeypatch.setattr(runreport, "render_html", render_then_swap)
    assert main(["report", str(run)]) == 2
    assert "owned by uid 65534" in capsys.readouterr().err
    assert list(target.iterdir()) == [], "root wrote its report into the directory the other user chose"
