"""``hangwatch replay``, ``hangwatch bundle pack``, ``hangwatch report``.

``register(subparsers)`` adds the commands to the supervisor's parser; each sets
``func`` to a callable returning the exit code. User mistakes
(``DiagnosticsError``, ``ConfigError``) print ``hangwatch: error: ...`` and exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from functools import wraps
from pathlib import Path
from typing import Any, Callable

from hangwatch.contract.errors import ConfigError
from hangwatch.contract.exitcodes import EXIT_USAGE
from hangwatch.contract.atomic import write_file
from hangwatch.contract.terminal import one_line, terminal_safe
from hangwatch.diagnostics.bundle import check_output_path, load_bundle, pack, replace_file
from hangwatch.diagnostics.errors import DiagnosticsError
from hangwatch.diagnostics.replay import WhatIfDetector, aggregate, analyse, processes_overview, render_text
from hangwatch.diagnostics.signatures import load_signatures


def _guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    @wraps(fn)
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except (DiagnosticsError, ConfigError) as exc:
            print(f"hangwatch: error: {one_line(str(exc))}", file=sys.stderr)
            return EXIT_USAGE
        except (KeyError, TypeError, ValueError, ArithmeticError, AttributeError, IndexError, RecursionError,
                MemoryError) as exc:
            # Bundles come from other people: a field of the wrong type, shape or value is
            # malformed input, not our bug, and never a traceback.
            print(f"hangwatch: error: malformed input ({type(exc).__name__}: {one_line(str(exc)[:200])}); "
                  "not a bundle or dump hangwatch wrote", file=sys.stderr)
            return EXIT_USAGE

    return run


def register(subparsers: Any, whatif: WhatIfDetector | None = None) -> None:
    """Add replay, bundle and report to ``subparsers``; ``whatif`` enables replay's detector re-run."""
    rp = subparsers.add_parser("replay", help="classify incident bundles and py-spy dumps; aggregate; what-if the detector",
                               description="Classify bundles (dirs or .tar.gz), run dirs and raw py-spy dumps (text or --json, "
                                            "also pasted from bug reports). Several inputs at once: one table of every "
                                            "process and the suspect among them.")
    rp.add_argument("paths", nargs="+", metavar="PATH")
    rp.add_argument("--json", action="store_true", help="machine-readable output")
    rp.add_argument("--signatures", action="append", default=[], metavar="FILE", help="extra signature file (repeatable)")
    rp.add_argument("--stall-window", type=float, help="what-if: stall window (s)")
    rp.add_argument("--gpu-busy", type=float, help="what-if: GPU busy threshold (%%)")
    rp.add_argument("--cpu-idle", type=float, help="what-if: CPU idle threshold (%% of one core)")
    rp.add_argument("--interval", type=float, help="what-if: sampling interval (s)")
    rp.add_argument("--progress-timeout", type=float, help="what-if: heartbeat progress timeout (s)")
    rp.set_defaults(func=_guard(cmd_replay), whatif=whatif)

    bp = subparsers.add_parser("bundle", help="incident bundle tools")
    bsub = bp.add_subparsers(dest="bundle_command", metavar="COMMAND")
    bsub.required = True
    pk = bsub.add_parser("pack", help="make a .tar.gz of a bundle")
    pk.add_argument("bundle", metavar="BUNDLE")
    pk.add_argument("-o", "--output", metavar="OUT.tar.gz")
    pk.set_defaults(func=_guard(cmd_pack))

    rep = subparsers.add_parser("report", help="(re)generate a bundle's report.html, or a run's (RUN_DIR/report.html)")
    rep.add_argument("bundle", metavar="BUNDLE")
    rep.add_argument("-o", "--output", metavar="OUT.html", help="default: BUNDLE/report.html (required for .tar.gz)")
    rep.add_argument("--signatures", action="append", default=[], metavar="FILE")
    rep.set_defaults(func=_guard(cmd_report))


#: The what-if options, checked as ``hangwatch run`` checks the same ones: NaN passes no
#: comparison and would leave the detector silently blind, a window or interval of zero or
#: less means nothing, and seconds past a week overflow the OS's timers in a run.
_WEEK = 7 * 24 * 3600.0
_WHATIF_LIMITS: dict[str, tuple[Callable[[float], bool], str]] = {
    "stall_window": (lambda v: 0 < v <= _WEEK, "a positive number of seconds, at most a week (604800)"),
    "interval": (lambda v: 0.001 <= v <= _WEEK, "a number of seconds from 0.001 to a week (604800)"),
    "progress_timeout": (lambda v: 0 < v <= _WEEK, "a positive number of seconds, at most a week (604800)"),
    "gpu_busy": (lambda v: 0 < v <= 100, "a percent in (0, 100]"),
    "cpu_idle": (lambda v: 0 <= v, "a percent of one core, 0 or more"),
}


def _check_whatif(args: argparse.Namespace) -> None:
    for name, (ok, what) in _WHATIF_LIMITS.items():
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and ok(value)):
            raise DiagnosticsError(f"--{name.replace('_', '-')} must be {what}, got {value!r}")


def cmd_replay(args: argparse.Namespace) -> int:
    _check_whatif(args)
    signatures = load_signatures(args.signatures)
    overrides = {
        "stall_window": args.stall_window,
        "gpu_busy_pct": args.gpu_busy,
        "cpu_idle_pct": args.cpu_idle,
        "interval": args.interval,
        "progress_timeout": args.progress_timeout,
    }
    overrides = {k: v for k, v in overrides.items() if v is not None}
    incidents = analyse(args.paths, signatures, overrides, whatif=getattr(args, "whatif", None))
    agg = aggregate(incidents)
    ov = processes_overview(incidents)
    if args.json:
        doc = {"incidents": [i.to_json() for i in incidents], "aggregate": agg, **ov.to_json()}
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(terminal_safe(render_text(incidents, agg, ov)))
    return 0


def cmd_pack(args: argparse.Namespace) -> int:
    def skipped(name: str, what: str) -> None:
        print(f"hangwatch: warning: {one_line(name)}: left out of the archive ({what}); it holds regular "
              "files only", file=sys.stderr)

    out = pack(Path(args.bundle), Path(args.output) if args.output else None, skipped)
    print(out)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from hangwatch.diagnostics.report import render_report  # noqa: PLC0415

    path = Path(args.bundle)
    if not path.exists():
        raise DiagnosticsError(f"{path}: no such bundle")
    b = load_bundle(path)
    html = render_report(b, signature_files=args.signatures)
    if args.output:
        out = Path(args.output)
        check_output_path(out)  # never replace a device node, a directory or a symlink
        try:
            write_file(out, html.encode("utf-8"))
        except OSError as exc:
            raise DiagnosticsError(f"{out}: cannot write the report ({exc.strerror or exc})") from None
    elif path.is_dir():
        out = replace_file(path, "report.html", html)
    else:
        raise DiagnosticsError(f"{path}: is an archive; give -o OUT.html")
    print(out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hangwatch", description="hangwatch diagnostics")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    register(sub)
    return parser
