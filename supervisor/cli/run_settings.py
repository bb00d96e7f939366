"""``hangwatch run``'s settings: defaults < TOML file < command line, or, on ``--resume``, the
saved run's settings < command line; and the checks that make a run directory safe to resume.

``--resume`` trusts what the run directory holds (its settings choose the command, its
``tree.json`` what is killed), so it is checked here before anything reads it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from hangwatch.cli.errors import UsageError
from hangwatch.supervisor.config import SETTINGS, load_file, saved_cwd, saved_values


def run_settings(args: argparse.Namespace) -> tuple[dict[str, Any], list[str], Path | None, set[str]]:
    """Settings, command, the run to resume (if any), and which settings the user gave:
    defaults < TOML file < command line, or the saved run's settings < command line on --resume."""
    command = list(getattr(args, "command", []))
    if command and command[0] == "--":
        command = command[1:]
    elif command:
        raise UsageError(f"unknown option or missing '--' before the command: {command[0]!r} "
                         "(write: hangwatch run [options] -- COMMAND...)")
    cli_values = {k: v for k, v in vars(args).items() if k in SETTINGS}
    if "progress_timeout" in cli_values:
        # --progress-timeout auto learns it (the default covers the warm-up); seconds fix it, on a --resume too.
        auto = cli_values["progress_timeout"] == "auto"
        cli_values["progress_timeout_auto"] = auto
        if auto:
            del cli_values["progress_timeout"]
    for name, value in cli_values.items():
        # `--checkpoint-dir "$OUT"` with OUT unset: the empty value turned resuming off unsaid.
        if isinstance(value, str) and not value.strip():
            raise UsageError(f"--{name.replace('_', '-')} was given an empty value; give one, or leave the option out")

    resume_dir: Path | None = getattr(args, "resume", None)
    if resume_dir is not None:
        resume_dir = resume_dir.expanduser().resolve()
        check_private_run_dir(resume_dir)
        values, saved_command = saved_values(resume_dir)
        check_resumable(resume_dir)
        if command and command != saved_command:
            raise UsageError(
                f"--resume {resume_dir} continues the run's own command ({' '.join(saved_command)!s:.80}); "
                "drop the command after --, or start a new run with a new --run-dir")
        if getattr(args, "config", None):  # given with the resume: it changes the saved settings, as options do
            cli_values = {**load_file(Path(args.config)), **cli_values}
        given_dir = cli_values.get("run_dir")
        if given_dir and Path(given_dir).expanduser().resolve() != resume_dir:
            where = f"--run-dir {given_dir}" if getattr(args, "run_dir", None) else f"run-dir = {given_dir!r} in {args.config}"
            raise UsageError(f"{where}: a resumed run stays in its own directory ({resume_dir}); drop it, "
                             "or resume the run that is there")
        _enter_saved_cwd(resume_dir, cli_values)
        values.update(cli_values)
        values["run_dir"] = str(resume_dir)
        command = command or saved_command
    else:
        values = {k: v[1] for k, v in SETTINGS.items()}
        config_file = getattr(args, "config", None) or os.environ.get("HANGWATCH_CONFIG")
        if config_file:
            cli_values = {**load_file(Path(config_file)), **cli_values}  # given, not defaulted
        values.update(cli_values)
    return values, command, resume_dir, set(cli_values)


# Settings that name a path: given with --resume, they are the user's, relative to where they typed them.
_PATH_SETTINGS = ("checkpoint_dir", "metrics_textfile")


def _enter_saved_cwd(resume_dir: Path, cli_values: dict[str, Any]) -> None:
    """A resumed run runs where the run was started: its command (``python train.py``) and its
    relative paths (``--checkpoint-dir out``) resolve there, wherever ``--resume`` is typed."""
    cwd = saved_cwd(resume_dir)
    if cwd is None or cwd == os.getcwd():
        return
    if not os.path.isdir(cwd):
        raise UsageError(f"--resume {resume_dir}: the run was started in {cwd}, which is gone; its command and "
                         "relative paths resolve there: recreate that directory, or start a new run")
    for name in _PATH_SETTINGS:
        if isinstance(cli_values.get(name), str):
            cli_values[name] = os.path.abspath(os.path.expanduser(cli_values[name]))
    try:
        os.chdir(cwd)
    except OSError as exc:
        raise UsageError(f"--resume {resume_dir}: cannot enter {cwd}, where the run was started: "
                         f"{exc.strerror or exc}") from exc



def check_private_run_dir(run_dir: Path) -> None:
    """--resume trusts what the run dir holds (settings.json chooses the command it
    launches, tree.json what it kills): only if nobody but us could have written it."""
    from hangwatch.contract.private import check_private_file, private_dir  # noqa: PLC0415

    if not run_dir.is_dir():
        raise UsageError(f"--resume {run_dir}: no such run directory")
    private_dir(run_dir, "--resume run directory", create=False)
    for name in ("settings.json", "tree.json", "journal.jsonl"):
        check_private_file(run_dir / name, f"--resume {name}")


def check_resumable(run_dir: Path) -> None:
    """Refuse to resume a run that finished, or one whose supervisor is still alive
    (resuming would kill the processes it is watching)."""
    from hangwatch.cli.rundir import resumable_finish  # noqa: PLC0415
    from hangwatch.cli.run_summary import summarise  # noqa: PLC0415

    journal = run_dir / "journal.jsonl"
    if not journal.is_file():
        raise UsageError(f"--resume {run_dir}: no journal.jsonl; nothing to resume")
    try:
        summary = summarise(journal)
    except OSError as exc:
        raise UsageError(f"--resume {run_dir}: cannot read the journal: {exc.strerror or exc}; this is not a run "
                         "hangwatch can continue: start a new one with a new --run-dir") from exc
    # A stopped run (a user, a scheduler's preemption), one whose checkpoints could not be listed
    # (76), and a cohort node's that stopped because the cohort could not go on (75: the job is
    # resumed on every node, docs/multinode.md) did not fail: resumed, or their progress would start over.
    finished = summary["finished"]
    if finished is not None and not resumable_finish(finished, cohort=summary.get("cohort") is not None):
        raise UsageError(
            f"--resume {run_dir}: this run already finished ({finished['outcome']}, exit "
            f"{finished['exit_code']}); start a new run with a new --run-dir"
        )
    if summary["state"].startswith("running"):
        raise UsageError(f"--resume {run_dir}: still {summary['state']}; stop that supervisor first")
