"""The real wedge: vLLM's own engine (the CPU build, in ``.venv-vllm``) wedged by the wedge model
(``generator/engines/wedge_model.py``, registered through hangwatch's vLLM plugin), under
``hangwatch run`` with the toy trainer, at both recovery levels.

One run per level, each started once for the module (every engine start-up costs 30-150 s
here): ``auto`` restarts the engine alone with graphs off and retries the batch in the same
trainer; ``job`` restarts the tree and resumes from checkpoint-1 with graphs off. The job
run's step 2 is a clean run of that batch (a fresh trainer from the same checkpoint, graphs
off, the same seed), so the retried batch's tokens are checked against it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from real_vllm_helpers import build_wedge_model, real_vllm_missing

pytestmark = [pytest.mark.real_vllm, pytest.mark.slow, pytest.mark.timeout(1200),
              pytest.mark.skipif(real_vllm_missing() is not None, reason=str(real_vllm_missing()))]

ROOT = Path(__file__).resolve().parents[3]
HANGWATCH = str(Path(sys.executable).parent / "hangwatch")
WEDGE_AT = 2


def _run(base: Path, recovery: str) -> dict:
    base.mkdir(mode=0o700, parents=True)
    model = build_wedge_model(base / "model")
    run_dir, ckpt, rollouts = base / "run", base / "ckpt", base / "rollouts.jsonl"
    argv = [HANGWATCH, "run", "--quiet", "--run-dir", str(run_dir), "--gpu-probe", "none", "--interval", "0.5",
            "--stall-window", "400", "--engine-step-timeout", "15", "--grace", "3", "--capture-timeout", "60",
            "--backoff", "0.5", "--recovery", recovery, "--checkpoint-dir", str(ckpt),
            "--resume-arg", "--resume_from_checkpoint={checkpoint}", "--",
            sys.executable, str(ROOT / "scripts" / "toy_trainer.py"), "--engine", "vllm", "--model-dir", str(model),
            "--steps", "3", "--save-every", "1", "--checkpoint-dir", str(ckpt), "--wedge-at-step", str(WEDGE_AT),
            "--generate-timeout", "400", "--engine-start-timeout", "600", "--step-time", "0.05",
            "--rollouts-log", str(rollouts)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGWATCH_")}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1100)
    journal = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    steps = [json.loads(line) for line in rollouts.read_text().splitlines()] if rollouts.exists() else []
    return {"code": proc.returncode, "out": proc.stdout + proc.stderr, "journal": journal, "rollouts": steps,
            "ckpt": ckpt, "run_dir": run_dir}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("real-wedge")
    return {level: _run(base / level, level) for level in ("auto", "job")}


def _events(journal: list[dict], name: str) -> list[dict]:
    return [r for r in journal if r["event"] == name]


def _bundle(journal: list[dict]) -> Path:
    return Path(next(r["evidence_path"] for r in _events(journal, "engine_restart") + _events(journal, "attempt_ended")
                     if r.get("evidence_path")))


def _finished(run: dict) -> int:
    final = max(run["ckpt"].glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    return json.loads((final / "trainer_state.json").read_text())["global_step"]


@pytest.mark.parametrize("level", ["auto", "job"])
def test_the_engine_step_rule_fires_on_the_real_engine_and_replay_classifies_its_stacks(runs, level):
    run = runs[level]
    assert run["code"] == 0, run["out"][-4000:]
    incident = _events(run["journal"], "incident")[0]
    assert incident["evidence"]["rule"] == "engine_step", incident
    bundle = _bundle(run["journal"])
    manifest = json.loads((bundle / "manifest.json").read_text())
    # py-spy stacks of every process: the trainer, our engine worker (vLLM's front end), vLLM's
    # engine core and its worker; the wedged forward is in the last one.
    dumped = {d["pid"] for r in manifest["stacks"]["rounds"] for d in r["dumps"] if d["ok"]}
    assert len(dumped) >= 4, manifest["stacks"]
    stacks = (bundle / "stacks" / "stacks.txt").read_text()
    assert "cuda_graph_replay_synchronize" in stacks and "EngineCore" in stacks
    classification = manifest["classification"]
    assert classification["signature_id"].startswith("vllm-") and classification["frozen"] is True, classification


def test_auto_kills_only_the_engine_restarts_it_with_graphs_off_and_training_completes(runs):
    run = runs["auto"]
    assert run["code"] == 0, run["out"][-4000:]
    journal = run["journal"]
    attempts = _events(journal, "attempt_started")
    assert len(attempts) == 1, "the trainer process lived on: no second attempt"
    (restart,) = _events(journal, "engine_restart")
    assert restart["ok"] and restart["cudagraphs"] == "off"
    assert attempts[0]["pid"] not in restart["pids"] and len(restart["pids"]) >= 3, \
        "only the engine worker's processes (ours, vLLM's engine core and worker) were killed"
    (recovered,) = _events(journal, "engine_recovered")
    assert recovered["engine"]["applied_cudagraph_mode"] == "NONE"
    assert [r["level"] for r in _events(journal, "recovery")] == [1]
    assert _finished(run) == 3


def test_job_resumes_from_the_checkpoint_with_graphs_off(runs):
    run = runs["job"]
    assert run["code"] == 0, run["out"][-4000:]
    attempts = _events(run["journal"], "attempt_started")
    assert len(attempts) == 2 and attempts[1]["resume_from"].endswith("checkpoint-1")
    assert not _events(run["journal"], "engine_restart")
    assert [r["level"] for r in _events(run["journal"], "recovery")] == [2]
    assert _finished(run) == 3


def test_the_retried_batch_equals_a_clean_run_under_the_same_seed(runs):
    retried = [r for r in runs["auto"]["rollouts"] if r["step"] == WEDGE_AT]
    clean = [r for r in runs["job"]["rollouts"] if r["step"] == WEDGE_AT]
    assert len(retried) == 1 and len(clean) == 1, (runs["auto"]["rollouts"], runs["job"]["rollouts"])
    assert retried[0]["tokens"] == clean[0]["tokens"]
