"""The toy trainer standalone (no supervisor)."""

import json
import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = os.path.join(REPO_ROOT, "scripts", "toy_trainer.py")


def run(tmp_path, *args, env=None, timeout=50):
    full_env = {**os.environ, "HANGWATCH_RUN_DIR": str(tmp_path), "HANGWATCH_HEARTBEAT": str(tmp_path / "hb.json"),
                **(env or {})}
    return subprocess.run([sys.executable, SCRIPT, "--step-time", "0", *args], env=full_env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.timeout(110)  # two runs of up to 50 s each
def test_runs_to_completion_then_resume_continues_global_step_and_graphs_off_does_not_wedge(tmp_path):
    done = run(tmp_path, "--steps", "2", "--save-every", "1")
    assert done.returncode == 0, done.stderr
    assert "step 2/2 loss=" in done.stdout and done.stdout.strip().endswith("training complete: global_step=2")
    ckpts = tmp_path / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["checkpoint-1", "checkpoint-2"]
    assert json.loads((ckpts / "checkpoint-2" / "trainer_state.json").read_text())["global_step"] == 2
    assert json.loads((tmp_path / "hb.json").read_text())["step"] == 2
    assert (tmp_path / "generator-worker.log").exists()

    # The resumed run is also the graphs-off one: its step 3 is a wedge step, which graphs off
    # never wedges (a run of its own for that was one more trainer and engine start).
    resumed = run(tmp_path, "--steps", "3", "--save-every", "1", "--wedge-at-step", "3", "--generate-timeout", "5",
                  env={"HANGWATCH_RESUME_FROM": str(ckpts / "checkpoint-2"), "HANGWATCH_CUDAGRAPHS": "0"})
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout and "step 3/3" in resumed.stdout and "step 1/3" not in resumed.stdout
    assert resumed.stdout.strip().endswith("training complete: global_step=3")
    assert sorted(p.name for p in ckpts.iterdir()) == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    assert "cudagraphs=off" in resumed.stdout
    assert "WorkerTimeout" not in resumed.stderr and "cuda graph replay wedged" not in \
        (tmp_path / "generator-worker.log").read_text(), "graphs off: the wedge step did not wedge"


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_graphs_on_wedges_at_the_step_and_the_generate_timeout_is_the_backstop(tmp_path):
    """Without a supervisor the wedge is caught by the generator's own generate timeout: the
    engine is restarted once with graphs off and the batch retried in the same process."""
    done = run(tmp_path, "--steps", "3", "--save-every", "1", "--wedge-at-step", "2", "--generate-timeout", "2", "--worker-grace", "0.5",
               env={"HANGWATCH_CUDAGRAPHS": "1"})
    assert done.returncode == 0, done.stderr
    assert "WorkerTimeout" in done.stderr and "generate timeout is the backstop" in done.stderr
    assert "step 2/3" in done.stdout and "training complete: global_step=3" in done.stdout
    assert "cuda graph replay wedged" in (tmp_path / "generator-worker.log").read_text()
    assert (tmp_path / "checkpoints" / "checkpoint-1").exists()
