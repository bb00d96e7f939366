#!/usr/bin/env python3
"""Goodput: training seconds lost per wedge, measured for both recovery levels, then projected.

Measured (side by side in one run): the demo's toy trainer (fake engine in its isolated
worker, wedge at step 17, checkpoints every 5 steps, stall window 8 s) under
``--recovery job`` and ``--recovery auto``. Lost seconds per wedge = the moment the wedged
step finally completes, minus the moment it would have completed without the wedge
(the step before it plus the median step time). The last line of this part is
``lost_seconds_engine_level_over_job_level=X``.

Also measured: ``--recovery auto`` with the engine restarted cold (no standby worker), to
show what the standby buys.

Projected: a multi-day run from component times you set (defaults: one wedge per 700 steps
of 10 s, a checkpoint every 50 steps, engine init 60 s, trainer restart 300 s, stall window
60 s, engine step timeout 30 s and its wedge window 7.5 s, standby takeover 5 s), for: no watchdog (a person notices
after --notice-hours), a heartbeat watchdog with NeMo-RL's 450 s timeout and a job restart,
hangwatch level 2 (job restart), hangwatch level 1 with the engine started cold, and level 1
with a standby engine. Goodput = wall time making progress / wall time.

    .venv/bin/python scripts/bench_goodput.py [--skip-measure] [--step-s 10 --wedge-every 700 ...]

``--real-vllm`` (run with ``.venv-vllm/bin/python``, made by ``scripts/setup.sh --real-vllm``):
the same measurement on the real engine, vLLM's CPU build, with the toy trainer's ``--engine
vllm`` and the wedge model (``generator/engines/wedge_model.py``; a tiny Llama built in a
temp dir): each level's lost seconds, the engine start-up time (read from the worker's log),
and ``lost_seconds_engine_level_over_job_level_real=X`` (level 1 with the standby). Then the
projection, with ``--engine-init-s`` set to the measured start-up unless given.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP_LINE = re.compile(rb"^step (\d+)/(\d+) ")


def step_times(argv: list[str], timeout: float, what: str, work: Path) -> dict[int, list[float]]:
    """Run ``argv`` and note when each training step's line came (a step retried after a recovery
    prints again); exits with ``what`` when the run fails."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT)
    done: dict[int, list[float]] = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        m = STEP_LINE.match(line)
        if m:
            done.setdefault(int(m.group(1)), []).append(time.monotonic())
    if proc.wait(timeout=timeout) != 0:
        raise SystemExit(f"{what}: the run failed; see {work}")
    return done


def measure(recovery: str, wedge_at: int = 17, *, engine_step_timeout: float = 4.0,
            standby: bool = True) -> dict[str, float]:
    """One demo-like run; the wedged step's delay and the recovery's component times."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-goodput-{recovery}-"))
    ckpt = work / "checkpoints"
    ckpt.mkdir(parents=True)
    # The demo's settings (scripts/demo.py): the standby engine only where it can be used.
    argv = [sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(work / "run"), "--gpu-probe",
            f"file:{work / 'sim-gpu.json'}", "--interval", "0.5", "--stall-window", "8",
            "--engine-step-timeout", str(engine_step_timeout), "--grace", "3",
            "--capture-timeout", "20", "--backoff", "0.5", "--recovery", recovery, "--checkpoint-dir", str(ckpt),
            "--resume-arg", "--resume_from_checkpoint={checkpoint}", "--",
            sys.executable, str(ROOT / "scripts" / "toy_trainer.py"), "--steps", "24", "--save-every", "5",
            "--checkpoint-dir", str(ckpt), "--wedge-at-step", str(wedge_at), "--generate-timeout", "300",
            "--no-parent-death-signal", *(["--standby-engine"] if recovery == "auto" and standby else [])]
    done = step_times(argv, 600, f"--recovery {recovery}", work)
    first = [done[s][0] for s in range(1, wedge_at)]
    step_s = statistics.median(b - a for a, b in zip(first[5:], first[6:]))
    expected = done[wedge_at - 1][0] + step_s
    lost = done[wedge_at][-1] - expected
    journal = [json.loads(x) for x in (work / "run" / "journal.jsonl").read_text().splitlines()]
    capture = next((r["duration_s"] for r in journal if r["event"] == "capture"), 0.0)
    latency = next((r["latency_s"] for r in journal if r["event"] == "incident"), 0.0)
    kill = next((r.get("duration_s", 0.0) for r in journal if r["event"] == "kill"), 0.0)
    return {"lost_s": lost, "step_s": step_s, "capture_s": capture, "latency_s": latency, "kill_s": kill,
            "attempts": sum(r["event"] == "attempt_started" for r in journal)}


START_TOOK = re.compile(r"op=start id=\S+ ok=True took=([0-9.]+)s")


def build_real_model(directory: Path) -> Path:
    """A tiny Llama wedge model and its tokenizer (the real-engine tier's, tests/generator/real_vllm_helpers.py)."""
    sys.path.insert(0, str(ROOT / "tests" / "generator"))
    from real_vllm_helpers import build_wedge_model  # noqa: PLC0415

    return build_wedge_model(directory)


def measure_real(recovery: str, model: Path, *, standby: bool = True, steps: int = 6, wedge_at: int = 5,
                 save_every: int = 2, engine_step_timeout: float = 15.0) -> dict[str, float]:
    """One run on the real engine; the wedged step's delay, and the engine start-ups seen."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-goodput-real-{recovery}-"))
    ckpt = work / "checkpoints"
    ckpt.mkdir(parents=True)
    argv = [str(Path(sys.executable).parent / "hangwatch"), "run", "--run-dir", str(work / "run"), "--gpu-probe",
            "none", "--interval", "0.5", "--stall-window", "400", "--engine-step-timeout", str(engine_step_timeout),
            "--grace", "3", "--capture-timeout", "60", "--backoff", "0.5", "--recovery", recovery,
            "--checkpoint-dir", str(ckpt), "--resume-arg", "--resume_from_checkpoint={checkpoint}", "--",
            sys.executable, str(ROOT / "scripts" / "toy_trainer.py"), "--engine", "vllm", "--model-dir", str(model),
            "--steps", str(steps), "--save-every", str(save_every), "--checkpoint-dir", str(ckpt),
            "--wedge-at-step", str(wedge_at), "--wedge-on-attempts", "1", "--generate-timeout", "400",
            "--engine-start-timeout", "600", "--step-time", "0.05",
            *(["--standby-engine"] if recovery == "auto" and standby else [])]
    done = step_times(argv, 1800, f"--real-vllm --recovery {recovery}", work)
    first = [done[s][0] for s in range(1, wedge_at)]
    step_s = statistics.median(b - a for a, b in zip(first[1:], first[2:]))  # step 1 waited for the engine
    lost = done[wedge_at][-1] - (done[wedge_at - 1][0] + step_s)
    starts = [float(t) for log in sorted((work / "run").rglob("generator-*.log"))
              for t in START_TOOK.findall(log.read_text(errors="replace"))]
    journal = [json.loads(x) for x in (work / "run" / "journal.jsonl").read_text().splitlines()]
    latency = next((r["latency_s"] for r in journal if r["event"] == "incident"), 0.0)
    return {"lost_s": lost, "step_s": step_s, "latency_s": latency, "engine_start_s": min(starts) if starts else 0.0,
            "engine_starts": len(starts), "attempts": sum(r["event"] == "attempt_started" for r in journal)}


def measure_real_all() -> float:
    """Both levels (and level 1 cold) on the real engine; prints them; returns the engine start-up seconds."""
    model = build_real_model(Path(tempfile.mkdtemp(prefix="bench-goodput-model-")) / "model")
    job, cold, auto = measure_real("job", model), measure_real("auto", model, standby=False), measure_real("auto", model)
    print("measured on the real engine (vLLM's CPU build; engine step timeout 15 s, checkpoint every 2 steps, "
          "wedge at step 5):")
    for name, m in (("--recovery job             ", job), ("--recovery auto, engine cold", cold),
                    ("--recovery auto, standby   ", auto)):
        print(f"  {name}: {m['lost_s']:7.2f} s lost per wedge ({m['attempts']:.0f} attempt(s), "
              f"{m['engine_starts']:.0f} engine start(s), detected after {m['latency_s']:.2f} s, step {m['step_s']:.2f} s)")
    start = statistics.median([m["engine_start_s"] for m in (job, cold, auto) if m["engine_start_s"]] or [0.0])
    print(f"engine_startup_seconds_real={start:.1f}")
    print(f"lost_seconds_job_level_real={job['lost_s']:.1f}")
    print(f"lost_seconds_engine_level_cold_real={cold['lost_s']:.1f}")
    print(f"lost_seconds_engine_level_real={auto['lost_s']:.1f}")
    print(f"lost_seconds_engine_level_over_job_level_real={auto['lost_s'] / job['lost_s']:.2f}")
    return start


def project(a: argparse.Namespace) -> list[tuple[str, float, float]]:
    """(strategy, seconds lost per wedge, goodput) for each strategy."""
    between = a.wedge_every * a.step_s  # training seconds between wedges
    redo = a.checkpoint_every / 2 * a.step_s  # on average half a checkpoint interval is redone
    # An engine wedge is caught by whichever rule fires first: the engine step rule (the
    # worker made no step for --engine-step-timeout, or for --engine-wedge-window with the
    # cuda-graph wedge's signature: a pinned GPU, idle holders) or the stall window.
    detect = a.stall_window
    if a.engine_step_timeout > 0:
        wedge = a.engine_step_timeout / 4 if a.engine_wedge_window is None else a.engine_wedge_window
        detect = min(detect, a.engine_step_timeout, *([wedge] if wedge > 0 else []))
    # The engine level SIGKILLs its worker at once (no grace: nothing in it is worth saving).
    detect_capture = detect + a.capture_s
    losses = [
        ("no watchdog (a person notices)", a.notice_hours * 3600 + a.trainer_restart_s + redo),
        ("heartbeat watchdog, 450 s, job restart", 450 + a.kill_s + a.trainer_restart_s + redo),
        ("hangwatch level 2 (job restart)", detect_capture + a.kill_s + a.trainer_restart_s + redo),
        ("hangwatch level 1, engine started cold", detect_capture + a.engine_init_s + a.step_s),
        ("hangwatch level 1, standby engine", detect_capture + a.standby_takeover_s + a.step_s),
    ]
    return [(name, lost, between / (between + lost)) for name, lost in losses]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--skip-measure", action="store_true", help="only the projection")
    p.add_argument("--step-s", type=float, default=10.0)
    p.add_argument("--wedge-every", type=float, default=700, help="optimizer steps between wedges")
    p.add_argument("--checkpoint-every", type=float, default=50, help="steps between checkpoints")
    p.add_argument("--engine-init-s", type=float, default=None,
                   help="engine start-up seconds (default 60, or the measured one with --real-vllm)")
    p.add_argument("--real-vllm", action="store_true",
                   help="measure on the real engine (vLLM's CPU build; run with .venv-vllm/bin/python)")
    p.add_argument("--trainer-restart-s", type=float, default=300.0, help="relaunch, model + optimizer load, compile")
    p.add_argument("--stall-window", type=float, default=60.0)
    p.add_argument("--engine-step-timeout", type=float, default=30.0, help="the engine step rule (0: off)")
    p.add_argument("--engine-wedge-window", type=float, default=None,
                   help="the engine step rule on the wedge's signature (default: a quarter of the timeout; 0: off)")
    p.add_argument("--standby-takeover-s", type=float, default=5.0,
                   help="a standby's takeover beyond what every call does anyway (its wake and weight load)")
    p.add_argument("--capture-s", type=float, default=2.0)
    p.add_argument("--kill-s", type=float, default=1.0,
                   help="the job-level kill (a wedged tree is SIGKILLed after 1 s of quiet); the engine level "
                        "SIGKILLs its worker at once")
    p.add_argument("--notice-hours", type=float, default=4.0)
    a = p.parse_args()
    if a.real_vllm and not a.skip_measure:
        started = measure_real_all()
        if a.engine_init_s is None and started:
            a.engine_init_s = started
    if a.engine_init_s is None:
        a.engine_init_s = 60.0
    if not a.skip_measure and not a.real_vllm:
        job, cold = measure("job"), measure("auto", standby=False)
        auto = measure("auto")
        print("measured on the demo's settings (stall window 8 s, engine step timeout 4 s and its wedge "
              "window 1 s, checkpoint every 5 steps):")
        for name, m in (("--recovery job                ", job), ("--recovery auto, engine cold   ", cold),
                        ("--recovery auto, standby (demo)", auto)):
            print(f"  {name}: {m['lost_s']:6.2f} s lost per wedge ({m['attempts']:.0f} attempt(s), "
                  f"detected after {m['latency_s']:.2f} s, capture {m['capture_s']:.2f} s, kill {m['kill_s']:.2f} s, "
                  f"step {m['step_s']:.2f} s)")
        print(f"lost_seconds_engine_level_cold_over_job_level={cold['lost_s'] / job['lost_s']:.2f}")
        # What detection cannot change: both levels pay it, so even an instant verdict leaves this ratio.
        floor = (auto["lost_s"] - auto["latency_s"]) / (job["lost_s"] - job["latency_s"])
        print(f"  the same ratio with detection taken out of both (an instant verdict): {floor:.2f}")
        print(f"lost_seconds_engine_level_over_job_level={auto['lost_s'] / job['lost_s']:.2f}")
    print(f"\nprojected: one wedge per {a.wedge_every:g} steps of {a.step_s:g} s, checkpoint every "
          f"{a.checkpoint_every:g} steps, engine init {a.engine_init_s:g} s, trainer restart {a.trainer_restart_s:g} s, "
          f"stall window {a.stall_window:g} s, engine step timeout {a.engine_step_timeout:g} s "
          f"(wedge window {a.engine_step_timeout / 4 if a.engine_wedge_window is None else a.engine_wedge_window:g} s), "
          f"standby takeover {a.standby_takeover_s:g} s")
    for name, lost, goodput in project(a):
        print(f"  {name:<40} {lost:9.0f} s lost per wedge   goodput {goodput * 100:6.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
