"""Errors a person running hangwatch unattended meets: each one clear, none a traceback.

Regression tests for issue 14's findings: internal errors, the run-dir lock,
infinite values, ``bundle pack -o``, binary signature files, ``--resume``
closing the lost attempt, contradictory options, subcommand usage.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import wait_for

from hangwatch.cli import main as cli_main
from hangwatch.contract.errors import ConfigError
from hangwatch.contract.exitcodes import EXIT_INTERNAL, EXIT_USAGE
from hangwatch.supervisor.config import SETTINGS, build

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
SECRET = "hf_abcdefghijklmnopqrstuvwxyz0123"

# A supervisor whose detector fails inside the watch loop, with a secret in a local variable.
BROKEN = f'''
import sys
from hangwatch.supervisor.decide import detector
def observe(self, sample):
    HF_TOKEN = "{SECRET}"
    raise RuntimeError("detector exploded")
detector.Detector.observe = observe
from hangwatch.cli.main import main
sys.exit(main(sys.argv[1:]))
'''


def _defaults(**overrides):
    values = {k: v[1] for k, v in SETTINGS.items()}
    values.update(overrides)
    return values


@pytest.mark.slow
def test_internal_error_is_one_console_line_and_a_traceback_without_locals_in_the_log(tmp_path):
    run_dir = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_TOKEN=SECRET)
    result = subprocess.run([sys.executable, "-c", BROKEN, "run", "--run-dir", str(run_dir), "--gpu-probe", "none",
                             "--interval", "0.2", "--", "sleep", "30"], env=env, capture_output=True, text=True, timeout=45)
    assert result.returncode == EXIT_INTERNAL, result.stderr
    assert "Traceback" not in result.stderr and "locals" not in result.stderr
    assert SECRET not in result.stderr
    lines = [line for line in result.stderr.splitlines() if "] internal_error" in line]
    assert len(lines) == 1 and "detector exploded" in lines[0] and "traceback in" in lines[0]
    log = [json.loads(line) for line in (run_dir / "hangwatch.log").read_text().splitlines()]
    errors = [r for r in log if r.get("event") == "internal_error"]
    assert errors and "Traceback (most recent call last)" in errors[0]["exception"]
    assert "detector exploded" in errors[0]["exception"]
    assert SECRET not in (run_dir / "hangwatch.log").read_text(), "no local variable (nor the env) in the log"
    finished = [json.loads(x) for x in (run_dir / "journal.jsonl").read_text().splitlines()][-1]
    assert finished["event"] == "run_finished" and finished["outcome"] == "internal_error"


def test_internal_error_in_another_command_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "journal.jsonl").write_text('{"event": "run_started", "ts": 1, "run_id": "x", "pid": 1}\n')

    def broken(path):
        api_key = SECRET  # noqa: F841  (a local that must not be printed)
        raise KeyError("boom")

    monkeypatch.setattr("hangwatch.cli.run_summary.summarise", broken)
    assert cli_main.main(["status", str(tmp_path)]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hangwatch: internal error: KeyError")
    where = Path(err.rsplit("traceback in ", 1)[1].strip())
    text = where.read_text()
    assert "Traceback" in text and "boom" in text and SECRET not in text
    where.unlink()


@pytest.mark.slow
def test_run_dir_is_locked_by_its_live_supervisor_and_a_finished_run_is_not_reused(hw):
    proc = hw.start(hw.fast_args(**{"--stall-window": "60"}) + ["--", *hw.trainer("--beats", "1000", "--step-time", "0.05")])
    wait_for(lambda: "attempt_started" in (hw.run_dir / "journal.jsonl").read_text())
    second = hw.run(hw.fast_args() + ["--", "true"], timeout=30)
    assert second.returncode == EXIT_USAGE
    assert f"in use by a live supervisor (pid {proc.pid})" in second.stderr
    assert "Traceback" not in second.stderr
    assert json.loads((hw.run_dir / "settings.json").read_text())["command"][-1] == "0.05", "settings untouched"
    proc.terminate()
    proc.communicate(timeout=30)

    again = hw.run(hw.fast_args() + ["--", "true"], timeout=30)
    assert again.returncode == EXIT_USAGE and "already holds a run that was stopped" in again.stderr
    assert f"hangwatch run --resume {hw.run_dir}" in again.stderr, "a stopped run is continued, not started over"
    assert len(hw.events("run_started")) == 1, "nothing appended to the finished run's journal"


@pytest.mark.slow
def test_a_stopped_run_is_resumed_from_its_newest_checkpoint_without_spending_a_restart(hw):
    """A scheduler preempts the job (SIGTERM) and requeues it: ``--resume`` continues from the newest
    checkpoint. It was refused as 'already finished', so the requeued job started from step 0; and the
    stopped attempt must not count against --max-restarts (0 here)."""
    ckpt = hw.tmp / "ckpt"
    proc = hw.start(hw.fast_args(**{"--stall-window": "60", "--max-restarts": "0", "--checkpoint-dir": str(ckpt),
                                    "--resume-arg": "--resume_from_checkpoint={checkpoint}"})
                    + ["--", *hw.trainer("--beats", "30", "--step-time", "0.1", "--save-every", "2",
                                         "--checkpoint-dir", str(ckpt))])
    wait_for(lambda: (ckpt / "checkpoint-4" / "trainer_state.json").exists(), timeout=60)
    proc.terminate()
    assert proc.wait(30) == 128 + 15
    resumed = hw.run(["run", "--resume", str(hw.run_dir)], timeout=90)
    assert resumed.returncode == 0, resumed.stderr
    starts = hw.events("attempt_started")
    assert len(starts) == 2 and starts[1]["resume_from"] and int(starts[1]["resume_from"].rsplit("-", 1)[1]) >= 4
    assert hw.events("run_finished")[-1]["outcome"] == "success"
    status = json.loads(hw.run(["status", "--json", str(hw.run_dir)], timeout=30).stdout)
    assert status["finished"]["outcome"] == "success"
    assert status["restarts"] == 0, "a resume after a stop is no restart (status said 1)"
    finished = hw.run(["run", "--resume", str(hw.run_dir)], timeout=30)
    assert finished.returncode == EXIT_USAGE and "already finished (success" in finished.stderr


@pytest.mark.slow
def test_resume_closes_the_attempt_the_dead_supervisor_left_open(hw):
    proc = hw.start(hw.fast_args(**{"--stall-window": "60"}) + ["--", *hw.trainer("--beats", "30", "--step-time", "0.1")])
    wait_for(lambda: "first_heartbeat" in (hw.run_dir / "journal.jsonl").read_text())
    proc.kill()
    proc.wait(10)
    assert not hw.alive(timeout=10)
    gone = hw.run(["status", str(hw.run_dir)], timeout=30)
    assert "supervisor gone without finishing" in gone.stdout

    result = hw.run(["run", "--resume", str(hw.run_dir)], timeout=60)
    assert result.returncode == 0, result.stderr
    ended = hw.events("attempt_ended")
    assert [(e["attempt"], e["kind"]) for e in ended] == [(1, "supervisor_lost"), (2, "done")]
    status = json.loads(hw.run(["status", "--json", str(hw.run_dir)], timeout=30).stdout)
    assert [a["outcome"] for a in status["attempts"]] == ["supervisor_lost", "done"]


@pytest.mark.parametrize("name", ["interval", "stall_window", "grace", "backoff", "progress_timeout", "cpu_idle"])
@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_infinite_values_are_refused(name, value):
    with pytest.raises(ConfigError, match="finite"):
        build(_defaults(**{name: value, "backoff_max": 1e9 if name == "backoff" else 60.0}), ["true"])


def test_infinite_values_are_refused_on_the_command_line_and_in_files(tmp_path, capsys):
    assert cli_main.main(["run", "--run-dir", str(tmp_path / "r"), "--interval", "inf", "--", "true"]) == EXIT_USAGE
    assert "--interval must be a finite number" in capsys.readouterr().err
    assert cli_main.main(["run", "--phase-timeout", "checkpoint=inf", "--", "true"]) == EXIT_USAGE
    assert "positive, finite" in capsys.readouterr().err
    cfg = tmp_path / "hw.toml"
    cfg.write_text("stall-window = inf\n")
    assert cli_main.main(["run", "--config", str(cfg), "--", "true"]) == EXIT_USAGE
    assert "--stall-window must be a finite number" in capsys.readouterr().err
    assert not (tmp_path / "r").exists(), "refused before anything was created"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--backoff", "10", "--backoff-max", "1"], "--backoff 10 is more than --backoff-max 1"),
        (["--backoff-max", "0.5"], "--backoff 1 (the default) is more than --backoff-max 0.5"),
        (["--resume-arg", "--resume_from_checkpoint={checkpoint}"], "--resume-arg needs --checkpoint-dir"),
        (["--no-progress-restarts", "2"], "--no-progress-restarts 2 needs --checkpoint-dir"),
    ],
)
def test_contradictory_options_are_refused_with_the_reason(tmp_path, capsys, args, message):
    assert cli_main.main(["run", "--run-dir", str(tmp_path / "r"), *args, "--", "true"]) == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_resume_with_another_command_is_refused(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "settings.json").write_text(json.dumps({"values": _defaults(run_dir=str(run_dir)), "command": ["python", "train.py"]}))
    (run_dir / "journal.jsonl").write_text(json.dumps({"event": "run_started", "ts": 1, "run_id": "r", "pid": 999_999_999}) + "\n")
    assert cli_main.main(["run", "--resume", str(run_dir), "--", "python", "other.py"]) == EXIT_USAGE
    assert "continues the run's own command (python train.py)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, usage",
    [
        (["run", "--stall-windw", "5", "--", "true"], "usage: hangwatch run [options] -- COMMAND..."),
        (["status", "--jsn", "x"], "usage: hangwatch status"),
        (["bundle", "pack", "b", "--bogus"], "usage: hangwatch bundle pack"),
    ],
)
def test_subcommand_usage_errors_print_that_subcommands_usage(capsys, argv, usage):
    with pytest.raises(SystemExit) as exc:
        cli_main.main(argv)
    assert exc.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(usage) and "unrecognized arguments" in err


def _bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "20260101T000000-attempt1-stall"
    bundle.mkdir()
    (bundle / "manifest.json").write_text("{}")
    return bundle


def test_bundle_pack_refuses_anything_but_a_regular_file(tmp_path, capsys):
    bundle = _bundle(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link.tar.gz"
    link.symlink_to(os.devnull)
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    cases = [
        (fifo, "is a device or special file"),
        (link, "is a symbolic link"),
        (tmp_path, "is a directory"),
        (blocker / "out.tar.gz", "Not a directory"),
        (Path("/proc/hangwatch-test.tar.gz"), "cannot write the archive there"),
    ]
    for out, message in cases:
        assert cli_main.main(["bundle", "pack", str(bundle), "-o", str(out)]) == EXIT_USAGE, out
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (out, err)
    assert fifo.is_fifo() and link.is_symlink() and os.readlink(link) == os.devnull, "nothing was replaced"
    assert cli_main.main(["bundle", "pack", str(bundle), "-o", str(tmp_path / "ok.tar.gz")]) == 0
    assert (tmp_path / "ok.tar.gz").is_file()


def test_signatures_given_a_binary_file_is_a_clear_error(tmp_path, capsys):
    binary = tmp_path / "sigs.toml"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00")
    assert cli_main.main(["replay", "--signatures", str(binary), str(_bundle(tmp_path))]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "not a text (UTF-8 TOML) signature file" in err and "Traceback" not in err


def test_sigkilled_supervisor_releases_the_lock(tmp_path):
    """The kernel drops a flock with its holder: a dead supervisor never blocks --resume."""
    from hangwatch.cli import rundir

    code = f"import time; from hangwatch.cli import rundir; from pathlib import Path; rundir.lock(Path({str(tmp_path)!r})); print('locked', flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert proc.stdout.readline().strip() == "locked"
        assert rundir.held_by_live_supervisor(tmp_path) is True
        with pytest.raises(rundir.RunDirBusy, match=f"pid {proc.pid}"):
            rundir.lock(tmp_path)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert rundir.held_by_live_supervisor(tmp_path) is False


@pytest.mark.parametrize("finish, cohort, resumable", [
    ({"outcome": "interrupted", "exit_code": 143, "reason": "supervisor received SIGTERM"}, False, True),
    ({"outcome": "gave_up", "exit_code": 76, "reason": "checkpoints unreadable"}, False, True),
    ({"outcome": "gave_up", "exit_code": 75, "reason": "node 1 lost"}, True, True),
    ({"outcome": "gave_up", "exit_code": 75, "reason": "node 1 lost"}, False, False),
    ({"outcome": "gave_up", "exit_code": 71, "reason": "restart budget"}, False, False),
    ({"outcome": "success", "exit_code": 0, "reason": "done"}, False, False),
])
def test_a_new_run_on_a_resumable_run_dir_says_to_resume_it(tmp_path, finish, cohort, resumable):
    from hangwatch.cli.rundir import refuse_existing
    from hangwatch.contract.journal import Journal

    j = Journal(tmp_path / "journal.jsonl", "r1")
    if cohort:
        j.append("cohort_joined", node_rank=1, nnodes=2, cohort_id="job", store="h:1", hosts_store=False)
    j.append("run_finished", **finish)
    with pytest.raises(ConfigError) as refused:
        refuse_existing(tmp_path)
    assert (f"hangwatch run --resume {tmp_path}" in str(refused.value)) is resumable


@pytest.mark.parametrize("mode, message", [(0o640, "chmod 600"), (0o604, "chmod 600")])
def test_a_cohort_secret_file_others_may_read_is_refused_before_the_join(tmp_path, capsys, mode, message):
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123456789abcdef\n")
    secret.chmod(mode)
    code = cli_main.main(["run", "--run-dir", str(tmp_path / "r"), "--gpu-probe", "none", "--cohort", "127.0.0.1:1",
                          "--node-rank", "0", "--nnodes", "2", "--cohort-secret-file", str(secret), "--", "true"])
    assert code == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_a_secret_cohort_on_the_launchers_rendezvous_port_is_refused_before_the_join(tmp_path, capsys):
    """torchrun would connect to the authenticated store as its rendezvous, and be refused."""
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123456789abcdef\n")
    secret.chmod(0o600)
    code = cli_main.main(["run", "--run-dir", str(tmp_path / "r"), "--gpu-probe", "none", "--cohort", "127.0.0.1:29400",
                          "--node-rank", "0", "--nnodes", "2", "--cohort-secret-file", str(secret), "--", "torchrun",
                          "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:29400", "train.py"])
    assert code == EXIT_USAGE
    assert "give --cohort another port (for example 29401)" in capsys.readouterr().err
