"""The README's first command: the demo runs the whole loop and checks its own journal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from run_checks import check_journal

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_demo_wedge_caught_killed_resumed_with_evidence(tmp_path):
    run_dir = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py"), "--quiet", "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=220,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "classified as: vllm-cuda-graph-replay" in result.stdout

    journal = check_journal(run_dir)
    bundle = Path(next(r["evidence_path"] for r in journal if r["event"] == "attempt_ended" and r["evidence_path"]))
    manifest = json.loads((bundle / "manifest.json").read_text())
    classification = manifest["classification"]
    assert classification["signature_id"] == "vllm-cuda-graph-replay"
    assert classification["frozen"] is True
    assert any("cuda_graph" in frame for frame in classification["evidence"])
    assert (bundle / "report.html").stat().st_size > 1000
    final = max(run_dir.joinpath("checkpoints").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert json.loads((final / "trainer_state.json").read_text())["global_step"] == 30
