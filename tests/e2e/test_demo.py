"""The README's first command: the demo runs the whole loop and checks its own journal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from run_checks import check_journal

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("recovery", ["auto", "job"])
def test_demo_wedge_caught_killed_resumed_with_evidence(tmp_path, recovery):
    """auto (the default): only the engine worker is restarted, the trainer lives on;
    job: the tree is killed and resumed from checkpoint-15 with graphs off."""
    run_dir = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py"), "--quiet", "--run-dir", str(run_dir),
         "--recovery", recovery],
        capture_output=True, text=True, timeout=220,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "classified as: vllm-cuda-graph-replay" in result.stdout

    journal = check_journal(run_dir)
    attempts = [r for r in journal if r["event"] == "attempt_started"]
    incident = next(r for r in journal if r["event"] == "incident")
    assert incident["evidence"]["rule"] == "engine_step" and incident["evidence"].get("engine_wedge") is True, \
        "caught by the wedge's signature (a pinned GPU, idle holders), before the engine step timeout"
    if recovery == "auto":
        assert len(attempts) == 1, "the trainer process lived on: no second attempt, no checkpoint reloaded"
        restart = next(r for r in journal if r["event"] == "engine_restart")
        assert restart["ok"] and restart["cudagraphs"] == "off"
        assert attempts[0]["pid"] not in restart["pids"], "only the engine worker was killed"
        events = [r["event"] for r in journal]
        assert events.index("capture") < events.index("engine_restart"), "evidence before the kill"
        assert any(r["event"] == "engine_recovered" for r in journal)
        assert [r["kind"] for r in journal if r["event"] == "incident"] == ["stall"], "the wedge did not recur"
        status = subprocess.run([sys.executable, "-m", "hangwatch.cli", "status", str(run_dir)],
                                capture_output=True, text=True, timeout=30).stdout
        assert "only the rollout engine was restarted (graphs off), the trainer lived on" in status
    else:
        assert len(attempts) == 2 and attempts[1]["resume_from"].endswith("checkpoint-15")
        assert not any(r["event"] == "engine_restart" for r in journal), "--recovery job never restarts the engine alone"
        assert [r["level"] for r in journal if r["event"] == "recovery"] == [2]
    bundle = Path(next(r["evidence_path"] for r in journal if r["event"] == "attempt_ended" and r["evidence_path"]))
    manifest = json.loads((bundle / "manifest.json").read_text())
    classification = manifest["classification"]
    assert classification["signature_id"] == "vllm-cuda-graph-replay"
    assert classification["frozen"] is True
    assert any("cuda_graph" in frame for frame in classification["evidence"])
    assert (bundle / "report.html").stat().st_size > 1000
    final = max(run_dir.joinpath("checkpoints").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert json.loads((final / "trainer_state.json").read_text())["global_step"] == 30
