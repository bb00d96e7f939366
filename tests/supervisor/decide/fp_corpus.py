"""A false-positive corpus for the stall detector: healthy runs that fool watchdogs, and wedged copies.

This module is test data: a table of scenarios and the generator that turns them into sample
streams (over the size limits for library modules, as a data table may be). It lives beside the
detector's tests; test_false_positives.py replays a part of it on every test run and
scripts/bench_false_positives.py the whole of it, both loading it by path.

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
* fast steps (scenario ``fast_steps``): a GRPO step of seconds, where a learned timeout
  (``--progress-timeout auto``) is far shorter than the fixed one;
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
the result is the same (``tests/supervisor/decide/test_false_positives.py`` checks that).

Constraints the generator guarantees (``RunPlan.check`` asserts them): heartbeats
are at most 560 s apart outside long phases and 1500 s inside them, and no run
of "GPU busy, holders idle" readings outside a long phase lasts 60 s without a beat
(the longest is a 45 s blocking straggler wait).

Multi-rank streams (scenario ``ranks_uneven``, for the per-rank progress rule): every rank
also beats into its own file (``Sample.beats``). Ranks beat at different rates (ranks > 0
once per micro-batch while they train, rank 0 once per step); rank 0 evaluates and saves
alone while the others wait in a collective without a beat (for up to 900 s, longer than the
progress timeout); the last rank finishes early, sends its final beat and lingers. Their own
wedge, ``rank_stuck``: rank 1 stops beating while rank 0 goes on as healthy; only the
per-rank rule sees it, at rank 1's last beat + the progress timeout.

Engine streams (``ENGINE_SCENARIOS``, for the engine step rule) are a second kind of
run: per-process engine beat files as ``EngineBeacon`` writes them (at most one write per
0.2 s, read once a tick), beside the trainer's heartbeat, the tree's CPU and the GPUs,
planned per engine slot as segments (load, wake, prepare, generate, idle, standby, gone)
and expanded lazily into steps. Their wedges freeze one engine mid-request (its beat still
says ``generate``) with its host asleep or busy-polling; ``replay_engine`` forks the
detector there as ``replay`` does, and feeds it the same samples with the wedge laid over.

Usage: ``corpus(seed, hours_per_scenario)`` -> runs; ``replay(run, config)`` ->
``RunResult``; ``summarise(results)`` -> per-scenario rows. Engine streams:
``engine_corpus``, ``replay_engine``, ``summarise_engine``.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import itertools
import random
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from hangwatch.contract.verdict import Verdict, VerdictKind
from hangwatch.supervisor.decide.detector import DEFAULT_PHASE_TIMEOUTS, Detector, DetectorConfig
from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.samples import DeviceSample, Sample

INTERVAL = 1.0
LONG_PHASES = frozenset(DEFAULT_PHASE_TIMEOUTS)
MAX_SILENCE = 560  # ticks between beats outside long phases (progress timeout 600)
MAX_LONG_PHASE = 1500  # ticks a long phase may last (its timeouts are 1800)
WEDGE_TICKS = 75  # how long a wedged copy runs after T before we call it a miss
BUSY_VARIANTS = ("busy_cpu", "busy_gpu")  # busy hangs: only the progress rule sees them
RANK_VARIANT = "rank_stuck"  # one rank stops beating while the others go on: only the per-rank rule sees it
STUCK_RANK = 1
# Rank 0's phases during which the other ranks wait for it in a collective, without a beat.
_ALONE = frozenset({"eval_rank0", "ckpt"})

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
    "ranks_uneven",
    "fast_steps",
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
    # Per-rank beat files (scenario ranks_uneven): (tick, rank, phase, final), in tick order.
    rank_beats: tuple[tuple[int, int, str | None, bool], ...] = ()

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


def _generate(plan: RunPlan, stop_rank: tuple[int, int] | None = None) -> Iterator[Sample]:
    """The run's samples; ``stop_rank`` (rank, tick): that rank's file gets no beat from the tick on."""
    topo = plan.topology
    cache = _DeviceCache(topo).table
    noise_rng = random.Random(plan.seed ^ 0x5EED)
    nr = noise_rng.random
    beat: Heartbeat | None = None
    seq = 0
    gap_left = 0
    beat_pid = topo.trainer(0)
    rank_events = plan.rank_beats
    next_event = 0
    rank_hbs: dict[int, Heartbeat] = {}
    rank_seq = [0] * topo.ranks
    beats: tuple[Heartbeat, ...] = ()
    for index, seg in enumerate(plan.segments):
        rng = random.Random(plan.seed * 100_003 + index)
        r = rng.random
        gpus, cpus = _columns(plan, seg, rng)
        seg_beats = dict(seg.beats)
        for off in range(seg.length):
            t = float(seg.start + off)
            if off in seg_beats:
                seq += 1
                beat = _beat(beat_pid, seq, t, seg_beats[off])
            if next_event < len(rank_events) and rank_events[next_event][0] <= t:
                while next_event < len(rank_events) and rank_events[next_event][0] <= t:
                    _, rank, phase, final = rank_events[next_event]
                    next_event += 1
                    if stop_rank is not None and rank == stop_rank[0] and t >= stop_rank[1]:
                        continue
                    rank_seq[rank] += 1
                    rank_hbs[rank] = Heartbeat(pid=topo.trainer(rank), seq=rank_seq[rank], ts=t, step=rank_seq[rank],
                                               phase=phase, rank=rank, final=final)
                beats = tuple(rank_hbs[k] for k in sorted(rank_hbs))
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
            yield Sample(t, t, cpu, devices, beat, len(cpu), beats=beats)


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
    ticks: int = WEDGE_TICKS, beats: tuple[Heartbeat, ...] = (),
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
        yield Sample(t, t, cpu, devices, last_beat, len(cpu), beats=beats)  # every rank's file frozen too


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
    if scenario == "fast_steps":
        # A small model's GRPO step: seconds, now and then a data-loader stall of up to a minute.
        if rng.random() < 0.03:
            parts.append(("loader_stall", rng.randint(5, 60), ""))
        parts += [("sync", rng.randint(1, 3), ""), ("decode", rng.randint(2, 15), ""), ("train", rng.randint(1, 6), "")]
        for k, (activity, length, variant) in enumerate(parts):
            b.add(activity, length, [(length - 1, "train")] if k == len(parts) - 1 else [], variant)
        return
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
        "ranks_uneven": Topology(rng.choice([2, 4])),
        "fast_steps": Topology(rng.choice([1, 2])),
    }[scenario]
    busy = scenario == "busy_healthy"
    noise_rate, gap_rate = (0.02, 0.005) if scenario == "flaky_probe" else (0.002, 0.0005)
    b = _Builder(rng)
    _startup(b, compile_heavy=scenario == "compile_heavy", busy=busy)
    target = int(hours * 3600)
    ckpt_every = rng.randint(1200, 3600) if scenario != "ddp4_checkpoint" else rng.randint(600, 1500)
    eval_every = (rng.randint(900, 1800) if scenario in ("eval_heavy", "busy_healthy", "ranks_uneven")
                  else rng.randint(3600, 7200))
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
    rank_beats: tuple[tuple[int, int, str | None, bool], ...] = ()
    if scenario == "ranks_uneven":
        rank_beats = _rank_beats(plan, rng)
        stuck = _rank_wedge_tick(plan, rng)
        if stuck is not None:
            picks.append(stuck)
            variants.append(RANK_VARIANT)
    order = sorted(range(len(picks)), key=picks.__getitem__)
    return RunPlan(
        scenario, index, plan.seed, topo, plan.segments, noise_rate, gap_rate,
        tuple(picks[i] for i in order), tuple(variants[i] for i in order), rank_beats,
    )


def _rank_beats(plan: RunPlan, rng: random.Random) -> tuple[tuple[int, int, str | None, bool], ...]:
    """Every rank's own beats. Rank 0's are the shared file's; the others beat with it (the same
    tick) except while it evaluates or saves alone (they wait in a collective), and once per
    micro-batch (every 5-20 ticks) while they train; with more than two ranks the last one sends its
    final beat at 60-90 % of the run and lingers, alive and silent (never the stuck rank's)."""
    topo = plan.topology
    finisher = topo.ranks - 1 if topo.ranks > 2 else -1
    finish_at = int(plan.ticks * rng.uniform(0.6, 0.9))
    events: list[tuple[int, int, str | None, bool]] = []

    def others(t: int, phase: str | None) -> None:
        events.extend((t, r, phase, False) for r in range(1, topo.ranks) if not (r == finisher and t >= finish_at))

    for seg in plan.segments:
        for off, phase in seg.beats:
            events.append((seg.start + off, 0, phase, False))
            if seg.activity not in _ALONE:
                others(seg.start + off, phase)
        if seg.activity == "train":
            off = rng.randint(5, 20)
            while off < seg.length - 1:
                others(seg.start + off, "train")
                off += rng.randint(5, 20)
    if finisher > 0:
        events.append((finish_at, finisher, "train_end", True))
    events.sort(key=lambda e: (e[0], e[1]))
    return tuple(events)


#: Ticks a ``rank_stuck`` copy has after its tick: the longest timeout (the auto ceiling) and a
#: little, so the run does not end before a verdict.
RANK_WEDGE_ROOM = 3600 + 900


def _rank_wedge_tick(plan: RunPlan, rng: random.Random) -> int | None:
    """A tick for ``rank_stuck``: rank 0 trains (no phase of its own, no save or evaluation alone)
    from 600 ticks before it to 700 after it, so at the default timeout the silence is the stuck
    rank's alone (a longer one may see rank 0 work alone meanwhile, and hold the rank's clock);
    or None."""
    first = plan.beats()[0][0] if plan.beats() else plan.ticks
    bad = [(seg.start - 700, seg.start + seg.length + 600) for seg in plan.segments
           if seg.activity in _ALONE or any(phase not in (None, "train") for _, phase in seg.beats)]
    lo, hi = first + 600, plan.ticks - RANK_WEDGE_ROOM
    for _ in range(1000):
        if hi <= lo:
            return None
        t = rng.randrange(lo, hi)
        if not any(a <= t < b for a, b in bad):
            return t
    return None


def corpus(seed: int = 0, hours_per_scenario: float = 128.0, run_hours: tuple[float, float] = (2.0, 6.0),
           wedges_per_run: int = 3, scenarios: Sequence[str] = SCENARIOS, busy_wedges_per_run: int = 1) -> list[RunPlan]:
    """Runs for each scenario until ``hours_per_scenario`` is reached; deterministic from ``seed``."""
    return _fill(seed, scenarios, hours_per_scenario, run_hours,
                 lambda scenario, index, hours: plan_run(scenario, index, seed, hours, wedges_per_run,
                                                         busy_wedges_per_run))


def _fill(seed: int, scenarios: Sequence[str], hours_per_scenario: float, run_hours: tuple[float, float],
          plan: Callable[[str, int, float], Any]) -> list[Any]:
    """Plans of random lengths per scenario until each has ``hours_per_scenario``."""
    runs = []
    for scenario in scenarios:
        rng = random.Random(f"{seed}/{scenario}")
        done, index = 0.0, 0
        while done < hours_per_scenario:
            run = plan(scenario, index, min(rng.uniform(*run_hours), max(hours_per_scenario - done, 0.5)))
            runs.append(run)
            done += run.hours
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
    def rank(self) -> bool:
        """One rank stuck while the others go on (``rank_stuck``)."""
        return self.variant == RANK_VARIANT

    @property
    def judged_for(self) -> float | None:
        """A stuck rank: how long its clock ran at the verdict (its silence, less the time it was held
        while rank 0 worked alone): within the timeout + 2 intervals, it was caught in time."""
        if self.verdict is None or self.latency is None:
            return None
        return self.verdict.detected_at - self.verdict.onset

    @property
    def latency(self) -> float | None:
        """Stall wedges: verdict time minus the wedge tick (a stall verdict only).
        Busy hangs: verdict time minus the last beat (a hang verdict of any kind).
        A stuck rank: verdict time minus that rank's last beat (a verdict naming it)."""
        if self.verdict is None:
            return None
        if self.rank:
            if self.last_beat_t is None or self.verdict.evidence.get("stuck_rank") != STUCK_RANK:
                return None
            return self.verdict.detected_at - self.last_beat_t
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
    # The progress timeouts learned on the healthy run (auto timeouts), in order.
    learned: list[float] = field(default_factory=list)

    @property
    def false_verdict(self) -> Verdict | None:
        return self.false_verdicts[0] if self.false_verdicts else None


def replay(plan: RunPlan, config: DetectorConfig | None = None) -> RunResult:
    """Replay the healthy run; fork the detector at each wedge tick and feed the fork the wedge."""
    config = config or DetectorConfig()
    detector = Detector(config, start=0.0)
    result = RunResult(plan)
    pending = list(zip(plan.wedges, plan.wedge_variants))
    last: Sample | None = None
    observe = detector.observe
    n = 0
    learned = None
    for sample in plan.samples():
        while pending and int(sample.t) == pending[0][0]:  # two wedges may share a tick
            at, variant = pending.pop(0)
            if variant == RANK_VARIANT:
                result.wedges.append(_run_rank_wedge(detector, plan, at))
                continue
            last_beat = last.heartbeat if last else None
            timeout = detector.progress_timeout_for(last_beat.phase if last_beat else None)
            result.wedges.append(WedgeResult(at, variant, _run_wedge(detector, plan, at, last, variant),
                                             last_beat.ts if last_beat else None, timeout))
        verdict = observe(sample)
        n += 1
        last = sample
        if detector.learned is not learned and detector.learned is not None:
            learned = detector.learned
            result.learned.append(learned.timeout)
        if verdict is not None:
            result.false_verdicts.append(verdict)
            # Keep replaying (for the wedges) with a fresh detector, as the supervisor would after a restart.
            detector = Detector(config, start=sample.t)
            observe = detector.observe
    result.samples = n
    return result


def _wedge_ticks(detector: Detector, at: int, last_beat: Heartbeat | None, variant: str) -> int:
    """How long a wedged copy runs: a busy hang until a little past its progress timeout."""
    if variant not in BUSY_VARIANTS or last_beat is None:
        return WEDGE_TICKS
    timeout = detector.progress_timeout_for(last_beat.phase)
    if timeout is None:
        return WEDGE_TICKS
    return max(WEDGE_TICKS, int(last_beat.ts + timeout + 3 * detector.config.interval) - at + 1)


def _run_wedge(detector: Detector, plan: RunPlan, at: int, last: Sample | None, variant: str) -> Verdict | None:
    fork = copy.deepcopy(detector)
    last_beat = last.heartbeat if last else None
    ticks = _wedge_ticks(fork, at, last_beat, variant)
    for sample in wedge_samples(plan, at, last_beat, variant, seed=plan.seed ^ at, ticks=ticks,
                                beats=last.beats if last else ()):
        verdict = fork.observe(sample)
        if verdict is not None:
            return verdict
    return None


def _stuck_rank_last_beat(plan: RunPlan, at: int) -> float | None:
    beats = [t for t, rank, _, _ in plan.rank_beats if rank == STUCK_RANK and t < at]
    return float(beats[-1]) if beats else None


def _run_rank_wedge(detector: Detector, plan: RunPlan, at: int, fork: bool = True) -> WedgeResult:
    """Rank ``STUCK_RANK`` gets no beat from ``at`` on, the rest of the run as it was: the detector
    (forked at ``at``, or fresh from the start with ``fork=False``) until a little past the stuck
    rank's last beat + its timeout."""
    judge = copy.deepcopy(detector) if fork else detector
    last = _stuck_rank_last_beat(plan, at)
    # The longest timeout in force during the silence: a learned one may be learned again meanwhile.
    timeout = judge.progress_timeout_for("train") or 0.0
    deadline = at + RANK_WEDGE_ROOM
    verdict = None
    for sample in _generate(plan, stop_rank=(STUCK_RANK, at)):
        if fork and sample.t < at:
            continue
        if sample.t > deadline:
            break
        verdict = judge.observe(sample)
        if verdict is not None:
            break
        if sample.t >= at:
            timeout = max(timeout, judge.progress_timeout_for("train") or 0.0)
    return WedgeResult(at, RANK_VARIANT, verdict, last, timeout)


def replay_wedged_copy(plan: RunPlan, at: int, variant: str, config: DetectorConfig | None = None) -> Verdict | None:
    """The slow, literal way: a fresh detector over the copy (healthy prefix, then the wedge)."""
    config = config or DetectorConfig()
    detector = Detector(config, start=0.0)
    if variant == RANK_VARIANT:
        return _run_rank_wedge(detector, plan, at, fork=False).verdict
    last: Sample | None = None
    for sample in plan.samples():
        if sample.t >= at:
            break
        verdict = detector.observe(sample)
        if verdict is not None:
            return verdict
        last = sample
    last_beat = last.heartbeat if last else None
    ticks = _wedge_ticks(detector, at, last_beat, variant)
    for sample in wedge_samples(plan, at, last_beat, variant, seed=plan.seed ^ at, ticks=ticks,
                                beats=last.beats if last else ()):
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
    busy_latencies: list[float] = field(default_factory=list)  # verdict - last beat, seconds
    rank_detected: int = 0
    rank_wedges: int = 0
    rank_latencies: list[float] = field(default_factory=list)  # verdict - the stuck rank's last beat, seconds

    def latency_over_window(self, window: float) -> tuple[float, float, float] | None:
        if not self.latencies:
            return None
        return (min(self.latencies) / window, statistics.median(self.latencies) / window, max(self.latencies) / window)


def summarise(results: Sequence[RunResult], config: DetectorConfig | None = None) -> list[Row]:
    """Rows per scenario; a wedge counts as detected only within window + 2 intervals,
    a busy hang (or a stuck rank) only within the progress timeout in force + 2 intervals
    of its last beat."""
    config = config or DetectorConfig()
    bound = config.stall_window + 2 * config.interval
    rows: dict[str, Row] = {}
    for res in results:
        row = rows.setdefault(res.plan.scenario, Row(res.plan.scenario, 0, 0.0, 0, 0, 0, []))
        row.runs += 1
        row.hours += res.plan.hours
        row.false_verdicts += len(res.false_verdicts)
        for w in res.wedges:
            if w.busy or w.rank:
                lat = w.latency
                judged = w.judged_for if w.rank else lat
                caught = lat is not None and judged is not None and w.timeout \
                    and 0 <= judged <= w.timeout + 2 * config.interval
                if w.rank:
                    row.rank_wedges += 1
                    if caught:
                        row.rank_detected += 1
                        row.rank_latencies.append(lat)
                    continue
                row.busy_wedges += 1
                if caught:
                    row.busy_detected += 1
                    row.busy_ratios.append(lat / w.timeout)
                    row.busy_latencies.append(lat)
                continue
            row.wedges += 1
            if w.latency is not None and w.latency <= bound:
                row.detected += 1
                row.latencies.append(w.latency)
    return list(rows.values())


# -- engine streams: the engine step rule ---------------------------------------------------
#
# Every rollout engine process beats into its own file, at most once per 0.2 s while it
# steps (``generator/beacon.py``): ``prepare`` from a request's arrival to its first step,
# ``generate`` from then on, ``idle`` after it; ``step`` counts the process's steps over
# its life. The streams below are the files' contents as the sampler reads them once a
# tick, beside the trainer's heartbeat, the tree's CPU and the GPUs. One vLLM V1 step is
# one scheduler iteration: a decode step takes tens of ms, a prefill chunk is bounded by
# ``max_num_batched_tokens`` but takes seconds on a big model. What must not fire:
# long prefill chunks (up to 10 s), a first-use JIT of a kernel mid-run (one step of up
# to 20 s, at most once in a process's life: Triton and FlashInfer compile a kernel the
# first time a path is taken; public reports give ~14 s for a dozen Triton kernels on a
# first request, ~20 s for a FlashInfer kernel on the first prefix-cache hit), GC and
# host-contention pauses of a few seconds, a big batch's input
# processing (minutes of ``prepare``), idle and asleep while the trainer trains (hours),
# a standby worker that never steps, a worker's first step (its warm-up), several engines
# on one rank, a worker that died mid-request (its file still says ``generate``), a pid
# reused by the next worker, steps in the wall clock. What must fire: an engine that stops
# stepping mid-request, its host asleep (``engine_sleep``: the cuda-graph wedge) or
# busy-polling (``engine_spin``).

ENGINE_SCENARIOS = (
    "engine_worker",
    "engine_colocate",
    "engine_standby",
    "engine_multi",
    "engine_restarts",
    "engine_clock",
)
ENGINE_WEDGES = ("engine_sleep", "engine_spin")
BEACON_INTERVAL = 0.2  # EngineBeacon.min_interval
ROLLOUT_BUDGET = MAX_SILENCE - 20  # trainer beats at a rollout's start and end: under the progress timeout
LONG_STEP = 2.0  # steps at least this long are traced, so a false verdict can name its cause
LONGEST_HEALTHY_STEP = 20.0  # the longest step after a process's first (a first-use JIT)


@dataclass(frozen=True)
class StepProfile:
    """How long this run's engine steps take (seconds)."""

    decode: float  # one decode step
    chunk: float  # the longest prefill chunk (a full ``max_num_batched_tokens`` budget)
    warmup: float  # the longest first step of a process (lazy initialisation; never judged)


@dataclass(frozen=True)
class ESeg:
    """One stretch of one engine slot (a "lane"). ``kind``: ``absent`` (no process), ``load``
    (starting; no beat file yet), ``standby`` (alive, asleep, never asked: no file), ``idle``
    (between requests, or asleep while the trainer trains), ``wake`` (waking and loading
    weights: outside any request), ``prepare`` and ``generate`` (a request), ``gone`` (the
    process died with a request in flight; the generator removes its file at ``removed``,
    or never in this run when None)."""

    kind: str
    start: float
    end: float
    pid: int = 0
    first: bool = False  # generate: the process's first request (its first step is the warm-up)
    jit: bool = False  # generate: one step meets a kernel's first-use JIT compile
    removed: float | None = None


@dataclass(frozen=True)
class EnginePlan:
    scenario: str
    index: int
    seed: int
    ranks: int
    colocated: bool  # the engine steps in the trainer's process (TRL colocate): no worker, no EngineCore
    lanes: tuple[tuple[int, tuple[ESeg, ...]], ...]  # (rank, segments) per engine slot
    trainer_beats: tuple[tuple[float, str], ...]
    training: tuple[tuple[float, float], ...]  # the trainer computes (GPU and trainer CPU busy)
    profile: StepProfile
    ticks: int
    clock_jumps: tuple[tuple[float, float], ...] = ()  # (when, seconds the wall clock steps by)
    noise_rate: float = 0.002
    wedges: tuple[tuple[int, int], ...] = ()  # (tick, lane)
    wedge_variants: tuple[str, ...] = ()

    @property
    def hours(self) -> float:
        return self.ticks * INTERVAL / 3600.0

    @staticmethod
    def trainer(rank: int) -> int:
        return 2000 + 100 * rank

    def check(self) -> None:
        """Healthy for every other rule by construction; fail loudly if a change breaks that."""
        beats = [t for t, _ in self.trainer_beats] + [float(self.ticks)]
        for t0, t1 in zip(beats, beats[1:]):
            if t1 - t0 > MAX_SILENCE:
                raise AssertionError(
                    f"{self.scenario}#{self.index}: {t1 - t0:.0f} s without a trainer beat after {t0:.0f}")
        for lane, (_, segs) in enumerate(self.lanes):
            for a, b in zip(segs, segs[1:]):
                if a.end != b.start or a.end < a.start:
                    raise AssertionError(f"{self.scenario}#{self.index}: lane {lane} has a hole at {a.end}")

    def samples(self, trace: "EngineTrace | None" = None) -> Iterator[Sample]:
        return _engine_samples(self, trace)


class EngineTrace:
    """What the stream generator knows and the samples do not say: when each visible engine
    beat was really written (its ``ts`` may be off by a clock step), and the long steps."""

    def __init__(self, keep: int = 2) -> None:
        # pid -> the last ``keep`` beats read (a replay reads ahead of the tick it forks at)
        self.built: dict[int, collections.deque[tuple[Heartbeat, float]]] = {}
        self.keep = keep
        self.long_steps: list[tuple[int, float, float, str]] = []  # (pid, start, end, cause)

    def written_at(self, beat: Heartbeat) -> float | None:
        for hb, t in self.built.get(beat.pid, ()):
            if hb is beat:
                return t
        return None

    def cause(self, pid: int, onset: float, until: float) -> str:
        """The traced long step of ``pid`` that covers the silence [onset, until], if any."""
        best = "no long step"
        for p, a, b, why in self.long_steps:
            if p == pid and a <= onset + INTERVAL and b >= until - INTERVAL:
                best = why
        return best


class _EngineBuilder:
    def __init__(self, rng: random.Random, ranks: int, lanes: Sequence[int], colocated: bool) -> None:
        self.rng = rng
        self.colocated = colocated
        self.lanes: list[tuple[int, list[ESeg]]] = [(rank, []) for rank in lanes]
        self.pid: list[int] = []
        self.next_pid = {rank: EnginePlan.trainer(rank) + 2 for rank in range(ranks)}
        self.requests: list[int] = [0] * len(lanes)  # requests of the current process's life
        self.jit_at: list[int] = [0] * len(lanes)  # which of its requests meets the first-use JIT (0: none)
        self.beats: list[tuple[float, str]] = []
        self.training: list[tuple[float, float]] = []
        for lane, rank in enumerate(lanes):
            self.pid.append(EnginePlan.trainer(rank) if colocated else 0)
            self.new_life(lane)

    def new_life(self, lane: int, reuse: bool = False) -> None:
        """A new engine process in this slot: a fresh pid (workers take two: the worker and its
        EngineCore child), or the dead one's again."""
        rank = self.lanes[lane][0]
        if not self.colocated and not reuse:
            self.pid[lane] = self.next_pid[rank]
            self.next_pid[rank] += 2
        self.requests[lane] = 0
        self.jit_at[lane] = self.rng.randint(2, 8) if self.rng.random() < 0.5 else 0

    def end(self, lane: int) -> float:
        segs = self.lanes[lane][1]
        return segs[-1].end if segs else 0.0

    def extend(self, lane: int, kind: str, until: float, **extra) -> None:
        start = self.end(lane)
        if until > start:
            pid = 0 if kind == "absent" else self.pid[lane]
            self.lanes[lane][1].append(ESeg(kind, start, until, pid, **extra))

    def request(self, lane: int, start: float, prepare: float, generate: float) -> float:
        """One request: ``prepare`` then ``generate`` seconds of steps; returns its end."""
        self.extend(lane, "idle", start)
        self.requests[lane] += 1
        k = self.requests[lane]
        self.extend(lane, "prepare", start + prepare)
        self.extend(lane, "generate", start + prepare + generate, first=k == 1, jit=k == self.jit_at[lane])
        return start + prepare + generate


def _engine_rollout(b: _EngineBuilder, lane: int, t0: float, budget: float, scenario: str,
                    standby: int | None) -> tuple[float, int, int | None]:
    """One rank's rollout on its active lane from ``t0``: wake and weight sync (outside any
    request), then one request (a GRPO batch). The worker may die mid-request; the generator
    then removes its file and retries the batch on the standby, or on a fresh worker (sometimes
    under the same pid). Returns (end, the active lane after it, the standby lane after it)."""
    rng = b.rng
    t = t0 + rng.uniform(1, 20) + rng.uniform(2, 40)  # wake_up (weights, KV cache), then the weight sync
    b.extend(lane, "idle", t0)
    b.extend(lane, "wake", t)
    big_batch = rng.random() < (0.15 if scenario == "engine_worker" else 0.04)
    prepare = rng.uniform(60, 300) if big_batch else rng.uniform(0.05, 3)
    generate = rng.uniform(60, 400)
    generate = max(10.0, min(generate, t0 + budget - t - prepare))
    die_p = {"engine_restarts": 0.12, "engine_standby": 0.05}.get(scenario, 0.01)
    if b.colocated or rng.random() >= die_p:
        return b.request(lane, t, prepare, generate), lane, standby
    # The worker dies mid-request: its last beat says "generate" while its pid is gone.
    dies = t + prepare + rng.uniform(0.05, 0.9) * generate
    if t0 + budget - dies < 150:  # no room for a respawn and a retry in this rollout
        return b.request(lane, t, prepare, generate), lane, standby
    b.requests[lane] += 1
    b.extend(lane, "prepare", t + prepare)
    b.extend(lane, "generate", dies, first=b.requests[lane] == 1)
    noticed = dies + rng.uniform(0.01, 3.0)  # the generator sees the socket close, kills the group
    takeover = standby is not None and b.end(standby) <= noticed  # a standby that has finished starting
    reuse = not takeover and rng.random() < (0.5 if scenario == "engine_restarts" else 0.2)
    kept = not reuse and rng.random() < 0.2  # the cleanup did not run (the file stays for good)
    b.extend(lane, "gone", noticed, removed=None if kept else noticed)
    left = t0 + budget - noticed
    if takeover:
        # The standby takes over: no engine start, its first request is its warm-up.
        assert standby is not None
        b.extend(standby, "standby", noticed)
        b.extend(lane, "absent", noticed + rng.uniform(0.5, 5))
        new_active, new_standby = standby, lane
        retry = noticed + rng.uniform(3, 30)  # wake, verified weight load
    else:
        respawn = noticed + rng.uniform(0.5, 5)
        b.extend(lane, "absent", respawn)
        b.new_life(lane, reuse=reuse)
        retry = respawn + rng.uniform(30, min(240, max(31, left * 0.5)))
        b.extend(lane, "load", retry)
        new_active, new_standby = lane, standby
    remaining = max(10.0, min(generate, t0 + budget - retry - 5))
    end = b.request(new_active, retry, rng.uniform(0.05, 2), remaining)
    if takeover:  # a new standby starts, goes to sleep, and is asked nothing
        b.new_life(new_standby)
        b.extend(new_standby, "load", end + rng.uniform(60, 240))
    return end, new_active, new_standby


def plan_engine_run(scenario: str, index: int, seed: int, hours: float, wedges: int = 3) -> EnginePlan:
    rng = random.Random(f"{seed}/{scenario}/{index}")
    ranks = 2 if scenario == "engine_multi" else 1
    colocated = scenario == "engine_colocate"
    # Lanes: one engine per rank; engine_multi adds a second engine on rank 0 (a judge or
    # reward model), engine_standby a standby worker.
    lane_ranks = list(range(ranks)) + ([0] if scenario in ("engine_multi", "engine_standby") else [])
    big = scenario == "engine_worker" or rng.random() < 0.5
    profile = StepProfile(
        decode=rng.uniform(0.015, 0.06),
        chunk=rng.uniform(2.0, 10.0) if big else rng.uniform(0.2, 2.0),
        warmup=rng.uniform(5.0, 120.0),
    )
    b = _EngineBuilder(rng, ranks, lane_ranks, colocated)
    standby = 1 if scenario == "engine_standby" else None
    active = list(range(ranks))  # rank -> its active lane
    second = len(lane_ranks) - 1 if scenario == "engine_multi" else None
    t = rng.uniform(60, 600)  # engines start: load, cuda graphs; no beat before the first request
    for lane in range(len(lane_ranks)):
        b.extend(lane, "load", t if lane != standby else t + rng.uniform(60, 240))
    target = hours * 3600
    long_idle_p = 0.05 if scenario == "engine_clock" else 0.01
    while t < target:
        b.beats.append((t, "generate"))
        end = t
        for rank in range(ranks):
            budget = ROLLOUT_BUDGET * (1.0 if rank == 0 else rng.uniform(0.4, 0.9))  # ranks finish apart
            e, active[rank], standby = _engine_rollout(b, active[rank], t, budget, scenario, standby)
            end = max(end, e)
        if second is not None:
            # The second engine on rank 0: after the policy engine's batch (one idle while the
            # other generates), or beside it.
            after = rng.random() < 0.6
            start = end + rng.uniform(0.5, 5) if after else t + rng.uniform(5, 120)
            length = rng.uniform(20, 150)
            if start + length > t + ROLLOUT_BUDGET:
                length = max(5.0, t + ROLLOUT_BUDGET - start - 2)
            end = max(end, b.request(second, start, rng.uniform(0.05, 2), length))
        end += rng.uniform(0.5, 3)
        b.beats.append((end, "train"))
        train = rng.uniform(20, 200)
        if rng.random() < long_idle_p:
            # Hours of training without rollouts: the engines asleep, the trainer beating.
            train = rng.uniform(3600, 3 * 3600)
            beat = end
            while beat + 300 < end + train:
                beat += rng.uniform(30, 300)
                b.beats.append((beat, "train"))
        b.training.append((end, end + train))
        t = end + train
        if standby is not None:
            b.extend(standby, "standby", t)
    ticks = int(t) + 1
    for lane in range(len(lane_ranks)):
        kind = b.lanes[lane][1][-1].kind
        b.extend(lane, "standby" if lane == standby else "absent" if kind == "absent" else "idle", float(ticks))
    jumps: list[tuple[float, float]] = []
    for _ in range(rng.randint(2, 6) if scenario == "engine_clock" else int(rng.random() < 0.2)):
        step = rng.choice([rng.uniform(-30, 30), rng.uniform(-3600, 3600)])  # an NTP step, a bad RTC
        jumps.append((rng.uniform(0, ticks), step))
    plan = EnginePlan(scenario, index, rng.randrange(2**31), ranks, colocated,
                      tuple((rank, tuple(segs)) for rank, segs in b.lanes), tuple(b.beats), tuple(b.training),
                      profile, ticks, tuple(sorted(jumps)))
    plan.check()
    return _pick_engine_wedges(plan, rng, wedges)


def _pick_engine_wedges(plan: EnginePlan, rng: random.Random, count: int) -> EnginePlan:
    """Ticks inside a request that is not its process's first (a first step is never judged),
    whose process lives on after it, far enough from the end for the copy to run."""
    ranges = []
    for lane, (_, segs) in enumerate(plan.lanes):
        for seg, nxt in zip(segs, segs[1:]):
            if seg.kind == "generate" and not seg.first and nxt.kind != "gone":
                a, b_ = int(seg.start) + 2, min(int(seg.end) - 1, plan.ticks - 120)
                if b_ > a:
                    ranges.append((lane, a, b_))
    total = sum(b_ - a for _, a, b_ in ranges)
    picks = []
    for _ in range(count if total else 0):
        x = rng.randrange(total)
        for lane, a, b_ in ranges:
            if x < b_ - a:
                picks.append((a + x, lane))
                break
            x -= b_ - a
    picks.sort()
    variants = tuple(ENGINE_WEDGES[(plan.index + k) % len(ENGINE_WEDGES)] for k in range(len(picks)))
    return dataclasses.replace(plan, wedges=tuple(picks), wedge_variants=variants)


def engine_corpus(seed: int = 0, hours_per_scenario: float = 32.0, run_hours: tuple[float, float] = (2.0, 6.0),
                  wedges_per_run: int = 3, scenarios: Sequence[str] = ENGINE_SCENARIOS) -> list[EnginePlan]:
    """Engine runs for each scenario until ``hours_per_scenario``; deterministic from ``seed``."""
    return _fill(seed, scenarios, hours_per_scenario, run_hours,
                 lambda scenario, index, hours: plan_engine_run(scenario, index, seed, hours, wedges_per_run))


# -- engine streams: steps, beats, samples ----------------------------------------------------


def _steps(seg: ESeg, profile: StepProfile, rng: random.Random) -> Iterator[tuple[float, int, str]]:
    """The request's steps as (end time, steps, cause): a process's first step (its warm-up),
    the batch's prefill chunks, then decode steps with the odd chunk (sequences admitted as
    others finish, or recomputed after a preemption), GC pauses, host contention, maybe one
    first-use JIT. Fast decode steps come a beacon interval's worth at a time: the beacon
    writes at most once per interval, so the files read the same."""
    t, end = seg.start, seg.end
    decode = profile.decode
    per_write = max(1, int(BEACON_INTERVAL / decode) + 1)
    if seg.first:
        t = min(end, t + rng.uniform(1.0, profile.warmup))
        yield t, 1, "warm-up"
    for _ in range(rng.randint(1, 16)):
        if t >= end:
            return
        t = min(end, t + profile.chunk * rng.uniform(0.5, 1.0))
        yield t, 1, "prefill chunk"
    jit_at = rng.uniform(t, end) if seg.jit else None
    contention = (rng.uniform(t, end), rng.uniform(10, 120), rng.uniform(2, 5)) if rng.random() < 0.1 else None
    r = rng.random
    while t < end:
        if jit_at is not None and t >= jit_at:
            jit_at = None
            n, length, why = 1, rng.uniform(3.0, LONGEST_HEALTHY_STEP), "first-use JIT"
        elif r() < BEACON_INTERVAL / 45:  # one admission or recompute chunk every ~45 s
            n, length, why = 1, profile.chunk * rng.uniform(0.3, 1.0), "prefill chunk"
        else:
            n, length, why = per_write, per_write * decode * rng.uniform(0.8, 1.25), "decode"
            if contention is not None and contention[0] <= t < contention[0] + contention[1]:
                length *= contention[2]  # descheduled among the data loaders and tokenisers
                if r() < 0.02:
                    length += rng.uniform(1.0, 5.0)  # and now and then off the CPU for seconds
                why = "host contention"
            if r() < length / 200:  # a GC pause every ~200 s
                length += rng.uniform(0.3, 6.0)
                why = "GC pause"
        t = min(end, t + length)
        yield t, n, why


def _lane_events(plan: EnginePlan, lane: int,
                 trace: EngineTrace | None) -> Iterator[tuple[float, int, int, str | None, int]]:
    """The lane's file writes as (time, pid, step, phase, seq), and removals as (time, pid,
    0, None, 0), as ``EngineBeacon`` makes them: ``prepare`` at a request's start,
    ``generate`` when its first step starts, then at a step's end if the last write is at
    least ``BEACON_INTERVAL`` old, ``idle`` at its end. ``seq`` and ``step`` count from the
    process's start (a reused pid starts them again); a dead process writes nothing more."""
    segs = plan.lanes[lane][1]
    steps = seq = 0
    for index, seg in enumerate(segs):
        kind = seg.kind
        if kind == "load":
            steps = seq = 0  # a new process
        elif kind == "gone":
            if seg.removed is not None:
                yield seg.removed, seg.pid, 0, None, 0
        elif kind == "prepare":
            seq += 1
            yield seg.start, seg.pid, steps, "prepare", seq
        elif kind == "generate":
            rng = random.Random(plan.seed * 1_000_003 + lane * 10_007 + index)
            seq += 1
            yield seg.start, seg.pid, steps, "generate", seq
            last = prev = seg.start
            for t, n, why in _steps(seg, plan.profile, rng):
                steps += n
                if trace is not None and t - prev >= LONG_STEP:
                    trace.long_steps.append((seg.pid, prev, t, why))
                prev = t
                if t - last >= BEACON_INTERVAL:
                    seq += 1
                    yield t, seg.pid, steps, "generate", seq
                    last = t
            if index + 1 < len(segs) and segs[index + 1].kind != "gone":
                seq += 1
                yield seg.end, seg.pid, steps, "idle", seq


# (gpu lo, gpu hi), worker cpu, EngineCore cpu: per lane activity (an isolated worker).
_ENGINE_ACTIVITY = {
    "load": ((0, 60), (80, 120), (30, 100)),
    "standby": ((0, 3), (0, 1), (0, 1)),
    "idle": ((0, 3), (0, 2), (0, 1)),
    "wake": ((10, 60), (10, 60), (20, 80)),
    "prepare": ((0, 5), (90, 105), (0, 2)),
    "generate": ((85, 100), (20, 60), (95, 105)),  # the EngineCore's busy loop holds a core
}
# The engine inside the trainer's process (colocate): one pid does all of it.
_COLOCATED_CPU = {"load": (80, 120), "wake": (10, 60), "prepare": (90, 105), "generate": (70, 130)}


def _wall_offset(jumps: Sequence[tuple[float, float]], t: float) -> float:
    return sum(step for when, step in jumps if when <= t)


def _engine_samples(plan: EnginePlan, trace: EngineTrace | None) -> Iterator[Sample]:
    rng = random.Random(plan.seed ^ 0xE9)
    r = rng.random
    jumps = plan.clock_jumps
    lanes = plan.lanes
    events = [_lane_events(plan, lane, trace) for lane in range(len(lanes))]
    heads = [next(it, None) for it in events]
    seg_at = [0] * len(lanes)
    files: dict[int, tuple[float, int, int, str | None, int]] = {}  # pid -> its file: (written, pid, step, phase, seq)
    built: dict[int, tuple[tuple, Heartbeat]] = {}  # pid -> (the write it was built from, the beat)
    beats = plan.trainer_beats
    beat_i, beat_seq, trainer_beat = 0, 0, None
    train_i = 0
    device_cache: dict[tuple[int, int, tuple[int, ...]], DeviceSample] = {}
    for tick in range(plan.ticks):
        t = float(tick)
        wall = t + (_wall_offset(jumps, t) if jumps else 0.0)
        while beat_i < len(beats) and beats[beat_i][0] <= t:
            bt, phase = beats[beat_i]
            beat_seq += 1
            trainer_beat = Heartbeat(plan.trainer(0), beat_seq, bt + _wall_offset(jumps, bt), beat_seq, phase)
            beat_i += 1
        for lane, it in enumerate(events):
            head = heads[lane]
            while head is not None and head[0] <= t:
                if head[3] is None:
                    files.pop(head[1], None)
                else:
                    files[head[1]] = head
                head = next(it, None)
            heads[lane] = head
        while train_i < len(plan.training) and plan.training[train_i][1] <= t:
            train_i += 1
        training = train_i < len(plan.training) and plan.training[train_i][0] <= t
        cpu: dict[int, float] = {}
        utils: dict[int, int] = {}
        holders: dict[int, list[int]] = {}
        parents: dict[int, int] = {}  # as the sampler keeps them: the worker under its trainer, the EngineCore under it
        for rank in range(plan.ranks):
            trainer = plan.trainer(rank)
            parents[trainer] = 1
            cpu[trainer] = 90 + 20 * r() if training else 3 * r()
            utils[rank] = 90 + int(11 * r()) if training else int(4 * r())
            holders[rank] = [trainer]
        for lane, (rank, segs) in enumerate(lanes):
            i = seg_at[lane]
            while segs[i].end <= t and i + 1 < len(segs):
                i += 1
            seg_at[lane] = i
            kind = segs[i].kind
            if kind in ("absent", "gone"):
                continue
            (glo, ghi), worker, core = _ENGINE_ACTIVITY[kind]
            utils[rank] = max(utils[rank], glo + int((ghi - glo + 1) * r()))
            pid = segs[i].pid
            if plan.colocated:
                lo, hi = _COLOCATED_CPU.get(kind, (0, 0))
                if hi:
                    cpu[pid] = lo + (hi - lo) * r()
                continue
            cpu[pid] = worker[0] + (worker[1] - worker[0]) * r()
            cpu[pid + 1] = core[0] + (core[1] - core[0]) * r()
            holders[rank].append(pid + 1)
            parents[pid] = plan.trainer(rank)
            parents[pid + 1] = pid
        if r() < plan.noise_rate:
            ulist = [utils[k] for k in range(plan.ranks)]
            _noise(rng, cpu, ulist)
            utils = dict(enumerate(ulist))
        devices = []
        for rank in range(plan.ranks):
            key = (rank, utils[rank], tuple(holders[rank]))
            dev = device_cache.get(key)
            if dev is None:
                dev = device_cache[key] = DeviceSample(rank, float(utils[rank]), 40000.0, key[2])
            devices.append(dev)
        engine = []
        for pid, rec in files.items():
            known = built.get(pid)
            if known is not None and known[0] is rec:
                engine.append(known[1])
                continue
            when = rec[0]
            hb = Heartbeat(pid, rec[4], when + (_wall_offset(jumps, when) if jumps else 0.0), rec[2], rec[3])
            built[pid] = (rec, hb)
            if trace is not None:
                trace.built.setdefault(pid, collections.deque(maxlen=trace.keep)).append((hb, when))
            engine.append(hb)
        for pid in [p for p in built if p not in files]:
            del built[pid]
        yield Sample(t, wall, cpu, tuple(devices), trainer_beat, len(cpu), tuple(engine),
                     parents if engine else {})


# -- engine streams: replay -----------------------------------------------------------------


@dataclass
class EngineWedge:
    at: int
    variant: str
    pid: int  # the wedged engine's
    onset: float  # when its last beat was written (its last step, give or take the rate limit)
    verdict: Verdict | None

    @property
    def latency(self) -> float | None:
        return None if self.verdict is None else self.verdict.detected_at - self.onset

    @property
    def rule(self) -> str | None:
        return None if self.verdict is None else self.verdict.evidence.get("rule", "stall")


@dataclass
class EngineRunResult:
    plan: EnginePlan
    false_verdicts: list[Verdict] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)  # per false verdict: what the engine was doing
    wedges: list[EngineWedge] = field(default_factory=list)
    samples: int = 0
    longest_silence: float = 0.0  # the longest the rule watched a healthy engine without a step
    longest_cause: str = ""
    long_steps: dict[str, int] = field(default_factory=dict)  # steps of LONG_STEP or more, by cause


def _lane_pid(plan: EnginePlan, lane: int, t: float) -> int:
    for seg in plan.lanes[lane][1]:
        if seg.start <= t < seg.end:
            return seg.pid
    raise ValueError(f"lane {lane} has no segment at {t}")


def replay_engine(plan: EnginePlan, config: DetectorConfig | None = None) -> EngineRunResult:
    """Replay the healthy run; at each wedge tick fork the detector and feed the fork the
    copy: the same samples from there on, except that the wedged engine's beat and the
    trainer's stop, and its CPU and GPU read the variant's."""
    config = config or DetectorConfig()
    # The copy runs a little past the timeout (with the rule off, to the progress timeout:
    # what the other rules make of an engine wedge).
    ahead = int(config.engine_step_timeout or config.progress_timeout or config.stall_window) + 10
    detector = Detector(config, start=0.0)
    trace = EngineTrace(keep=ahead + 2)
    result = EngineRunResult(plan)
    pending = list(zip(plan.wedges, plan.wedge_variants))
    it = plan.samples(trace)
    prev: Sample | None = None
    n = 0
    judged: dict[int, tuple[tuple[int, int], float]] = {}  # pid -> (token, since): the margin, measured
    longest = (0.0, 0, 0.0)
    while True:
        sample = next(it, None)
        if sample is None:
            break
        while pending and prev is not None and int(sample.t) == pending[0][0][0]:
            (at, lane), variant = pending.pop(0)
            pid = _lane_pid(plan, lane, at - 1.0)
            frozen = next(e for e in prev.engine if e.pid == pid)
            onset = trace.written_at(frozen)
            assert onset is not None and frozen.phase == "generate" and frozen.step, (plan.scenario, plan.index, at)
            it, fork_it = itertools.tee(it)
            copy_samples = [sample, *itertools.islice(fork_it, ahead - 1)]
            wedge = _engine_wedge_samples(plan, copy_samples, lane, pid, frozen, prev.heartbeat, variant,
                                          plan.seed ^ at)
            fork = copy.deepcopy(detector)
            verdict = next((v for v in map(fork.observe, wedge) if v is not None), None)
            result.wedges.append(EngineWedge(at, variant, pid, onset, verdict))
        verdict = detector.observe(sample)
        n += 1
        prev = sample
        for e in sample.engine:
            if e.step and e.phase == "generate" and e.pid in sample.cpu_pct:
                known = judged.get(e.pid)
                if known is None or known[0] != e.token:
                    judged[e.pid] = (e.token, sample.t)
                elif sample.t - known[1] > longest[0]:
                    longest = (sample.t - known[1], e.pid, known[1])
            else:
                judged.pop(e.pid, None)
        if verdict is not None:
            result.false_verdicts.append(verdict)
            ev = verdict.evidence
            if ev.get("rule") == "engine_step":
                result.causes.append(trace.cause(ev["engine_pid"], verdict.onset, verdict.detected_at))
            else:
                result.causes.append(f"{ev.get('rule', 'stall')} rule")
            detector = Detector(config, start=sample.t)
    result.samples = n
    for _, _, _, why in trace.long_steps:
        result.long_steps[why] = result.long_steps.get(why, 0) + 1
    if longest[0] > 0:
        result.longest_silence = longest[0]
        result.longest_cause = trace.cause(longest[1], longest[2], longest[2] + longest[0])
    return result


def _engine_wedge_samples(plan: EnginePlan, healthy: Sequence[Sample], lane: int, pid: int, frozen: Heartbeat,
                          trainer_beat: Heartbeat | None, variant: str, seed: int) -> Iterator[Sample]:
    """``engine_sleep``: the host thread asleep in a synchronize, the GPU pinned (the
    cuda-graph wedge); ``engine_spin``: the engine busy-polls for a step that never
    comes. Either way no more steps, the beat still says ``generate``, the trainer waits."""
    rng = random.Random(seed)
    r = rng.random
    rank = plan.lanes[lane][0]
    core = None if plan.colocated else pid + 1
    trainer = plan.trainer(rank)
    for s in healthy:
        cpu = dict(s.cpu_pct)
        if not plan.colocated:
            cpu[trainer] = 3 * r()  # waiting for its rollouts
        if variant == "engine_sleep":
            cpu[pid] = 2 * r()
            util = 96 + int(5 * r())
        else:
            cpu[pid] = 90 + 15 * r() if plan.colocated else 20 + 40 * r()
            util = 85 + int(16 * r())
        if core is not None:
            cpu[core] = 3 * r() if variant == "engine_sleep" else 90 + 15 * r()
        devices = list(s.gpu or ())
        for k, d in enumerate(devices):
            if d.index == rank:
                pids = d.pids if core is None or core in (d.pids or ()) else (*(d.pids or ()), core)
                devices[k] = DeviceSample(rank, float(util), d.mem_used_mib, pids)
        engine = tuple(frozen if e.pid == pid else e for e in s.engine)
        if frozen not in engine:
            engine = (*engine, frozen)
        yield Sample(s.t, s.wall, cpu, tuple(devices), trainer_beat, len(cpu), engine, s.parents)


@dataclass
class EngineRow:
    scenario: str
    runs: int = 0
    hours: float = 0.0
    false_verdicts: int = 0
    detected: int = 0
    by_engine_rule: int = 0
    wedges: int = 0
    latencies: list[float] = field(default_factory=list)
    causes: dict[str, int] = field(default_factory=dict)
    longest_silence: float = 0.0
    longest_cause: str = ""


def summarise_engine(results: Sequence[EngineRunResult], config: DetectorConfig | None = None) -> list[EngineRow]:
    """Rows per scenario; a wedge counts as detected when a hang verdict comes within the
    engine step timeout + 2 intervals of the engine's last beat."""
    config = config or DetectorConfig()
    bound = (config.engine_step_timeout or config.stall_window) + 2 * config.interval
    rows: dict[str, EngineRow] = {}
    for res in results:
        row = rows.setdefault(res.plan.scenario, EngineRow(res.plan.scenario))
        row.runs += 1
        row.hours += res.plan.hours
        row.false_verdicts += len(res.false_verdicts)
        for cause in res.causes:
            row.causes[cause] = row.causes.get(cause, 0) + 1
        if res.longest_silence > row.longest_silence:
            row.longest_silence, row.longest_cause = res.longest_silence, res.longest_cause
        for w in res.wedges:
            row.wedges += 1
            if w.latency is not None and 0 <= w.latency <= bound:
                row.detected += 1
                row.latencies.append(w.latency)
                row.by_engine_rule += w.rule == "engine_step"
    return list(rows.values())
