"""``hangwatch``: the command line's entry point (``hangwatch`` and ``python -m hangwatch.cli``).

    hangwatch run [options] -- COMMAND...   supervise a training command
    hangwatch status RUN_DIR                attempts, incidents, restarts, state
    hangwatch replay PATH...                classify saved bundles / py-spy dumps
    hangwatch bundle pack BUNDLE            make a .tar.gz for a bug report
    hangwatch report BUNDLE|RUN_DIR         (re)write a bundle's or a run's HTML report
    hangwatch doctor                        check this machine before a long run
    hangwatch reproduce BUNDLE              run a bundle's kept batch again: does it wedge?

The options are ``hangwatch.cli.parser``'s, the commands ``hangwatch.cli.commands``';
this module parses, dispatches and turns what escapes a command into an exit code.
User mistakes print ``hangwatch: error: ...`` and exit 2, never a traceback.
"""

from __future__ import annotations

import sys


def _quiet_interrupt(kind, value, traceback):  # type: ignore[no-untyped-def]
    """A Ctrl-C while hangwatch is still importing: one line, not a traceback (the process
    still dies of SIGINT, as the shell expects). Kept only if the imports below are cut short."""
    if issubclass(kind, KeyboardInterrupt):
        sys.stderr.write("hangwatch: interrupted\n")
    else:
        _excepthook(kind, value, traceback)  # whatever hook was there before


_excepthook, sys.excepthook = sys.excepthook, _quiet_interrupt

import argparse  # noqa: E402
import os  # noqa: E402

from hangwatch.cli import parser as grammar  # noqa: E402
from hangwatch.cli.errors import UsageError  # noqa: E402
from hangwatch.contract.errors import ConfigError  # noqa: E402
from hangwatch.contract.exitcodes import EXIT_INTERNAL, EXIT_USAGE  # noqa: E402
from hangwatch.contract.terminal import one_line  # noqa: E402

sys.excepthook = _excepthook  # imported: main() handles a Ctrl-C from here on


def build_parser() -> argparse.ArgumentParser:
    """The parser, handed every command's handler. Importing the commands loads diagnostics and
    doctor (a second or so): done here, when the command line is parsed, not on import."""
    from hangwatch.cli.commands import bundle, doctor, replay, report, reproduce, run, status  # noqa: PLC0415

    return grammar.build_parser({
        "run": run.cmd_run,
        "status": status.cmd_status,
        "replay": replay.cmd_replay,
        "bundle pack": bundle.cmd_pack,
        "report": report.cmd_report,
        "doctor": doctor.cmd_doctor,
        "reproduce": reproduce.cmd_reproduce,
    })


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C while the parser's modules load: no traceback
        return 130


def _main(argv: list[str] | None) -> int:
    _ensure_standard_streams()
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not args_list:
        parser.print_help()
        return EXIT_USAGE
    args, extras = parser.parse_known_args(_join_option_values(args_list))
    if extras:
        # The subcommand's own usage, not the top level's: it is the one that helps.
        _chosen_parser(parser, args).error(f"unrecognized arguments: {' '.join(extras)}")
    if not hasattr(args, "func"):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except (UsageError, ConfigError) as exc:
        # Paths and values in the message can come from disk (a planted name, a journal's text):
        # on one line, or a planted name's newline forges one ("hangwatch: all good").
        print(f"hangwatch: error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`hangwatch status RUN | head`): not our failure. Point stdout
        # at /dev/null so the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as the shell reports a command killed by it
    except Exception as exc:  # noqa: BLE001  (one line here, the traceback in a file)
        return _internal_error(exc)


def _ensure_standard_streams() -> None:
    """Started with stdin, stdout or stderr closed (``>&-``, some schedulers): put /dev/null there.

    Otherwise Python's ``sys.stdout`` is None (echoing the trainer failed: exit 70), and the
    next file opened would get descriptor 1 or 2, so a stray print would land in it."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", encoding="utf-8", errors="replace", closefd=False))


def _internal_error(exc: BaseException) -> int:
    """A bug of ours: one line on the console, the traceback (no locals) in a file."""
    from hangwatch.cli import logsetup  # noqa: PLC0415
    from hangwatch.contract.redact import redact_text  # noqa: PLC0415

    where = logsetup.record_internal_error(exc)
    tail = f"; traceback in {where}" if where else ""
    print(f"hangwatch: internal error: {type(exc).__name__}: {redact_text(str(exc))}{tail}", file=sys.stderr)
    return EXIT_INTERNAL


def _chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost subcommand parser that ``args`` selected (``bundle pack`` -> pack's)."""
    current = parser
    while True:
        action = next((a for a in current._actions if isinstance(a, argparse._SubParsersAction)), None)  # noqa: SLF001
        name = getattr(args, action.dest, None) if action is not None else None
        if action is None or name not in action.choices:
            return current
        current = action.choices[name]


def _join_option_values(argv: list[str]) -> list[str]:
    """Let ``--resume-arg '--flag={checkpoint}'`` work as written: argparse would
    take a value that starts with ``--`` for an option of its own."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return out + argv[i:]
        if token == "--resume-arg" and i + 1 < len(argv):
            out.append(f"--resume-arg={argv[i + 1]}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out


if __name__ == "__main__":
    sys.exit(main())
