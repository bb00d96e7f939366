"""``hangwatch status RUN_DIR``: what a run did and is doing, or why it has no journal yet.

The summary, its rendering and ``--follow`` are ``hangwatch.cli.run_summary``'s; this
module chooses among them and prints.
"""

from __future__ import annotations

import argparse

from hangwatch.cli.errors import UsageError
from hangwatch.cli.rundir import read_not_started
from hangwatch.contract.terminal import terminal_safe


def cmd_status(args: argparse.Namespace) -> int:
    from hangwatch.cli.run_summary import follow, render_status, summarise  # noqa: PLC0415

    path = args.run_dir / "journal.jsonl"
    if not path.is_file():
        return _status_before_start(args)
    if args.follow:
        return follow(args.run_dir, as_json=args.json)
    try:
        summary = summarise(path)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the journal: {exc.strerror or exc}; is RUN_DIR a hangwatch run "
                         "directory?") from exc
    if args.json:
        import json  # noqa: PLC0415

        print(json.dumps(summary, indent=2))
    else:
        print(terminal_safe(render_status(summary)))  # phases, reasons and paths come from the trainer too
    return 0


def _status_before_start(args: argparse.Namespace) -> int:
    """A run directory whose journal is not there yet: a supervisor still starting (a multi-node
    cohort node waits for every node to join, up to --join-timeout: status said "not a hangwatch
    run directory" the whole time), or one that stopped before its run began."""
    from hangwatch.cli.rundir import held_by_live_supervisor  # noqa: PLC0415

    if not (args.run_dir / "settings.json").is_file():
        raise UsageError(f"{args.run_dir}: not a hangwatch run directory (no journal.jsonl)")
    if held_by_live_supervisor(args.run_dir):
        state = ("starting: no attempt yet (a multi-node cohort node waits here until every node has joined, "
                 "up to --join-timeout)")
    else:
        state = ("stopped before its run began (refused at start, for example a cohort node that could not join: "
                 "its console said why); nothing to resume: start it again")
        why = read_not_started(args.run_dir)
        if why:
            state = f"stopped before its run began: {why}; nothing to resume: start it again"
    if args.json:
        import json  # noqa: PLC0415

        print(json.dumps({"run_dir": str(args.run_dir), "state": state, "attempts": []}, indent=2))
    else:
        print(terminal_safe(f"run      {args.run_dir}\nstate    {state}"))
    return 0
