"""hangwatch with the real TRL GRPOTrainer end to end (CPU, tiny local model, no hub), under the
real ``hangwatch run`` CLI: ``scripts/trl_grpo_example.py`` wedges in a vLLM-like graph-replay
frame, is detected, killed, resumed from the newest real checkpoint with graphs off, and
finishes; a slow save is not a wedge. (The callback's own tests are in
tests/generator/test_hf_callback.py; the policy at TRL's real colocate call site in
tests/generator/test_trl_patch.py.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psutil
import pytest

from hangwatch.contract.exitcodes import EXIT_BUDGET

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "scripts" / "trl_grpo_example.py"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def quiet_env(monkeypatch):
    for key, value in {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "TRANSFORMERS_OFFLINE": "1",
                       "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
                       "PYTHONWARNINGS": "ignore"}.items():
        monkeypatch.setenv(key, value)


def _e2e_args(hw, **overrides):
    opts = {"--interval": "0.25", "--stall-window": "3", "--grace": "1", "--capture-timeout": "15"}
    opts.update(overrides)
    return hw.fast_args(**opts)


def _example(hw, *args):
    return [sys.executable, str(EXAMPLE), "--output_dir", str(hw.ckpt), "--pidfile", str(hw.pidfile), *args]


def _global_step(checkpoint: Path) -> int:
    return json.loads((checkpoint / "trainer_state.json").read_text())["global_step"]


def _no_children_left():
    me = psutil.Process()
    left = [p for p in me.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"processes left behind: {left}"


@pytest.mark.slow
def test_grpo_wedge_is_caught_and_resumed_from_the_real_checkpoint_with_graphs_off(hw, quiet_env):
    max_steps = 6
    args = _e2e_args(hw) + [
        "--checkpoint-dir", str(hw.ckpt), "--resume-arg", "--resume_from_checkpoint={checkpoint}", "--",
        *_example(hw, "--max_steps", str(max_steps), "--save_steps", "2", "--wedge-at-step", "5", "--record-trl-llm"),
    ]
    result = hw.run(args, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]

    incidents = hw.events("incident")
    assert [i["kind"] for i in incidents] == ["stall"]
    assert incidents[0]["evidence"]["step"] == 4 and incidents[0]["evidence"]["phase"] == "generate"
    assert hw.events("kill")[0]["confirmed"] is True

    attempts = hw.events("attempt_started")
    assert len(attempts) == 2
    assert attempts[0]["env"]["HANGWATCH_CUDAGRAPHS"] == "1"
    assert attempts[1]["env"]["HANGWATCH_CUDAGRAPHS"] == "0"
    newest = hw.ckpt / "checkpoint-4"
    assert attempts[1]["resume_from"] == str(newest)
    assert f"--resume_from_checkpoint={newest}" in attempts[1]["argv"]
    assert _global_step(newest) == 4

    # the rollout policy each attempt applied, as TRL's real LLM(...) call received it
    attempt_dirs = sorted((hw.run_dir / "attempts").iterdir())
    first, second = (json.loads((d / "trl_llm_kwargs.json").read_text()) for d in attempt_dirs)
    assert "compilation_config" not in first
    assert second["compilation_config"] == {"cudagraph_mode": "NONE"}
    assert second["distributed_executor_backend"] == "external_launcher"
    info2 = [e["info"] for e in hw.events("trainer_info") if e["attempt"] == 2]
    assert info2 and all(i["cudagraphs"] == "off" for i in info2)
    assert info2[-1]["trl_llm_kwargs"]["compilation_config"] == {"cudagraph_mode": "NONE"}
    assert info2[-1]["engine_kwargs"] == {"compilation_config": {"cudagraph_mode": "NONE"}}

    # training finished the planned steps from the resumed checkpoint
    final = hw.ckpt / f"checkpoint-{max_steps}"
    assert _global_step(final) == max_steps
    assert hw.events("attempt_ended")[-1]["start_step"] == 4
    assert f"finished at step {max_steps}" in (attempt_dirs[1] / "stdout.log").read_text()
    assert hw.events("run_finished")[-1]["outcome"] == "success"
    assert len(hw.reported_pids()["trainer"]) == 2
    assert not hw.alive()
    _no_children_left()


@pytest.mark.slow
@pytest.mark.parametrize("announce", [True, False], ids=["checkpoint-phase", "no-phase-control"])
def test_slow_save_under_a_busy_gpu_is_not_a_wedge(hw, quiet_env, announce):
    args = _e2e_args(hw, **{"--max-restarts": "0"}) + [
        "--checkpoint-dir", str(hw.ckpt), "--",
        *_example(hw, "--max_steps", "2", "--save_steps", "2", "--slow-save", "5",
                  *([] if announce else ["--no-checkpoint-phase"])),
    ]
    result = hw.run(args, timeout=200)
    if announce:
        assert result.returncode == 0, result.stderr[-3000:]
        assert hw.events("incident") == []
        saving = [e for e in hw.events("trainer_info") if e["phase"] == "checkpoint"]
        assert saving and saving[0]["info"]["saving"] == 2 and saving[0]["step"] == 2
        assert _global_step(hw.ckpt / "checkpoint-2") == 2
        assert hw.events("run_finished")[-1]["outcome"] == "success"
    else:
        # The same save without the announcement is taken for a wedge: the phase is what prevents it.
        assert result.returncode == EXIT_BUDGET
        assert [i["kind"] for i in hw.events("incident")] == ["stall"]
    assert not hw.alive()
    _no_children_left()
