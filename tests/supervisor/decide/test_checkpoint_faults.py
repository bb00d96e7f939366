"""Case 10: the newest checkpoints are corrupt or half-written."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(90)


@pytest.mark.slow
def test_corrupt_and_half_written_checkpoints_are_skipped_and_untouched(hw, faults):
    faults.make_checkpoints(hw.ckpt)  # 3 complete, 6 corrupt JSON marker, 9 no marker
    (hw.ckpt / "checkpoint-12").mkdir()
    (hw.ckpt / "checkpoint-12" / "trainer_state.json").write_bytes(b"")  # 0-byte marker (disk full at save)
    before = faults.snapshot(hw.ckpt)
    trainer = hw.trainer("--beats", "5", "--wedge", "--wedge-unless-graphs-off")
    result = hw.run(hw.fast_args(**{"--checkpoint-dir": str(hw.ckpt)}) + ["--", *trainer])
    assert result.returncode == 0, result.stderr
    records = faults.check_journal(hw.run_dir)
    starts = [r for r in records if r["event"] == "attempt_started"]
    assert starts[1]["resume_from"] == str(hw.ckpt / "checkpoint-3")
    assert starts[1]["env"]["HANGWATCH_RESUME_FROM"] == str(hw.ckpt / "checkpoint-3")
    for name in ("checkpoint-12", "checkpoint-9", "checkpoint-6"):
        assert f"skipping {hw.ckpt / name}" in result.stderr, name
    assert "unreadable" in result.stderr and "save did not finish" in result.stderr
    ended = [r for r in records if r["event"] == "attempt_ended"]
    assert [e["start_step"] for e in ended] == [3, 3], "progress is measured on complete checkpoints only"
    assert faults.snapshot(hw.ckpt) == before, "hangwatch never deletes or rewrites a checkpoint"
    assert records[-1]["outcome"] == "success"
