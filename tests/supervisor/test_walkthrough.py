"""What a new user meets on a fresh checkout: the README's commands and common mistakes.

Each test is one finding of walking through the README and the docs as a user: a
mistake or an interruption must end in one clear line and the right exit status,
never a traceback.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

import hangwatch.cli.main as cli_main

pytestmark = pytest.mark.timeout(60)

# Stands in for a Ctrl-C that lands while `hangwatch` is still importing its modules
# (the first fraction of a second, longer on a loaded machine): the import of the
# settings module raises KeyboardInterrupt, as the SIGINT handler would there.
_INTERRUPTED_IMPORT = """
import builtins
real_import = builtins.__import__
def interrupting_import(name, *args, **kwargs):
    if name == "hangwatch.supervisor.config":
        raise KeyboardInterrupt
    return real_import(name, *args, **kwargs)
builtins.__import__ = interrupting_import
from hangwatch.cli.main import main
"""


def test_ctrl_c_while_importing_prints_one_line_and_dies_of_sigint() -> None:
    proc = subprocess.run([sys.executable, "-c", _INTERRUPTED_IMPORT], capture_output=True, text=True, timeout=50)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == "hangwatch: interrupted"
    assert proc.returncode == -signal.SIGINT  # the shell sees 130, as for any Ctrl-C'd command


def test_ctrl_c_while_the_parser_loads_exits_130_without_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt  # building the parser imports diagnostics and doctor: a second or so

    monkeypatch.setattr(cli_main, "build_parser", interrupted)
    assert cli_main.main(["status", "nowhere"]) == 130


def test_importing_the_cli_leaves_the_excepthook_alone() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; before = sys.excepthook; import hangwatch.cli.main; "
         "assert sys.excepthook is before, sys.excepthook"],
        capture_output=True, text=True, timeout=50)
    assert proc.returncode == 0, proc.stderr


def test_status_of_a_dead_supervisors_run_does_not_call_its_open_attempt_running(tmp_path) -> None:
    from hangwatch.cli.status import render_status, summarise
    from hangwatch.contract.journal import Journal

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=50)  # a supervisor that died (SIGKILL, OOM) without writing run_finished
    journal = Journal(tmp_path / "journal.jsonl", run_id="r1")
    journal.append("run_started", pid=gone.pid, command=["python", "train.py"], run_dir=str(tmp_path))
    journal.append("attempt_started", attempt=1, pid=gone.pid + 1, create_time=0.0, argv=["python", "train.py"], env={})
    summary = summarise(tmp_path / "journal.jsonl")
    assert summary["alive"] is False
    text = render_status(summary)
    assert "supervisor gone without finishing" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("1 "))
    assert "running" not in row and "left open" in row, row
