"""Hostile inputs the supervisor reads while it runs (held-out round 3).

Each test is the attack or the malformed input, reproduced first with a real run, and
fails on the code before its fix.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hangwatch.contract.heartbeat import read_heartbeat
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.supervisor.decide.detector import Detector, DetectorConfig

pytestmark = pytest.mark.timeout(60)


def _write_beat(path: Path, seq: int, **fields: object) -> None:
    record = {"pid": 4242, "seq": seq, "ts": 1000.0 + seq, "step": seq, "phase": "train", "info": {}}
    record.update(fields)
    path.write_text(json.dumps(record))


@pytest.mark.parametrize("phase", [["train"], {"a": 1}, 5, 2.5, True])
def test_a_phase_that_is_not_a_string_never_stops_the_tick(tmp_path: Path, phase: object) -> None:
    """A beat whose phase is a list killed the supervisor at the detector's phase-timeout
    lookup (``unhashable type: 'list'``, exit 70, the trainer left unwatched). The phase is
    kept as text and the tick goes on."""
    path = tmp_path / "heartbeat.json"
    detector = Detector(DetectorConfig(interval=1.0, stall_window=5.0, progress_timeout=10.0), 0.0)
    for seq in (1, 2, 3):
        _write_beat(path, seq, phase=phase)
        hb = read_heartbeat(path)
        assert hb is not None and isinstance(hb.phase, str)
        sample = Sample(t=float(seq), wall=float(seq), cpu_pct={4242: 50.0},
                        gpu=(DeviceSample(0, 10.0, 100.0, (4242,)),), heartbeat=hb)
        assert detector.observe(sample) is None


@pytest.mark.parametrize("ts", ["NaN", "Infinity", "-Infinity"])
def test_a_beat_without_a_finite_time_is_no_beat(tmp_path: Path, ts: str) -> None:
    path = tmp_path / "heartbeat.json"
    path.write_text('{"pid": 1, "seq": 1, "ts": %s, "step": 1, "phase": "train"}' % ts)
    assert read_heartbeat(path) is None


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


def _own_cgroup_writable() -> bool:
    from hangwatch.supervisor.contain import cgroup

    if os.geteuid() != 0:
        return False
    try:
        containment, _ = cgroup.detect("auto", "probe")
    except Exception:
        return False
    if containment is None:
        return False
    containment.close()
    return True


@pytest.mark.skipif(not _own_cgroup_writable(), reason="needs root and a writable cgroup v2 hierarchy")
def test_no_containment_claimed_below_a_cgroup_another_user_controls() -> None:
    """Root's supervisor started from a cgroup delegated to another user (their
    ``user@UID.service``: a terminal or tmux of theirs): the attempt's cgroup was made below
    theirs, and they moved root's trainer out of it into a cgroup of their own, then froze and
    killed it through that cgroup's files (reproduced as a second user; the attempt's kill no
    longer reached it). Such a cgroup is refused: ``auto`` falls back to the tree walk and says
    why, ``cgroup`` is an error."""
    from hangwatch.supervisor.contain import cgroup

    delegated = cgroup.base_dir() / f"hw-round3-{os.getpid()}"
    delegated.mkdir()
    try:
        for path in (delegated, delegated / "cgroup.procs", delegated / "cgroup.subtree_control"):
            os.chown(path, 65534, 65534)  # what systemd's delegation does for a user's subtree
        containment, why = cgroup.detect("auto", "round3", base=delegated)
        if containment is not None:
            containment.close()
        assert containment is None and "uid 65534" in (why or "")
        with pytest.raises(cgroup.CgroupError, match="controlled by uid 65534"):
            cgroup.detect("cgroup", "round3", base=delegated)
        from hangwatch.cli.commands.doctor import check_cgroup

        assert check_cgroup(delegated).status == "warn"  # doctor judges it as run does
    finally:
        for child in sorted(delegated.glob("hangwatch-*/*"), reverse=True) + sorted(delegated.glob("hangwatch-*")):
            child.rmdir()
        delegated.rmdir()


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


def _opens_for_reading(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths handed to ``os.open`` for anything but ``O_PATH`` (a real open: a driver's open runs)."""
    opened: list[str] = []
    real = os.open

    def spy(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not flags & getattr(os, "O_PATH", 0):
            opened.append(os.fspath(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    return opened


def test_status_never_opens_what_another_users_run_dir_links_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root's `hangwatch status` (and each poll of `--follow`) on another user's run dir opened
    whatever their ``supervisor.lock`` or ``journal.jsonl`` link named: reproduced with a FIFO
    whose writer their open unblocked; their terminal or ``/dev/watchdog`` open the same way.
    Only a regular file is ever opened; a linked lock file is no lock."""
    from hangwatch.cli.rundir import held_by_live_supervisor
    from hangwatch.cli.run_summary import JournalTail

    fifo = tmp_path / "theirs.fifo"
    os.mkfifo(fifo)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "supervisor.lock").symlink_to(fifo)
    (run_dir / "journal.jsonl").symlink_to(fifo)
    opened = _opens_for_reading(monkeypatch)
    assert held_by_live_supervisor(run_dir) is None
    assert JournalTail(run_dir / "journal.jsonl").read() == []
    assert [p for p in opened if p.startswith(str(tmp_path))] == []


@pytest.mark.parametrize("field", ["step", "seq", "pid"])
def test_a_beat_with_a_number_past_64_bits_is_no_beat(tmp_path: Path, field: str) -> None:
    """A step of 400 digits (an int no float holds) made the metrics exporter fail at every tick
    (``OverflowError``): the textfile was no longer rewritten while the beat stood."""
    path = tmp_path / "heartbeat.json"
    record = {"pid": 4242, "seq": 1, "ts": 1000.0, "step": 1, "phase": "train"}
    path.write_text(json.dumps(record).replace(f'"{field}": {record[field]}', f'"{field}": {"9" * 400}'))
    assert read_heartbeat(path) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")
def test_the_simulated_gpu_writer_never_follows_another_users_links(tmp_path: Path) -> None:
    """``--gpu-probe file:/tmp/gpu.json`` (the documented example) puts the simulated GPU in a
    shared directory. Another user's ``gpu.json.lock`` link made a root trainer create the file
    it named, and their ``gpu.json.<pid>.tmp`` links made it overwrite a root-only file with the
    GPU's JSON (reproduced as a second user). Nothing is followed, nothing of theirs is written."""
    from hangwatch.contract import simgpu

    shared = tmp_path / "tmp"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    victim = tmp_path / "root-only"
    victim.write_text("root's own data\n")
    victim.chmod(0o600)
    target = shared / "gpu.json"
    links = [shared / "gpu.json.lock", shared / f"gpu.json.{os.getpid()}.tmp"]
    for link in links:
        link.symlink_to(tmp_path / "created-by-root" if link.name.endswith(".lock") else victim)
        os.lchown(link, 65534, 65534)  # planted by another user
    simgpu.hold(100.0, 1000.0, path=str(target))
    assert victim.read_text() == "root's own data\n"
    assert not (tmp_path / "created-by-root").exists()
    # Without anyone's links, the simulated GPU works as before.
    for link in links:
        link.unlink()
    assert simgpu.hold(100.0, 1000.0, path=str(target))
    assert json.loads(target.read_text())["devices"][0]["pids"] == [os.getpid()]
