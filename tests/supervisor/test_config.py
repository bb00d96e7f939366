"""The configuration: values from a config file and the settings a ``--resume`` reads back.

Hostile values in a config file are ``hangwatch: error:`` (exit 2), never an internal error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(60)
def test_an_integer_of_thousands_of_digits_in_a_config_file_is_a_config_error(tmp_path):
    # tomllib reads it with int(), which refuses more than 4300 digits with a ValueError that
    # is not a TOMLDecodeError: the run died with exit 70 and a traceback file.
    config = tmp_path / "hangwatch.toml"
    config.write_text("max-restarts = " + "9" * 5000 + "\n")
    config.chmod(0o600)
    done = subprocess.run([sys.executable, "-m", "hangwatch.cli", "run", "--config", str(config), "--run-dir",
                           str(tmp_path / "run"), "--gpu-probe", "none", "--", "true"],
                          capture_output=True, text=True, timeout=50, cwd=ROOT)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert done.stderr.startswith("hangwatch: error: config file") and "internal error" not in done.stderr, done.stderr
    assert "digits" in done.stderr and "set_int_max_str_digits" not in done.stderr, done.stderr
    assert not (tmp_path / "run").exists()


def test_a_phase_timeout_of_true_in_a_config_file_is_refused_not_one_second():
    """TOML ``checkpoint = true``: a bool is an int to float(), so it became a 1 s window and a
    healthy checkpoint save was a hang after one second."""
    from hangwatch.contract.errors import ConfigError
    from hangwatch.supervisor.config import parse_phase_timeouts

    with pytest.raises(ConfigError, match="seconds must be a number"):
        parse_phase_timeouts({"checkpoint": True})
    assert parse_phase_timeouts({"checkpoint": 90})["checkpoint"] == 90.0


@pytest.mark.timeout(60)
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
def test_a_metrics_textfile_below_another_users_folder_is_refused(tmp_path):
    # The textfile is rewritten every few seconds for the whole run, 0644: the folder's owner
    # renamed it away and put a link to a root-only folder in its place, and root's supervisor
    # wrote hw.prom there (reproduced with a second user). Refused like a run dir or a report -o.
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    done = subprocess.run([sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(tmp_path / "run"),
                           "--gpu-probe", "none", "--metrics-textfile", str(theirs / "hw.prom"), "--", "true"],
                          capture_output=True, text=True, timeout=50, cwd=ROOT)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert done.stderr.startswith("hangwatch: error: --metrics-textfile") and "uid 65534" in done.stderr, done.stderr
    assert not (theirs / "hw.prom").exists()


@pytest.mark.parametrize("content", ["[" * 100_000 + "]" * 100_000, '{"values": [], "command": "rm -rf /"}', "[1, 2]"])
def test_malformed_settings_on_resume_is_a_clear_error(tmp_path, content):
    from hangwatch.contract.errors import ConfigError
    from hangwatch.supervisor.config import saved_values

    (tmp_path / "settings.json").write_text(content)
    with pytest.raises(ConfigError, match="--resume"):
        saved_values(tmp_path)


def test_progress_timeout_auto_from_the_command_line_a_file_and_a_resume(tmp_path):
    """``--progress-timeout auto`` (or ``progress-timeout = "auto"`` in a file) learns the timeout,
    the fixed default covering the warm-up; seconds given later (on a --resume) fix it again."""
    from hangwatch.cli.parser import build_parser
    from hangwatch.cli.run_settings import run_settings
    from hangwatch.contract.errors import ConfigError
    from hangwatch.supervisor.config import build, load_file

    parser = build_parser({name: (lambda args: 0) for name in (
        "run", "status", "report", "doctor", "replay", "reproduce", "bundle pack", "bundle unpack")})
    args = parser.parse_args(["run", "--progress-timeout", "auto", "--auto-warmup-beats", "30", "--", "true"])
    values, command, _, given = run_settings(args)
    config = build(values, command, given)
    assert config.detector.auto_progress is not None and config.detector.auto_progress.warmup_beats == 30
    assert config.detector.progress_timeout == 600.0
    fixed = run_settings(parser.parse_args(["run", "--progress-timeout", "90", "--", "true"]))[0]
    assert fixed["progress_timeout_auto"] is False and build(fixed, ["true"]).detector.auto_progress is None
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--progress-timeout", "soon", "--", "true"])
    file = tmp_path / "hangwatch.toml"
    file.write_text('progress-timeout = "auto"\n')
    file.chmod(0o600)
    assert load_file(file) == {"progress_timeout_auto": True}
    with pytest.raises(ConfigError, match="auto-warmup-beats"):
        build({**values, "auto_warmup_beats": 1}, command)
    with pytest.raises(ConfigError, match="auto needs a progress rule"):
        build({**values, "progress_timeout": 0.0}, command)


def test_prewarming_is_automatic_unless_an_option_says_on_or_off():
    from hangwatch.supervisor.config import SETTINGS, build

    values = {k: v[1] for k, v in SETTINGS.items()}
    assert build(values, ["torchrun", "t.py"]).prewarm_launcher is None  # auto: known launchers only
    on = build({**values, "prewarm_launcher": True}, ["x"], {"prewarm_launcher"})
    off = build({**values, "prewarm_launcher": False}, ["x"], {"prewarm_launcher"})
    assert (on.prewarm_launcher, off.prewarm_launcher) == (True, False)
    imports = build({**values, "prewarm_import": ["torch"]}, ["python", "t.py"], {"prewarm_import"})
    assert imports.prewarm_import == ("torch",) and imports.prewarm_launcher is None
