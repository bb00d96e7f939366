"""The false-positive corpus (scripts/fp_corpus.py), replayed in part on every test run.

The full corpus (>= 1,000 run-hours) is ``scripts/bench_false_positives.py``; here a
72 run-hour subset with ~75 injected wedges and ~25 busy hangs must give zero false
verdicts, catch every wedge within window + 2 intervals and every busy hang at its
last beat + the progress timeout (+ 1 interval).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

from hangwatch.contract.verdict import VerdictKind
from hangwatch.supervisor.detector import DetectorConfig

pytestmark = pytest.mark.timeout(120)


def _load_corpus_module():
    # scripts/ is not a package; load the generator by path (registered in sys.modules
    # because dataclasses look their module up there).
    path = Path(__file__).resolve().parents[2] / "scripts" / "fp_corpus.py"
    name = "hangwatch_fp_corpus"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


fp = _load_corpus_module()

SEED = 7
HOURS_PER_SCENARIO = 8.0


@pytest.fixture(scope="module")
def runs():
    return fp.corpus(seed=SEED, hours_per_scenario=HOURS_PER_SCENARIO)


@pytest.fixture(scope="module")
def results(runs):
    return [fp.replay(plan) for plan in runs]


def test_the_subset_is_big_enough(runs):
    assert sum(plan.hours for plan in runs) >= 50.0
    assert sum(len(plan.wedges) for plan in runs) >= 20
    assert {plan.scenario for plan in runs} == set(fp.SCENARIOS)


def test_no_false_verdicts_and_every_wedge_caught_within_window_plus_two_intervals(results):
    cfg = DetectorConfig()
    false = [(r.plan.scenario, r.plan.index, v.to_json()) for r in results for v in r.false_verdicts]
    assert false == []
    bound = cfg.stall_window + 2 * cfg.interval
    wedges = [(r.plan.scenario, r.plan.index, w) for r in results for w in r.wedges if not w.busy]
    late = [(s, i, w.at, w.variant, w.verdict and w.verdict.to_json()) for s, i, w in wedges
            if w.latency is None or not 0 <= w.latency <= bound]
    assert late == []
    assert all(w.verdict.kind is VerdictKind.STALL for _, _, w in wedges)
    # The summary the bench prints agrees.
    rows = fp.summarise(results)
    assert sum(row.false_verdicts for row in rows) == 0
    assert sum(row.detected for row in rows) == sum(row.wedges for row in rows) == len(wedges)


def test_every_busy_hang_caught_at_the_progress_timeout_after_its_last_beat(results):
    cfg = DetectorConfig()
    busy = [(r.plan.scenario, w) for r in results for w in r.wedges if w.busy]
    assert len(busy) >= 9 and {w.variant for _, w in busy} == set(fp.BUSY_VARIANTS)
    late = [(s, w.at, w.variant, w.verdict and w.verdict.to_json()) for s, w in busy
            if w.latency is None or not cfg.progress_timeout - 0.05 <= w.latency <= cfg.progress_timeout + cfg.interval]
    assert late == []
    assert all(w.verdict.kind.is_hang and w.verdict.evidence["tree"] == "busy" for _, w in busy)
    rows = fp.summarise(results)
    assert sum(row.busy_detected for row in rows) == sum(row.busy_wedges for row in rows) == len(busy)


def test_the_old_idle_only_rule_misses_every_busy_hang(runs):
    cfg = DetectorConfig(idle_only=True)
    subset = [p for p in runs if p.scenario == "busy_healthy"][:2]
    results = [fp.replay(p, cfg) for p in subset]
    busy = [w for r in results for w in r.wedges if w.busy]
    assert busy and all(w.verdict is None for w in busy)


def test_forking_the_detector_equals_replaying_the_wedged_copy(runs, results):
    checked = 0
    for plan, res in zip(runs, results):
        if plan.hours > 3.0 or not plan.wedges:
            continue  # the literal replay is slow; short runs suffice
        for wedge in res.wedges:
            literal = fp.replay_wedged_copy(plan, wedge.at, wedge.variant)
            assert literal is not None and wedge.verdict is not None
            assert (literal.kind, literal.onset, literal.detected_at) == (
                wedge.verdict.kind, wedge.verdict.onset, wedge.verdict.detected_at)
            checked += 1
        if checked >= 6:
            break
    assert checked >= 3


def test_corpus_is_deterministic_from_the_seed(runs):
    again = fp.corpus(seed=SEED, hours_per_scenario=HOURS_PER_SCENARIO)
    assert again == runs
    plan = runs[0]
    first = [s.to_json() for _, s in zip(range(2000), plan.samples())]
    assert first == [s.to_json() for _, s in zip(range(2000), plan.samples())]
    assert fp.corpus(seed=SEED + 1, hours_per_scenario=2.0)[0] != runs[0]


def test_corpus_contains_the_phases_that_fool_watchdogs(runs):
    seen: dict[str, set[str]] = {}
    for plan in runs:
        for seg in plan.segments:
            seen.setdefault(plan.scenario, set()).add(f"{seg.activity}:{seg.variant}" if seg.variant else seg.activity)
    everything = set().union(*seen.values())
    for needed in ("ckpt:phase", "ckpt:shards", "capture", "compile", "sync", "straggler:block",
                   "straggler:spin", "eval", "eval_rank0:block", "loader_stall", "decode",
                   "eval:silent", "compile:silent", "loader_warmup"):
        assert needed in everything, needed
    assert "loader_stall" in seen["dataloader_stalls"]
    # Probe gaps (gpu=None) and long GPU-busy/CPU-idle stretches really occur in the samples.
    flaky = next(p for p in runs if p.scenario == "flaky_probe")
    missing = sum(1 for s in flaky.samples() if s.gpu is None)
    assert missing > 0.01 * flaky.ticks
    assert any(not p.topology.holders_visible for p in runs)


def test_wedges_are_never_inside_an_announced_long_phase(runs):
    for plan in runs:
        beats = plan.beats()
        for at in plan.wedges:
            before = [phase for t, phase in beats if t < at]
            assert not before or before[-1] not in fp.LONG_PHASES


@pytest.mark.parametrize(
    ("weaker", "why"),
    [
        ({"phase_timeouts": {}}, "checkpoint saves and graph capture look like wedges without phase timeouts"),
        ({"stall_window": 30.0}, "weight syncs and blocked stragglers last up to 45 s"),
        ({"progress_timeout": 300.0}, "busy evaluations and compiles go up to 540 s without a beat"),
    ],
)
def test_the_corpus_has_teeth(runs, weaker, why):
    """Weaker settings do fire on this corpus: it is not trivially quiet."""
    cfg = dataclasses.replace(DetectorConfig(), **weaker)
    scenarios = ("busy_healthy",) if "progress_timeout" in weaker else ("ddp4_checkpoint", "colocate_1gpu", "compile_heavy")
    subset = [p for p in runs if p.scenario in scenarios][:6]
    false = sum(fp.replay(dataclasses.replace(p, wedges=(), wedge_variants=()), cfg).false_verdict is not None
                for p in subset)
    assert false > 0, why
