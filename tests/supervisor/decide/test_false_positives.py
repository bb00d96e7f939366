"""The false-positive corpus (tests/supervisor/decide/fp_corpus.py), replayed in part on every test run.

The full corpus (>= 1,000 run-hours) is ``scripts/bench_false_positives.py``; here a
72 run-hour subset with ~75 injected wedges and ~25 busy hangs must give zero false
verdicts, catch every wedge within window + 2 intervals and every busy hang at its
last beat + the progress timeout (+ 1 interval). Its engine streams (27 run-hours, 33
engine wedges) must give zero false verdicts and every engine wedge caught by the engine
step rule at the engine's last beat + ``engine_step_timeout`` (+ 1 interval).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.contract.verdict import VerdictKind
from hangwatch.supervisor.decide.detector import Detector, DetectorConfig

pytestmark = pytest.mark.timeout(120)


def _load_corpus_module():
    # Load the generator by path, wherever this test sits (registered in sys.modules
    # because dataclasses look their module up there).
    root = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
    path = root / "tests" / "supervisor" / "decide" / "fp_corpus.py"
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


@pytest.mark.slow
def test_no_false_verdicts_and_every_wedge_caught_within_window_plus_two_intervals(results):
    cfg = DetectorConfig()
    false = [(r.plan.scenario, r.plan.index, v.to_json()) for r in results for v in r.false_verdicts]
    assert false == []
    bound = cfg.stall_window + 2 * cfg.interval
    wedges = [(r.plan.scenario, r.plan.index, w) for r in results for w in r.wedges if not (w.busy or w.rank)]
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


def test_every_stuck_rank_is_caught_at_its_last_beat_plus_the_progress_timeout_while_others_beat(results):
    """Scenario ranks_uneven: rank 1 stops beating while rank 0 trains on; only the per-rank rule
    sees it, and its verdict names rank 1. Its healthy streams (ranks at different rates, rank 0
    evaluating and saving alone for longer than the timeout, a rank that finished early) are quiet."""
    cfg = DetectorConfig()
    ranked = [r for r in results if r.plan.scenario == "ranks_uneven"]
    assert ranked and all(r.false_verdicts == [] for r in ranked)
    stuck = [w for r in ranked for w in r.wedges if w.rank]
    assert len(stuck) >= 2
    late = [(w.at, w.last_beat_t, w.verdict and w.verdict.to_json()) for w in stuck
            if w.latency is None or not cfg.progress_timeout - 0.05 <= w.latency <= cfg.progress_timeout + cfg.interval]
    assert late == []
    assert all(w.verdict.evidence["rule"] == "rank_progress" and w.verdict.evidence["stuck_rank"] == 1 for w in stuck)
    rows = fp.summarise(results)
    assert sum(row.rank_detected for row in rows) == sum(row.rank_wedges for row in rows) == len(stuck)


def test_the_multi_rank_streams_hold_what_the_per_rank_rule_must_not_judge(runs):
    ranked = [p for p in runs if p.scenario == "ranks_uneven"]
    assert ranked
    for plan in ranked:
        finals = [(t, rank) for t, rank, _, final in plan.rank_beats if final]
        assert len(finals) == 1 and finals[0][1] == plan.topology.ranks - 1
        assert not [t for t, rank, _, _ in plan.rank_beats if rank == finals[0][1] and t > finals[0][0]]
    alone = [seg for p in ranked for seg in p.segments if seg.activity in ("eval_rank0", "ckpt")]
    assert max(seg.length for seg in alone) > DetectorConfig().progress_timeout, \
        "rank 0 works alone for longer than the timeout while the others wait without a beat"


@pytest.mark.slow
def test_auto_timeouts_give_no_false_verdict_and_catch_every_wedge(runs):
    """--progress-timeout auto over the subset: learned after 20 beats, p99 x 3, 60 s to 3600 s."""
    from hangwatch.supervisor.decide.learned_timeout import AutoTimeout

    cfg = DetectorConfig(auto_progress=AutoTimeout())
    results = [fp.replay(plan, cfg) for plan in runs]
    assert [(r.plan.scenario, v.reason) for r in results for v in r.false_verdicts] == []
    rows = fp.summarise(results, cfg)
    assert sum(row.detected for row in rows) == sum(row.wedges for row in rows)
    assert sum(row.busy_detected for row in rows) == sum(row.busy_wedges for row in rows)
    assert sum(row.rank_detected for row in rows) == sum(row.rank_wedges for row in rows) > 0
    assert any(r.learned for r in results)


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


@pytest.mark.slow
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


# -- engine streams: the engine step rule ---------------------------------------------------

ENGINE_HOURS_PER_SCENARIO = 4.0


@pytest.fixture(scope="module")
def engine_runs():
    return fp.engine_corpus(seed=SEED, hours_per_scenario=ENGINE_HOURS_PER_SCENARIO)


@pytest.fixture(scope="module")
def engine_results(engine_runs):
    return [fp.replay_engine(plan) for plan in engine_runs]


@pytest.mark.slow
def test_engine_streams_give_no_false_verdict_and_every_engine_wedge_is_caught_by_the_engine_rule(engine_results):
    cfg = DetectorConfig()
    timeout = cfg.engine_step_timeout
    assert timeout == 30.0
    false = [(r.plan.scenario, r.plan.index, why, v.to_json())
             for r in engine_results for v, why in zip(r.false_verdicts, r.causes)]
    assert false == []
    wedges = [(r.plan.scenario, r.plan.index, w) for r in engine_results for w in r.wedges]
    assert len(wedges) >= 30 and {w.variant for _, _, w in wedges} == set(fp.ENGINE_WEDGES)
    # Caught at the engine's last beat + the timeout, within the read delay (one interval)
    # and the beacon's rate limit, by the engine rule, naming the wedged engine; the
    # cuda-graph wedge (host asleep, GPU pinned) at its shorter wedge window.
    wedge_window = cfg.effective_engine_wedge_window
    assert wedge_window == timeout / 4

    late = cfg.interval + fp.BEACON_INTERVAL
    # (a worker whose EngineCore child holds its GPU, on a node of several GPUs, too: the
    # sample's parents say which GPU is the worker's)
    # (a noisy reading may restart the signature's window: never past the plain timeout)
    bounds = {"engine_sleep": (wedge_window, timeout + late), "engine_spin": (timeout, timeout + late)}
    wrong = [(s, i, w.at, w.variant, w.verdict and w.verdict.to_json()) for s, i, w in wedges
             if w.latency is None
             or not bounds[w.variant][0] - 0.05 <= w.latency <= bounds[w.variant][1]
             or w.rule != "engine_step" or w.verdict.kind is not VerdictKind.STALL
             or w.verdict.evidence["engine_pid"] != w.pid
             or w.verdict.evidence.get("engine_wedge", False) is not (w.variant == "engine_sleep")]
    assert wrong == []
    asleep = sorted(w.latency for _, _, w in wedges if w.variant == "engine_sleep")
    assert asleep[len(asleep) // 2] <= wedge_window + late
    rows = fp.summarise_engine(engine_results)
    assert sum(row.false_verdicts for row in rows) == 0
    assert sum(row.detected for row in rows) == sum(row.by_engine_rule for row in rows) == len(wedges)
    # The margin: the rule watched healthy engines go quiet for a while, never for the timeout.
    longest = max(r.longest_silence for r in engine_results)
    assert fp.LONG_STEP < longest < timeout


def test_engine_streams_contain_the_patterns_that_could_fool_the_rule(engine_runs, engine_results):
    assert sum(p.hours for p in engine_runs) >= 20.0
    assert {p.scenario for p in engine_runs} == set(fp.ENGINE_SCENARIOS)
    segs = [(p, seg) for p in engine_runs for _, lane in p.lanes for seg in lane]
    assert any(seg.kind == "prepare" and seg.end - seg.start >= 60 for _, seg in segs)  # a big batch's input processing
    assert any(p.colocated for p in engine_runs)
    # Hours asleep while the trainer trains.
    assert any(seg.kind == "idle" and seg.end - seg.start >= 3600 for _, seg in segs)
    assert any(seg.kind == "standby" for _, seg in segs)
    assert any(seg.kind == "gone" for _, seg in segs)  # workers dying mid-request
    assert any(p.clock_jumps for p in engine_runs)
    reused = [p for p in engine_runs for _, lane in p.lanes
              if len({s.pid for s in lane if s.kind == "load"}) < sum(s.kind == "load" for s in lane)]
    assert reused, "no pid reused by a new worker"
    causes = {why for r in engine_results for why in r.long_steps}
    assert {"prefill chunk", "GC pause", "first-use JIT", "warm-up", "host contention"} <= causes
    # In the samples: a dead pid's in-flight beat, and two engines of one rank, one generating and one not.
    dead = two = False
    for plan in engine_runs:
        if plan.scenario not in ("engine_restarts", "engine_multi"):
            continue
        for s in plan.samples():
            alive = [e for e in s.engine if e.pid in s.cpu_pct]
            dead = dead or any(e.phase == "generate" and e.pid not in s.cpu_pct for e in s.engine)
            two = two or (len(alive) >= 2 and {e.phase for e in alive} >= {"generate", "idle"})
        if dead and two:
            break
    assert dead and two


def test_engine_corpus_is_deterministic_from_the_seed(engine_runs):
    again = fp.engine_corpus(seed=SEED, hours_per_scenario=ENGINE_HOURS_PER_SCENARIO)
    assert again == engine_runs
    plan = engine_runs[0]
    first = [s.to_json() for _, s in zip(range(3000), plan.samples())]
    assert first == [s.to_json() for _, s in zip(range(3000), plan.samples())]
    assert fp.engine_corpus(seed=SEED + 1, hours_per_scenario=2.0)[0] != engine_runs[0]


def test_the_engine_streams_have_teeth(engine_runs):
    """A short engine step timeout does fire on them: long prefill chunks, GC pauses and
    first-use JIT steps are in there."""
    cfg = DetectorConfig(engine_step_timeout=5.0)
    subset = [p for p in engine_runs if p.scenario == "engine_worker"][:1]
    results = [fp.replay_engine(dataclasses.replace(p, wedges=(), wedge_variants=()), cfg) for p in subset]
    assert sum(len(r.false_verdicts) for r in results) > 0
    assert all(v.evidence["rule"] == "engine_step" for r in results for v in r.false_verdicts)


# Two healthy streams the engine step rule once fired on (hand-built: the corpus's random
# runs do not meet them): a pid reused by a new worker, and a job stopped and continued.


def _tick(t, cpu, engine, wall=None):
    gpu = (DeviceSample(0, 2.0, 1000.0, (1000,)),)
    return Sample(float(t), float(t if wall is None else wall), cpu, gpu, Heartbeat(1000, 1, 0.0, 1, "generate"),
                  len(cpu), tuple(engine))


def test_a_pid_reused_by_a_new_worker_does_not_inherit_the_dead_workers_beat():
    pid = 3001
    det = Detector(DetectorConfig(), start=0.0)
    verdicts = []
    # The old worker: its first request, one step, then it dies (an OOM kill); the generator
    # removes its file at once.
    old = [Heartbeat(pid, 1, 0.0, 0, "prepare"), Heartbeat(pid, 2, 0.1, 0, "generate"),
           Heartbeat(pid, 3, 0.5, 1, "generate")]
    for t, beat in enumerate(old):
        verdicts.append(det.observe(_tick(t, {1000: 1.0, pid: 40.0}, [beat])))
    # It is gone; 40 s later a new worker starts under the same pid (the pid space wrapped) and loads.
    for t in range(3, 100):
        verdicts.append(det.observe(_tick(t, {1000: 1.0, **({pid: 90.0} if t >= 40 else {})}, [])))
    # Its first request: a small batch, prepare and the first step in under a tick, so the first beat
    # read is its third: (pid, 3), step 1, like the dead worker's last. It goes on stepping.
    for t in range(100, 110):
        beat = Heartbeat(pid, 3 + 5 * (t - 100), t + 0.5, 1 + 20 * (t - 100), "generate")
        verdicts.append(det.observe(_tick(t, {1000: 1.0, pid: 40.0}, [beat])))
    assert [v.to_json() for v in verdicts if v is not None] == []


def test_a_job_stopped_and_continued_is_not_an_engine_wedge():
    pid = 3001
    det = Detector(DetectorConfig(), start=0.0)
    verdicts = []
    for t in range(0, 20):  # an engine stepping, 5 beats a second
        beat = Heartbeat(pid, 2 + 5 * t, t + 0.9, 1 + 50 * t, "generate")
        verdicts.append(det.observe(_tick(t, {1000: 1.0, pid: 60.0}, [beat])))
    # The scheduler suspends the job for 10 minutes (SIGSTOP to every process, the supervisor
    # included), then continues it: the runner sees its sleep overrun and says so. The first
    # tick after it comes before the engine's next write.
    det.unobserved(620 - 19)
    verdicts.append(det.observe(_tick(620, {1000: 0.0, pid: 0.0}, [beat])))
    for t in range(621, 630):
        beat = Heartbeat(pid, 2 + 5 * t, t + 0.9, 1 + 50 * t, "generate")
        verdicts.append(det.observe(_tick(t, {1000: 1.0, pid: 60.0}, [beat])))
    assert [v.to_json() for v in verdicts if v is not None
            if v.evidence.get("rule") == "engine_step"] == []


# A third: a dead worker's file left behind while a new process holds its pid. The detector
# cannot tell that beat from the new process's (it has no start times); the sampler drops a
# beat written before its pid's current process started (test_engine_step_rule.py).
