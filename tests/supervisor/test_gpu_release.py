"""When killed processes' GPU memory counts as released (``gpu_release.gpu_released``), and the
engine-level recovery waiting on it with fakes: where the probe lists no processes (NVML in a
container), an engine restart must not wait out the whole --gpu-release-timeout because the
trainer, alive on purpose, still holds its own memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from hangwatch.contract.journal import Journal, read_journal
from hangwatch.contract.samples import DeviceSample
from hangwatch.contract.verdict import Verdict, VerdictKind
from hangwatch.supervisor.attempt import GraphPolicy, RecoveryLevel
from hangwatch.supervisor.engine_level import EngineLevel
from hangwatch.supervisor.gpu_release import gpu_released
from hangwatch.supervisor.killer import KillReport

pytestmark = pytest.mark.timeout(30)

GIB = 1024.0


def _dev(index: int, mib: float, pids: tuple[int, ...] | None = None) -> DeviceSample:
    return DeviceSample(index, 100.0, mib, pids)


def test_listed_processes_answer_exactly():
    assert not gpu_released([_dev(0, 70 * GIB, (10, 20))], {20}, GIB)
    assert gpu_released([_dev(0, 30 * GIB, (10,))], {20}, GIB), "the trainer (10) may keep its memory"


def test_whole_tree_on_unlisted_devices_needs_them_all_but_empty():
    assert not gpu_released([_dev(0, 30 * GIB), _dev(1, 0.3 * GIB)], {20}, GIB)
    assert gpu_released([_dev(0, 0.5 * GIB), _dev(1, 0.3 * GIB)], {20}, GIB)


def test_engine_only_on_unlisted_devices_is_judged_by_the_drop_since_the_kill():
    before = [_dev(0, 70 * GIB), _dev(1, 30 * GIB)]  # the engine on 0 beside the trainer; 1 is the trainer's
    held = [_dev(0, 70 * GIB), _dev(1, 30 * GIB)]
    freed = [_dev(0, 30 * GIB), _dev(1, 30 * GIB)]
    assert not gpu_released(held, {20}, GIB, before=before, engine_only=True)
    assert gpu_released(freed, {20}, GIB, before=before, engine_only=True)
    # The whole-tree test would have waited for an empty device: the trainer's 30 GiB never go.
    assert not gpu_released(freed, {20}, GIB, before=before)


def test_engine_only_with_no_reading_at_the_kill_trusts_the_confirmed_kill():
    assert gpu_released([_dev(0, 30 * GIB)], {20}, GIB, before=None, engine_only=True)


class _Tree:
    def __init__(self) -> None:
        self.kills: list[tuple[frozenset[int], float]] = []

    def kill_groups(self, pgids, grace, kill_timeout):
        self.kills.append((pgids, grace))
        return KillReport(targets=({"pid": 20, "create_time": 1.0, "pgid": 20, "name": "worker"},),
                          signals=({"target": "pgid 20", "signal": "SIGKILL", "t": 0.0},), escalated=(),
                          survivors=(), duration_s=0.01, grace_rule="none", grace_s=0.0)


def test_the_engine_restart_reads_the_gpu_before_the_kill_and_kills_without_grace(tmp_path: Path):
    journal = Journal(tmp_path / "journal.jsonl", "run")
    readings = iter([[_dev(0, 70 * GIB)]])
    waited: list[tuple[KillReport, object]] = []
    tree = _Tree()
    level = EngineLevel(tree, lambda: journal, lambda: 100.0, kill_timeout=5.0, read_gpu=lambda: next(readings),
                        wait_gpu_release=lambda report, before: waited.append((report, before)))
    verdict = Verdict(VerdictKind.STALL, detected_at=100.0, onset=96.0, reason="engine made no step",
                      evidence={"step": 17})
    control = tmp_path / "control.json"
    ok = level.restart(1, GraphPolicy(cudagraphs_off=True), RecoveryLevel(1, "engine only", frozenset({20})),
                       verdict, control, None)
    assert ok and tree.kills == [(frozenset({20}), 0.0)]
    assert waited and waited[0][1] == [_dev(0, 70 * GIB)], "the reading from before the kill is the baseline"
    events = [r["event"] for r in read_journal(tmp_path / "journal.jsonl")]
    assert events == ["kill", "engine_restart"] and level.restarts == 1 and level.last_restart == 100.0
