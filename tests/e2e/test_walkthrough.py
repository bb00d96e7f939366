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
from hangwatch.cli.run_settings import run_settings

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
    from hangwatch.cli.run_summary import render_status, summarise
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


def _interrupted_run(tmp_path):
    """A run directory as a supervisor that died (SIGKILL) leaves it: settings, an open journal."""
    import os

    from hangwatch.contract.journal import Journal
    from hangwatch.supervisor.config import SETTINGS, save_values

    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    values = {k: v[1] for k, v in SETTINGS.items()} | {"run_dir": str(run_dir), "gpu_probe": "none"}
    save_values(run_dir, values, [sys.executable, "-c", "pass"])  # ends at once if it were ever resumed
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=50)
    Journal(run_dir / "journal.jsonl", run_id="r1").append("run_started", pid=gone.pid, command=[sys.executable, "-c", "pass"])
    os.chmod(run_dir / "journal.jsonl", 0o600)
    return run_dir


def test_resume_refuses_another_run_dir_instead_of_ignoring_it(tmp_path, capsys) -> None:
    run_dir = _interrupted_run(tmp_path)
    assert cli_main.main(["run", "--resume", str(run_dir), "--run-dir", str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err
    assert "--run-dir" in err and "stays in its own directory" in err and "Traceback" not in err
    assert not (tmp_path / "other").exists()


def test_resume_reads_the_config_file_it_is_given(tmp_path, capsys) -> None:
    run_dir = _interrupted_run(tmp_path)
    missing = tmp_path / "missing.toml"
    assert cli_main.main(["run", "--resume", str(run_dir), "--config", str(missing)]) == 2
    assert "does not exist" in capsys.readouterr().err
    config = tmp_path / "more.toml"
    config.write_text("eager-escalation = false\nstall-window = 90\n")
    config.chmod(0o600)
    args = cli_main.build_parser().parse_args(["run", "--resume", str(run_dir), "--config", str(config),
                                               "--stall-window", "45"])
    values, command, resumed, explicit = run_settings(args)
    assert resumed == run_dir.resolve() and command == [sys.executable, "-c", "pass"]
    assert values["eager_escalation"] is False  # from the file
    assert values["stall_window"] == 45.0  # the command line wins over the file
    assert values["gpu_probe"] == "none"  # what the file does not set stays as the run saved it


def test_a_node_rank_without_a_cohort_is_refused_not_run_as_a_single_node(tmp_path) -> None:
    import os

    env = {k: v for k, v in os.environ.items()
           if k not in ("SLURM_NODEID", "SLURM_NNODES", "NODE_RANK", "NNODES", "GROUP_RANK", "MASTER_ADDR",
                        "SLURM_JOB_NODELIST", "SLURM_NODELIST")}
    marker = tmp_path / "trainer-ran"
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from hangwatch.cli.main import main; sys.exit(main())",
         "run", "--run-dir", str(tmp_path / "run"), "--gpu-probe", "none", "--node-rank", "1", "--",
         sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
        capture_output=True, text=True, timeout=50, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "--node-rank 1" in proc.stderr and "--nnodes" in proc.stderr and "Traceback" not in proc.stderr
    assert not marker.exists()  # node 1 of a job that never formed would have trained alone, as node 0
    assert not (tmp_path / "run").exists()  # refused before anything was written (no stray run directory)


@pytest.mark.parametrize("option", ["--checkpoint-dir", "--run-dir"])
def test_an_empty_path_option_is_refused_not_taken_as_unset(option, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a run that started anyway would land here, under ./hangwatch-runs
    assert cli_main.main(["run", option, "", "--gpu-probe", "none", "--", sys.executable, "-c", "pass"]) == 2
    err = capsys.readouterr().err
    assert f"{option} was given an empty value" in err
    assert not (tmp_path / "hangwatch-runs").exists()


def test_status_drops_the_no_heartbeat_warning_once_heartbeats_arrive() -> None:
    from hangwatch.cli.run_summary import render_status

    no_detection = {"ts": 1.0, "event": "no_detection", "message": "attempt 1: NO HANG CAN BE DETECTED yet"}
    disk = {"ts": 2.0, "event": "disk_low", "message": "disk low"}

    def status_text(heartbeat_seen: bool) -> str:
        live = {"phase": "watching", "attempt": 1, "updated": 100.0, "heartbeat_seen": heartbeat_seen,
                "heartbeat": {"step": 17, "phase": "train", "ts": 99.0} if heartbeat_seen else None,
                "warnings": [no_detection, disk]}
        summary = {"run_dir": "/r", "run_id": "x", "state": "running: attempt 1, supervisor pid 5", "restarts": 0,
                   "alive": True, "live": live, "attempts": [], "incidents": [], "finished": None}
        return render_status(summary, now=100.0)

    assert "NO HANG CAN BE DETECTED" in status_text(heartbeat_seen=False)
    beating = status_text(heartbeat_seen=True)
    assert "heartbeat step 17" in beating and "NO HANG CAN BE DETECTED" not in beating
    assert "disk low" in beating  # other warnings stay
