#!/usr/bin/env python3
"""Replay the full false-positive corpus through the stall detector.

    .venv/bin/python scripts/bench_false_positives.py [--seed 0] [--hours-per-scenario 128] [--jobs 2]

Prints one row per scenario, then the summary line:

    run_hours=<h> false_verdicts=<n> wedges_detected=<k>/<m> median_latency_over_window=<r> busy_hangs_detected=<b>/<c> rank_hangs_detected=<s>/<t>

and, for the engine streams (the engine step rule: per-process engine beats beside the
trainer's; ``fp_corpus.engine_corpus``), a table, the longest silence the rule watched on a
healthy engine, a sweep of ``engine_step_timeout`` (false verdicts by cause), and a last line:

    engine_run_hours=<h> engine_false_verdicts=<n> engine_wedges_detected=<k>/<m> median_engine_latency_s=<s> median_engine_latency_by_wedge_s=<wedge>:<s>,... longest_healthy_silence_s=<l> engine_sweep=<timeout>:<false verdicts>,...

An engine wedge counts as detected when a verdict comes within ``engine_step_timeout`` + 2
intervals of the engine's last beat; its latency is measured from that beat.

A wedge counts as detected when a stall verdict comes within window + 2 intervals
of the injected onset; r is the median of those latencies divided by the window.
A busy hang (spinning, no beat) counts as detected when a hang verdict comes within
progress timeout + 2 intervals of its last beat; ``wedges_detected`` counts both.
A stuck rank (scenario ``ranks_uneven``: one rank stops beating while the others go on)
counts as detected when a verdict naming it comes within its timeout + 2 intervals of
counted silence (its clock is paused while rank 0 works alone); ``wedges_detected`` counts
it too. ``--stall-window``/``--noise-samples``/``--no-phase-timeouts`` replay the same corpus
under other settings (a what-if), and ``--ablations`` adds a table of weaker
settings on a slice of the corpus, to show that it does fool them.

``--progress-timeout auto`` replays the corpus with the progress timeout learned from each
run (``--auto-warmup-beats``), then with the fixed one, and prints both side by side, then:

    auto run_hours=<h> false_verdicts=<n> wedges_detected=<k>/<m> median_stall_latency_s=<fixed>/<auto> median_busy_hang_latency_s=<fixed>/<auto> median_rank_hang_latency_s=<fixed>/<auto> learned_timeout_s=<min>/<median>/<max>
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hangwatch.contract.errors import ConfigError  # noqa: E402
from hangwatch.supervisor.decide.detector import DetectorConfig  # noqa: E402
from hangwatch.supervisor.decide.learned_timeout import AutoTimeout  # noqa: E402


def _load_corpus():
    name = "hangwatch_fp_corpus"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "supervisor" / "decide" / "fp_corpus.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


fp = _load_corpus()


def _replay(args):
    replay, plan, config = args
    return getattr(fp, replay)(plan, config)


def replay_all(runs, config, jobs, replay: str = "replay", chunksize: int = 2):
    """``fp.<replay>(plan, config)`` for every run, in ``jobs`` processes."""
    if jobs <= 1:
        return [getattr(fp, replay)(plan, config) for plan in runs]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(_replay, [(replay, plan, config) for plan in runs], chunksize=chunksize))


def print_table(rows, config) -> None:
    print(f"{'scenario':<20} {'runs':>4} {'run_h':>7} {'false':>5} {'wedges':>8}   latency/window min / median / max"
          f"   {'busy':>7}  (verdict-beat)/timeout max")
    for row in rows:
        lat = row.latency_over_window(config.stall_window)
        lat_s = " / ".join(f"{x:.3f}" for x in lat) if lat else "-"
        busy = f"{max(row.busy_ratios):.3f}" if row.busy_ratios else "-"
        print(f"{row.scenario:<20} {row.runs:>4} {row.hours:>7.1f} {row.false_verdicts:>5} "
              f"{row.detected:>4}/{row.wedges:<3}   {lat_s:<23}   {row.busy_detected:>3}/{row.busy_wedges:<3}  {busy}")


def ablations(runs, jobs) -> None:
    base = DetectorConfig()
    weaker = [
        ("no phase timeouts", dataclasses.replace(base, phase_timeouts={})),
        ("window 30 s", dataclasses.replace(base, stall_window=30.0)),
        ("window 45 s", dataclasses.replace(base, stall_window=45.0)),
        ("no noise tolerance", dataclasses.replace(base, noise_samples=0)),
        ("progress timeout 300 s", dataclasses.replace(base, progress_timeout=300.0)),
        ("idle only (old rule)", dataclasses.replace(base, idle_only=True)),
    ]
    print()
    print(f"ablations on {sum(p.hours for p in runs):.0f} run-hours ({len(runs)} runs):")
    print(f"{'setting':<22} {'false':>5} {'wedges':>9}  median latency/window  {'busy hangs':>10}")
    for name, cfg in weaker:
        rows = fp.summarise(replay_all(runs, cfg, jobs), cfg)
        lat = [x for row in rows for x in row.latencies]
        med = f"{statistics.median(lat) / cfg.stall_window:.3f}" if lat else "-"
        busy = f"{sum(r.busy_detected for r in rows)}/{sum(r.busy_wedges for r in rows)}"
        print(f"{name:<22} {sum(r.false_verdicts for r in rows):>5} "
              f"{sum(r.detected for r in rows):>4}/{sum(r.wedges for r in rows):<4}  {med:<21}  {busy:>10}")
    print()


def replay_engine_all(runs, config, jobs):
    return replay_all(runs, config, jobs, replay="replay_engine", chunksize=1)


def _causes(causes: dict) -> str:
    return ", ".join(f"{why} {n}" for why, n in sorted(causes.items(), key=lambda kv: -kv[1])) or "-"


def engine_section(runs, config, sweep, jobs) -> tuple[bool, str]:
    """The engine streams under ``config``, then under each timeout of ``sweep``; returns
    (all quiet and all caught, the summary line)."""
    started = time.perf_counter()
    results = replay_engine_all(runs, config, jobs)
    rows = fp.summarise_engine(results, config)
    timeout = config.engine_step_timeout
    print()
    print(f"engine streams: beats at most every {fp.BEACON_INTERVAL:g} s, read every {config.interval:g} s; "
          f"engine step timeout {timeout:g} s" if timeout else "engine streams: engine step rule off")
    print(f"{'scenario':<20} {'runs':>4} {'run_h':>7} {'false':>5} {'wedges':>8}   latency s min / median / max"
          f"   by engine_step   longest healthy silence")
    for row in rows:
        lat = row.latencies
        lat_s = f"{min(lat):.1f} / {statistics.median(lat):.1f} / {max(lat):.1f}" if lat else "-"
        print(f"{row.scenario:<20} {row.runs:>4} {row.hours:>7.1f} {row.false_verdicts:>5} "
              f"{row.detected:>4}/{row.wedges:<3}   {lat_s:<26}   {row.by_engine_rule:>4}/{row.wedges:<3}       "
              f"{row.longest_silence:>4.0f} s ({row.longest_cause or '-'})")
    for r in results:
        for v, why in list(zip(r.false_verdicts, r.causes))[:3]:
            print(f"false verdict: {r.plan.scenario}#{r.plan.index}: {v.reason} (t={v.detected_at:.0f}, {why})")
    samples = sum(r.samples for r in results)
    print(f"replayed {samples:,} engine samples in {time.perf_counter() - started:.1f} s")
    # The cuda-graph wedge (host asleep, GPU pinned) is caught at the wedge window; a spinning one at the timeout.
    by_variant: dict[str, list[float]] = {}
    for r in results:
        for w in r.wedges:
            if w.latency is not None:
                by_variant.setdefault(w.variant, []).append(w.latency)
    variant_medians = ",".join(f"{v}:{statistics.median(x):.1f}" for v, x in sorted(by_variant.items()))
    print(f"median latency by wedge (engine wedge window {config.effective_engine_wedge_window or 0:g} s): "
          f"{variant_medians or '-'}")
    sweep_out = []
    if sweep:
        print()
        print("engine_step_timeout sweep (false verdicts by what the engine was doing; wedges caught within "
              "timeout + 2 intervals):")
        print(f"{'timeout':>7} {'false':>6} {'wedges':>9}  {'median latency':>14}  causes")
        for value in sweep:
            cfg = dataclasses.replace(config, engine_step_timeout=value)
            srows = rows if value == timeout else fp.summarise_engine(replay_engine_all(runs, cfg, jobs), cfg)
            causes: dict[str, int] = {}
            for row in srows:
                for why, n in row.causes.items():
                    causes[why] = causes.get(why, 0) + n
            false = sum(row.false_verdicts for row in srows)
            lat = [x for row in srows for x in row.latencies]
            med = f"{statistics.median(lat):.1f} s" if lat else "-"
            print(f"{value:>6g}s {false:>6} {sum(r.detected for r in srows):>4}/{sum(r.wedges for r in srows):<4}  "
                  f"{med:>14}  {_causes(causes)}")
            sweep_out.append(f"{value:g}:{false}")
    hours = sum(row.hours for row in rows)
    false = sum(row.false_verdicts for row in rows)
    detected = sum(row.detected for row in rows)
    wedges = sum(row.wedges for row in rows)
    lat = [x for row in rows for x in row.latencies]
    longest = max((row.longest_silence for row in rows), default=0.0)
    line = (f"engine_run_hours={hours:.1f} engine_false_verdicts={false} engine_wedges_detected={detected}/{wedges} "
            f"median_engine_latency_s={statistics.median(lat) if lat else float('nan'):.1f} "
            f"median_engine_latency_by_wedge_s={variant_medians or '-'} "
            f"longest_healthy_silence_s={longest:.0f}" + (f" engine_sweep={','.join(sweep_out)}" if sweep_out else ""))
    return false == 0 and detected == wedges, line


def _totals(rows) -> dict:
    """The corpus's totals and median latencies (seconds) from ``fp.summarise``'s rows."""
    def med(values):
        return statistics.median(values) if values else float("nan")

    return {
        "hours": sum(r.hours for r in rows),
        "false": sum(r.false_verdicts for r in rows),
        "detected": sum(r.detected + r.busy_detected + r.rank_detected for r in rows),
        "wedges": sum(r.wedges + r.busy_wedges + r.rank_wedges for r in rows),
        "stall": med([x for r in rows for x in r.latencies]),
        "busy": med([x for r in rows for x in r.busy_latencies]),
        "rank": med([x for r in rows for x in r.rank_latencies]),
    }


def auto_section(runs, fixed_config, auto_config, jobs) -> int:
    """The corpus under learned progress timeouts beside the fixed one: false verdicts, wedges caught,
    median detection latencies; returns the exit code (0: auto is quiet and catches every wedge)."""
    started = time.perf_counter()
    fixed_results = replay_all(runs, fixed_config, jobs)
    auto_results = replay_all(runs, auto_config, jobs)
    fixed, auto = _totals(fp.summarise(fixed_results, fixed_config)), _totals(fp.summarise(auto_results, auto_config))
    settings = auto_config.auto_progress
    print(f"progress timeout: fixed {fixed_config.progress_timeout:g} s, or learned after {settings.warmup_beats} beats "
          f"(p{settings.quantile * 100:g} x {settings.factor:g}, {settings.floor:g} s to {settings.ceiling:g} s; "
          f"fixed until then and in phases other than train)")
    print(f"{'scenario':<20} {'false fixed/auto':>16} {'wedges fixed/auto':>18}  median busy hang s  "
          f"median stuck rank s  learned s min / median / max")
    by_fixed = {r.scenario: r for r in fp.summarise(fixed_results, fixed_config)}
    for row in fp.summarise(auto_results, auto_config):
        f = by_fixed[row.scenario]
        learned = [x for res in auto_results if res.plan.scenario == row.scenario for x in res.learned]
        lrange = f"{min(learned):.0f} / {statistics.median(learned):.0f} / {max(learned):.0f}" if learned else "-"

        def pair(a, b):
            return f"{statistics.median(a):.0f}/{statistics.median(b):.0f}" if a and b else "-"

        print(f"{row.scenario:<20} {f.false_verdicts:>7}/{row.false_verdicts:<8} "
              f"{f.detected + f.busy_detected + f.rank_detected:>7}/{row.detected + row.busy_detected + row.rank_detected:<4}"
              f"of {row.wedges + row.busy_wedges + row.rank_wedges:<4}  {pair(f.busy_latencies, row.busy_latencies):>18}  "
              f"{pair(f.rank_latencies, row.rank_latencies):>19}  {lrange}")
    for r in auto_results:
        for v in r.false_verdicts[:3]:
            print(f"false verdict (auto): {r.plan.scenario}#{r.plan.index}: {v.reason} (t={v.detected_at:.0f})")
    learned = [x for res in auto_results for x in res.learned]
    print(f"replayed the corpus twice in {time.perf_counter() - started:.1f} s (jobs={jobs})")
    print(f"fixed run_hours={fixed['hours']:.1f} false_verdicts={fixed['false']} "
          f"wedges_detected={fixed['detected']}/{fixed['wedges']}")
    lsum = (f"{min(learned):.0f}/{statistics.median(learned):.0f}/{max(learned):.0f}" if learned else "-")
    print(f"auto run_hours={auto['hours']:.1f} false_verdicts={auto['false']} wedges_detected={auto['detected']}/"
          f"{auto['wedges']} median_stall_latency_s={fixed['stall']:.1f}/{auto['stall']:.1f} "
          f"median_busy_hang_latency_s={fixed['busy']:.1f}/{auto['busy']:.1f} "
          f"median_rank_hang_latency_s={fixed['rank']:.1f}/{auto['rank']:.1f} learned_timeout_s={lsum}")
    ok = all(t["false"] == 0 and t["detected"] == t["wedges"] for t in (fixed, auto))
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hours-per-scenario", type=float, default=128.0,
                        help="run-hours per scenario (9 scenarios; default 128, i.e. 1,152 in all)")
    parser.add_argument("--wedges-per-run", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--stall-window", type=float, help="what-if: another window (s)")
    parser.add_argument("--noise-samples", type=int, help="what-if: another noise tolerance")
    parser.add_argument("--no-phase-timeouts", action="store_true", help="what-if: no phase stretches the window")
    parser.add_argument("--progress-timeout", help="what-if: another progress timeout (s), or auto: learned from "
                             "each run, replayed beside the fixed one")
    parser.add_argument("--auto-warmup-beats", type=int, default=AutoTimeout().warmup_beats,
                        help="with --progress-timeout auto: beat intervals before the timeout is learned")
    parser.add_argument("--idle-only", action="store_true", help="what-if: the progress rule needs an idle tree")
    parser.add_argument("--ablations", action="store_true", help="also replay a slice under weaker settings")
    parser.add_argument("--engine-hours-per-scenario", type=float, default=32.0,
                        help=f"engine streams: run-hours per scenario ({len(fp.ENGINE_SCENARIOS)} scenarios; "
                             "default 32; 0 skips them)")
    parser.add_argument("--engine-step-timeout", type=float, help="what-if: another engine step timeout (s)")
    parser.add_argument("--engine-sweep", default="5,10,15,20,30",
                        help="engine step timeouts (s, comma-separated) to replay the engine streams under; '' for none")
    parser.add_argument("--engine-only", action="store_true", help="replay only the engine streams")
    args = parser.parse_args(argv)
    try:
        sweep = [float(x) for x in args.engine_sweep.split(",") if x.strip()]
        if any(not x > 0 for x in sweep):
            raise ValueError
    except ValueError:
        parser.error(f"--engine-sweep: positive seconds separated by commas, got {args.engine_sweep!r}")

    config = DetectorConfig()
    if args.stall_window is not None:
        config = dataclasses.replace(config, stall_window=args.stall_window)
    if args.noise_samples is not None:
        config = dataclasses.replace(config, noise_samples=args.noise_samples)
    if args.no_phase_timeouts:
        config = dataclasses.replace(config, phase_timeouts={})
    auto = args.progress_timeout == "auto"
    if args.progress_timeout is not None and not auto:
        try:
            config = dataclasses.replace(config, progress_timeout=float(args.progress_timeout))
        except ValueError:
            parser.error(f"--progress-timeout: seconds or auto, got {args.progress_timeout!r}")
    if args.idle_only:
        config = dataclasses.replace(config, idle_only=True)
    if args.engine_step_timeout is not None:
        try:  # 0 turns the rule off, as on the command line of ``hangwatch run``
            config = dataclasses.replace(config, engine_step_timeout=args.engine_step_timeout or None)
        except ConfigError as exc:
            parser.error(str(exc))
    engine_runs = (fp.engine_corpus(seed=args.seed, hours_per_scenario=args.engine_hours_per_scenario,
                                    wedges_per_run=args.wedges_per_run) if args.engine_hours_per_scenario > 0 else [])
    if args.engine_only:
        ok, line = engine_section(engine_runs, config, sweep, args.jobs)
        print(line)
        return 0 if ok else 1

    started = time.perf_counter()
    runs = fp.corpus(seed=args.seed, hours_per_scenario=args.hours_per_scenario, wedges_per_run=args.wedges_per_run)
    if auto:
        try:
            auto_config = dataclasses.replace(config, auto_progress=AutoTimeout(warmup_beats=args.auto_warmup_beats))
        except ConfigError as exc:
            parser.error(str(exc))
        return auto_section(runs, config, auto_config, args.jobs)
    results = replay_all(runs, config, args.jobs)
    elapsed = time.perf_counter() - started
    samples = sum(r.samples for r in results)
    rows = fp.summarise(results, config)

    print(f"detector: window {config.stall_window:g} s, interval {config.interval:g} s, "
          f"noise {config.noise_samples}, gap tolerance {config.effective_gap_tolerance:g} s, "
          f"progress timeout {config.progress_timeout:g} s{' (idle only)' if config.idle_only else ''}, "
          f"phases {dict(config.phase_timeouts)}")
    print_table(rows, config)
    for r in results:
        for v in r.false_verdicts[:3]:
            print(f"false verdict: {r.plan.scenario}#{r.plan.index}: {v.reason} (t={v.detected_at:.0f}, phase {v.phase})")
    print(f"replayed {samples:,} samples in {elapsed:.1f} s ({elapsed / max(samples, 1) * 1e6:.2f} us/sample, "
          f"jobs={args.jobs})")
    if args.ablations:
        # The first two runs of every scenario.
        ablations([p for p in runs if p.index < 2], args.jobs)

    hours = sum(row.hours for row in rows)
    false = sum(row.false_verdicts for row in rows)
    busy_detected = sum(row.busy_detected for row in rows)
    busy_wedges = sum(row.busy_wedges for row in rows)
    detected = sum(row.detected for row in rows) + busy_detected
    wedges = sum(row.wedges for row in rows) + busy_wedges
    latencies = [x for row in rows for x in row.latencies]
    ratio = statistics.median(latencies) / config.stall_window if latencies else float("nan")
    engine_ok, engine_line = engine_section(engine_runs, config, sweep, args.jobs) if engine_runs else (True, "")
    rank_detected = sum(row.rank_detected for row in rows)
    rank_wedges = sum(row.rank_wedges for row in rows)
    detected += rank_detected
    wedges += rank_wedges
    print(f"run_hours={hours:.1f} false_verdicts={false} wedges_detected={detected}/{wedges} "
          f"median_latency_over_window={ratio:.3f} busy_hangs_detected={busy_detected}/{busy_wedges} "
          f"rank_hangs_detected={rank_detected}/{rank_wedges}")
    if engine_line:
        print(engine_line)
    return 0 if false == 0 and detected == wedges and engine_ok else 1


if __name__ == "__main__":
    sys.exit(main())
