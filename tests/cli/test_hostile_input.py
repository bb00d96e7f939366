"""Hostile and malformed input to the CLI and the files it reads (docs/security.md).

Each test is one finding of an adversarial probe: a FIFO, a device, a sparse file
of GiB, a field of the wrong type, a value no clock can hold, a link planted in a
run directory or above it. The rule every test holds the product to: a clear
``hangwatch: error:`` (or a record skipped), never a hang, an unbounded read, an
internal error or a write through a link.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import tracemalloc
from pathlib import Path

import pytest

from hangwatch.contract.errors import ConfigError
from hangwatch.contract.exitcodes import EXIT_USAGE

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="files of another user need root")
NOBODY = 65534


def finishes(fn, seconds: float = 10.0, release: Path | None = None):
    """``fn()``'s result, failing (not hanging) if it does not return within ``seconds``.

    ``release``: a FIFO a stuck reader waits on; opened for writing afterwards so the
    abandoned thread ends."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if release is not None:
            os.close(os.open(release, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"did not return within {seconds} s (blocked)")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


def sparse(path: Path, size: int, head: bytes = b"", tail: bytes = b"") -> Path:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size - len(tail))
        f.seek(0, os.SEEK_END)
        f.write(tail)
    return path


def cli(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hangwatch.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def run_dir_with(tmp_path: Path, lines: list[str | bytes]) -> Path:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    (run / "journal.jsonl").write_bytes(b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines))
    return run


def rec(event: str, **fields: object) -> str:
    return json.dumps({"event": event, "ts": 1.7e9, "run_id": "r", **fields})


# -- config files and saved settings --------------------------------------------------------------


@pytest.mark.timeout(30)
def test_config_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    from hangwatch.supervisor.config import load_file

    fifo = tmp_path / "c.toml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file .*FIFO"):
        finishes(lambda: load_file(fifo), release=fifo)


@pytest.mark.timeout(30)
def test_config_file_larger_than_a_config_is_refused_unread(tmp_path):
    from hangwatch.supervisor.config import load_file

    big = sparse(tmp_path / "c.toml", 64 << 20, b"# a comment that never ends ")
    with pytest.raises(ConfigError, match=r"c\.toml: 64\.0 MiB, over the 1\.0 MiB"):
        load_file(big)


@pytest.mark.timeout(30)
def test_deeply_nested_config_is_a_clear_error(tmp_path):
    from hangwatch.supervisor.config import load_file

    deep = tmp_path / "c.toml"
    deep.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_file(deep)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("values, key", [({"interval": "fast"}, "interval"), ({"max_restarts": [1]}, "max_restarts"),
                                         ({"notify": [1, 2]}, "notify"), ({"quiet": 1}, "quiet")])
def test_resume_settings_of_the_wrong_type_name_the_key(tmp_path, values, key):
    from hangwatch.supervisor.config import saved_values

    (tmp_path / "settings.json").write_text(json.dumps({"values": values, "command": ["true"]}))
    with pytest.raises(ConfigError, match=rf"settings\.json: {key} must be "):
        saved_values(tmp_path)


@pytest.mark.timeout(30)
def test_resume_settings_missing_a_key_get_its_default(tmp_path):
    from hangwatch.supervisor.config import SETTINGS, saved_values

    (tmp_path / "settings.json").write_text(json.dumps({"values": {"grace": 3, "gone_option": 1}, "command": ["true"]}))
    values, command = saved_values(tmp_path)
    assert values["grace"] == 3.0 and values["on_crash"] == SETTINGS["on_crash"][1] and "gone_option" not in values
    assert command == ["true"]


def _values(**overrides):
    from hangwatch.supervisor.config import SETTINGS

    return {**{k: v[1] for k, v in SETTINGS.items()}, **overrides}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", ["interval", "grace", "kill_timeout", "capture_timeout", "backoff_max",
                                  "gpu_release_timeout", "heartbeat_warning"])
def test_waits_longer_than_a_week_are_refused(tmp_path, name):
    from hangwatch.supervisor.config import build

    with pytest.raises(ConfigError, match="more than a week"):
        build(_values(run_dir=str(tmp_path / "run"), **{name: 1e300}), ["true"])
    with pytest.raises(ConfigError, match="more than a week"):
        build(_values(run_dir=str(tmp_path / "run"), phase_timeouts={"checkpoint": 1e12}), ["true"])


@pytest.mark.timeout(30)
@pytest.mark.parametrize("setting", [{"checkpoint_glob": ""}, {"checkpoint_glob": "/etc/*"},
                                     {"checkpoint_glob": "../../*"}, {"checkpoint_marker": ""},
                                     {"checkpoint_marker": "../../../etc/shadow"}])
def test_checkpoint_glob_and_marker_stay_inside_the_checkpoint_dir(tmp_path, setting):
    from hangwatch.supervisor.config import build

    option = next(iter(setting)).replace("_", "-")
    with pytest.raises(ConfigError, match=rf"--{option} .*inside --checkpoint-dir"):
        build(_values(run_dir=str(tmp_path / "run"), checkpoint_dir=str(tmp_path), **setting), ["true"])


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, said", [(["--nnodes", "0"], "--nnodes 0"), (["--lease-timeout", "-1"], "--lease-timeout")])
def test_cohort_numbers_that_cannot_be_meant_are_refused(tmp_path, args, said):
    result = cli("run", "--run-dir", str(tmp_path / "run"), "--gpu-probe", "none", *args, "--", "true")
    assert result.returncode == EXIT_USAGE, result.stderr
    assert "hangwatch: error:" in result.stderr and said in result.stderr


# -- the journal's one reader, status and --follow ----------------------------------------------------


@pytest.mark.timeout(30)
def test_journal_reader_skips_what_is_not_a_record_of_ours(tmp_path):
    from hangwatch.contract.journal import read_journal

    good = rec("run_started", pid=5)
    run = run_dir_with(tmp_path, [
        b"\xff\xfe not utf-8",
        '{"event":"attempt_started","ts":1,"run_id":"r","attempt":NaN,"pid":2}',
        '{"event":"attempt_started","ts":1e308,"run_id":"r","attempt":1,"pid":2}',
        rec("attempt_started", pid=2),  # no attempt number
        rec("attempt_started", attempt=1, pid=10 ** 30),
        rec("attempt_started", attempt=1, pid=2, env={"HANGWATCH_CUDAGRAPHS": [0]}),
        b'{"event": "kill", "pad": "' + b"x" * (3 << 20) + b'"}',  # longer than any record
        good,
    ])
    assert read_journal(run / "journal.jsonl") == [json.loads(good)]


@pytest.mark.timeout(30)
def test_journal_that_is_a_fifo_or_gigabytes_is_refused_unread(tmp_path):
    from hangwatch.contract.journal import read_journal

    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="FIFO"):
        finishes(lambda: read_journal(fifo), release=fifo)
    with pytest.raises(OSError, match="over the 1.0 GiB"):
        read_journal(sparse(tmp_path / "big.jsonl", 3 << 30, rec("run_started", pid=1).encode() + b"\n"))


HOSTILE_JOURNALS = {
    "bad-utf8": [b"\xff\xfe", b'{"event":"run_started","pid":1,"reason":"\xff"}'],
    "attempt-infinity": ['{"event":"attempt_started","ts":1,"run_id":"r","attempt":Infinity,"pid":2}'],
    "ts-too-large": ['{"event":"attempt_started","ts":1e308,"run_id":"r","attempt":1,"pid":2}'],
    "cohort-fields-missing": [rec("attempt_started", attempt=1, pid=2), rec("cohort_joined", node_rank=0),
                              rec("cohort_incident", attempt=1), rec("cohort_agreed"), rec("member_lost")],
    "evidence-not-a-path": [rec("attempt_started", attempt=1, pid=2), rec("incident", attempt=1, kind="stall"),
                            rec("attempt_ended", attempt=1, kind="stall", exit_code=-9, evidence_path=["x"])],
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("label", list(HOSTILE_JOURNALS))
def test_status_of_a_hostile_journal_is_not_an_internal_error(tmp_path, capsys, label):
    from hangwatch.cli.main import main

    run = run_dir_with(tmp_path, [rec("run_started", pid=999_999), *HOSTILE_JOURNALS[label]])
    assert main(["status", str(run)]) == 0, capsys.readouterr().err
    assert main(["status", "--json", str(run)]) == 0, capsys.readouterr().err


@pytest.mark.timeout(30)
def test_follow_reads_records_of_the_wrong_type_without_failing(tmp_path):
    from hangwatch.cli.run_summary import follow

    run = run_dir_with(tmp_path, [
        rec("run_started", pid="abc"),
        rec("kill", attempt=1, pids=5, survivors=7, confirmed=False),
        rec("capture", attempt=1, evidence_path=["x"]),
        b'{"event": "kill", "pad": "' + b"x" * (3 << 20),  # an overlong line, then its end
        b'"}',
        rec("run_finished", outcome="success", exit_code=0),
    ])
    out = io.StringIO()
    assert finishes(lambda: follow(run, out=out, sleep=lambda s: None)) == 0
    assert "run finished: success" in out.getvalue() and "x" * 1000 not in out.getvalue()


@pytest.mark.timeout(30)
def test_status_is_not_blocked_by_a_fifo_in_the_run_dir(tmp_path, capsys):
    from hangwatch.cli.main import main

    run = run_dir_with(tmp_path, [rec("run_started", pid=999_999)])
    os.mkfifo(run / "supervisor.lock")
    assert finishes(lambda: main(["status", str(run)]), release=run / "supervisor.lock") == 0


@pytest.mark.timeout(30)
def test_a_live_status_file_with_fields_of_the_wrong_shape_is_shown_not_raised(tmp_path):
    from hangwatch.cli.run_summary import describe_live, render_status
    from hangwatch.supervisor.operate.livestatus import read_status

    for live in ({"phase": "stall_building", "stall": {"x": 1}}, {"phase": "backing_off", "backoff": {"delay_s": 1}},
                 {"phase": "watching", "progress": {"timeout_s": "x", "silent_s": []}}, {"updated": "x"}):
        assert describe_live(live)
    summary = {"run_dir": "r", "run_id": "i", "state": "running", "attempts": [], "restarts": 0, "incidents": [],
               "finished": None, "live": {"phase": "watching", "heartbeat": {"ts": "x"}, "warnings": [1]}}
    assert "status.json holds fields" in render_status(summary)
    os.mkfifo(tmp_path / "status.json")
    assert finishes(lambda: read_status(tmp_path), release=tmp_path / "status.json") is None


@pytest.mark.timeout(30)
def test_bundle_summary_of_a_journal_path_that_is_not_a_bundle(tmp_path):
    from hangwatch.supervisor.operate.evidence import bundle_summary

    assert bundle_summary(["x"])["bundle"] is None  # type: ignore[arg-type]
    (tmp_path / "b").mkdir()
    os.mkfifo(tmp_path / "b" / "manifest.json")
    assert finishes(lambda: bundle_summary(tmp_path / "b"), release=tmp_path / "b" / "manifest.json")["signature"] is None


# -- run directories ------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_link_planted_in_an_existing_run_dir_is_refused_and_never_written(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    (run / "supervisor.lock").symlink_to(victim)  # planted while the dir was open to others, then chmod'ed
    result = cli("run", "--run-dir", str(run), "--gpu-probe", "none", "--", "true")
    assert result.returncode == EXIT_USAGE, result.stderr
    assert "'supervisor.lock', a symbolic link" in result.stderr and "remove" in result.stderr
    assert victim.read_text() == "untouched\n"


@pytest.mark.timeout(60)
def test_a_run_dir_under_a_world_writable_non_sticky_directory_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    result = cli("run", "--run-dir", str(shared / "run"), "--gpu-probe", "none", "--", "true")
    assert result.returncode == EXIT_USAGE, result.stderr
    assert f"{shared} on its way is writable by group or others and not sticky" in result.stderr
    assert "chmod +t" in result.stderr
    assert not (shared / "run").exists()


@needs_root
@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["parent", "link"])
def test_a_run_dir_below_another_users_directory_or_link_is_refused(tmp_path, how):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    if how == "parent":  # they could rename our run dir away and put a link in its place
        given = theirs / "run"
    else:  # a link of theirs on the way (e.g. in /tmp) chooses where we write
        given = tmp_path / "run"
        os.symlink(theirs, given)
        os.lchown(given, NOBODY, NOBODY)
    result = cli("run", "--run-dir", str(given), "--gpu-probe", "none", "--", "true")
    assert result.returncode == EXIT_USAGE, result.stderr
    assert f"{theirs if how == 'parent' else given} on its way is" in result.stderr
    assert "owned by uid 65534" in result.stderr
    assert list(theirs.iterdir()) == []


# -- what the supervisor reads from the trainer ----------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("content", ["[" * 30_000 + "]" * 30_000, '{"pid": 1e400, "seq": 1}', "fifo"])
def test_a_heartbeat_file_never_stops_the_supervisor(tmp_path, content):
    from hangwatch.contract.heartbeat import read_heartbeat

    path = tmp_path / "heartbeat.json"
    if content == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(content)
    assert finishes(lambda: read_heartbeat(path), release=path if content == "fifo" else None) is None


@pytest.mark.timeout(30)
def test_checkpoint_markers_nested_too_deeply_or_very_large(tmp_path):
    from hangwatch.supervisor.decide.checkpoints import CheckpointSpec, newest_complete

    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "checkpoint-1").mkdir()  # larger than is parsed: judged by how it ends
    sparse(tmp_path / "checkpoint-1" / "trainer_state.json", 80 << 20, b'{"log_history": [', b"]}\n")
    best, skipped = newest_complete(CheckpointSpec(tmp_path, "checkpoint-*", "trainer_state.json"))
    assert best is not None and best.path.name == "checkpoint-1"
    assert [c.path.name for c in skipped] == ["checkpoint-2"]


# -- doctor and bounded tools --------------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("text", ["infG", "1e400", "nan"])
def test_doctor_sizes_that_are_not_finite_are_a_usage_error(text):
    from hangwatch.cli.parser import parse_bytes

    with pytest.raises(argparse.ArgumentTypeError, match="is not a size"):
        parse_bytes(text)


@needs_root
@pytest.mark.timeout(60)
def test_doctor_runs_another_users_interpreter_as_that_user():
    from hangwatch.cli.commands.doctor import interpreter_versions

    base = Path(tempfile.mkdtemp(prefix="hw-doctor-"))  # not under pytest's 0700 folders: that user must reach it
    try:
        base.chmod(0o755)
        venv = base / "venv"
        venv.mkdir()
        python = venv / "python"  # stands for a venv's interpreter, whose .pth files its owner writes
        python.write_text("#!/bin/sh\nprintf '{\"python\": [3, 11, 0], \"packages\": {\"uid\": \"%s\"}}' \"$(id -u)\"\n")
        python.chmod(0o755)
        os.chown(venv, NOBODY, NOBODY)
        os.chown(python, NOBODY, NOBODY)
        assert interpreter_versions(str(python)) == ((3, 11, 0), {"uid": str(NOBODY)}), "root ran another user's program"
    finally:
        shutil.rmtree(base)


@pytest.mark.timeout(60)
def test_a_tool_that_floods_its_output_is_held_to_the_cap():
    from hangwatch.contract.tools import run_bounded

    tracemalloc.start()
    try:
        result = run_bounded(["head", "-c", str(96 << 20), "/dev/zero"], 30, max_output=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.ok and len(result.stdout) == 1 << 20
    assert peak < 24 << 20, f"held {peak >> 20} MiB of a tool's output"


@pytest.mark.timeout(30)
def test_a_huge_or_malformed_tree_file_kills_nothing_and_reads_nothing_whole(tmp_path):
    from hangwatch.supervisor.contain.members_file import recorded

    assert recorded(sparse(tmp_path / "tree.json", 3 << 30, b'{"members": [')) == []
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    assert recorded(tmp_path / "deep.json") == []
    (tmp_path / "inf.json").write_text('{"members": [{"pid": 1e400, "create_time": 0}]}')
    assert recorded(tmp_path / "inf.json") == []


@pytest.mark.timeout(30)
def test_secrets_in_the_resume_template_never_reach_the_journal(tmp_path):
    from hangwatch.supervisor.config import build

    config = build(_values(run_dir=str(tmp_path / "run"), checkpoint_dir=str(tmp_path),
                           resume_arg="--resume={checkpoint} --hub-token=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123 --password hunter2"),
                   ["train", "--api-key", "s3cr3t"])
    text = json.dumps(config.to_json())
    assert "hf_AbCdEf" not in text and "hunter2" not in text and "s3cr3t" not in text
    assert config.resume_arg and "hunter2" in config.resume_arg  # the launch itself keeps it


@pytest.mark.timeout(30)
def test_an_empty_program_or_a_spinning_interval_is_refused(tmp_path):
    from hangwatch.supervisor.config import build

    with pytest.raises(ConfigError, match="program is empty"):
        build(_values(run_dir=str(tmp_path / "run")), ["", "train.py"])
    with pytest.raises(ConfigError, match="under 0.001 s"):
        build(_values(run_dir=str(tmp_path / "run"), interval=1e-300), ["true"])


@pytest.mark.timeout(30)
def test_report_of_a_run_whose_journal_cannot_be_read_says_so(tmp_path, capsys):
    from hangwatch.cli.main import main

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    sparse(run / "journal.jsonl", 2 << 30, rec("run_started", pid=1).encode() + b"\n")
    assert main(["report", str(run)]) == EXIT_USAGE
    assert "journal.jsonl: cannot read the journal: 2.0 GiB" in capsys.readouterr().err


@needs_root
@pytest.mark.timeout(30)
@pytest.mark.parametrize("how", ["world-writable", "another-users", "in-a-shared-folder"])
def test_a_config_file_others_can_change_is_refused(tmp_path, how):
    from hangwatch.supervisor.config import load_file

    folder = tmp_path / "etc"
    folder.mkdir()
    config = folder / "c.toml"
    config.write_text('notify-command = "id > /tmp/pwned"\n')  # runs as the supervisor's user on every alert
    if how == "world-writable":
        config.chmod(0o666)
    elif how == "another-users":
        os.chown(config, NOBODY, NOBODY)
    else:
        folder.chmod(0o777)
    with pytest.raises(ConfigError, match="(writable by group or others|owned by uid 65534)"):
        load_file(config)


@pytest.mark.timeout(30)
def test_errors_never_put_terminal_escapes_on_the_console(tmp_path, capsys):
    from hangwatch.cli.main import main

    assert main(["run", "--gpu-probe", "none", "--checkpoint-dir", "/nonexistent\x1b]0;pwned\x07/a/b", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\\x1b]0;pwned\\x07" in err


@pytest.mark.timeout(30)
def test_control_file_and_gpu_probe_file_never_block_or_read_unbounded(tmp_path):
    from hangwatch.contract.control import read_control
    from hangwatch.supervisor.watch.probes import FileProbe

    fifo = tmp_path / "control.json"
    os.mkfifo(fifo)
    assert finishes(lambda: read_control(fifo), release=fifo) is None
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    assert read_control(tmp_path / "deep.json") is None
    gpu = tmp_path / "gpu.json"
    os.mkfifo(gpu)
    assert finishes(lambda: FileProbe(gpu).sample(), release=gpu) is None
    gpu.unlink()
    sparse(gpu, 2 << 30, b'{"devices": [')
    assert FileProbe(gpu).sample() is None


@pytest.mark.timeout(30)
def test_the_run_dir_lock_is_never_taken_through_a_link(tmp_path):
    from hangwatch.cli.rundir import lock

    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "run" / "supervisor.lock").symlink_to(victim)
    with pytest.raises(OSError):
        lock(tmp_path / "run")
    assert victim.read_text() == "untouched\n"


@pytest.mark.timeout(60)
def test_a_run_started_with_its_standard_streams_closed_still_supervises(tmp_path):
    run = tmp_path / "run"
    result = subprocess.run(["sh", "-c", 'exec "$@" <&- >&- 2>&-', "sh", sys.executable, "-m", "hangwatch.cli", "run",
                             "--run-dir", str(run), "--gpu-probe", "none", "--interval", "0.2",
                             "--", "sh", "-c", "seq 1 1000; echo x >&2"],
                            timeout=50)
    assert result.returncode == 0
    finished = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines() if '"run_finished"' in x]
    assert finished and finished[-1]["outcome"] == "success"
