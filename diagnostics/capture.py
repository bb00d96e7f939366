"""The incident capture: everything worth knowing about a hung tree, before the kill.

``capture_incident(request)`` is the supervisor's capture hook. It runs in a
worker thread that the supervisor abandons at ``request.deadline``; it must
return before then and must never hold recovery up, so:

* every external tool runs through ``run_bounded`` with its own timeout;
* the cheap steps (process table, GPU state, versions, environment, log tails)
  run concurrently in daemon threads, each joined only until the step budget
  ends; one that is still running is recorded as failed and left behind;
* py-spy rounds run in this thread; the dumps of one round run concurrently
  (a thread pool), so a round costs about one py-spy call whatever the tree
  size; a round that no longer fits before the budget end is skipped;
* the first round may have been taken before the verdict, while the hang was
  building (``early_round``, offered to the supervisor by ``IncidentCapture``;
  it arrives in ``request.extra["early_round"]``): then the capture takes only
  the final round, with no wait, and "frozen across rounds" compares rounds
  seconds apart. Every round records when it was taken (``taken_at``);
* a process py-spy is refused or times out on, and that has none of its stacks yet, is
  asked for its own (``inprocess.collect``: one signal, its faulthandler dump read
  back within ``in_process_timeout``), right after that round; later rounds leave it
  to that dump. The manifest says per process how its stacks came (``stacks.methods``:
  ``py-spy``, ``in-process``, or ``none`` with why);
* ``write_reserve`` seconds before the deadline are kept for writing the bundle;
* every failure is data in ``manifest.json``: the bundle is written whatever
  failed (unless writing itself fails, which raises).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import psutil

from hangwatch.diagnostics import bundle as bundle_mod
from hangwatch.diagnostics.batch import add_batches, kept_batches
from hangwatch.diagnostics.bundle import Bundle, dumps_json
from hangwatch.diagnostics.classify import classify
from hangwatch.diagnostics.errors import DiagnosticsError
from hangwatch.diagnostics.gpustate import gpu_state
from hangwatch.diagnostics.inprocess import FALLBACK_PROBLEMS, InProcessResult, as_pyspy_json, collect
from hangwatch.diagnostics.proctable import process_table, render_table, resume, verify
from hangwatch.diagnostics.pyspy import DumpResult, dump_process, find_pyspy
from hangwatch.contract.redact import redact_argv
from hangwatch.diagnostics.signatures import load_signatures
from hangwatch.diagnostics.stacks import ProcessDump, group_series, render_text
from hangwatch.diagnostics.sysinfo import log_files, safe_names, tails, trainer_environ, versions
from hangwatch.contract.capture import CaptureRequest, TreeProcess, bundle_name
from hangwatch.contract.procid import MAX_CMDLINE, capped_argv, initial_environ
from hangwatch.contract.tools import helper_pids

#: Characters of command line kept for the whole tree, and the least kept for one process.
TREE_CMDLINE_BUDGET = 2 << 20
MIN_CMDLINE_SHARE = 1024

# py-spy failures after which further rounds cannot succeed either.
_HOPELESS = {"missing", "ptrace_denied"}


class CaptureConfigError(DiagnosticsError):
    """An unknown or out-of-range capture setting (recorded, defaults used)."""


@dataclass(frozen=True)
class CaptureConfig:
    rounds: int = 2
    round_interval: float = 2.0
    pyspy_timeout: float = 5.0
    native: bool = False
    pyspy: str | None = None
    max_workers: int = 16
    log_lines: int = 200
    write_reserve: float = 2.0
    signatures: tuple[str, ...] = ()
    #: ask a process py-spy cannot dump for its own stacks (``inprocess``), within this many seconds
    in_process: bool = True
    in_process_timeout: float = 3.0

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise CaptureConfigError(f"capture rounds must be >= 1, got {self.rounds!r}")
        for name in ("round_interval", "write_reserve"):
            if getattr(self, name) < 0:
                raise CaptureConfigError(f"capture {name} must be >= 0, got {getattr(self, name)!r}")
        if self.pyspy_timeout <= 0 or self.max_workers < 1 or self.log_lines < 0 or self.in_process_timeout <= 0:
            raise CaptureConfigError("capture pyspy_timeout and in_process_timeout must be > 0, max_workers >= 1, "
                                     "log_lines >= 0")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "CaptureConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise CaptureConfigError(f"unknown capture setting(s) {unknown}; known: {sorted(known)}")
        values = dict(data)
        if "signatures" in values:
            values["signatures"] = tuple(str(s) for s in values["signatures"])
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in fields(self)}


@dataclass
class _Steps:
    """What each step produced or why it failed; shared with step threads."""

    results: dict[str, Any] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, name: str, fn: Callable[[], Any], clock: Callable[[], float]) -> None:
        started = clock()
        try:
            value = fn()
            with self.lock:
                self.results[name] = value
        except Exception as exc:  # a failing step never stops the others
            with self.lock:
                self.failed[name] = f"{type(exc).__name__}: {exc}"
        finally:
            with self.lock:
                self.durations[name] = round(clock() - started, 3)


@dataclass(frozen=True)
class EarlyRound:
    """A py-spy round taken while the hang was building, before the verdict."""

    taken_wall: float
    taken_mono: float
    duration_s: float
    processes: int
    results: tuple[DumpResult, ...]
    pyspy: str | None


def early_round(tree: Sequence[TreeProcess], deadline: float, *, config: CaptureConfig | None = None,
                clock: Callable[[], float] = time.monotonic) -> EarlyRound:
    """One round of stacks now (round 1), bounded by ``deadline`` (``time.monotonic``)."""
    config = config or CaptureConfig()
    helpers = helper_pids()
    # A process stopped before the verdict (job control, a debugger) is left alone: it is
    # neither dumped nor continued now; the capture at the verdict handles it.
    tree = [tp for tp in tree if tp.pid not in helpers and not _stopped(tp)]
    pyspy = find_pyspy(config.pyspy)
    wall, t0 = time.time(), clock()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(config.max_workers, len(tree) or 1)),
                                                 thread_name_prefix="hangwatch-pyspy-early")
    try:
        live, got = _one_round(pool, pyspy, tree, 1, config, deadline, clock)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    resume(tree)  # py-spy may leave a target stopped (see proctable.resume)
    return EarlyRound(wall, t0, round(clock() - t0, 3), len(live), tuple(got), pyspy)


def _stopped(tp: TreeProcess) -> bool:
    proc = verify(tp)
    try:
        return proc is not None and proc.status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.Error:
        return False


class IncidentCapture:
    """The supervisor's capture hook: ``__call__`` writes the bundle at the verdict;
    ``early_round`` takes the first stacks while the hang is still building."""

    def __init__(self, config: CaptureConfig | None = None) -> None:
        self.config = config

    def __call__(self, request: CaptureRequest) -> Path:
        return capture_incident(request, config=self.config)

    def early_round(self, tree: Sequence[TreeProcess], deadline: float) -> EarlyRound:
        return early_round(tree, deadline, config=self.config)


def capture_incident(request: CaptureRequest, *, config: CaptureConfig | None = None, clock: Callable[[], float] = time.monotonic) -> Path:
    """Write the incident bundle for ``request``; return its directory."""
    t0, wall0 = clock(), time.time()
    steps = _Steps()
    if config is None:
        try:
            config = CaptureConfig.from_mapping(request.extra.get("capture") or {})
        except (CaptureConfigError, TypeError) as exc:
            steps.failed["config"] = f"{exc}; defaults used"
            config = CaptureConfig()
    budget_end = request.deadline - config.write_reserve
    helpers = helper_pids()
    tree = [tp for tp in request.tree if tp.pid not in helpers]
    # The tree's command lines share one budget: 200 processes of 64 KiB each took the capture
    # past its deadline redacting them, and a wider tree wrote a manifest over the 32 MiB a
    # bundle's reader accepts (replay and report refused it).
    cmdline_limit = max(MIN_CMDLINE_SHARE, min(MAX_CMDLINE, TREE_CMDLINE_BUDGET // max(1, len(tree))))
    tree = [dataclasses.replace(tp, cmdline=tuple(capped_argv(tp.cmdline, cmdline_limit))) for tp in tree]
    root = _root(tree)

    background = {
        "processes": lambda: process_table(tree, cmdline_limit),
        "gpu": lambda: gpu_state(max(1.0, min(10.0, budget_end - clock()))),
        "versions": lambda: versions(_python_pid(root, tree), timeout=max(0.5, min(5.0, budget_end - clock()))),
        "environment": lambda: _environment(root),
        "logs": lambda: tails(log_files(request.log_paths), config.log_lines),
        "batch": lambda: kept_batches(request.log_paths.get("attempt_dir"), {tp.pid for tp in tree}),
    }
    threads = [threading.Thread(target=steps.run, args=(n, fn, clock), name=f"hangwatch-capture-{n}", daemon=True) for n, fn in background.items()]
    for th in threads:
        th.start()

    early = request.extra.get("early_round")
    attempt_dir = request.log_paths.get("attempt_dir")
    stack_info = _stack_rounds(tree, config, budget_end, clock, steps,
                               early if isinstance(early, EarlyRound) else None,
                               Path(attempt_dir) if attempt_dir is not None else None)

    for th in threads:
        th.join(timeout=max(0.0, budget_end - clock()))
    with steps.lock:
        for name in background:
            if name not in steps.results and name not in steps.failed:
                steps.failed[name] = f"did not finish within the capture budget ({budget_end - t0:.1f} s); abandoned"
        results, failed, durations = dict(steps.results), dict(steps.failed), dict(steps.durations)

    files, manifest = _assemble(request, config, tree, stack_info, results, failed, durations, t0, wall0, clock)
    final = request.run_dir / "incidents" / bundle_name(request)
    _add_report(final, files, manifest, config, failed)
    return bundle_mod.write_bundle(final, files)


def _root(tree: Sequence[TreeProcess]) -> TreeProcess | None:
    pids = {tp.pid for tp in tree}
    return next((tp for tp in tree if tp.ppid not in pids), tree[0] if tree else None)


def _python_pid(root: TreeProcess | None, tree: Sequence[TreeProcess]) -> int | None:
    """The trainer's interpreter: the root if it is Python, else the first Python process
    of the tree (a shell or launcher may sit on top). Its versions are read from files,
    never by running it."""
    for tp in ([root] if root else []) + list(tree):
        proc = verify(tp)
        try:
            if proc is not None and Path(proc.exe()).name.startswith("python"):
                return tp.pid
        except Exception:
            continue
    return None


def _environment(root: TreeProcess | None) -> dict[str, str]:
    if root is None or verify(root) is None:
        raise RuntimeError("trainer process gone; environment not captured")
    env = trainer_environ(root.pid)
    if env is None:
        raise RuntimeError(f"/proc/{root.pid}/environ not readable")
    return env


@dataclass
class _StackInfo:
    rounds: list[dict[str, Any]] = field(default_factory=list)
    results: list[DumpResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    resumed: list[int] = field(default_factory=list)
    pyspy: str | None = None
    in_process: list[InProcessResult] = field(default_factory=list)
    attempt_dir: Path | None = None

    def in_process_dumped(self) -> set[int]:
        return {r.pid for r in self.in_process if r.dump is not None}


def _one_round(pool, pyspy, tree: Sequence[TreeProcess], round_no: int, config: CaptureConfig, budget_end: float,
               clock) -> tuple[list[TreeProcess], list[DumpResult]]:
    """One py-spy dump of every live process, concurrently, bounded by ``budget_end``."""
    round_t0 = clock()
    timeout = min(config.pyspy_timeout, budget_end - round_t0)
    live = [tp for tp in tree if verify(tp) is not None]
    futures = {pool.submit(dump_process, pyspy, tp.pid, round_no=round_no, timeout=timeout, native=config.native): tp for tp in live}
    # run_bounded kills at `timeout`; the slack covers reaping.
    done, pending = concurrent.futures.wait(futures, timeout=max(0.0, min(timeout + 2.5, budget_end - clock())))
    got = [f.result() for f in done]
    for fut in pending:
        tp = futures[fut]
        got.append(DumpResult(tp.pid, round_no, "", clock() - round_t0, problem="timeout", message="py-spy call abandoned at the capture deadline"))
    got.sort(key=lambda r: r.pid)
    return live, got


def _fall_back(tree: Sequence[TreeProcess], got: Sequence[DumpResult], round_no: int, config: CaptureConfig,
               budget_end: float, clock, info: _StackInfo) -> list[dict[str, Any]]:
    """Each process py-spy failed on in this round, with no stacks yet, asked for its own
    (``inprocess.collect``); returns what each answered, for the round's record."""
    if not config.in_process:
        return []
    have = {r.pid for r in info.results if r.dump is not None} | {r.pid for r in info.in_process}
    need = {r.pid for r in got if r.problem in FALLBACK_PROBLEMS and r.pid not in have}
    members = [tp for tp in tree if tp.pid in need]
    if not members:
        return []
    deadline = min(budget_end, clock() + config.in_process_timeout)
    if deadline - clock() <= 0.05:
        info.skipped.append(f"round {round_no}: in-process stacks not asked for, no time left")
        return []
    answers = collect(members, info.attempt_dir, round_no, deadline, clock=clock)
    info.in_process.extend(answers)
    return [a.to_json() for a in answers]


def _stack_rounds(tree: Sequence[TreeProcess], config: CaptureConfig, budget_end: float, clock, steps: _Steps,
                  early: EarlyRound | None = None, attempt_dir: Path | None = None) -> _StackInfo:
    info = _StackInfo(pyspy=find_pyspy(config.pyspy), attempt_dir=attempt_dir)
    started = clock()
    if not tree:
        info.skipped.append("no process in the tree; no stacks to take")
        return info
    first = 1
    if early is not None and early.results:
        # Round 1 was taken while the hang was building: only the final round is left.
        info.results.extend(early.results)
        info.rounds.append({
            "round": 1,
            "early": True,
            "taken_at": _iso_ms(early.taken_wall),
            "started_s": round(early.taken_mono - started, 3),
            "duration_s": early.duration_s,
            "processes": early.processes,
            "ok": sum(1 for r in early.results if r.dump is not None),
            "dumps": [r.to_json() for r in early.results],
        })
        # Asked at the verdict, not while the hang was building: it is the capture's to send.
        in_process = _fall_back(tree, early.results, 1, config, budget_end, clock, info)
        if in_process:
            info.rounds[-1]["in_process"] = in_process
        if all(r.problem in _HOPELESS for r in early.results):
            info.skipped.append(f"rounds after 1: skipped, py-spy cannot work here ({early.results[0].problem})")
            return info
        first = 2
    workers = max(1, min(config.max_workers, len(tree)))
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hangwatch-pyspy")
    try:
        for round_no in range(first, max(config.rounds, first) + 1):
            if round_no > first:
                # A second look only helps if it can finish: wait, then one call.
                if clock() + config.round_interval + 0.5 > budget_end:
                    info.skipped.append(f"round {round_no}: skipped, would not fit before the capture deadline")
                    break
                time.sleep(config.round_interval)
            round_t0, round_wall = clock(), time.time()
            if min(config.pyspy_timeout, budget_end - round_t0) <= 0.2:
                info.skipped.append(f"round {round_no}: skipped, no time left")
                break
            # A process whose own dump answered is left to it: py-spy failed on it already.
            own = info.in_process_dumped()
            live, got = _one_round(pool, info.pyspy, [tp for tp in tree if tp.pid not in own], round_no, config,
                                   budget_end, clock)
            info.resumed.extend(p for p in resume(tree) if p not in info.resumed)
            in_process = _fall_back(tree, got, round_no, config, budget_end, clock, info)
            info.results.extend(got)
            info.rounds.append(
                {
                    "round": round_no,
                    "taken_at": _iso_ms(round_wall),
                    "started_s": round(round_t0 - started, 3),
                    "duration_s": round(clock() - round_t0, 3),
                    "processes": len(live),
                    "ok": sum(1 for r in got if r.dump is not None),
                    "dumps": [r.to_json() for r in got],
                    **({"in_process": in_process} if in_process else {}),
                }
            )
            if got and all(r.problem in _HOPELESS for r in got):
                info.skipped.append(f"rounds after {round_no}: skipped, py-spy cannot work here ({got[0].problem})")
                break
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        steps.durations["stacks"] = round(clock() - started, 3)
    return info


def _assemble(request, config, tree, stack_info: _StackInfo, results, failed, durations, t0, wall0, clock):
    files: dict[str, bytes | str] = {}
    captured: list[str] = []
    rows = results.get("processes")
    cmdlines = {int(r["pid"]): " ".join(r.get("cmdline") or []) for r in rows or [] if "pid" in r}
    cmdlines.update({tp.pid: " ".join(redact_argv(tp.cmdline)) for tp in tree if tp.pid not in cmdlines})
    ranks = launcher_ranks(tree)
    for row in rows or []:
        if row.get("pid") in ranks:
            row["rank"] = ranks[row["pid"]]

    series = group_series(_stack_files(files, stack_info, cmdlines, ranks))
    problems = _stack_problems(stack_info)
    if series:
        captured.append("stacks")
        files["stacks/stacks.txt"] = render_text(series)
    if problems:
        failed["stacks"] = "; ".join(problems)

    classification = None
    try:
        signatures = load_signatures(config.signatures)
    except DiagnosticsError as exc:
        failed["signatures"] = f"{exc}; built-in signatures used"
        signatures = load_signatures()
    if series:
        classification = classify(series, signatures)
    if classification is not None:
        files["classification.json"] = dumps_json(classification.to_json())
        captured.append("classification")

    if rows is not None:
        files["processes.json"] = dumps_json(rows)
        files["processes.txt"] = render_table(rows)
        captured.append("processes")
    gpu = results.get("gpu")
    if gpu is not None:
        smi = (gpu.get("nvidia_smi") or {})
        if smi.get("output"):
            files["gpu/nvidia-smi-q.txt"] = smi.pop("output")
        files["gpu/state.json"] = dumps_json(gpu)
        captured.append("gpu")
    if "versions" in results:
        files["versions.json"] = dumps_json(results["versions"])
        captured.append("versions")
    if "environment" in results:
        files["environment.json"] = dumps_json(results["environment"])
        captured.append("environment")
    if "logs" in results:
        got, log_failed = results["logs"]
        names = safe_names(got)
        for name, text in got.items():
            files[f"logs/{names[name]}.tail.txt"] = text
        if got:
            captured.append("logs")
        if log_failed:
            failed["logs"] = "; ".join(f"{k}: {v}" for k, v in log_failed.items())
    add_batches(results.get("batch"), files, captured, failed)  # the engine requests in flight
    files["samples.jsonl"] = "".join(dumps_json(s.to_json()).replace("\n", "") + "\n" for s in request.samples)
    captured.append("samples")

    manifest = {
        "schema": bundle_mod.SCHEMA,
        "kind": "hangwatch-incident",
        "run_id": request.run_id,
        "attempt": request.attempt,
        "verdict": request.verdict.to_json(),
        "thresholds": dict(request.thresholds),
        "gpu_probe": request.gpu_probe,
        "times": {
            "capture_started": _iso(wall0),
            "capture_finished": _iso(time.time()),
            "capture_duration_s": round(clock() - t0, 3),
            "deadline_s": round(request.deadline - t0, 3),
        },
        "capture": config.to_json(),
        "tree": [{**tp.to_json(), "cmdline": redact_argv(tp.cmdline)} for tp in tree],
        "root_pid": _root(tree).pid if tree else None,
        "captured": captured,
        "failed": failed,
        "step_durations_s": {**durations},
        "stacks": {
            "pyspy": stack_info.pyspy,
            "rounds": stack_info.rounds,
            "skipped": stack_info.skipped,
            "resumed_stopped_pids": stack_info.resumed,
            "methods": _methods(tree, stack_info),
        },
        "classification": classification.to_json() if classification else None,
    }
    files["manifest.json"] = dumps_json(manifest)
    return files, manifest


def launcher_ranks(tree: Sequence[TreeProcess]) -> dict[int, int]:
    """Each process's distributed rank as its launcher gave it (``RANK`` in the environment it was
    started with): torchrun's ranks say it nowhere else, and a culprit named by pid alone is hard to
    find in a multi-node job's logs. Processes of the watched tree only; unreadable ones have none."""
    ranks = {}
    for tp in tree:
        try:
            entries = initial_environ(tp.pid)
        except OSError:
            continue
        value = next((e[5:] for e in entries if e.startswith(b"RANK=")), b"")
        if value.isdigit() and len(value) < 10:
            ranks[tp.pid] = int(value)
    return ranks


def _stack_files(files: dict[str, bytes | str], info: _StackInfo, cmdlines: Mapping[int, str],
                 ranks: Mapping[int, int] = {}) -> list[ProcessDump]:  # noqa: B006  (read only)
    """Every dump as ``stacks/round-N/pid-P.json``, py-spy's and the in-process ones alike (in
    py-spy's JSON shape; their text as received in ``stacks/in-process/``); returns the dumps."""
    dumps: list[ProcessDump] = []
    for r in info.results:
        if r.dump is not None:
            files[f"stacks/round-{r.round}/pid-{r.pid}.json"] = r.raw
            d = r.dump
            dumps.append(ProcessDump(r.pid, d.threads, cmdlines.get(r.pid, ""), d.python, r.round, ranks.get(r.pid)))
    for a in info.in_process:
        if a.raw:
            files[f"stacks/in-process/pid-{a.pid}-round-{a.round}.txt"] = a.raw
        if a.dump is not None:
            files[f"stacks/round-{a.round}/pid-{a.pid}.json"] = json.dumps(as_pyspy_json(a.dump), indent=1)
            dumps.append(ProcessDump(a.pid, a.dump.threads, cmdlines.get(a.pid, ""), a.dump.python, a.round,
                                     ranks.get(a.pid)))
    dumps.sort(key=lambda d: (d.round, d.pid or 0))
    return dumps


def _methods(tree: Sequence[TreeProcess], info: _StackInfo) -> list[dict[str, Any]]:
    """How each process's stacks were obtained: ``py-spy``, ``in-process``, or ``none`` with why."""
    order = list(dict.fromkeys([tp.pid for tp in tree] + [r.pid for r in info.results] + [a.pid for a in info.in_process]))
    out = []
    for pid in order:
        spy = [r for r in info.results if r.pid == pid]
        own = [a for a in info.in_process if a.pid == pid]
        rounds = sorted({r.round for r in spy if r.dump is not None} | {a.round for a in own if a.dump is not None})
        failed = next((r for r in reversed(spy) if r.problem), None)
        spy_why = f"py-spy: {failed.problem} ({failed.message})" if failed is not None else None
        if any(r.dump is not None for r in spy):
            method, why = "py-spy", None
        elif any(a.dump is not None for a in own):
            method, why = "in-process", spy_why
        elif failed is not None and failed.problem == "not_python":
            method, why = "none", "not a Python process"
        else:
            asked = own[-1] if own else None
            own_why = f"in-process: {asked.problem} ({asked.message})" if asked is not None else None
            why = "; ".join(w for w in (spy_why, own_why) if w) or "not dumped (gone, or no round reached it)"
            method = "none"
        out.append({"pid": pid, "method": method, "why": why, "rounds": rounds})
    return out


def _stack_problems(info: _StackInfo) -> list[str]:
    """One line per kind of problem, with the pids and the fix, not one per call. A process whose
    own dump answered is not listed under py-spy's problem: its stacks are in the bundle."""
    own = info.in_process_dumped()
    by_kind: dict[str, tuple[list[int], str]] = {}
    for r in info.results:
        if r.problem and r.problem != "not_python" and r.pid not in own:
            pids, msg = by_kind.setdefault(r.problem, ([], r.message or r.problem))
            if r.pid not in pids:
                pids.append(r.pid)
    for a in info.in_process:
        if a.problem:
            pids, msg = by_kind.setdefault(f"in-process {a.problem}", ([], a.message or a.problem))
            if a.pid not in pids:
                pids.append(a.pid)
    out = [f"{kind} for pid(s) {', '.join(map(str, pids))}: {msg}" for kind, (pids, msg) in by_kind.items()]
    dumped = any(r.dump for r in info.results) or bool(own)
    if info.results and not dumped and not out:
        out.append("no Python process in the tree could be dumped")
    return out + list(info.skipped if not dumped else [])


def _add_report(final: Path, files: dict[str, bytes | str], manifest: dict[str, Any], config: CaptureConfig, failed: dict[str, str]) -> None:
    from hangwatch.diagnostics.report import render_report  # noqa: PLC0415 - keeps capture importable if report breaks

    try:
        view = Bundle(final, final.name, {k: (bundle_mod.encode_text(v) if isinstance(v, str) else v) for k, v in files.items()})
        files["report.html"] = render_report(view, signature_files=config.signatures)
    except Exception as exc:
        failed["report"] = f"{type(exc).__name__}: {exc}"
        manifest["failed"] = failed
        files["manifest.json"] = dumps_json(manifest)


def _iso(wall: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall))


def _iso_ms(wall: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(wall)) + f".{int(wall % 1 * 1000):03d}Z"
