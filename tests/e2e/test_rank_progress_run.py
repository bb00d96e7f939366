"""The per-rank progress rule with real processes: two ranks (``RANK=0/1``) beat, one hangs while
the other keeps beating. The incident comes within the progress timeout plus one interval of the
hang and names the stuck rank. (The rule itself, on a fake clock: tests/supervisor/decide/test_rank_progress.py.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from run_checks import check_journal

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

RANK_TRAINER = Path(__file__).resolve().parents[1] / "fixtures" / "rank_trainer.py"
TIMEOUT_S, INTERVAL_S = 3.0, 0.2
# A tick runs late by a little on a loaded machine (a tree scan); the journal's fsync takes more.
JITTER_S, SLACK_S = 0.1, 0.5


def test_one_stuck_rank_is_caught_while_the_other_keeps_beating(hw):
    hang_file = hw.tmp / "hang.txt"
    args = hw.fast_args(**{"--gpu-probe": "none", "--interval": str(INTERVAL_S),
                           "--progress-timeout": str(TIMEOUT_S), "--max-restarts": "0"})
    args += ["--", sys.executable, str(RANK_TRAINER), "--every", "0.2", "--beats", "400", "--hang-rank", "1",
             "--hang-after", "10", "--hang-file", str(hang_file), "--pidfile", str(hw.pidfile)]
    result = hw.run(args, timeout=90)
    assert result.returncode != 0, result.stderr
    journal = check_journal(hw.run_dir)
    incidents = [r for r in journal if r["event"] == "incident"]
    assert len(incidents) == 1, incidents
    incident = incidents[0]
    assert incident["kind"] == "silent_hang"
    assert "rank 1 (pid" in incident["reason"], incident["reason"]
    hung_at = float(hang_file.read_text())
    # Rank 0 was still beating: only the per-rank rule could see it. The verdict's wall time: the tick
    # that read rank 1's last beat (within an interval of it), plus the timeout.
    detected = incident["onset_wall"] + incident["latency_s"]
    assert 0 <= incident["onset_wall"] - hung_at <= INTERVAL_S + JITTER_S, (incident["onset_wall"] - hung_at)
    assert TIMEOUT_S - 0.05 * INTERVAL_S <= detected - hung_at <= TIMEOUT_S + INTERVAL_S + JITTER_S, \
        (detected - hung_at, incident)
    assert incident["ts"] - hung_at <= TIMEOUT_S + INTERVAL_S + SLACK_S, "journaled at once"
    assert incident["evidence"]["others_last_progress_s"] < 1.0, "rank 0 was beating all along"
    beats = sorted(hw.run_dir.glob("attempts/attempt-*/heartbeat-*.json"))
    assert len(beats) == 2, beats  # each rank its own file, private
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in beats)
    assert incident["evidence"]["stuck_rank"] == 1 and incident["evidence"]["rule"] == "rank_progress"
