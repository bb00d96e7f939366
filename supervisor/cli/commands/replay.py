"""``hangwatch replay PATH...``: classify saved bundles, run dirs and py-spy dumps; aggregate;
what-if the detector.

The what-if re-runs the supervisor's own detector over a bundle's samples with other
thresholds; diagnostics takes it injected (``WhatIfDetector``) and never imports the
supervisor.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, Callable, Mapping

from hangwatch.cli.errors import bundle_input_errors
from hangwatch.contract.errors import ConfigError
from hangwatch.contract.terminal import terminal_safe
from hangwatch.diagnostics.errors import DiagnosticsError
from hangwatch.diagnostics.replay import aggregate, analyse, processes_overview, render_text
from hangwatch.diagnostics.signatures import load_signatures


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


@bundle_input_errors
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
    incidents = analyse(args.paths, signatures, overrides, whatif=_whatif)
    agg = aggregate(incidents)
    ov = processes_overview(incidents)
    if args.json:
        doc = {"incidents": [i.to_json() for i in incidents], "aggregate": agg, **ov.to_json()}
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(terminal_safe(render_text(incidents, agg, ov)))
    return 0


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
