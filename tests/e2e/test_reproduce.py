"""The wedged batch, kept and run again: a real incident's bundle reproduces its wedge.

The demo (``hangwatch run`` on the toy trainer, the fake engine wedging in its cuda-graph
replay at one step's seed) produces the bundle; ``hangwatch reproduce`` runs its batch on a
fresh engine: with the recorded policy it wedges again (exit 80, a new bundle of the wedged
worker's stacks), with graphs off it completes (exit 0).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hangwatch.contract.exitcodes import EXIT_NOT_REPRODUCED, EXIT_REPRODUCED

ROOT = Path(__file__).resolve().parents[2]


def hangwatch(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hangwatch.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_wedge_kept_in_a_bundle_reproduces_with_the_recorded_policy_and_completes_with_graphs_off(tmp_path):
    run_dir = tmp_path / "demo"
    demo = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo.py"), "--quiet", "--run-dir", str(run_dir),
                           "--steps", "6", "--save-every", "5", "--wedge-at-step", "3"],
                          capture_output=True, text=True, timeout=220)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    (bundle,) = [p for p in (run_dir / "incidents").iterdir() if (p / "manifest.json").is_file()]
    kept = json.loads((bundle / "batch.json").read_text())
    assert kept["request"]["seed"] == 3 and kept["engine_kwargs"]["fake_wedge_at_seed"] == 3
    assert kept["policy"]["cudagraphs"] == "on" and kept["applied"]["cudagraph_mode"] != "NONE"
    assert "batch" in json.loads((bundle / "manifest.json").read_text())["captured"]

    again = hangwatch("reproduce", str(bundle), "--policy", "recorded", "--step-timeout", "3",
                      "--out", str(tmp_path / "recorded"))
    assert again.returncode == EXIT_REPRODUCED, again.stdout + again.stderr
    assert "run 1: WEDGED: no engine step" in again.stdout and "reproduced (exit 80)" in again.stdout
    summary = json.loads((tmp_path / "recorded" / "reproduce.json").read_text())
    (run,) = summary["runs"]
    assert run["outcome"] == "wedged" and summary["outcome"] == "reproduced"
    new = Path(run["bundle"])
    assert new.parent == tmp_path / "recorded" / "incidents"
    manifest = json.loads((new / "manifest.json").read_text())
    assert (manifest["classification"] or {}).get("signature_id") == "vllm-cuda-graph-replay", manifest["failed"]
    assert json.loads((new / "batch.json").read_text())["request"]["prompts"] == kept["request"]["prompts"]

    fixed = hangwatch("reproduce", str(bundle), "--policy", "graphs-off", "--times", "2", "--step-timeout", "3",
                      "--out", str(tmp_path / "graphs-off"), "--json")
    assert fixed.returncode == EXIT_NOT_REPRODUCED, fixed.stdout + fixed.stderr
    summary = json.loads(fixed.stdout)
    assert summary["outcome"] == "did not reproduce"
    assert [r["outcome"] for r in summary["runs"]] == ["completed", "completed"]
    assert all(r["applied"]["cudagraph_mode"] == "NONE" and r["step_times_s"] for r in summary["runs"])
    assert summary["engine_kwargs"]["compilation_config"] == {"cudagraph_mode": "NONE"}
