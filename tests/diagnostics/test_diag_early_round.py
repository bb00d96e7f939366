"""The early py-spy round: taken while the hang builds, it is round 1 of the bundle,
and the capture at the verdict takes only the final round, with no wait."""

from __future__ import annotations

import json
import time

import pytest

from diag_helpers import make_request
from hangwatch.diagnostics.capture import CaptureConfig, EarlyRound, IncidentCapture, capture_incident


@pytest.mark.timeout(90)
def test_an_early_round_makes_the_capture_take_one_final_round_without_waiting(hung_tree, tmp_path):
    tree = hung_tree(1)
    # A round interval far longer than the test would take: any wait would show.
    config = CaptureConfig(rounds=2, round_interval=30.0, pyspy_timeout=10.0)
    hook = IncidentCapture(config)
    early = hook.early_round(tree.tree, time.monotonic() + 20.0)
    assert isinstance(early, EarlyRound) and early.processes == 2
    assert all(r.round == 1 and r.dump is not None for r in early.results)

    path = capture_incident(make_request(tmp_path / "run", tree, deadline_s=60.0, extra={"early_round": early}),
                            config=config)

    m = json.loads((path / "manifest.json").read_text())
    rounds = m["stacks"]["rounds"]
    assert [(r["round"], r.get("early", False)) for r in rounds] == [(1, True), (2, False)]
    assert all(r["taken_at"].endswith("Z") for r in rounds) and rounds[0]["taken_at"] <= rounds[1]["taken_at"]
    assert rounds[0]["started_s"] <= 0.0  # before the capture began
    assert rounds[1]["started_s"] < config.round_interval, "the final round did not wait for the interval"
    assert m["stacks"]["skipped"] == []
    for pid in tree.pids:
        assert (path / f"stacks/round-1/pid-{pid}.json").is_file() and (path / f"stacks/round-2/pid-{pid}.json").is_file()
    c = m["classification"]
    assert c["signature_id"] == "vllm-cuda-graph-replay" and c["frozen"] is True and c["rounds"] == 2


@pytest.mark.timeout(60)
def test_without_an_early_round_the_capture_takes_both_rounds_itself(hung_tree, tmp_path):
    tree = hung_tree(0)
    path = capture_incident(make_request(tmp_path / "run", tree, extra={"early_round": "not a round"}),
                            config=CaptureConfig(rounds=2, round_interval=0.2, pyspy_timeout=5.0))
    rounds = json.loads((path / "manifest.json").read_text())["stacks"]["rounds"]
    assert [(r["round"], r.get("early", False)) for r in rounds] == [(1, False), (2, False)]
    assert all("taken_at" in r for r in rounds)
