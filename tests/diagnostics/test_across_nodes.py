"""Naming the culprit of a multi-node job from every node's process rows (``across_nodes``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hangwatch.contract.capture import TreeProcess
from hangwatch.diagnostics.across_nodes import culprit_across
from hangwatch.diagnostics.capture import launcher_ranks

pytestmark = pytest.mark.timeout(30)

ALL_REDUCE = "all_reduce (torch/distributed/distributed_c10d.py:2501)"


def _waiting(pid, rank):
    return {"pid": pid, "rank": rank, "state": "stalled", "signature_id": "nccl-collective-wait", "collective": True,
            "evidence": [ALL_REDUCE], "top_frames": ["train_step (train.py:40)"]}


def test_a_rank_blocked_outside_the_collective_on_one_node_is_named_from_every_nodes_rows():
    rows = {0: [_waiting(10, 0), _waiting(11, 1)],
            1: [_waiting(20, 2), {"pid": 21, "rank": 3, "state": "stalled", "signature_id": "file-lock-wait",
                                  "collective": False, "evidence": ["_acquire (filelock/_unix.py:40)"]}]}
    culprit = culprit_across(rows)
    assert (culprit["node"], culprit["rank"], culprit["pid"], culprit["signature_id"]) == (1, 3, 21, "file-lock-wait")
    assert "3 other process(es) wait in a collective" in culprit["reason"]


def test_one_rank_per_node_still_names_the_one_not_in_the_collective():
    """Alone, node 1's single process has no crowd to differ from; with node 0's, it has."""
    rows = {0: [_waiting(10, 0)], 1: [{"pid": 20, "rank": 1, "state": "unknown", "collective": False}]}
    culprit = culprit_across(rows)
    assert (culprit["node"], culprit["rank"]) == (1, 1)


def test_every_rank_in_the_collective_says_the_culprit_was_not_captured():
    culprit = culprit_across({0: [_waiting(10, 0)], 1: [_waiting(20, 1)]})
    assert culprit["present"] is False and "not among them" in culprit["note"]


def test_rows_that_no_node_writes_are_skipped():
    hostile = {0: [None, 3, "x", {"state": "sleeping"}, {"state": "stalled", "pid": True, "rank": "2"}],
               1: "not a list", 2: [{"state": "stalled", "evidence": [None, 5, "y" * 100_000]}]}
    assert culprit_across(hostile) is None
    assert culprit_across({}) is None


def test_the_rank_a_launcher_gave_is_read_from_the_environment_the_process_started_with():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             env={**os.environ, "RANK": "7"})
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             env={k: v for k, v in os.environ.items() if k != "RANK"})
    try:
        tree = [TreeProcess(pid, 0.0, os.getpid(), pid, pid, "python") for pid in (child.pid, plain.pid, 2 ** 22 + 1)]
        assert launcher_ranks(tree) == {child.pid: 7}
    finally:
        for p in (child, plain):
            p.kill()
            p.wait(timeout=10)
