"""``hangwatch reproduce BUNDLE``: run a bundle's kept batch again on a fresh engine; did it wedge?

Reads ``batch.json`` (the engine request that was in flight at the incident,
``hangwatch.contract.batch``), and runs it ``--times`` times, each against a fresh engine in the
generator's isolated worker with the recorded settings under ``--policy``
(``hangwatch.generator.reproduce``). A run whose engine makes no step for ``--step-timeout``
seconds is a wedge: the incident capture (``hangwatch.diagnostics.capture``) takes the wedged
worker's evidence into a new bundle before its process group is killed.

This process never imports torch or vLLM: the worker does. Exit codes
(``REPRODUCE_EXIT_CODES``): reproduced, did not reproduce, could not run; a missing batch or
model is a one-line error with "could not run", never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

import psutil

from hangwatch.contract import atomic
from hangwatch.contract.batch import Batch, BatchError, parse_record
from hangwatch.contract.capture import CaptureRequest, TreeProcess
from hangwatch.contract.exitcodes import EXIT_CANNOT_REPRODUCE, EXIT_NOT_REPRODUCED, EXIT_REPRODUCED
from hangwatch.contract.redact import MARK
from hangwatch.contract.terminal import one_line, terminal_safe
from hangwatch.contract.verdict import Verdict, VerdictKind
from hangwatch.diagnostics.batch import BATCH_FILE
from hangwatch.diagnostics.bundle import load_bundle
from hangwatch.diagnostics.errors import DiagnosticsError
from hangwatch.generator.engines import ENGINES
from hangwatch.generator.process import WorkerProcess
from hangwatch.generator.reproduce import (RunResult, Settings, default_work_dir, engine_kwargs_for, run_all,
                                           step_summary)
from hangwatch.supervisor.watch.proctree import describe

#: Seconds the capture of a wedged run may take (it runs while the engine is still wedged).
CAPTURE_TIMEOUT_S = 30.0


class CannotReproduce(Exception):
    """The batch cannot be run here (no batch, no model, a bundle that cannot be read)."""


def cmd_reproduce(args: argparse.Namespace) -> int:
    try:
        batch, name = read_batch(Path(args.bundle))
        model = model_for(batch, args.model)
        kwargs, notes = engine_kwargs_for(batch, args.policy, model)
    except CannotReproduce as exc:
        print(f"hangwatch: error: {one_line(str(exc))} (could not run)", file=sys.stderr)
        return EXIT_CANNOT_REPRODUCE
    work_dir = Path(args.out) if args.out else default_work_dir(name)
    work_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    notes = warnings_for(batch) + notes
    settings = Settings(batch.engine, kwargs, batch.prompts, batch.n, batch.seed, batch.sampling, work_dir,
                        step_timeout=args.step_timeout,
                        recorded_applied=batch.applied if args.policy == "recorded" else None)
    if not args.json:
        print(f"hangwatch reproduce: {len(batch.prompts)} prompt(s) x n={batch.n}, seed {batch.seed}, engine "
              f"{batch.engine}, policy {args.policy}, {args.times} run(s), step timeout {args.step_timeout:g} s")
        for note in notes:
            print(f"  note: {terminal_safe(note)}")
        print(f"  runs in {work_dir}", flush=True)
    results = run_all(settings, args.times, on_wedge=capture_wedge,
                      progress=None if args.json else _print_run)
    code = exit_code_for(results)
    summary = {"bundle": str(args.bundle), "policy": args.policy, "engine": batch.engine, "engine_kwargs": kwargs,
               "notes": notes, "runs": [r.to_json() for r in results], "outcome": OUTCOMES[code]}
    atomic.write_file(work_dir / "reproduce.json", (json.dumps(summary, indent=2, default=str) + "\n").encode())
    if args.json:
        json.dump(summary, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print(f"{OUTCOMES[code]} (exit {code}); details in {work_dir / 'reproduce.json'}")
    return code


OUTCOMES = {EXIT_REPRODUCED: "reproduced", EXIT_NOT_REPRODUCED: "did not reproduce",
            EXIT_CANNOT_REPRODUCE: "could not run"}


def exit_code_for(results: Sequence[RunResult]) -> int:
    """Any run wedged: reproduced; every run completed: did not reproduce; else could not run."""
    if any(r.outcome == "wedged" for r in results):
        return EXIT_REPRODUCED
    if results and all(r.outcome == "completed" for r in results):
        return EXIT_NOT_REPRODUCED
    return EXIT_CANNOT_REPRODUCE


def read_batch(path: Path) -> tuple[Batch, str]:
    """The bundle's kept batch, checked, and the bundle's name."""
    if not path.exists():
        raise CannotReproduce(f"{path}: no such bundle")
    try:
        bundle = load_bundle(path)
    except (DiagnosticsError, OSError) as exc:
        raise CannotReproduce(str(exc)) from None
    text = bundle.text(BATCH_FILE)
    if text is None:
        raise CannotReproduce(f"{path} has no {BATCH_FILE}: no engine request was in flight when it was captured "
                              f"(or its hangwatch did not keep batches), so there is nothing to reproduce")
    try:
        batch = Batch.from_record(parse_record(text, f"{bundle.name}/{BATCH_FILE}"), f"{bundle.name}/{BATCH_FILE}")
    except BatchError as exc:
        raise CannotReproduce(str(exc)) from None
    if batch.engine not in ENGINES:
        raise CannotReproduce(f"{BATCH_FILE} names the engine {batch.engine!r}; this hangwatch runs "
                              f"{', '.join(ENGINES)}")
    return batch, bundle.name.removesuffix(".tar.gz")


def model_for(batch: Batch, given: str | None) -> str | None:
    """The model to load: ``--model`` (it must exist), else the recorded one (a path must exist here)."""
    if given is not None:
        if not Path(given).exists():
            raise CannotReproduce(f"--model {given}: no such file or directory")
        return given
    recorded = batch.model
    if batch.engine != "vllm":
        return None
    if not recorded:
        raise CannotReproduce(f"{BATCH_FILE} records no model path; give --model PATH")
    looks_like_path = recorded.startswith(("/", ".", "~")) or Path(recorded).exists()
    if looks_like_path and not Path(recorded).expanduser().exists():
        raise CannotReproduce(f"the recorded model {recorded} is not on this machine; give --model PATH")
    return None  # the recorded one, as recorded


def warnings_for(batch: Batch) -> list[str]:
    """What makes this reproduction differ from the recorded request, said up front."""
    notes = []
    if batch.truncated:
        notes.append(f"the batch was cut to fit the record's cap: {batch.truncated.get('prompts_kept')} of "
                     f"{batch.truncated.get('prompts_total')} prompts kept")
    if MARK in json.dumps([batch.prompts, batch.sampling, batch.engine_kwargs], default=str):
        notes.append(f"parts of the batch were redacted ({MARK}) in the bundle: they run as written there")
    weights = batch.record.get("weights")
    if isinstance(weights, dict) and weights.get("source") == "trainer":
        notes.append(f"the recorded run's weights were the trainer's (digest {weights.get('digest')}); "
                     f"this run loads the model's own")
    return notes


def capture_wedge(worker: WorkerProcess, run_dir: Path, result: RunResult) -> str | None:
    """The incident capture of the still-wedged worker's process group, as a bundle under the work dir."""
    from hangwatch.diagnostics.capture import capture_incident  # noqa: PLC0415 - only when a run wedges

    now = time.monotonic()
    stuck = result.stuck_for_s or 0.0
    verdict = Verdict(VerdictKind.STALL, now, now - stuck, f"reproduce run {result.index}: {result.error}",
                      window=stuck, phase="generate", evidence={"rule": "reproduce_step_timeout"})
    request = CaptureRequest(
        run_dir=run_dir.parent, run_id="reproduce", attempt=result.index, verdict=verdict, samples=[],
        tree=_group(worker), log_paths={"attempt_dir": run_dir}, thresholds={"step_timeout": stuck},
        deadline=now + CAPTURE_TIMEOUT_S, gpu_probe="none")
    try:
        return str(capture_incident(request))
    except Exception as exc:  # noqa: BLE001 - a failed capture is a note, never a lost result
        result.notes.append(f"the capture failed: {type(exc).__name__}: {exc}")
        return None


def _group(worker: WorkerProcess) -> list[TreeProcess]:
    """The worker and its descendants (vLLM's engine core, its GPU workers)."""
    try:
        root = psutil.Process(worker.pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    return [tp for tp in (describe(p) for p in procs) if tp is not None]


def _print_run(result: RunResult) -> None:
    times = ", ".join(f"{k} {v:.2f} s" for k, v in result.seconds.items())
    if result.outcome == "completed":
        line = f"completed: {step_summary(result.step_times_s)} ({times})"
    elif result.outcome == "wedged":
        line = f"WEDGED: {result.error} ({times})" + (f"; evidence in {result.bundle}" if result.bundle else "")
    else:
        line = f"could not run: {one_line(result.error or 'unknown error')}; worker log {result.log}"
    print(f"run {result.index}: {terminal_safe(line)}", flush=True)
    for note in result.notes:
        print(f"  note: {terminal_safe(note)}", flush=True)
