"""Choosing the checkpoint to resume from: the newest complete one, judged newest down; custom globs
and markers; and checkpoint folders that cannot be walked or that the trainer's user named to mislead."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from hangwatch.supervisor.decide.checkpoints import CheckpointSpec, CheckpointsUnreadable, newest_complete
from hangwatch.supervisor.decide.checkpoints import complete_at, complete_steps
from hangwatch.contract.journal import Journal, read_journal

pytestmark = pytest.mark.timeout(60)


def _checkpoint(path: Path, step: int) -> None:
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text(f'{{"global_step": {step}}}')


def test_a_checkpoint_deleted_while_a_nested_glob_walks_it_is_skipped(tmp_path, monkeypatch):
    """The trainer's rotation (save_total_limit) deletes old checkpoints as it saves. With a
    nested --checkpoint-glob, Path.glob lists each folder it descends into and raised the
    FileNotFoundError of one deleted between the listing and the descent out of the walk:
    an internal error (exit 70) between two attempts, and the run was never relaunched."""
    root = tmp_path / "ckpt"
    _checkpoint(root / "run-a" / "checkpoint-10", 10)
    _checkpoint(root / "run-b" / "checkpoint-20", 20)
    doomed = str(root / "run-a")
    real_scandir = os.scandir

    def rotating_scandir(path=".", *args, **kwargs):
        if not isinstance(path, int) and os.fspath(path) == doomed and os.path.isdir(doomed):
            shutil.rmtree(doomed)  # the trainer's rotation, between the listing and the descent
        return real_scandir(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", rotating_scandir)
    chosen, _ = newest_complete(CheckpointSpec(root, "run-*/checkpoint-*"))
    assert chosen is not None and chosen.step == 20


def test_a_link_to_a_folder_that_cannot_be_listed_is_a_clear_error_not_a_crash(tmp_path):
    """The trainer's user links a folder below the checkpoint directory to one that lists with
    an error other than EACCES (a zombie's /proc/PID/net: EINVAL). Path.glob raised it out of
    the supervisor (exit 70); now it is CheckpointsUnreadable, which the runner turns into its
    'cannot read the checkpoints' exit with the folder named."""
    root = tmp_path / "ckpt"
    _checkpoint(root / "run-a" / "checkpoint-10", 10)
    zombie = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with open(f"/proc/{zombie.pid}/stat") as handle:
                if handle.read().rpartition(")")[2].split()[0] == "Z":
                    break
            time.sleep(0.01)
        os.symlink(f"/proc/{zombie.pid}/net", root / "run-z")
        with pytest.raises(CheckpointsUnreadable, match="run-z"):
            newest_complete(CheckpointSpec(root, "run-*/checkpoint-*"))
    finally:
        zombie.wait()


def test_a_nested_glob_matches_what_path_glob_matched(tmp_path):
    """The walk that replaced Path.glob keeps its answers: links followed by '*', never by
    '**'; dot-names matched; '**' also matching the folder itself."""
    root = tmp_path / "ckpt"
    for sub in ("checkpoint-1", "checkpoint-2/inner", "run-a/checkpoint-3", "run-b/x/checkpoint-4", ".old/checkpoint-5"):
        (root / sub).mkdir(parents=True)
    (root / "checkpoint-file").write_text("")
    os.symlink(root / "run-a", root / "run-link")
    os.symlink(".", root / "run-a" / "loop")
    from hangwatch.supervisor.decide.checkpoints import _glob

    for pattern in ("checkpoint-*", "*/checkpoint-*", "**/checkpoint-*", "run-?/**/checkpoint-*", "**", "checkpoint-2/inner"):
        assert sorted(map(str, _glob(root, pattern))) == sorted(map(str, root.glob(pattern))), pattern


@pytest.mark.timeout(30)
def test_newest_complete_checkpoint_skips_incomplete_and_corrupt(tmp_path):
    for step, state in [(10, '{"global_step": 10}'), (20, '{"global_step": 20}'), (30, None), (40, "{not json")]:
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        if state is not None:
            (d / "trainer_state.json").write_text(state)
    chosen, skipped = newest_complete(CheckpointSpec(tmp_path))
    assert chosen.path.name == "checkpoint-20" and chosen.step == 20
    assert [c.path.name for c in skipped] == ["checkpoint-40", "checkpoint-30"]
    assert "unreadable" in skipped[0].problem and "did not finish" in skipped[1].problem
    assert all((tmp_path / f"checkpoint-{s}").is_dir() for s in (10, 20, 30, 40)), "nothing deleted"


@pytest.mark.timeout(30)
def test_a_cohorts_checkpoint_steps_are_judged_newest_down_only_as_far_as_needed(tmp_path, monkeypatch):
    """What a node tells its cohort (its newest complete steps) and the folder of the step the
    cohort agreed on: every marker was parsed for both (5 s for 200 checkpoints of 1.6 MB,
    between the kill and the relaunch)."""
    for step in range(10, 110, 10):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        if step != 90:
            (d / "trainer_state.json").write_text(f'{{"global_step": {step}}}')
    from hangwatch.supervisor.decide import checkpoints

    judged = []
    real = checkpoints._incomplete
    monkeypatch.setattr(checkpoints, "_incomplete", lambda path, marker: judged.append(path.name) or real(path, marker))
    spec = CheckpointSpec(tmp_path)
    assert complete_steps(spec, 3) == [100, 80, 70] and len(judged) == 4
    judged.clear()
    agreed = complete_at(spec, 30)
    assert agreed is not None and agreed.path.name == "checkpoint-30" and judged == ["checkpoint-30"]
    assert complete_at(spec, 90) is None and complete_at(spec, None) is None
    assert all((tmp_path / f"checkpoint-{s}").is_dir() for s in range(10, 110, 10)), "nothing deleted"


@pytest.mark.timeout(30)
def test_checkpoint_custom_glob_and_marker(tmp_path):
    (tmp_path / "step_00100").mkdir()
    (tmp_path / "step_00100" / "COMPLETE").write_text("")
    (tmp_path / "step_00200").mkdir()
    chosen, _ = newest_complete(CheckpointSpec(tmp_path, glob="step_*", marker="COMPLETE"))
    assert chosen.step == 100
    assert newest_complete(CheckpointSpec(tmp_path / "missing"))[0] is None


def test_a_checkpoint_name_with_a_huge_number_never_erases_the_journals_records(tmp_path: Path) -> None:
    """The trainer's user names the checkpoint folders: ``checkpoint-99999999999999999999``
    became every attempt's ``start_step``/``end_step``, a number no step counter reaches, which
    the journal's readers skip as a forged record: ``hangwatch status`` showed each attempt
    "left open" with no exit code (reproduced with a real run and a crashing trainer). A
    number past any step counter is no step: the folder is an unnumbered checkpoint."""
    from hangwatch.contract.journal import Journal, fold_journal, read_journal
    from hangwatch.supervisor.decide.checkpoints import CheckpointSpec, newest_complete

    ckpt = tmp_path / "ckpt" / "checkpoint-99999999999999999999"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text("{}")
    chosen, _ = newest_complete(CheckpointSpec(tmp_path / "ckpt"))
    assert chosen is not None and chosen.path == ckpt
    journal = Journal(tmp_path / "run" / "journal.jsonl", "r1")
    journal.append("attempt_started", attempt=1, pid=4242, env={}, resume_from=str(chosen.path))
    journal.append("attempt_ended", attempt=1, kind="crash", exit_code=3, start_step=chosen.step, end_step=chosen.step)
    run = fold_journal(read_journal(tmp_path / "run" / "journal.jsonl"))
    assert run.attempts[0].outcome == "crash" and run.attempts[0].exit_code == 3


def test_choosing_the_checkpoint_parses_only_the_markers_it_must(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every complete checkpoint's ``trainer_state.json`` (the whole log history: MiBs) was
    parsed to pick the newest one, at each attempt's end and the next one's start: 200
    checkpoints of 2.9 MB took 18.7 s each time, between the kill and the relaunch (0.08 s
    now). The newest complete one is found judging from the newest down."""
    from hangwatch.supervisor.decide import checkpoints

    for step in range(10, 210, 10):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "trainer_state.json").write_text('{"log_history": []}')
    (tmp_path / "checkpoint-210").mkdir()  # the save the kill interrupted: no marker
    reads: list[Path] = []
    real = checkpoints.read_capped
    monkeypatch.setattr(checkpoints, "read_capped", lambda path, cap: reads.append(path) or real(path, cap))
    chosen, skipped = checkpoints.newest_complete(checkpoints.CheckpointSpec(tmp_path))
    assert chosen is not None and chosen.step == 200 and [c.step for c in skipped] == [210]
    assert reads == [tmp_path / "checkpoint-200" / "trainer_state.json"]
