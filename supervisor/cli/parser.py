"""The command line's grammar: every command's options and help, built with argparse.

``build_parser(handlers)`` is handed each command's handler (``hangwatch.cli.main`` imports
them), so building the parser loads no command: the parser only knows the option names,
types and help text. Each parser sets ``func`` to its handler, which returns the exit code.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from hangwatch.contract.exitcodes import EXIT_CODES, EXIT_USAGE, REPRODUCE_EXIT_CODES
from hangwatch.supervisor.config import SETTINGS

Handler = Callable[[argparse.Namespace], int]
GIB = 1 << 30

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


def build_parser(handlers: Mapping[str, Handler]) -> argparse.ArgumentParser:
    """The whole parser; ``handlers`` maps each command ("bundle pack" for the nested one) to its handler."""
    parser = _Parser(
        prog="hangwatch",
        description="Hang watchdog and recovery supervisor for long GPU training runs.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND", parser_class=_Parser)
    add_run_parser(sub, handlers["run"])
    status = sub.add_parser("status", help="summarise a run from its journal")
    status.add_argument("run_dir", metavar="RUN_DIR", type=Path)
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--follow", action="store_true",
                        help="stream events and phase changes as they happen, until the run finishes (Ctrl-C to stop)")
    status.set_defaults(func=handlers["status"])
    _add_bundle_parsers(sub, handlers)
    _add_doctor_parser(sub, handlers["doctor"])
    _add_reproduce_parser(sub, handlers["reproduce"])
    return parser


def _add_bundle_parsers(sub: Any, handlers: Mapping[str, Handler]) -> None:
    """``replay``, ``bundle pack`` and ``report``: the commands that read incident bundles."""
    rp = sub.add_parser("replay", help="classify incident bundles and py-spy dumps; aggregate; what-if the detector",
                               description="Classify bundles (dirs or .tar.gz), run dirs and raw stack dumps (py-spy text or --json, "
                                            "faulthandler, tracebacks, gdb/lldb/WinDbg, macOS sample, Linux kernel "
                                            "stacks, Julia backtraces; also pasted from bug reports). Several inputs at once: one table of every "
                                            "process and the suspect among them.")
    rp.add_argument("paths", nargs="+", metavar="PATH")
    rp.add_argument("--json", action="store_true", help="machine-readable output")
    rp.add_argument("--signatures", action="append", default=[], metavar="FILE", help="extra signature file (repeatable)")
    rp.add_argument("--stall-window", type=float, help="what-if: stall window (s)")
    rp.add_argument("--gpu-busy", type=float, help="what-if: GPU busy threshold (%%)")
    rp.add_argument("--cpu-idle", type=float, help="what-if: CPU idle threshold (%% of one core)")
    rp.add_argument("--interval", type=float, help="what-if: sampling interval (s)")
    rp.add_argument("--progress-timeout", type=float, help="what-if: heartbeat progress timeout (s)")
    rp.set_defaults(func=handlers["replay"])

    bp = sub.add_parser("bundle", help="incident bundle tools")
    bsub = bp.add_subparsers(dest="bundle_command", metavar="COMMAND")
    bsub.required = True
    pk = bsub.add_parser("pack", help="make a .tar.gz of a bundle")
    pk.add_argument("bundle", metavar="BUNDLE")
    pk.add_argument("-o", "--output", metavar="OUT.tar.gz")
    pk.set_defaults(func=handlers["bundle pack"])

    rep = sub.add_parser("report", help="(re)generate a bundle's report.html, or a run's (RUN_DIR/report.html)",
                         description="(Re)write a bundle's report.html, or, given a run directory, RUN_DIR/report.html: "
                                     "every attempt and incident of the run, with goodput and time to recover.")
    rep.add_argument("bundle", metavar="BUNDLE")
    rep.add_argument("-o", "--output", metavar="OUT.html", help="default: BUNDLE/report.html (required for .tar.gz)")
    rep.add_argument("--signatures", action="append", default=[], metavar="FILE")
    rep.set_defaults(func=handlers["report"])


def parse_bytes(text: str) -> int:
    units = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
             "MIB": 1 << 20, "G": GIB, "GB": GIB, "GIB": GIB, "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}
    raw = text.strip().upper()
    number = raw.rstrip("BKMGTI")
    unit = raw[len(number):]
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; write e.g. 16G, 15000000000 or 14.2GiB") from None
    # not finite: inf, or 1e400 read as inf, has no int and must be refused here (argparse turns
    # only ValueError and TypeError into a usage error; an OverflowError became a traceback).
    if unit not in units or not 0 < value < math.inf or value * units[unit] >= 1 << 63:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; write e.g. 16G, 15000000000 or 14.2GiB")
    return int(value * units[unit])


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def _add_doctor_parser(sub: Any, handler: Handler) -> None:
    doctor = sub.add_parser(
        "doctor", help="check this machine before a long run (py-spy, ptrace, NVML, cgroups, /dev/shm, versions, the vLLM engine)",
        description="Check what a multi-day run needs, in a few seconds, before it starts: one line per "
                    "check (ok, warn or fail) with the fix.",
        epilog="exit status: 0 nothing failed (warnings allowed), 1 a check failed, 2 bad arguments",
    )
    doctor.add_argument("--model-bytes", type=parse_bytes, metavar="N",
                        help="size of the trained weights (e.g. 16G) to check /dev/shm against")
    doctor.add_argument("--ranks", type=_positive_int, default=1, metavar="N",
                        help="trainer processes per node that each stage their weights (default 1)")
    doctor.add_argument("--run-dir", type=Path, default=Path("hangwatch-runs"), metavar="DIR",
                        help="where runs will be written (default ./hangwatch-runs)")
    doctor.add_argument("--shm", default="/dev/shm", metavar="DIR", help="weight staging directory (default /dev/shm)")
    doctor.add_argument("--python", metavar="PATH",
                        help="the trainer's Python: check its TRL/vLLM/transformers (default: this interpreter)")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.set_defaults(func=handler)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 7 * 24 * 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds (at most a week)")
    return value


def _add_reproduce_parser(sub: Any, handler: Handler) -> None:
    rp = sub.add_parser(
        "reproduce", help="run a bundle's kept batch again on a fresh engine: does it wedge?",
        description="Run the engine request that was in flight at an incident (the bundle's batch.json)\n"
                    "against a fresh engine in an isolated worker, with the recorded settings under --policy.\n"
                    "Each run reports whether it wedged (no engine step within --step-timeout), its times,\n"
                    "and for a wedge a new bundle of the wedged worker's evidence (docs/diagnostics.md).",
        epilog="exit codes:\n" + "\n".join(f"  {code:3d}  {text}" for code, text in REPRODUCE_EXIT_CODES.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rp.add_argument("bundle", metavar="BUNDLE", help="an incident bundle (directory or .tar.gz) with a batch.json")
    rp.add_argument("--model", metavar="PATH", help="load the model from PATH instead of the recorded model path")
    rp.add_argument("--times", type=_positive_int, default=1, metavar="N",
                    help="run the batch N times, each on a fresh engine (default 1)")
    rp.add_argument("--policy", choices=["recorded", "graphs-off", "eager"], default="recorded",
                    help="recorded: the engine arguments as recorded; graphs-off: cuda graphs off "
                         "(cudagraph_mode NONE, torch.compile kept); eager: enforce_eager (default recorded)")
    rp.add_argument("--step-timeout", type=_positive_seconds, default=60.0, metavar="S",
                    help="a run wedged when its engine makes no step for S seconds (default 60)")
    rp.add_argument("--out", metavar="DIR",
                    help="where the runs' logs, wedge bundles and reproduce.json go "
                         "(default ./hangwatch-reproduce-BUNDLE-TIME)")
    rp.add_argument("--json", action="store_true", help="machine-readable output")
    rp.set_defaults(func=handler)


def add_run_parser(sub: Any, handler: Handler) -> None:
    """``hangwatch run``: its options in groups, shown in this order; defaults from the settings table."""
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
    _add_run_group(run, d)
    _add_checkpoint_group(run, d)
    _add_detection_group(run, d)
    _add_recovery_group(run, d)
    _add_restart_group(run, d)
    _add_alerts_group(run, d)
    run.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    run.set_defaults(func=handler)


def _add_run_group(run: argparse.ArgumentParser, d: Mapping[str, Any]) -> None:
    g = run.add_argument_group("run")
    g.add_argument("--run-dir", metavar="DIR", help="run directory (default: a new folder under ./hangwatch-runs/)")
    g.add_argument("--resume", metavar="RUN_DIR", type=Path,
                   help="continue a run whose supervisor died or that was stopped (a preempted job): same journal, "
                        "attempt count and settings, from the newest complete checkpoint")
    _add_multinode_group(run)  # between --resume and --config, as the help has always listed them
    g.add_argument("--config", metavar="FILE", type=Path,
                   help="TOML file of settings (keys = long option names); also $HANGWATCH_CONFIG")
    g.add_argument("--quiet", action="store_true", help="do not echo the trainer's output to the console")
    g.add_argument("--log-max-bytes", type=int, metavar="N",
                   help=f"cap of each attempt's stdout/stderr log: head and newest tail kept (default {d['log_max_bytes']})")
    g.add_argument("--keep-incidents", type=int, metavar="N",
                   help=f"keep the newest N incident bundles plus the first of each signature (default {d['keep_incidents']})")
    g.add_argument("--min-free-mb", type=float, metavar="MB",
                   help=f"warn, and cut trainer logs to 1 MB, below this free space on the run dir's disk; 0 disables (default {d['min_free_mb']:g})")


def _add_multinode_group(run: argparse.ArgumentParser) -> None:
    m = run.add_argument_group("multi-node (docs/multinode.md); taken from Slurm or NODE_RANK/NNODES/MASTER_ADDR when unset")
    m.add_argument("--cohort", metavar="HOST:PORT",
                   help="the cohort store: node 0's supervisor hosts it there, the others connect (default port 29600)")
    m.add_argument("--node-rank", type=int, metavar="N", help="this node's rank, 0-based")
    m.add_argument("--nnodes", type=int, metavar="N", help="number of nodes (one hangwatch run per node)")
    m.add_argument("--cohort-id", metavar="ID", help="names the job in the store (default: $SLURM_JOB_ID)")
    m.add_argument("--cohort-secret-file", metavar="PATH",
                   help="the job's cohort secret (every node the same; mode 600): store records are authenticated "
                        "with it (default: $HANGWATCH_COHORT_SECRET; none: unauthenticated)")
    m.add_argument("--lease-timeout", type=float, metavar="S",
                   help="a node whose supervisor has not renewed its lease for this long is lost (default 15)")
    m.add_argument("--join-timeout", type=float, metavar="S",
                   help="how long every node waits at start for all nodes to join the cohort (default 120)")


def _add_checkpoint_group(run: argparse.ArgumentParser, d: Mapping[str, Any]) -> None:
    g = run.add_argument_group("checkpoints and resume")
    g.add_argument("--checkpoint-dir", metavar="DIR", help="where the trainer writes checkpoints")
    g.add_argument("--checkpoint-glob", metavar="GLOB", help=f"checkpoint folders (default {d['checkpoint_glob']})")
    g.add_argument("--checkpoint-marker", metavar="FILE",
                   help=f"file whose presence makes a checkpoint complete (default {d['checkpoint_marker']})")
    g.add_argument("--resume-arg", metavar="TEMPLATE",
                   help="arguments appended on a resume, e.g. '--resume_from_checkpoint={checkpoint}'")


def seconds_or_auto(text: str) -> float | str:
    """``--progress-timeout``'s value: seconds, or ``auto`` (learned from the run)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds or auto, got {text!r}") from None


def _add_detection_group(run: argparse.ArgumentParser, d: Mapping[str, Any]) -> None:
    g = run.add_argument_group("detection")
    g.add_argument("--gpu-probe", metavar="PROBE",
                   help="auto (NVML if it loads), nvml, none, or file:PATH (simulated GPU) (default auto)")
    g.add_argument("--interval", type=float, metavar="S", help=f"sampling interval (default {d['interval']:g})")
    g.add_argument("--gpu-busy", type=float, metavar="PCT", help=f"GPU utilisation that counts as busy (default {d['gpu_busy']:g})")
    g.add_argument("--cpu-idle", type=float, metavar="PCT",
                   help=f"CPU of GPU-holding processes, %% of one core, that counts as idle (default {d['cpu_idle']:g})")
    g.add_argument("--stall-window", type=float, metavar="S", help=f"how long a stall must last (default {d['stall_window']:g})")
    g.add_argument("--progress-timeout", type=seconds_or_auto, metavar="S|auto",
                   help=f"hang: no heartbeat progress for S seconds after the first beat (of any trainer process, "
                        f"each judged on its own), busy or idle; 0 disables; auto learns it from the run's beat "
                        f"intervals after a warm-up (default {d['progress_timeout']:g})")
    g.add_argument("--auto-warmup-beats", type=int, metavar="N",
                   help=f"--progress-timeout auto: beat intervals seen before the timeout is learned; until then "
                        f"the fixed timeout applies (default {d['auto_warmup_beats']})")
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


def _add_recovery_group(run: argparse.ArgumentParser, d: Mapping[str, Any]) -> None:
    g = run.add_argument_group("recovery")
    g.add_argument("--capture-timeout", type=float, metavar="S", help=f"hard deadline for evidence capture (default {d['capture_timeout']:g})")
    g.add_argument("--in-process-stacks", choices=["hangwatch", "all", "off"],
                   help="which Python processes dump their own stacks on a signal, for the capture where py-spy "
                        "may not attach: hangwatch (those importing hangwatch.trainer, and the engine worker), all "
                        "(every Python process, through a start-up hook put on PYTHONPATH; docs/diagnostics.md), "
                        "off (default hangwatch)")
    g.add_argument("--stacks-signal", metavar="SIG",
                   help=f"the signal of that dump (default {d['stacks_signal']}; not SIGUSR1/SIGUSR2, which Slurm "
                        "and NVRx use)")
    g.add_argument("--grace", type=float, metavar="S", help=f"SIGTERM to SIGKILL grace (default {d['grace']:g})")
    g.add_argument("--kill-timeout", type=float, metavar="S", help=f"wait after SIGKILL before giving up (default {d['kill_timeout']:g})")
    g.add_argument("--containment", choices=["auto", "cgroup", "tree"],
                   help="cgroup: each attempt in a cgroup v2 of its own, killed with cgroup.kill; tree: the "
                        "process-tree walk; auto: cgroup where writable, else tree with a warning (default auto)")
    warm = g.add_mutually_exclusive_group()
    warm.add_argument("--prewarm-launcher", action="store_true", default=argparse.SUPPRESS,
                      help="once an attempt is up, start the next attempt's launcher process ahead (a fresh, "
                           "single-use Python that imports e.g. torchrun's module and waits), so a relaunch skips "
                           "its cold start; ~0.3 GB idle for torchrun; falls back to a cold launch. Default: on for "
                           "launchers known not to touch the GPU at import (torchrun, python -m torch.distributed.run, "
                           "accelerate launch, python SCRIPT); this option prewarms any other Python launcher too")
    warm.add_argument("--no-prewarm-launcher", action="store_false", dest="prewarm_launcher",
                      default=argparse.SUPPRESS,
                      help="never prewarm: every relaunch starts the launcher cold")
    g.add_argument("--prewarm-import", action="append", metavar="MODULE",
                   help="also import MODULE in the warm launcher (repeatable), e.g. torch for 'python train.py', "
                        "where the warm process becomes the rank; torchrun's ranks are fresh processes it cannot help")
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
    g.add_argument("--on-hang", choices=["act", "observe"],
                   help="act: recover from a hang (kill, restart; default); observe: detect, capture the evidence, "
                        "alert and journal what would have been done (would_act), but never kill, restart or change "
                        "the graph policy on a hang; the trainer is watched on, and a recovery by itself is journaled")
    g.add_argument("--engine-retry-window", type=float, metavar="S",
                   help="a second engine wedge within S seconds of an engine restart restarts the job "
                        f"(default {d['engine_retry_window']:g})")


def _add_restart_group(run: argparse.ArgumentParser, d: Mapping[str, Any]) -> None:
    g = run.add_argument_group("restart policy")
    g.add_argument("--max-restarts", type=int, metavar="N", help=f"total restart budget (default {d['max_restarts']})")
    g.add_argument("--max-restarts-per-hour", type=int, metavar="N", help=f"crash-loop cap (default {d['max_restarts_per_hour']})")
    g.add_argument("--no-progress-restarts", type=int, metavar="N",
                   help=f"stop after N attempts in a row without checkpoint progress; 0 disables (default {d['no_progress_restarts']})")
    g.add_argument("--on-crash", choices=["restart", "stop"], help="what a crash leads to (default restart)")
    g.add_argument("--backoff", type=float, metavar="S", help=f"first backoff between restarts, doubling (default {d['backoff']:g})")
    g.add_argument("--backoff-max", type=float, metavar="S", help=f"backoff cap (default {d['backoff_max']:g})")


def _add_alerts_group(run: argparse.ArgumentParser, d: Mapping[str, Any]) -> None:
    g = run.add_argument_group("alerts and metrics (README: Alerts and metrics)")
    g.add_argument("--notify", action="append", metavar="URL",
                   help="send incident, gave_up and run_finished alerts to this apprise URL (repeatable; slack://, "
                        "ntfy://, mailto://, json://host/path, ...); a config file keeps the token out of ps")
    g.add_argument("--notify-command", metavar="CMD", help="run CMD (through sh) with each alert as JSON on stdin")
    g.add_argument("--metrics-port", metavar="[HOST:]PORT", help="serve Prometheus metrics at http://HOST:PORT/metrics")
    g.add_argument("--metrics-textfile", metavar="PATH", help="keep Prometheus metrics in PATH (node-exporter textfile collector)")
    g.add_argument("--heartbeat-warning", type=float, metavar="S",
                   help=f"warn when an attempt sends no heartbeat within S s of launch; 0 disables (default {d['heartbeat_warning']:g})")
