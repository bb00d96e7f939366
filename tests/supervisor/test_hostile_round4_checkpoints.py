"""Round 4 of hostile inputs: checkpoint folders that cannot be walked."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from hangwatch.supervisor.decide.checkpoints import CheckpointSpec, CheckpointsUnreadable, newest_complete

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
