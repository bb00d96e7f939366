"""A false-positive corpus for the stall detector: healthy runs that fool watchdogs, and wedged copies.

Each run is a deterministic, compact plan (a topology and a list of segments, a few
hundred per run-hour at most) from which ``Sample`` objects are produced lazily at a
1 s interval, the way the supervisor's sampler would record them. The segments are the
phases that make naive watchdogs fire on healthy training:

* long decodes: GPU busy, the engine's CPU ~100 % of a core, the trainer idle,
  one heartbeat per GRPO step (every few minutes);
* weight syncs and stragglers: GPU busy with the host asleep for up to 45 s;
* checkpoint saves: one rank writes while the others sit in a collective (GPU busy,
  CPU idle, for minutes), announced as phase ``checkpoint`` or beating per shard;
* torch.compile and cuda-graph capture (phases ``compile``/``warmup``);
* evaluation passes (all ranks, or rank 0 alone with its peers in a barrier);
* data-loader stalls that recover (GPU idle, CPU low, under the progress timeout);
* GPU probe gaps (NVML returns nothing for up to 20 s) and single noisy readings;
* busy-but-healthy stretches without a beat (scenario ``busy_healthy``): evaluation
  passes of up to 540 s that beat only at their end, an unannounced first compile and
  a data-loader warm-up before the first beat, unannounced recompiles: the CPU burns,
  no beat comes, and it is not a hang.

Busy hangs are injected too (one per run after the first beat): the trainer spins
(``busy_cpu``: a retry loop, GPU idle) or the engine busy-polls a pinned GPU
(``busy_gpu``), and no beat arrives. Only the progress rule can catch them: at the
last beat + ``progress_timeout``.

A wedge is injected into a copy of a run at a tick ``T`` outside any announced long
phase: from ``T`` on, the wedged GPU reads 96-100 %, its holders 0-5 % CPU in total,
and no heartbeat arrives. Replaying the copy from the start would repeat the healthy
prefix exactly, so ``replay`` forks the detector (a deep copy) at ``T`` during the
healthy replay instead; the detector is a deterministic function of its samples, so
the result is the same (``tests/supervisor/test_false_positives.py`` checks that).

Constraints the generator guarantees (``RunPlan.check`` asserts them): heartbeats
are at most 560 s apart outside long phases and 1500 s inside them, and no run
of "GPU busy, holders idle" readings outside a long phase lasts 60 s without a beat
(the longest is a 45 s blocking straggler wait).

Usage: ``corpus(seed, hours_per_scenario)`` -> runs; ``replay(run, config)`` ->
``RunResult``; ``summarise(results)`` -> per-scenario rows.
"""

from __future__ import annotations

import copy
import random
import statistics
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from hangwatch.contract.verdict import Verdict, VerdictKind
from hangwatch.supervisor.detector import DEFAULT_PHASE_TIMEOUTS, Detector, DetectorConfig
from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.samples import DeviceSample, Sample

INTERVAL = 1.0
LONG_PHASES = frozenset(DEFAULT_PHASE_TIMEOUTS)
MAX_SILENCE = 560  # ticks between beats outside long phases (progress timeout 600)
MAX_LONG_PHASE = 1500  # ticks a long phase may last (its timeouts are 1800)
WEDGE_TICKS = 75  # how long a wedged copy runs after T before we call it a miss
BUSY_VARIANTS = ("busy_cpu", "busy_gpu")  # busy hangs: only the progress rule sees them

SCENARIOS = (
    "colocate_1gpu",
    "engine_proc_1gpu",
    "ddp4_checkpoint",
    "compile_heavy",
    "eval_heavy",
    "dataloader_stalls",
    "flaky_probe",
    "container_nopids",
    "busy_healthy",
)


@dataclass(frozen=True)
class Topology:
    """Who runs where. Rank r's trainer is pid 1000+16r, its engine (when a separate
    process) 1001+16r, its data-loader workers 1002+16r...; rank r holds GPU r."""

    ranks: int = 1
    engine_process: bool = False  # vLLM EngineCore in its own process (else inside the trainer)
    workers: int = 2
    holders_visible: bool = True  # False: NVML lists no pids (a container)

    def trainer(self, rank: int) -> int:
        return 1000 + 16 * rank

    def engine(self, rank: int) -> int:
        return 1001 + 16 * rank if self.engine_process else self.trainer(rank)

    def worker_pids(self, rank: int) -> list[int]:
        return [1002 + 16 * rank + i for i in range(self.workers)]

    def holders(self, rank: int) -> tuple[int, ...]:
        return (self.trainer(rank), 1001 + 16 * rank) if self.engine_process else (self.trainer(rank),)

    def pids(self) -> list[int]:
        out: list[int] = []
        for r in range(self.ranks):
            out.extend(self.holders(r))
            out.extend(self.worker_pids(r))
        return out


@dataclass(frozen=True)
class Segment:
    """``length`` ticks of one activity; ``beats`` are (offset, phase) within it."""

    activity: str
    start: int
    length: int
    beats: tuple[tuple[int, str | None], ...] = ()
    variant: str = ""  # activity detail: "block"/"spin" for waits, "phase"/"shards" for saves


@dataclass(frozen=True)
class RunPlan:
    scenario: str
    index: int
    seed: int
    topology: Topology
    segments: tuple[Segment, ...]
    noise_rate: float  # per tick: one reading replaced by a noisy one
    gap_rate: float  # per tick: the GPU probe starts returning nothing for 1-20 ticks
    wedges: tuple[int, ...] = ()  # ticks T where a wedged copy diverges
    wedge_variants: tuple[str, ...] = ()

    @property
    def ticks(self) -> int:
        last = self.segments[-1]
        return last.start + last.length

    @property
    def hours(self) -> float:
        return self.ticks * INTERVAL / 3600.0

    def beats(self) -> list[tuple[int, str | None]]:
        return [(seg.start + off, phase) for seg in self.segments for off, phase in seg.beats]

    def check(self) -> None:
        """The plan is healthy by construction; fail loudly if a change to the generator breaks that."""
        beats = self.beats()
        for (t0, phase), (t1, _) in zip(beats, beats[1:] + [(self.ticks, None)]):
            limit = MAX_LONG_PHASE if phase in LONG_PHASES else MAX_SILENCE
            if t1 - t0 > limit:
                raise AssertionError(f"{self.scenario}#{self.index}: {t1 - t0} ticks without a beat after {t0} ({phase})")
        for seg in self.segments:
            if seg.activity in ("sync", "straggler") and seg.variant != "spin" and seg.length > 45:
                raise AssertionError(f"{self.scenario}#{self.index}: {seg.activity} of {seg.length} ticks")

    def eligible(self) -> list[tuple[int, int]]:
        """Tick ranges [a, b) where the phase of the last beat before the tick is not a long one."""
        out = []
        edges = [(0, None)] + [(t + 1, phase) for t, phase in self.beats()] + [(self.ticks, "end")]
        for (a, phase), (b, _) in zip(edges, edges[1:]):
            if phase not in LONG_PHASES and b > a:
                out.append((a, b))
        return out

    def samples(self) -> Iterator[Sample]:
        return _generate(self)


# -- activities: per-rank GPU utilisation and per-process CPU ranges ------------------------

# (gpu lo, gpu hi), trainer cpu, engine cpu (separate process), worker cpu
_ACTIVITY = {
    "load": ((0, 5), (80, 200), (0, 2), (0, 5)),
    "compile": ((0, 10), (90, 400), (0, 2), (0, 10)),
    "capture": ((95, 100), (0, 5), (0, 3), (0, 3)),
    "sync": ((95, 100), (0, 5), (0, 3), (0, 20)),
    "decode": ((85, 100), (70, 130), (70, 130), (0, 20)),
    "train": ((90, 100), (90, 110), (0, 2), (5, 40)),
    "loader_stall": ((0, 10), (0, 5), (0, 1), (0, 3)),
    "eval": ((90, 100), (60, 120), (0, 2), (5, 30)),
    "loader_warmup": ((0, 5), (20, 60), (0, 2), (80, 100)),
}
# Colocated engine: decode runs in the trainer process, so the trainer is the busy one.
_COLOCATED_DECODE = ((85, 100), (70, 130), (0, 0), (0, 20))


def _columns(plan: RunPlan, seg: Segment, rng: random.Random):
    """(gpu specs, cpu specs) for a segment: lists of (rank, lo, span) and (pid, lo, span)."""
    topo = plan.topology
    act = seg.activity
    straggler = rng.randrange(topo.ranks)
    gpus, cpus = [], []
    for r in range(topo.ranks):
        if act == "ckpt":
            if r == 0:
                # The writer: single-GPU saves copy to host (GPU busy, host in I/O wait);
                # on several ranks rank 0 serialises (CPU busy) while the rest wait.
                prof = ((95, 100), (0, 5), (0, 2), (0, 5)) if topo.ranks == 1 else ((0, 20), (80, 120), (0, 2), (0, 5))
            else:
                prof = ((97, 100), (0, 3), (0, 1), (0, 3))  # in a collective, host asleep
        elif act == "eval_rank0" and r != 0:
            prof = ((97, 100), (0, 3), (0, 1), (0, 3)) if seg.variant == "block" else ((97, 100), (90, 100), (0, 1), (0, 3))
        elif act == "eval_rank0":
            prof = _ACTIVITY["eval"]
        elif act == "straggler":
            if r == straggler:
                prof = _ACTIVITY["decode"] if topo.engine_process else _COLOCATED_DECODE
            elif seg.variant == "block":
                prof = ((97, 100), (0, 3), (0, 1), (0, 3))
            else:
                prof = ((97, 100), (90, 100), (0, 1), (0, 3))  # spinning in cudaMemcpy/sync
        elif act == "decode" and not topo.engine_process:
            prof = _COLOCATED_DECODE
        else:
            prof = _ACTIVITY[act]
        (glo, ghi), trainer, engine, worker = prof
        gpus.append((r, glo, ghi - glo + 1))
        cpus.append((topo.trainer(r), trainer[0], trainer[1] - trainer[0]))
        if topo.engine_process:
            cpus.append((topo.engine(r), engine[0], engine[1] - engine[0]))
        for pid in topo.worker_pids(r):
            cpus.append((pid, worker[0], worker[1] - worker[0]))
    return gpus, cpus


class _DeviceCache:
    """NVML utilisation is a whole percent: one DeviceSample per (rank, percent), shared."""

    def __init__(self, topo: Topology) -> None:
        self.table = []
        for r in range(topo.ranks):
            pids = topo.holders(r) if topo.holders_visible else None
            self.table.append([DeviceSample(r, float(u), 40000.0, pids) for u in range(101)])


def _beat(pid: int, seq: int, t: float, phase: str | None) -> Heartbeat:
    return Heartbeat(pid=pid, seq=seq, ts=t, step=seq, phase=phase)


def _generate(plan: RunPlan) -> Iterator[Sample]:
    topo = plan.topology
    cache = _DeviceCache(topo).table
    noise_rng = random.Random(plan.seed ^ 0x5EED)
    nr = noise_rng.random
    beat: Heartbeat | None = None
    seq = 0
    gap_left = 0
    beat_pid = topo.trainer(0)
    for index, seg in enumerate(plan.segments):
        rng = random.Random(plan.seed * 100_003 + index)
        r = rng.random
        gpus, cpus = _columns(plan, seg, rng)
        beats = dict(seg.beats)
        for off in range(seg.length):
            t = float(seg.start + off)
            if off in beats:
                seq += 1
                beat = _beat(beat_pid, seq, t, beats[off])
            cpu = {pid: lo + span * r() for pid, lo, span in cpus}
            utils = [lo + int(span * r()) for _, lo, span in gpus]  # r() < 1: never above hi
            if nr() < plan.noise_rate:
                _noise(noise_rng, cpu, utils)
            if gap_left == 0 and nr() < plan.gap_rate:
                gap_left = 1 + int(20 * nr())
            if gap_left:
                gap_left -= 1
                devices = None
            else:
                devices = tuple(cache[i][u] for i, u in enumerate(utils))
            yield Sample(t, t, cpu, devices, beat, len(cpu))


def _noise(rng: random.Random, cpu: dict[int, float], utils: list[int]) -> None:
    """One reading goes wrong for one tick: what NVML and /proc deltas do under load."""
    kind = rng.randrange(4)
    if kind == 0:
        i = rng.randrange(len(utils))
        utils[i] = 40  # a dip
    elif kind == 1:
        i = rng.randrange(len(utils))
        utils[i] = 100  # a spike on an idle GPU
    else:
        pid = rng.choice(list(cpu))
        cpu[pid] = rng.uniform(0.0, 5.0) if kind == 2 else 150.0


# -- wedges ---------------------------------------------------------------------------------


def wedge_samples(
    plan: RunPlan, at: int, last_beat: Heartbeat | None, variant: str, seed: int, noise_run: int = 2,
    ticks: int = WEDGE_TICKS,
) -> Iterator[Sample]:
    """The copy's samples from tick ``at`` on: rank 0 (or every rank) wedged, no beats.

    Variants: ``all`` every rank wedged (peers blocked behind it, hosts asleep);
    ``spin`` rank 0 wedged, its peers at 100 % GPU spinning at ~100 % CPU in a
    collective (the case a whole-tree CPU rule would miss). Busy hangs:
    ``busy_cpu`` every trainer spins at ~100 % of a core with its GPU idle;
    ``busy_gpu`` every GPU reads 85-100 % while its holders poll at ~100 %.

    The run's single noisy readings go on (at its ``noise_rate``), at most
    ``noise_run`` ticks in a row: a longer run of contrary readings is not noise.
    The probe does not drop out: a gap longer than the gap tolerance restarts the
    window by design, so a wedge with one is detected later than window + 2 ticks.
    """
    topo = plan.topology
    cache = _DeviceCache(topo).table
    rng = random.Random(seed)
    r = rng.random
    noisy_in_a_row = 0
    busy = variant in BUSY_VARIANTS
    for i in range(ticks):
        t = float(at + i)
        cpu: dict[int, float] = {}
        utils = []
        for rank in range(topo.ranks):
            wedged = rank == 0 or variant == "all"
            holders = topo.holders(rank)
            if busy:
                utils.append(int(5 * r()) if variant == "busy_cpu" else 85 + int(16 * r()))
                for pid in holders:
                    cpu[pid] = 90 + 15 * r() if pid == holders[-1] else 2 * r()
            elif wedged:
                utils.append(96 + int(5 * r()))
                # Holders' CPU 0-5 % in all; without holder pids the holders are the
                # whole tree, so the 5 % is shared by every rank's holders.
                share = 5.0 / len(holders) / (1 if topo.holders_visible else topo.ranks)
                for pid in holders:
                    cpu[pid] = share * r()
            else:
                utils.append(100)
                for pid in holders:
                    cpu[pid] = 90 + 10 * r()
            for pid in topo.worker_pids(rank):
                # Without holder pids the whole tree's CPU counts: the workers have
                # filled their prefetch queues and sleep too (<= 4 % in all).
                cpu[pid] = (4.0 / (topo.workers * topo.ranks)) * r() if not topo.holders_visible else 30 * r()
        if i and noisy_in_a_row < noise_run and r() < plan.noise_rate:
            _noise(rng, cpu, utils)
            noisy_in_a_row += 1
        else:
            noisy_in_a_row = 0
        devices = tuple(cache[k][u] for k, u in enumerate(utils))
        yield Sample(t, t, cpu, devices, last_beat, len(cpu))


# -- plans ----------------------------------------------------------------------------------


class _Builder:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.segments: list[Segment] = []
        self.t = 0

    def add(self, activity: str, length: int, beats: Sequence[tuple[int, str | None]] = (), variant: str = "") -> None:
        self.segments.append(Segment(activity, self.t, length, tuple(beats), variant))
        self.t += length

    def every(self, length: int, lo: int, hi: int, phase: str) -> list[tuple[int, str | None]]:
        """Beats at 0, then every lo..hi ticks (per-batch or per-shard progress), and a
        last one in phase ``train`` on the final tick (the trainer moves on)."""
        out, off = [], 0
        while off < length - 1:
            out.append((off, phase))
            off += self.rng.randint(lo, hi)
        out.append((length - 1, "train"))
        return out


def _startup(b: _Builder, compile_heavy: bool, busy: bool = False) -> None:
    rng = b.rng
    b.add("load", rng.randint(60, 600))  # before the first beat: nothing to time out yet
    if busy:
        # Busy before the first beat (the warm-up allowance): data-loader workers fill
        # their queues, then a first compile the trainer does not announce.
        b.add("loader_warmup", rng.randint(60, 900))
    announce = [] if busy and rng.random() < 0.5 else [(0, "compile")]
    b.add("compile", rng.randint(120, 1200 if compile_heavy else 600), announce, "" if announce else "silent")
    capture = rng.randint(60, 1200 if compile_heavy else 300)
    b.add("capture", capture, [(0, "warmup"), (capture - 1, "train")])


def _step(b: _Builder, scenario: str, topo: Topology) -> None:
    """One GRPO step; the trainer beats once, at its end. At most MAX_SILENCE ticks."""
    rng = b.rng
    budget = MAX_SILENCE - 1
    parts: list[tuple[str, int, str]] = []
    stall_p, stall_hi = (0.3, 300) if scenario == "dataloader_stalls" else (0.03, 60)
    if rng.random() < stall_p:
        parts.append(("loader_stall", rng.randint(10, stall_hi), ""))
    parts.append(("sync", rng.randint(3, 40), ""))
    long_decode = scenario == "engine_proc_1gpu"
    parts.append(("decode", rng.randint(60, 400) if long_decode else rng.randint(30, 200), ""))
    if topo.ranks > 1 and rng.random() < 0.5:
        block = rng.random() < 0.5
        parts.append(("straggler", rng.randint(5, 45) if block else rng.randint(5, 200), "block" if block else "spin"))
    parts.append(("train", rng.randint(20, 150), ""))
    used = sum(p[1] for p in parts)
    if used > budget:  # trim the decode, the most elastic part
        i = next(k for k, p in enumerate(parts) if p[0] == "decode")
        parts[i] = ("decode", max(10, parts[i][1] - (used - budget)), "")
    for k, (activity, length, variant) in enumerate(parts):
        beats = [(length - 1, "train")] if k == len(parts) - 1 else []
        b.add(activity, length, beats, variant)


def _checkpoint(b: _Builder, topo: Topology) -> None:
    rng = b.rng
    if rng.random() < 0.5:
        length = rng.randint(120, MAX_LONG_PHASE - 100)
        b.add("ckpt", length, [(0, "checkpoint"), (length - 1, "train")], "phase")
    else:
        length = rng.randint(60, 900)
        b.add("ckpt", length, b.every(length, 5, 45, "save"), "shards")


def _evaluate(b: _Builder, topo: Topology, busy: bool = False) -> None:
    rng = b.rng
    if busy and rng.random() < 0.6:
        # A long evaluation that beats only when it is done: busy, silent, healthy.
        length = rng.randint(120, MAX_SILENCE - 20)
        b.add("eval", length, [(length - 1, "train")], "silent")
        return
    length = rng.randint(120, 900)
    if topo.ranks > 1 and rng.random() < 0.5:
        b.add("eval_rank0", length, b.every(length, 5, 40, "eval"), "block" if rng.random() < 0.5 else "spin")
    else:
        b.add("eval", length, b.every(length, 5, 30, "eval"))


def _recompile(b: _Builder, busy: bool = False) -> None:
    rng = b.rng
    if busy and rng.random() < 0.5:
        length = rng.randint(30, 500)  # a recompile the trainer does not announce
        b.add("compile", length, [(length - 1, "train")], "silent")
    elif rng.random() < 0.5:
        length = rng.randint(30, 300)
        b.add("compile", length, [(0, "compile"), (length - 1, "train")])
    else:
        length = rng.randint(30, 300)
        b.add("capture", length, [(0, "warmup"), (length - 1, "train")])


def plan_run(scenario: str, index: int, seed: int, hours: float, wedges: int = 3, busy_wedges: int = 1) -> RunPlan:
    rng = random.Random(f"{seed}/{scenario}/{index}")
    topo = {
        "colocate_1gpu": Topology(1),
        "engine_proc_1gpu": Topology(1, engine_process=True),
        "ddp4_checkpoint": Topology(4),
        "compile_heavy": Topology(rng.choice([1, 2])),
        "eval_heavy": Topology(rng.choice([1, 4])),
        "dataloader_stalls": Topology(1, workers=4),
        "flaky_probe": Topology(rng.choice([1, 4]), engine_process=rng.random() < 0.5),
        "container_nopids": Topology(rng.choice([1, 2]), engine_process=rng.random() < 0.5, holders_visible=False),
        "busy_healthy": Topology(rng.choice([1, 2]), engine_process=rng.random() < 0.5),
    }[scenario]
    busy = scenario == "busy_healthy"
    noise_rate, gap_rate = (0.02, 0.005) if scenario == "flaky_probe" else (0.002, 0.0005)
    b = _Builder(rng)
    _startup(b, compile_heavy=scenario == "compile_heavy", busy=busy)
    target = int(hours * 3600)
    ckpt_every = rng.randint(1200, 3600) if scenario != "ddp4_checkpoint" else rng.randint(600, 1500)
    eval_every = rng.randint(900, 1800) if scenario in ("eval_heavy", "busy_healthy") else rng.randint(3600, 7200)
    recompile_every = rng.randint(1200, 3600) if scenario in ("compile_heavy", "busy_healthy") else 10**9
    next_ckpt, next_eval, next_recompile = b.t + ckpt_every, b.t + eval_every, b.t + recompile_every
    while b.t < target:
        if b.t >= next_ckpt:
            _checkpoint(b, topo)
            next_ckpt = b.t + ckpt_every
        elif b.t >= next_eval:
            _evaluate(b, topo, busy)
            next_eval = b.t + eval_every
        elif b.t >= next_recompile:
            _recompile(b, busy)
            next_recompile = b.t + recompile_every
        else:
            _step(b, scenario, topo)
    plan = RunPlan(scenario, index, rng.randrange(2**31), topo, tuple(b.segments), noise_rate, gap_rate)
    plan.check()
    # Wedge ticks: uniform over the ticks outside announced long phases, away from the end
    # (the copy needs WEDGE_TICKS after T) and not in the first minute.
    ranges = [(a, min(b_, plan.ticks - WEDGE_TICKS)) for a, b_ in plan.eligible()]
    ranges = [(max(a, 60), b_) for a, b_ in ranges if b_ > max(a, 60)]
    total = sum(b_ - a for a, b_ in ranges)
    picks = []
    for _ in range(wedges):
        x = rng.randrange(total)
        for a, b_ in ranges:
            if x < b_ - a:
                picks.append(a + x)
                break
            x -= b_ - a
    variants = [("all" if topo.ranks == 1 or not topo.holders_visible else rng.choice(["all", "spin"])) for _ in picks]
    # Busy hangs: only after the first beat (before it, the warm-up allowance holds).
    first_beat = plan.beats()[0][0] if plan.beats() else plan.ticks
    busy_ranges = [(max(a, first_beat + 1), b_) for a, b_ in ranges if b_ > max(a, first_beat + 1)]
    busy_total = sum(b_ - a for a, b_ in busy_ranges)
    for k in range(busy_wedges if busy_total else 0):
        x = rng.randrange(busy_total)
        for a, b_ in busy_ranges:
            if x < b_ - a:
                picks.append(a + x)
                variants.append(BUSY_VARIANTS[(index + k) % len(BUSY_VARIANTS)])
                break
            x -= b_ - a
    order = sorted(range(len(picks)), key=picks.__getitem__)
    return RunPlan(
        scenario, index, plan.seed, topo, plan.segments, noise_rate, gap_rate,
        tuple(picks[i] for i in order), tuple(variants[i] for i in order),
    )


def corpus(seed: int = 0, hours_per_scenario: float = 128.0, run_hours: tuple[float, float] = (2.0, 6.0),
           wedges_per_run: int = 3, scenarios: Sequence[str] = SCENARIOS, busy_wedges_per_run: int = 1) -> list[RunPlan]:
    """Runs for each scenario until ``hours_per_scenario`` is reached; deterministic from ``seed``."""
    runs = []
    for scenario in scenarios:
        rng = random.Random(f"{seed}/{scenario}")
        done, index = 0.0, 0
        while done < hours_per_scenario:
            hours = min(rng.uniform(*run_hours), max(hours_per_scenario - done, 0.5))
            plan = plan_run(scenario, index, seed, hours, wedges_per_run, busy_wedges_per_run)
            runs.append(plan)
            done += plan.hours
            index += 1
    return runs


# -- replay ---------------------------------------------------------------------------------


@dataclass
class WedgeResult:
    at: int
    variant: str
    verdict: Verdict | None
    last_beat_t: float | None = None
    timeout: float | None = None  # the progress timeout in force at the wedge

    @property
    def busy(self) -> bool:
        return self.variant in BUSY_VARIANTS

    @property
    def latency(self) -> float | None:
        """Stall wedges: verdict time minus the wedge tick (a stall verdict only).
        Busy hangs: verdict time minus the last beat (a hang verdict of any kind)."""
        if self.verdict is None:
            return None
        if self.busy:
            return None if self.last_beat_t is None else self.verdict.detected_at - self.last_beat_t
        if self.verdict.kind is not VerdictKind.STALL:
            return None
        return self.verdict.detected_at - self.at


@dataclass
class RunResult:
    plan: RunPlan
    false_verdicts: list[Verdict] = field(default_factory=list)
    wedges: list[WedgeResult] = field(default_factory=list)
    samples: int = 0

    @property
    def false_verdict(self) -> Verdict | None:
        return self.false_verdicts[0] if self.false_verdicts else None


def replay(plan: RunPlan, config: DetectorConfig | None = None) -> RunResult:
    """Replay the healthy run; fork the detector at each wedge tick and feed the fork the wedge."""
    config = config or DetectorConfig()
    detector = Detector(config, start=0.0)
    result = RunResult(plan)
    pending = list(zip(plan.wedges, plan.wedge_variants))
    last_beat: Heartbeat | None = None
    observe = detector.observe
    n = 0
    for sample in plan.samples():
        while pending and int(sample.t) == pending[0][0]:  # two wedges may share a tick
            at, variant = pending.pop(0)
            timeout = config.progress_timeout_for(last_beat.phase if last_beat else None)
            result.wedges.append(WedgeResult(at, variant, _run_wedge(detector, plan, at, last_beat, variant),
                                             last_beat.ts if last_beat else None, timeout))
        verdict = observe(sample)
        n += 1
        last_beat = sample.heartbeat
        if verdict is not None:
            result.false_verdicts.append(verdict)
            # Keep replaying (for the wedges) with a fresh detector, as the supervisor would after a restart.
            detector = Detector(config, start=sample.t)
            observe = detector.observe
    result.samples = n
    return result


def _wedge_ticks(config: DetectorConfig, at: int, last_beat: Heartbeat | None, variant: str) -> int:
    """How long a wedged copy runs: a busy hang until a little past its progress timeout."""
    if variant not in BUSY_VARIANTS or last_beat is None:
        return WEDGE_TICKS
    timeout = config.progress_timeout_for(last_beat.phase)
    if timeout is None:
        return WEDGE_TICKS
    return max(WEDGE_TICKS, int(last_beat.ts + timeout + 3 * config.interval) - at + 1)


def _run_wedge(detector: Detector, plan: RunPlan, at: int, last_beat: Heartbeat | None, variant: str) -> Verdict | None:
    fork = copy.deepcopy(detector)
    ticks = _wedge_ticks(fork.config, at, last_beat, variant)
    for sample in wedge_samples(plan, at, last_beat, variant, seed=plan.seed ^ at, ticks=ticks):
        verdict = fork.observe(sample)
        if verdict is not None:
            return verdict
    return None


def replay_wedged_copy(plan: RunPlan, at: int, variant: str, config: DetectorConfig | None = None) -> Verdict | None:
    """The slow, literal way: a fresh detector over the copy (healthy prefix, then the wedge)."""
    config = config or DetectorConfig()
    detector = Detector(config, start=0.0)
    last_beat = None
    for sample in plan.samples():
        if sample.t >= at:
            break
        verdict = detector.observe(sample)
        if verdict is not None:
            return verdict
        last_beat = sample.heartbeat
    ticks = _wedge_ticks(config, at, last_beat, variant)
    for sample in wedge_samples(plan, at, last_beat, variant, seed=plan.seed ^ at, ticks=ticks):
        verdict = detector.observe(sample)
        if verdict is not None:
            return verdict
    return None


@dataclass
class Row:
    scenario: str
    runs: int
    hours: float
    false_verdicts: int
    detected: int
    wedges: int
    latencies: list[float]
    busy_detected: int = 0
    busy_wedges: int = 0
    busy_ratios: list[float] = field(default_factory=list)  # (verdict - last beat) / progress timeout

    def latency_over_window(self, window: float) -> tuple[float, float, float] | None:
        if not self.latencies:
            return None
        return (min(self.latencies) / window, statistics.median(self.latencies) / window, max(self.latencies) / window)


def summarise(results: Sequence[RunResult], config: DetectorConfig | None = None) -> list[Row]:
    """Rows per scenario; a wedge counts as detected only within window + 2 intervals,
    a busy hang only within progress timeout + 2 intervals of its last beat."""
    config = config or DetectorConfig()
    bound = config.stall_window + 2 * config.interval
    rows: dict[str, Row] = {}
    for res in results:
        row = rows.setdefault(res.plan.scenario, Row(res.plan.scenario, 0, 0.0, 0, 0, 0, []))
        row.runs += 1
        row.hours += res.plan.hours
        row.false_verdicts += len(res.false_verdicts)
        for w in res.wedges:
            if w.busy:
                row.busy_wedges += 1
                lat = w.latency
                if lat is not None and w.timeout and 0 <= lat <= w.timeout + 2 * config.interval:
                    row.busy_detected += 1
                    row.busy_ratios.append(lat / w.timeout)
                continue
            row.wedges += 1
            if w.latency is not None and w.latency <= bound:
                row.detected += 1
                row.latencies.append(w.latency)
    return list(rows.values())
