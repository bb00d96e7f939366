#!/usr/bin/env python3
"""A CPU toy GRPO-shaped trainer for hangwatch demos and tests.

Each optimizer step: ``beat(phase="generate")``, rollouts from the fake engine
in its own worker process (own session: it "escapes" the trainer's group),
a tiny loss/backward/step, ``beat(phase="train")``. Every ``--save-every``
steps an atomic ``checkpoint-<global_step>/`` (``trainer_state.json`` written
last; old checkpoints are never deleted).

The wedge: with ``--wedge-at-step S`` the rollout for optimizer step S (seed S)
wedges inside the fake engine's cuda-graph replay, so only while
``HANGWATCH_CUDAGRAPHS`` != "0" and ``HANGWATCH_ENFORCE_EAGER`` != "1"
(the engine kwargs come from ``hangwatch.generator.policy``). The trainer then waits on
the generate timeout (``--generate-timeout``, default 300 s, longer than the
supervisor's stall window) with the sim GPU at 100 % and the CPU idle.
``--wedge-on-attempts 1,2`` limits the wedge to those HANGWATCH_ATTEMPT
values (default: every attempt), to model a transient wedge.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from hangwatch.generator.colocated import ColocatedGenerator, Timeouts  # noqa: E402
from hangwatch.generator.engines.toy_model import ToyConfig, ToyPolicy  # noqa: E402
from hangwatch.generator.policy import rollout_policy  # noqa: E402
from hangwatch.contract import simgpu  # noqa: E402
from hangwatch.contract.heartbeat import beat  # noqa: E402

PROMPTS = ["solve: 2+2", "name a colour", "count to three", "say hi"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    run_dir = os.environ.get("HANGWATCH_RUN_DIR")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30, help="total optimizer steps")
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--checkpoint-dir", default=os.path.join(run_dir, "checkpoints") if run_dir else "checkpoints")
    p.add_argument("--step-time", type=float, default=0.1, help="seconds of simulated compute per step")
    p.add_argument("--wedge-at-step", type=int, default=None)
    p.add_argument("--trainer-wedge-at-step", type=int, default=None,
                   help="the trainer itself hangs in step N's train phase (GPU busy, CPU idle), the engine asleep")
    p.add_argument("--wedge-in-load", type=int, default=None, metavar="K",
                   help="the engine wedges in its K-th weight load (graphs on only): the trainer waits on it in 'load'")
    p.add_argument("--wedge-on-attempts", default="all", help="comma list of HANGWATCH_ATTEMPT values, or 'all'")
    p.add_argument("--resume_from_checkpoint", "--resume-from-checkpoint", dest="resume",
                   default=os.environ.get("HANGWATCH_RESUME_FROM") or None)
    p.add_argument("--engine", default="fake", choices=["fake", "vllm"],
                   help="vllm: the real engine (vLLM's CPU build works) on --model-dir, a Llama whose tokenizer "
                        "knows the prompts' words; the trainer trains a transformers copy of it")
    p.add_argument("--model-dir", default=None, help="--engine vllm: the model (config, weights, tokenizer)")
    p.add_argument("--engine-start-timeout", type=float, default=120.0, help="the generator's engine start timeout")
    p.add_argument("--fail-engine-without-graphs", action="store_true",
                   help="tests: an engine started with cuda graphs off fails to start (an engine restart that fails)")
    p.add_argument("--standby-engine", action="store_true",
                   help="keep a second engine worker started and asleep (graphs off) to take over on an engine restart")
    p.add_argument("--generate-timeout", type=float, default=300.0)
    p.add_argument("--load-timeout", type=float, default=120.0, help="the generator's weight load timeout")
    p.add_argument("--worker-grace", type=float, default=5.0, help="SIGTERM-to-SIGKILL grace for the engine worker")
    p.add_argument("--n", type=int, default=2, help="completions per prompt")
    p.add_argument("--rollouts-log", default=None, help="append each step's rollout token ids here (JSON lines)")
    p.add_argument("--no-parent-death-signal", action="store_true",
                   help="let the engine worker outlive the trainer (to test a supervisor's orphan sweep)")
    return p.parse_args(argv)


def _fsync_write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def save_checkpoint(root: Path, step: int, model: torch.nn.Module, opt: torch.optim.Optimizer) -> Path:
    """Write ``checkpoint-<step>/`` atomically: temp dir, fsync, state file last, rename."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"checkpoint-{step}"
    if final.exists():
        return final  # a complete one is already there (rename is atomic); never overwrite
    tmp = Path(tempfile.mkdtemp(prefix=f".checkpoint-{step}.tmp-", dir=root))
    for name, obj in (("model.pt", model.state_dict()), ("optimizer.pt", opt.state_dict()),
                      ("rng_state.pth", torch.get_rng_state())):
        with open(tmp / name, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
    state = {"global_step": step, "saved_at": time.time(), "attempt": os.environ.get("HANGWATCH_ATTEMPT")}
    _fsync_write(tmp / "trainer_state.json", json.dumps(state).encode())
    dir_fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    os.rename(tmp, final)
    root_fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(root_fd)
    finally:
        os.close(root_fd)
    return final


def load_checkpoint(path: Path, model: torch.nn.Module, opt: torch.optim.Optimizer) -> int:
    state = json.loads((path / "trainer_state.json").read_text())
    model.load_state_dict(torch.load(path / "model.pt", weights_only=True))
    opt.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    rng = path / "rng_state.pth"
    if rng.exists():
        torch.set_rng_state(torch.load(rng, weights_only=True))
    return int(state["global_step"])


REAL_PROMPTS = ["the cat sat on", "a dog ran up", "one two three", "the big red log"]
#: The word whose token makes the real engine's wedge model (engines/wedge_model.py) block.
REAL_WEDGE_WORD = "wedge"


def real_engine_setup(args: argparse.Namespace, policy: Any) -> tuple[torch.nn.Module, dict[str, Any], dict[str, Any]]:
    """--engine vllm: the trainer's transformers copy of --model-dir, the engine kwargs (CPU-sized;
    the policy's graph setting; a small fixed KV cache) and the sampling (every completion max_tokens
    long, so the batch is a tensor)."""
    from transformers import AutoModelForCausalLM

    if not args.model_dir:
        raise SystemExit("--engine vllm needs --model-dir")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)
    kwargs = {"model": args.model_dir, "dtype": "float32", "max_model_len": 256, "max_num_seqs": 8, "seed": 0,
              "kv_cache_memory_bytes": 64 << 20, **policy.engine_kwargs()}
    return model, kwargs, {"max_tokens": 6, "temperature": 1.0, "ignore_eos": True}


def wedge_applies(args: argparse.Namespace, at_step: int | None) -> bool:
    if at_step is None:
        return False
    if args.wedge_on_attempts == "all":
        return True
    attempt = os.environ.get("HANGWATCH_ATTEMPT", "1")
    return attempt in {a.strip() for a in args.wedge_on_attempts.split(",")}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    policy = rollout_policy(os.environ)
    torch.manual_seed(0)
    config = ToyConfig()
    model = ToyPolicy(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    global_step = 0
    if args.resume and args.engine == "fake":
        global_step = load_checkpoint(Path(args.resume), model, opt)
        print(f"resumed from {args.resume} at global_step={global_step}", flush=True)

    engine_kwargs = {"fake_model_config": config.to_json(), "seed": 0, **policy.engine_kwargs()}
    if wedge_applies(args, args.wedge_at_step):
        engine_kwargs["fake_wedge_at_seed"] = args.wedge_at_step
    if args.wedge_in_load is not None and wedge_applies(args, args.wedge_in_load):
        engine_kwargs["fake_wedge_on_load"] = args.wedge_in_load
    if args.fail_engine_without_graphs:
        engine_kwargs["fake_fail_start_without_graphs"] = True
    prompts, sampling = PROMPTS, {"max_tokens": 6, "temperature": 1.0}
    if args.engine == "vllm":
        model, engine_kwargs, sampling = real_engine_setup(args, policy)
        prompts = REAL_PROMPTS
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        if args.resume:
            global_step = load_checkpoint(Path(args.resume), model, opt)
            print(f"resumed from {args.resume} at global_step={global_step}", flush=True)
    log_dir = (os.environ.get("HANGWATCH_ATTEMPT_DIR") or os.environ.get("HANGWATCH_RUN_DIR")
               or tempfile.mkdtemp(prefix="toy-trainer-"))
    print(f"rollout engine: cudagraphs={'on' if policy.cudagraphs else 'off'} "
          f"enforce_eager={policy.enforce_eager} kwargs={policy.engine_kwargs()} log_dir={log_dir}", flush=True)
    beat(step=global_step, phase="start", **policy.beat_info())
    generator = ColocatedGenerator(
        model, opt, engine=args.engine, engine_kwargs=engine_kwargs, log_dir=log_dir,
        sampling=sampling, parent_death_signal=not args.no_parent_death_signal,
        timeouts=Timeouts(start=args.engine_start_timeout, generate=args.generate_timeout, load=args.load_timeout,
                          grace=args.worker_grace), standby=args.standby_engine,
    )
    checkpoints = Path(args.checkpoint_dir)
    try:
        while global_step < args.steps:
            step = global_step + 1
            # the generator's info: the policy, and from its first start what the engine worker applied
            beat(step=global_step, phase="generate", **generator.beat_info)
            simgpu.hold(0, 2000)  # offloaded while the engine runs
            batch = prompts
            if args.engine == "vllm" and args.wedge_at_step is not None and step >= args.wedge_at_step \
                    and wedge_applies(args, args.wedge_at_step):
                batch = [f"{p} {REAL_WEDGE_WORD}" for p in prompts]  # the wedge model's trigger, from step S on
            rollouts = generator.generate(batch, args.n, seed=step, step=global_step)
            if args.rollouts_log:
                with open(args.rollouts_log, "a") as f:
                    f.write(json.dumps({"step": step, "attempt": os.environ.get("HANGWATCH_ATTEMPT"),
                                        "tokens": [[list(c.token_ids) for c in row] for row in rollouts]}) + "\n")
            simgpu.hold(45, 9000)
            if step == args.trainer_wedge_at_step and wedge_applies(args, step):
                # The trainer's own thread wedges (a collective that never returns): not the engine's.
                beat(step=global_step, phase="train", **generator.beat_info)
                print(f"step {step}: trainer wedged in its train phase", flush=True)
                simgpu.hold(100, 9000)
                while True:
                    time.sleep(3600)
            tokens = torch.tensor([list(c.token_ids) for row in rollouts for c in row])
            logits = model(tokens[:, :-1])
            logits = getattr(logits, "logits", logits)  # a transformers model's output
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            time.sleep(args.step_time)
            global_step = step
            value = float(loss.detach())
            beat(step=global_step, phase="train", loss=round(value, 4), **generator.beat_info)
            print(f"step {global_step}/{args.steps} loss={value:.4f}", flush=True)
            if args.save_every > 0 and global_step % args.save_every == 0:
                beat(step=global_step, phase="checkpoint")
                path = save_checkpoint(checkpoints, global_step, model, opt)
                print(f"saved {path}", flush=True)
    finally:
        generator.close()
        simgpu.release()
    print(f"training complete: global_step={global_step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
