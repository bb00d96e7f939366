"""``hangwatch``: the command line.

    hangwatch run [options] -- COMMAND...   supervise a training command
    hangwatch status RUN_DIR                attempts, incidents, restarts, state
    hangwatch replay PATH...                classify saved bundles / py-spy dumps
    hangwatch bundle pack BUNDLE            make a .tar.gz for a bug report
    hangwatch report BUNDLE                 (re)write a bundle's HTML report

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
import contextlib  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any, Mapping  # noqa: E402

if TYPE_CHECKING:
    from hangwatch.contract.capture import CaptureHook

from hangwatch.contract.errors import ConfigError
from hangwatch.contract.exitcodes import EXIT_CODES, EXIT_INTERNAL, EXIT_USAGE
from hangwatch.contract.terminal import one_line, terminal_safe
from hangwatch.contract.tools import abort_running_tools
from hangwatch.contract.private import check_import_path, private_dir
from hangwatch.supervisor.config import MAX_SECONDS, SETTINGS, build, build_operate, load_file, save_values, saved_cwd, saved_values

sys.excepthook = _excepthook  # imported: main() handles a Ctrl-C from here on

EPILOG_EXIT = "exit codes:\n" + "\n".join(f"  {code:3d}  {text}" for code, text in EXIT_CODES.items()) + (
    "\n  other  after SIGINT/SIGTERM/SIGHUP to the supervisor: the trainer's own status, shell style"
    "\n         (128+N if it died of signal N); 128 + our signal if no trainer was running"
    "\n         and, in a multi-node job, on every node"
)


class UsageError(Exception):
    """A user mistake; printed without a traceback."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"hangwatch: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hangwatch",
        description="Hang watchdog and recovery supervisor for long GPU training runs.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND", parser_class=_Parser)
    add_run_parser(sub)
    status = sub.add_parser("status", help="summarise a run from its journal")
    status.add_argument("run_dir", metavar="RUN_DIR", type=Path)
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--follow", action="store_true",
                        help="stream events and phase changes as they happen, until the run finishes (Ctrl-C to stop)")
    status.set_defaults(func=cmd_status)
    from hangwatch.diagnostics.cli import register  # noqa: PLC0415

    register(sub, whatif=_whatif)
    _report_runs_too(sub.choices["report"])
    from hangwatch.cli.doctor import add_doctor_parser  # noqa: PLC0415

    add_doctor_parser(sub)
    return parser


def _report_runs_too(report: argparse.ArgumentParser) -> None:
    """``hangwatch report RUN_DIR``: a run's page (attempts, incidents, goodput); a bundle as before."""
    bundle_report = report.get_default("func")
    report.description = ("(Re)write a bundle's report.html, or, given a run directory, RUN_DIR/report.html: "
                          "every attempt and incident of the run, with goodput and time to recover.")

    def run_or_bundle(args: argparse.Namespace) -> int:
        run_dir = Path(args.bundle)
        if not (run_dir / "journal.jsonl").is_file():
            return int(bundle_report(args))
        from hangwatch.cli.runreport import write_run_report  # noqa: PLC0415
        from hangwatch.contract.capped import FileTooLarge, NotRegularFile  # noqa: PLC0415
        from hangwatch.diagnostics.bundle import check_output_path  # noqa: PLC0415
        from hangwatch.diagnostics.errors import DiagnosticsError  # noqa: PLC0415

        out = Path(args.output) if args.output else None
        try:
            check_output_path(out or run_dir / "report.html")  # never below a folder another user controls
            path, g = write_run_report(run_dir, out)
        except DiagnosticsError as exc:
            raise UsageError(str(exc)) from exc
        except (NotRegularFile, FileTooLarge) as exc:  # the journal: the only file read whole
            raise UsageError(f"{run_dir / 'journal.jsonl'}: cannot read the journal: {exc.strerror}") from exc
        except OSError as exc:
            raise UsageError(f"{out or run_dir}: cannot write the report there ({exc.strerror or exc})") from exc
        goodput = f"{100 * g['goodput']:.1f} %" if g["goodput"] is not None else "-"
        print(terminal_safe(f"{path}  (goodput {goodput}: {g['productive_s']:.0f} s of {g['wall_s']:.0f} s; "
                            f"{len(g['incidents'])} incident(s), {len(g['attempts'])} attempt(s))"))
        return 0

    report.set_defaults(func=run_or_bundle)


def add_run_parser(sub: Any) -> None:
    d = {k: v[1] for k, v in SETTINGS.items()}
    run = sub.add_parser(
        "run",
        help="supervise a training command",
        usage="hangwatch run [options] -- COMMAND...",
        description=(
            "Launch COMMAND, watch GPU, CPU and heartbeats of its whole process tree, and on a stall "
            "capture evidence, kill the tree and resume from the newest complete checkpoint with cuda "
            "graphs off, within a restart budget."
        ),
        epilog=EPILOG_EXIT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        argument_default=argparse.SUPPRESS,
    )
    g = run.add_argument_group("run")
    g.add_argument("--run-dir", metavar="DIR", help="run directory (default: a new folder under ./hangwatch-runs/)")
    g.add_argument("--resume", metavar="RUN_DIR", type=Path,
                   help="continue a run whose supervisor died or that was stopped (a preempted job): same journal, "
                        "attempt count and settings, from the newest complete checkpoint")
    m = run.add_argument_group("multi-node (docs/multinode.md); taken from Slurm or NODE_RANK/NNODES/MASTER_ADDR when unset")
    m.add_argument("--cohort", metavar="HOST:PORT",
                   help="the cohort store: node 0's supervisor hosts it there, the others connect (default port 29600)")
    m.add_argument("--node-rank", type=int, metavar="N", help="this node's rank, 0-based")
    m.add_argument("--nnodes", type=int, metavar="N", help="number of nodes (one hangwatch run per node)")
    m.add_argument("--cohort-id", metavar="ID", help="names the job in the store (default: $SLURM_JOB_ID)")
    m.add_argument("--lease-timeout", type=float, metavar="S",
                   help="a node whose supervisor has not renewed its lease for this long is lost (default 15)")
    m.add_argument("--join-timeout", type=float, metavar="S",
                   help="how long every node waits at start for all nodes to join the cohort (default 120)")
    g.add_argument("--config", metavar="FILE", type=Path,
                   help="TOML file of settings (keys = long option names); also $HANGWATCH_CONFIG")
    g.add_argument("--quiet", action="store_true", help="do not echo the trainer's output to the console")
    g.add_argument("--log-max-bytes", type=int, metavar="N",
                   help=f"cap of each attempt's stdout/stderr log: head and newest tail kept (default {d['log_max_bytes']})")
    g.add_argument("--keep-incidents", type=int, metavar="N",
                   help=f"keep the newest N incident bundles plus the first of each signature (default {d['keep_incidents']})")
    g.add_argument("--min-free-mb", type=float, metavar="MB",
                   help=f"warn, and cut trainer logs to 1 MB, below this free space on the run dir's disk; 0 disables (default {d['min_free_mb']:g})")

    g = run.add_argument_group("checkpoints and resume")
    g.add_argument("--checkpoint-dir", metavar="DIR", help="where the trainer writes checkpoints")
    g.add_argument("--checkpoint-glob", metavar="GLOB", help=f"checkpoint folders (default {d['checkpoint_glob']})")
    g.add_argument("--checkpoint-marker", metavar="FILE",
                   help=f"file whose presence makes a checkpoint complete (default {d['checkpoint_marker']})")
    g.add_argument("--resume-arg", metavar="TEMPLATE",
                   help="arguments appended on a resume, e.g. '--resume_from_checkpoint={checkpoint}'")

    g = run.add_argument_group("detection")
    g.add_argument("--gpu-probe", metavar="PROBE",
                   help="auto (NVML if it loads), nvml, none, or file:PATH (simulated GPU) (default auto)")
    g.add_argument("--interval", type=float, metavar="S", help=f"sampling interval (default {d['interval']:g})")
    g.add_argument("--gpu-busy", type=float, metavar="PCT", help=f"GPU utilisation that counts as busy (default {d['gpu_busy']:g})")
    g.add_argument("--cpu-idle", type=float, metavar="PCT",
                   help=f"CPU of GPU-holding processes, %% of one core, that counts as idle (default {d['cpu_idle']:g})")
    g.add_argument("--stall-window", type=float, metavar="S", help=f"how long a stall must last (default {d['stall_window']:g})")
    g.add_argument("--progress-timeout", type=float, metavar="S",
                   help=f"hang: no heartbeat progress for S seconds after the first beat, busy or idle; 0 disables (default {d['progress_timeout']:g})")
    g.add_argument("--engine-step-timeout", type=float, metavar="S",
                   help=f"stall: a rollout engine made no step for S seconds with a request in flight "
                        f"(engines beat per step); 0 disables (default {d['engine_step_timeout']:g})")
    g.add_argument("--engine-wedge-window", type=float, metavar="S",
                   help="stall, sooner: the same, but after S seconds when the wedge shows itself (the engine's GPU "
                        "busy, its holders and the engine idle); 0 disables (default: a quarter of the engine step "
                        "timeout)")
    g.add_argument("--step-timeout", type=float, metavar="S",
                   help="hang: beats go on but their step has not changed for S seconds (a livelock, or beats from "
                        "a side thread while the loop is stuck); longer than the slowest healthy step; 0 disables (default 0)")
    g.add_argument("--phase-timeout", action="append", metavar="PHASE=S", dest="phase_timeouts",
                   help="longer window for a phase the trainer announces (repeatable; defaults: checkpoint, compile, warmup = 1800)")
    g.add_argument("--noise-samples", type=int, metavar="N",
                   help=f"contrary samples in a row tolerated during a stall (default {d['noise_samples']})")
    g.add_argument("--idle-only", action="store_true",
                   help="the progress timeout fires only on an idle tree (no busy GPU, CPU idle): misses busy hangs")

    g = run.add_argument_group("recovery")
    g.add_argument("--capture-timeout", type=float, metavar="S", help=f"hard deadline for evidence capture (default {d['capture_timeout']:g})")
    g.add_argument("--grace", type=float, metavar="S", help=f"SIGTERM to SIGKILL grace (default {d['grace']:g})")
    g.add_argument("--kill-timeout", type=float, metavar="S", help=f"wait after SIGKILL before giving up (default {d['kill_timeout']:g})")
    g.add_argument("--containment", choices=["auto", "cgroup", "tree"],
                   help="cgroup: each attempt in a cgroup v2 of its own, killed with cgroup.kill; tree: the "
                        "process-tree walk; auto: cgroup where writable, else tree with a warning (default auto)")
    g.add_argument("--prewarm-launcher", action="store_true",
                   help="once an attempt is up, start the next attempt's launcher process ahead (a fresh, "
                        "single-use Python that imports e.g. torchrun's module and waits), so a relaunch skips "
                        "its cold start; ~0.3 GB idle for torchrun; falls back to a cold launch (default off)")
    g.add_argument("--prewarm-import", action="append", metavar="MODULE",
                   help="also import MODULE in the warm launcher (repeatable), e.g. torch for 'python train.py'")
    g.add_argument("--gpu-release-timeout", type=float, metavar="S", help=f"wait for GPU memory release (default {d['gpu_release_timeout']:g})")
    g.add_argument("--cudagraphs-after-stall", choices=["off", "keep"],
                   help="turn cuda graphs off for every attempt after a stall (default off)")
    g.add_argument("--no-eager-escalation", action="store_false", dest="eager_escalation",
                   help="do not set HANGWATCH_ENFORCE_EAGER=1 after a second stall with graphs off")
    g.add_argument("--recovery", choices=["auto", "job"],
                   help="auto: when only the rollout engine's worker is wedged (a stall while the trainer waits in "
                        "the generate phase), kill just that worker and let the trainer's generator restart it with "
                        "graphs off and retry the batch; job: always kill the tree and resume from a checkpoint "
                        "(default auto)")
    g.add_argument("--engine-retry-window", type=float, metavar="S",
                   help="a second engine wedge within S seconds of an engine restart restarts the job "
                        f"(default {d['engine_retry_window']:g})")

    g = run.add_argument_group("restart policy")
    g.add_argument("--max-restarts", type=int, metavar="N", help=f"total restart budget (default {d['max_restarts']})")
    g.add_argument("--max-restarts-per-hour", type=int, metavar="N", help=f"crash-loop cap (default {d['max_restarts_per_hour']})")
    g.add_argument("--no-progress-restarts", type=int, metavar="N",
                   help=f"stop after N attempts in a row without checkpoint progress; 0 disables (default {d['no_progress_restarts']})")
    g.add_argument("--on-crash", choices=["restart", "stop"], help="what a crash leads to (default restart)")
    g.add_argument("--backoff", type=float, metavar="S", help=f"first backoff between restarts, doubling (default {d['backoff']:g})")
    g.add_argument("--backoff-max", type=float, metavar="S", help=f"backoff cap (default {d['backoff_max']:g})")
    g = run.add_argument_group("alerts and metrics (README: Alerts and metrics)")
    g.add_argument("--notify", action="append", metavar="URL",
                   help="send incident, gave_up and run_finished alerts to this apprise URL (repeatable; slack://, "
                        "ntfy://, mailto://, json://host/path, ...); a config file keeps the token out of ps")
    g.add_argument("--notify-command", metavar="CMD", help="run CMD (through sh) with each alert as JSON on stdin")
    g.add_argument("--metrics-port", metavar="[HOST:]PORT", help="serve Prometheus metrics at http://HOST:PORT/metrics")
    g.add_argument("--metrics-textfile", metavar="PATH", help="keep Prometheus metrics in PATH (node-exporter textfile collector)")
    g.add_argument("--heartbeat-warning", type=float, metavar="S",
                   help=f"warn when an attempt sends no heartbeat within S s of launch; 0 disables (default {d['heartbeat_warning']:g})")
    run.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    run.set_defaults(func=cmd_run)


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


def cmd_run(args: argparse.Namespace) -> int:
    from hangwatch.cli import logsetup, operate  # noqa: PLC0415  (keep `hangwatch --help` fast)
    from hangwatch.supervisor.contain import guardian, launcher  # noqa: PLC0415
    from hangwatch.supervisor.watch.probes import ProbeError, make_probe  # noqa: PLC0415
    from hangwatch.supervisor.runner import Supervisor  # noqa: PLC0415
    from hangwatch.supervisor.contain.tree_ops import LocalTree  # noqa: PLC0415

    # Twice: the interpreter made PYTHONPATH's relative and empty entries absolute at its start (our
    # own lazy imports), and the helpers we start resolve them in the directory --resume enters.
    check_import_path(os.environ.get("PYTHONPATH"))  # before it is used: a lazy import, a helper's start
    values, command, resume_dir, explicit = _run_settings(args)  # --resume enters the run's working directory
    check_import_path(os.environ.get("PYTHONPATH"))
    config = build(values, command, explicit=explicit)
    operate_config = build_operate(values)
    try:
        probe, probe_note = make_probe(config.gpu_probe)
    except ProbeError as exc:
        raise UsageError(str(exc)) from exc

    run_dir = config.run_dir
    membership = _cohort_membership(args, config)  # a usage error here leaves no run directory behind
    _open_run_dir(run_dir, resumed=resume_dir is not None, given=values.get("run_dir"))
    values["run_dir"] = str(run_dir)
    save_values(run_dir, values, command, cwd=os.getcwd())
    logsetup.configure(run_dir / "hangwatch.log")
    import structlog  # noqa: PLC0415

    log = structlog.get_logger("hangwatch.cli")
    if probe_note:
        log.warning("gpu_detection_off", message=probe_note)
    if not launcher.set_child_subreaper():
        log.warning("no_subreaper", message="PR_SET_CHILD_SUBREAPER unavailable: escaped processes may be missed")
    state, lost = _resume_state(run_dir, log) if resume_dir is not None else (None, None)

    try:
        cohort = _join_cohort(args, config, log, membership, values.get("checkpoint_dir"))
    except UsageError as exc:
        _note_not_started(run_dir, f"refused while joining the cohort: {exc}")
        raise
    except _StoppedJoining as exc:
        return _stopped_joining(run_dir, exc.signum, exc.told)
    supervisor = Supervisor(config, probe, default_capture_hook(), state=state, cohort=cohort)
    if lost is not None:
        log.warning("attempt_lost", message=f"attempt {lost} was left open by the dead supervisor: journaled as supervisor_lost")
    ops = operate.start(config, operate_config, supervisor.state.run_id, probe.name, log)
    supervisor.journal, supervisor.observer = ops.journal, ops.observer  # status file, alerts, metrics
    # In a cohort a stop on this node stops every node, and another node's stop stops this one.
    stop = supervisor.cohort.bind_stop(supervisor.request_stop) if supervisor.cohort is not None else supervisor.request_stop
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    signal.signal(signal.SIGCONT, supervisor.note_continued)  # a suspended job: that time is not silence
    for sig in _PENDING_STOP[:1]:  # a stop that came after the join, before the handlers above
        stop(sig, None)
    containment = _contain(supervisor, config, log, resumed=resume_dir is not None)
    if config.prewarm_launcher and isinstance(supervisor.tree, LocalTree):
        from hangwatch.supervisor.contain.prewarm import Prewarmer  # noqa: PLC0415
        supervisor.tree.prewarm = Prewarmer(config.prewarm_import, clock=supervisor.tree.clock)
    keeper, guardian_state = _start_guardian(supervisor, log)
    log.info("run_dir", message=f"run directory: {run_dir}")
    try:
        return _supervise(supervisor, config, log, resumed=resume_dir is not None, guardian_state=guardian_state,
                          containment=containment)
    finally:
        abort_running_tools()  # an abandoned capture's py-spy would otherwise hold our exit up
        ops.close()  # bounded: queued alerts get NOTIFY_DRAIN_S at most
        if keeper is not None:
            guardian.stop(keeper)
        if isinstance(supervisor.tree, LocalTree):
            supervisor.tree.close()
        if cohort is not None:
            cohort.close()
        probe.close()


def _run_settings(args: argparse.Namespace) -> tuple[dict[str, Any], list[str], Path | None, set[str]]:
    """Settings, command, the run to resume (if any), and which settings the user gave:
    defaults < TOML file < command line, or the saved run's settings < command line on --resume."""
    command = list(getattr(args, "command", []))
    if command and command[0] == "--":
        command = command[1:]
    elif command:
        raise UsageError(f"unknown option or missing '--' before the command: {command[0]!r} "
                         "(write: hangwatch run [options] -- COMMAND...)")
    cli_values = {k: v for k, v in vars(args).items() if k in SETTINGS}
    for name, value in cli_values.items():
        # `--checkpoint-dir "$OUT"` with OUT unset: the empty value turned resuming off unsaid.
        if isinstance(value, str) and not value.strip():
            raise UsageError(f"--{name.replace('_', '-')} was given an empty value; give one, or leave the option out")

    resume_dir: Path | None = getattr(args, "resume", None)
    if resume_dir is not None:
        resume_dir = resume_dir.expanduser().resolve()
        _check_private_run_dir(resume_dir)
        values, saved_command = saved_values(resume_dir)
        _check_resumable(resume_dir)
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


def _open_run_dir(run_dir: Path, *, resumed: bool, given: str | None = None) -> None:
    """Create (0700) or check the run dir, lock it for this process's life, refuse a used one."""
    from hangwatch.cli import rundir  # noqa: PLC0415
    from hangwatch.contract.private import check_ancestors  # noqa: PLC0415

    leads = f"--run-dir {given}: " if given and Path(os.path.abspath(Path(given).expanduser())) != run_dir else ""
    try:
        if given:
            check_ancestors(Path(given).expanduser(), "run directory")  # as written: a link on the way counts
        private_dir(run_dir, f"{leads}run directory")  # refuses a directory another user controls
    except OSError as exc:
        raise UsageError(f"--run-dir {run_dir}: cannot create it: {exc}") from exc
    try:
        rundir.lock(run_dir)  # held for this process's life; the kernel drops it even on SIGKILL
    except OSError as exc:
        raise UsageError(f"--run-dir {run_dir}: cannot lock it: {exc}") from exc
    if not resumed:
        rundir.refuse_existing(run_dir)


def _resume_state(run_dir: Path, log: Any) -> tuple[Any, int | None]:
    """Kill what the dead supervisor left, close its open attempt, and rebuild the run's state."""
    from hangwatch.cli import rundir  # noqa: PLC0415
    from hangwatch.supervisor.runner import load_state  # noqa: PLC0415
    from hangwatch.contract.journal import read_journal  # noqa: PLC0415
    from hangwatch.supervisor.contain.left_behind import kill_left_behind, resume_marks  # noqa: PLC0415
    from hangwatch.supervisor.contain.members_file import recorded  # noqa: PLC0415

    try:  # what escaped after the last tick, should the guardian have died too (an unreadable journal: below)
        marks = resume_marks(read_journal(run_dir / "journal.jsonl"), str(run_dir))
    except (OSError, ValueError):
        marks = []
    killed = kill_left_behind(recorded(run_dir / "tree.json"), marks)  # as its guardian would have
    if killed:
        log.warning("orphans_killed", message=f"killed {len(killed)} survivor(s) of the previous supervisor: {killed}")
    try:
        lost = rundir.close_lost_attempt(run_dir, killed)
        return load_state(run_dir), lost
    except (OSError, ValueError) as exc:
        raise UsageError(f"--resume {run_dir}: cannot read the journal: {exc}") from exc


def _start_guardian(supervisor: Any, log: Any) -> tuple[Any, str]:
    """The guardian (kills the tree if we are SIGKILLed), and what to journal about it."""
    from hangwatch.supervisor.contain import guardian  # noqa: PLC0415
    from hangwatch.supervisor.contain.tree_ops import LocalTree  # noqa: PLC0415

    keeper = guardian.start(later=True)  # one that does not arm now is tried again (keep_armed)
    exc = keeper.start_error
    if exc is not None:
        log.warning("guardian_unavailable", message=(
            f"{exc}: if this supervisor is SIGKILLed, processes that left the trainer's session "
            "will not be killed; hangwatch run --resume kills them later (another start is tried in a second, then after 10 s, doubling to 10 min)"))
    if isinstance(supervisor.tree, LocalTree):
        supervisor.tree.attach_guardian(keeper.send, keeper.armed)  # the tree goes over the pipe, not through a file

    def guardian_event(event: str, message: str) -> None:
        (log.warning if event == "guardian_rearmed" else log.error)(event, message=message)
        try:
            supervisor.journal.append(event, pid=keeper.proc.pid if keeper.proc is not None else None, message=message)
        except Exception:  # noqa: BLE001  (a journal that cannot be written is the main loop's to report)
            pass

    keeper.keep_armed(guardian_event)  # a guardian that dies is replaced (a user's kill, the OOM killer)
    return keeper, "armed" if exc is None else f"unavailable: {exc}"


def _supervise(supervisor: Any, config: Any, log: Any, *, resumed: bool, guardian_state: str,
               containment: Any) -> int:
    """Run; a failure of hangwatch itself kills the tree and ends the journal (exit 70)."""
    from hangwatch.contract.journal import JournalError  # noqa: PLC0415
    from hangwatch.supervisor.contain import launcher  # noqa: PLC0415

    try:
        return supervisor.run(resumed=resumed, guardian=guardian_state, containment=containment)
    except launcher.LaunchError as exc:
        if supervisor.cohort is not None:  # the other nodes read why this one left (docs/multinode.md)
            supervisor.cohort.gave_up(str(exc))
        supervisor.journal.append("run_finished", outcome="launch_failed", exit_code=EXIT_USAGE, reason=str(exc),
                                  attempts=supervisor.state.attempt)
        raise UsageError(str(exc)) from exc
    except Exception as exc:
        if supervisor.cohort is not None:
            supervisor.cohort.gave_up(f"hangwatch failed on node {supervisor.cohort.node_rank}: "
                                      f"{type(exc).__name__}: {exc}")
        if isinstance(exc, JournalError):
            # Supervising without a record breaks the promise that every decision is
            # on disk (and the disk is likely full): stop cleanly instead.
            log.error("journal_failed", message=f"{exc}; killing the tree and stopping (exit {EXIT_INTERNAL})")
        else:
            log.exception("internal_error", message=f"hangwatch failed: {exc}")
        try:
            supervisor.tree.kill(grace=config.kill.grace, kill_timeout=config.kill.kill_timeout)
        finally:
            try:
                supervisor.journal.append("run_finished", outcome="internal_error", exit_code=EXIT_INTERNAL,
                                          reason=f"{type(exc).__name__}: {exc}", attempts=supervisor.state.attempt)
            except JournalError:
                pass  # already reported above; nothing more can be recorded
        return EXIT_INTERNAL


def _cohort_membership(args: argparse.Namespace, config: Any) -> Any:
    """This node's place in a multi-node cohort (None for a single-node run), checked before
    anything is written: a mistake in the multi-node options is a usage error, not a run."""
    from hangwatch.supervisor.cohort.node import joined_before, membership_from  # noqa: PLC0415

    _check_cohort_numbers(args)
    try:
        membership = membership_from(os.environ, endpoint=getattr(args, "cohort", None),
                                     node_rank=getattr(args, "node_rank", None), nnodes=getattr(args, "nnodes", None),
                                     cohort_id=getattr(args, "cohort_id", None))
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    joined = joined_before(config.run_dir / "journal.jsonl") if getattr(args, "resume", None) is not None else None
    if getattr(args, "resume", None) is not None and (membership is not None or joined is not None):
        # A whole job is resumed on every node, each with its cohort options again (they are not saved
        # settings); a node resumed alone ran as a single node, its launcher waiting for a rendezvous.
        node = f" (this run was node {joined.get('node_rank')} of {joined.get('nnodes')})" if joined else ""
        if membership is None:
            raise UsageError(f"--resume is not supported for a multi-node cohort{node} without its cohort options: "
                             "resume every node of the job together, each with its --cohort, --node-rank and "
                             "--nnodes given again")
        if joined is None or (joined.get("node_rank"), joined.get("nnodes")) != (membership.node_rank, membership.nnodes):
            was = f"this run was node {joined.get('node_rank')} of {joined.get('nnodes')}" if joined else \
                "this run was not a multi-node cohort node"
            raise UsageError(f"--resume with --node-rank {membership.node_rank} --nnodes {membership.nnodes}: {was}; "
                             "resume each node's own run with its own rank")
    if membership is None:
        rank = getattr(args, "node_rank", None)
        if rank:  # this node would run alone as if it were node 0: its peers wait for a node that never joins
            raise UsageError(f"--node-rank {rank}: no multi-node cohort is set up (no --nnodes above 1, --cohort, "
                             "Slurm or NNODES); add --nnodes N --cohort HOST:PORT, or drop --node-rank")
    return membership


def _join_cohort(args: argparse.Namespace, config: Any, log: Any, membership: Any,
                 checkpoint_given: str | None = None) -> Any:
    """Multi-node: join the cohort of per-node supervisors (None for a single-node run)."""
    from hangwatch.supervisor.cohort.node import (Cohort, CohortError, JoinStopped, barrier_timeout,  # noqa: PLC0415
                                             runs_launcher, settings_fingerprint)
    from hangwatch.supervisor.cohort.store import StoreError, TCPStoreClient  # noqa: PLC0415
    import time  # noqa: PLC0415

    if membership is None:
        return None
    # A job resumes on every node or on none: one node from scratch while the others resume splits it.
    fingerprint = {**settings_fingerprint(config, membership.nnodes, checkpoint_given), "resumed": getattr(args, "resume", None) is not None}
    lease = float(getattr(args, "lease_timeout", 15.0))
    join = float(getattr(args, "join_timeout", None) or 120.0)
    started = time.monotonic()

    # The join may wait minutes for the other nodes: a stop then ends it, and the others are told
    # (the default action killed this node unsaid, and they waited out their join timeout or lease).
    def stopped(signum: int, _frame: Any) -> None:
        _hold_stops()  # a second signal during the goodbye is not a second interruption
        raise JoinStopped(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stopped)
    log.info("cohort", message=(f"node {membership.node_rank} of {membership.nnodes}; cohort store "
                                f"{membership.endpoint}" + (" (hosted here)" if membership.is_leader else "")))
    cohort = None
    try:
        store = TCPStoreClient(membership.host, membership.port, master=membership.is_leader,
                               timeout=max(2.0, lease / 3), connect_timeout=join)  # as long as the join waits
        cohort = Cohort(store, membership, fingerprint, lease_interval=max(0.2, lease / 10), lease_timeout=lease,
                        barrier_timeout=barrier_timeout(config), launcher=runs_launcher(config.command))
        cohort.join(timeout=join, spent=time.monotonic() - started)  # reaching the store counts: one bound in all
        _hold_stops()  # joined: a stop now waits for cmd_run's handlers, which replay it
    except JoinStopped as exc:
        _hold_stops()
        told = False
        if cohort is not None:
            with contextlib.suppress(Exception):
                told = cohort.leave_joining(exc.signum)
        if "store" in locals():
            store.close()
        raise _StoppedJoining(exc.signum, told) from None
    except (StoreError, CohortError) as exc:
        _hold_stops()
        if "store" in locals():
            store.close()
        raise UsageError(f"--cohort: {exc}") from exc
    return cohort


_PENDING_STOP: list[int] = []  # signals held while the join ends, before the run's own handlers


def _hold_stops() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: _PENDING_STOP.append(signum))


class _StoppedJoining(Exception):
    def __init__(self, signum: int, told: bool) -> None:
        super().__init__(signum)
        self.signum, self.told = signum, told


def _stopped_joining(run_dir: Path, signum: int, told: bool) -> int:
    """This node was stopped while it joined the cohort: why on stderr and in the run directory
    (``hangwatch status`` reads it where there is no journal yet), exit 128 + the signal."""
    name = signal.Signals(signum).name
    why = f"stopped by {name} while joining the cohort; " + (
        "the other nodes were told" if told else "no other node had been reached (they wait out their join timeout)")
    print(f"hangwatch: {why}", file=sys.stderr)
    _note_not_started(run_dir, why, exit_code=128 + signum)
    return 128 + signum


NOT_STARTED = "not_started.json"  # why a run stopped before its journal began (status reads it)


def _note_not_started(run_dir: Path, why: str, exit_code: int = EXIT_USAGE) -> None:
    import json  # noqa: PLC0415

    from hangwatch.contract.atomic import write_file  # noqa: PLC0415

    with contextlib.suppress(OSError):
        write_file(run_dir / NOT_STARTED, json.dumps({"why": one_line(why)[:2000], "exit_code": exit_code}).encode())


def _check_cohort_numbers(args: argparse.Namespace) -> None:
    """Refused when given, cohort or not: a value that cannot be meant is never silently ignored."""
    nnodes = getattr(args, "nnodes", None)
    if nnodes is not None and nnodes < 1:
        raise UsageError(f"--nnodes {nnodes}: must be at least 1 (the number of nodes, one hangwatch run on each)")
    lease = getattr(args, "lease_timeout", None)
    if lease is not None and not (math.isfinite(lease) and 0 < lease <= MAX_SECONDS):
        raise UsageError(f"--lease-timeout {lease:g}: must be a positive number of seconds, at most {MAX_SECONDS:.0f} "
                         "(default 15)")
    join = getattr(args, "join_timeout", None)
    if join is not None and not (math.isfinite(join) and 0 < join <= MAX_SECONDS):
        raise UsageError(f"--join-timeout {join:g}: must be a positive number of seconds, at most {MAX_SECONDS:.0f} "
                         "(default 120)")


def _contain(supervisor: Any, config: Any, log: Any, resumed: bool = False) -> str:
    """Put the real tree under kernel containment where possible; returns which was used."""
    from hangwatch.supervisor.contain.cgroup import CgroupError, detect, kill_stale  # noqa: PLC0415
    from hangwatch.supervisor.contain.tree_ops import LocalTree  # noqa: PLC0415

    if not isinstance(supervisor.tree, LocalTree):
        return "tree"
    if resumed:
        killed = kill_stale(supervisor.state.run_id)
        if killed:
            log.warning("orphans_killed", message=f"killed {len(killed)} process(es) left in the previous "
                                                  f"supervisor's cgroups: {killed}")
    try:
        containment, why_not = detect(config.containment, supervisor.state.run_id)
    except CgroupError as exc:
        raise UsageError(f"{exc} (--containment auto falls back to the process-tree walk where no cgroup can be "
                         "used; --containment tree always uses it)") from exc
    supervisor.tree.containment = containment
    if containment is None and config.containment == "auto":
        log.warning("no_cgroup_containment", message=(
            f"kernel containment unavailable ({why_not}); falling back to the process-tree walk: a process "
            "forked and escaped in the instant before a SIGKILL of this supervisor can survive it"))
    return supervisor.tree.containment_name


def _check_private_run_dir(run_dir: Path) -> None:
    """--resume trusts what the run dir holds (settings.json chooses the command it
    launches, tree.json what it kills): only if nobody but us could have written it."""
    from hangwatch.contract.private import check_private_file, private_dir  # noqa: PLC0415

    if not run_dir.is_dir():
        raise UsageError(f"--resume {run_dir}: no such run directory")
    private_dir(run_dir, "--resume run directory", create=False)
    for name in ("settings.json", "tree.json", "journal.jsonl"):
        check_private_file(run_dir / name, f"--resume {name}")


def _check_resumable(run_dir: Path) -> None:
    """Refuse to resume a run that finished, or one whose supervisor is still alive
    (resuming would kill the processes it is watching)."""
    from hangwatch.cli.rundir import resumable_finish  # noqa: PLC0415
    from hangwatch.cli.status import summarise  # noqa: PLC0415

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


def default_capture_hook() -> "CaptureHook":
    """The full diagnostics capture (py-spy stacks, process table, GPU state, logs).

    Injected into the supervisor here, at the top, so the supervisor never
    imports diagnostics; if it fails at run time the supervisor falls back to
    the samples-only capture by itself.
    """
    from hangwatch.diagnostics.capture import IncidentCapture  # noqa: PLC0415

    return IncidentCapture()  # also offers early_round: the first stacks while a hang builds


def _whatif(samples: Any, config: Mapping[str, Any]) -> Any:
    """``hangwatch replay``'s what-if: the supervisor's own detector over a bundle's samples."""
    from hangwatch.supervisor.config import MAX_SECONDS, MIN_INTERVAL  # noqa: PLC0415
    from hangwatch.supervisor.decide.detector import DetectorConfig, replay_detector  # noqa: PLC0415

    # The bundle's recorded thresholds come from whoever sent it: held to what `run` accepts
    # (an interval of 1e308 failed an assertion in the detector: exit 70).
    for name in ("interval", "stall_window", "progress_timeout", "engine_step_timeout", "engine_wedge_window",
                 "step_timeout", "gap_tolerance"):
        value = config.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not (
                math.isfinite(value) and 0 <= value <= MAX_SECONDS and (name != "interval" or value >= MIN_INTERVAL)):
            raise ConfigError(f"the bundle's recorded {name} is {value!r}: not a number of seconds hangwatch run "
                              f"takes (at most a week; an interval of at least {MIN_INTERVAL:g} s)")
    if "engine_wedge_window" not in config:
        # Recorded before the option (every bundle since records it, null for the default): that run had no
        # wedge window, and its recorded settings replayed with today's default fired sooner than it did.
        config = {**config, "engine_wedge_window": 0.0}
    return replay_detector(samples, DetectorConfig.from_json(config))


def cmd_status(args: argparse.Namespace) -> int:
    from hangwatch.cli.status import follow, render_status, summarise  # noqa: PLC0415

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


def _read_not_started(run_dir: Path) -> str | None:
    import json  # noqa: PLC0415

    from hangwatch.contract.capped import read_capped  # noqa: PLC0415

    try:  # status reads run dirs other users may write: a regular file only (a FIFO hung it), capped
        record = json.loads(read_capped(run_dir / NOT_STARTED, 8192))
        return f"{one_line(str(record['why']))[:2000]} (exit {int(record['exit_code'])})"
    except (OSError, ValueError, TypeError, KeyError):
        return None


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
        why = _read_not_started(args.run_dir)
        if why:
            state = f"stopped before its run began: {why}; nothing to resume: start it again"
    if args.json:
        import json  # noqa: PLC0415

        print(json.dumps({"run_dir": str(args.run_dir), "state": state, "attempts": []}, indent=2))
    else:
        print(terminal_safe(f"run      {args.run_dir}\nstate    {state}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
