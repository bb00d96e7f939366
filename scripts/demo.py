"""The demo: a toy GRPO-style run wedges in the engine's cuda-graph replay, hangwatch
catches it (the engine step rule) and captures the evidence. With the default
``--recovery auto`` it SIGKILLs only the engine's worker and the trainer, alive all
along, retries the batch on a standby worker with cuda graphs off; with ``--recovery
job`` it kills the whole tree (the escaped engine worker ignores SIGTERM) and resumes
from the newest complete checkpoint with cuda graphs off. Training completes.

    .venv/bin/python scripts/demo.py [--run-dir DIR] [--steps 30] [--wedge-at-step 17]

Runs on a CPU-only machine: the GPU is simulated (``--gpu-probe file:``), everything
else is real (processes, sessions, signals, py-spy). Settings are scaled so the whole
loop takes about a minute. Exits 0 only if the journal shows what should happen.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", type=Path, default=None)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--save-every", type=int, default=5)
    parser.add_argument("--wedge-at-step", type=int, default=17)
    parser.add_argument("--stall-window", type=float, default=8.0)
    parser.add_argument("--engine-step-timeout", type=float, default=4.0,
                        help="the engine step rule's timeout (the toy engine steps every few ms)")
    parser.add_argument("--quiet", action="store_true", help="hide the trainer's own output")
    parser.add_argument("--recovery", choices=["auto", "job"], default="auto",
                        help="auto (default): only the wedged engine worker is restarted, the trainer lives on; "
                             "job: the whole tree is killed and resumed from the newest checkpoint")
    args = parser.parse_args()

    run_dir = (args.run_dir or ROOT / "hangwatch-runs" / f"demo-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    checkpoints = run_dir / "checkpoints"
    # 0700 whatever the umask: hangwatch refuses a run dir that others can write.
    run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    checkpoints.mkdir(exist_ok=True)
    command = [
        sys.executable, "-m", "hangwatch.cli", "run",
        "--run-dir", str(run_dir),
        "--gpu-probe", f"file:{run_dir / 'sim-gpu.json'}",
        "--interval", "0.5",
        "--stall-window", str(args.stall_window),
        "--engine-step-timeout", str(args.engine_step_timeout),
        "--grace", "3",
        "--capture-timeout", "20",
        "--backoff", "0.5",
        "--recovery", args.recovery,
        "--checkpoint-dir", str(checkpoints),
        "--resume-arg", "--resume_from_checkpoint={checkpoint}",
        *(["--quiet"] if args.quiet else []),
        "--",
        sys.executable, str(ROOT / "scripts" / "toy_trainer.py"),
        "--steps", str(args.steps),
        "--save-every", str(args.save_every),
        "--checkpoint-dir", str(checkpoints),
        "--wedge-at-step", str(args.wedge_at_step),
        # The engine's own operation timeout must outlast detection plus capture,
        # so the supervisor takes the evidence before anything else reacts.
        "--generate-timeout", "300",
        # Without its parent-death guard the wedged worker outlives the trainer, as
        # vLLM's EngineCore processes do: hangwatch must find it (escaped into its
        # own session) and kill it (--recovery job: it ignores SIGTERM, so SIGKILL).
        "--no-parent-death-signal",
        # Engine-level recovery hands over to a standby worker started ahead of time.
        *(["--standby-engine"] if args.recovery == "auto" else []),
    ]
    print(f"hangwatch demo: {args.steps} steps, wedge injected at step {args.wedge_at_step}, run dir {run_dir}\n",
          flush=True)
    started = time.monotonic()
    code = subprocess.call(command, cwd=ROOT)
    elapsed = time.monotonic() - started
    return summarise(run_dir, code, elapsed, args)


def summarise(run_dir: Path, code: int, elapsed: float, args: argparse.Namespace) -> int:
    journal = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines() if line.strip()]

    def events(name: str) -> list[dict]:
        return [r for r in journal if r["event"] == name]

    attempts = events("attempt_started")
    incidents = events("incident")
    kills = [k for k in events("kill") if str(k.get("reason", "")).startswith("stall")]
    restarts = [e for e in events("engine_restart") if e.get("ok")]
    recovered = events("engine_recovered")
    finished = events("run_finished")[-1] if events("run_finished") else {}
    ended = events("attempt_ended")
    bundle = next((e.get("evidence_path") for e in [*restarts, *ended] if e.get("evidence_path")), None)

    print("\n== hangwatch demo summary ==")
    for inc in incidents:
        print(f"incident   attempt {inc['attempt']}: {inc['kind']} detected {inc['latency_s']:.1f} s after onset "
              f"(window {inc.get('window') or args.stall_window:g} s): {inc['reason']}")
    if bundle:
        print(f"evidence   {bundle}")
        signature = _signature(Path(bundle))
        if signature:
            print(f"           classified as: {signature}")
    for k in kills:
        if k.get("grace_rule") == "none":
            print(f"kill       {len(k['pids'])} process(es) (the engine worker's group), SIGKILL at once, "
                  f"confirmed dead: {k['confirmed']}")
        else:
            print(f"kill       {len(k['pids'])} process(es), SIGKILL needed for {k['escalated']} "
                  f"(ignored SIGTERM), confirmed dead: {k['confirmed']}")
    for r in restarts:
        print(f"engine     only the rollout engine's worker was restarted, cuda graphs {r['cudagraphs']}; the trainer "
              f"process (pid {attempts[0]['pid']}) lived on, no checkpoint was reloaded")
    for r in recovered:
        worker = (r.get("engine") or {}).get("engine_worker")
        print(f"recovered  the trainer reached step {r['step']} {r['kill_to_progress_s']:.1f} s after the engine restart "
              f"({r['onset_to_progress_s']:.1f} s after the wedge began)"
              + (", on the standby worker started ahead of time" if worker == "standby" else
                 ", on a worker started cold" if worker == "cold" else ""))
    for a in attempts[1:]:
        print(f"attempt {a['attempt']}  HANGWATCH_CUDAGRAPHS={a['env'].get('HANGWATCH_CUDAGRAPHS')}, "
              f"resumed from {a.get('resume_from')}")
    print(f"finished   {finished.get('outcome')} (exit {code}) in {elapsed:.0f} s")
    print(f"run dir    {run_dir}   (hangwatch status {run_dir})")

    problems = []
    if code != 0 or finished.get("outcome") != "success":
        problems.append(f"the run did not finish successfully (exit {code})")
    if [i["kind"] for i in incidents] != ["stall"]:
        problems.append(f"expected one stall incident, got {[i['kind'] for i in incidents]}")
    if not kills or not kills[0]["confirmed"]:
        problems.append("expected a kill confirmed dead")
    elif args.recovery == "auto" and kills[0].get("grace_rule") != "none":
        problems.append("expected the engine worker SIGKILLed at once (no grace)")
    elif args.recovery == "job" and not kills[0]["escalated"]:
        problems.append("expected a kill that needed SIGKILL for the SIGTERM-ignoring worker")
    if args.recovery == "auto":
        if len(attempts) != 1 or len(restarts) != 1 or not recovered:
            problems.append("expected one attempt whose engine alone was restarted, with graphs off, and progress after")
    elif len(attempts) < 2 or attempts[1]["env"].get("HANGWATCH_CUDAGRAPHS") != "0" or not attempts[1].get("resume_from"):
        problems.append("expected attempt 2 with cuda graphs off, resumed from a checkpoint")
    for p in problems:
        print(f"DEMO FAILED: {p}", file=sys.stderr)
    return 1 if problems else 0


def _signature(bundle: Path) -> str | None:
    try:
        manifest = json.loads((bundle / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    found = manifest.get("classification") or {}
    if isinstance(found, dict) and found.get("signature_id"):
        return f"{found['signature_id']} ({found.get('title', '')})"
    return None


if __name__ == "__main__":
    sys.exit(main())
