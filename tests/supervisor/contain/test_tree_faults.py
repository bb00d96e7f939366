"""Faults in the process tree: a zombie, a stopped (state T) process, an unkillable (D) one."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import psutil
import pytest

from hangwatch.supervisor.contain.killer import TreeKiller
from hangwatch.contract.exitcodes import EXIT_CRASH_STOP, EXIT_UNKILLABLE

from fakes import FakeProcessTree

pytestmark = pytest.mark.timeout(90)


def _resumable(hw, faults, *extra):
    faults.make_checkpoints(hw.ckpt)
    trainer = hw.trainer("--beats", "5", "--wedge", "--wedge-unless-graphs-off", *extra)
    args = hw.fast_args(**{"--checkpoint-dir": str(hw.ckpt)}) + ["--", *trainer]
    return args


@pytest.mark.slow
def test_zombie_in_the_tree_is_ignored_and_the_run_recovers(hw, faults):
    """Case 5: the trainer has a child that exited and was never waited for."""
    args = _resumable(hw, faults, "--zombie")
    before = faults.snapshot(hw.ckpt)
    result = hw.run(args)
    assert result.returncode == 0, result.stderr
    records = faults.check_journal(hw.run_dir)
    assert [r["kind"] for r in records if r["event"] == "incident"] == ["stall"]
    zombie = hw.reported_pids()["zombie"][0]
    kill = next(r for r in records if r["event"] == "kill")
    assert kill["confirmed"] is True and not kill["survivors"]
    assert zombie not in kill["escalated"], "a zombie is dead: it needs no SIGKILL"
    assert records[-1]["outcome"] == "success"
    assert faults.snapshot(hw.ckpt) == before
    try:  # reparented to the subreaper and reaped, or to init after the supervisor exited
        assert psutil.Process(zombie).status() != psutil.STATUS_ZOMBIE or psutil.Process(zombie).ppid() == 1
    except psutil.NoSuchProcess:
        pass


@pytest.mark.slow
def test_stopped_process_is_continued_by_capture_then_stopped_gracefully(hw, faults):
    """Case 6 (simulated, stall path): a process in state T (SIGSTOP, a handled SIGTERM
    pending) is SIGCONTed by the capture (hangwatch.diagnostics.proctable.resume), so the SIGTERM
    that follows ends it gracefully; the bundle names it."""
    args = _resumable(hw, faults, "--stopped")
    before = faults.snapshot(hw.ckpt)
    result = hw.run(args)
    assert result.returncode == 0, result.stderr
    records = faults.check_journal(hw.run_dir)
    stopped = hw.reported_pids()["stopped"][0]
    kill = next(r for r in records if r["event"] == "kill")
    assert stopped in kill["pids"] and stopped not in kill["escalated"]
    assert kill["confirmed"] is True
    bundle = next(r["evidence_path"] for r in records if r["event"] == "attempt_ended" and r["evidence_path"])
    manifest = json.loads((Path(bundle) / "manifest.json").read_text())
    assert stopped in (_find(manifest, "resumed_stopped_pids") or []), "the bundle records the SIGCONT"
    assert records[-1]["outcome"] == "success"
    assert faults.snapshot(hw.ckpt) == before


@pytest.mark.slow
def test_stopped_process_left_by_a_crash_is_sigkilled(hw, faults):
    """Case 6 (simulated, crash path: no capture, so nobody continues it): the handled
    SIGTERM stays pending in state T; SIGKILL after the grace ends it."""
    faults.make_checkpoints(hw.ckpt)
    before = faults.snapshot(hw.ckpt)
    result = hw.run(hw.fast_args(**{"--checkpoint-dir": str(hw.ckpt), "--on-crash": "stop"})
                    + ["--", *hw.trainer("--beats", "2", "--stopped", "--exit", "3")])
    assert result.returncode == EXIT_CRASH_STOP, result.stderr
    records = faults.check_journal(hw.run_dir)
    stopped = hw.reported_pids()["stopped"][0]
    kill = next(r for r in records if r["event"] == "kill")
    assert kill["reason"] == "crash"
    assert kill["escalated"] == [stopped], "state T keeps SIGTERM pending; SIGKILL is needed"
    assert kill["confirmed"] is True
    assert records[-1]["outcome"] == "gave_up" and records[-1]["exit_code"] == EXIT_CRASH_STOP
    assert faults.snapshot(hw.ckpt) == before


def _find(obj, key):
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for v in obj.values():
            found = _find(v, key)
            if found is not None:
                return found
    return None


class _Never:
    """A process in uninterruptible sleep: takes signals, never dies."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.got: list[int] = []

    def create_time(self) -> float:
        return 123.0

    def name(self) -> str:
        return "dstate"

    def status(self) -> str:
        return "disk-sleep"

    def send_signal(self, sig: int) -> None:
        self.got.append(sig)


def test_killer_gives_up_on_a_d_state_process_within_kill_timeout():
    """Case 6 (unit): the wait after SIGKILL is bounded by kill_timeout; the survivor is reported."""
    now = [0.0]
    sleeps = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        now[0] += s

    proc = _Never(4_194_001)
    killer = TreeKiller(FakeProcessTree([proc]), reap=lambda: None, clock=lambda: now[0], sleep=sleep, poll_s=0.05)
    report = killer.kill(grace=2.0, kill_timeout=3.0)
    assert proc.got == [signal.SIGTERM, signal.SIGKILL]
    assert report.escalated == (4_194_001,)
    assert not report.confirmed
    assert [s["pid"] for s in report.survivors] == [4_194_001]
    assert report.survivors[0]["state"] == "disk-sleep"
    assert 5.0 <= report.duration_s <= 5.0 + 0.05 + 1e-9, "grace + kill_timeout, one poll of slack at most"
    assert len(sleeps) < 200


@pytest.mark.slow
def test_unkillable_process_makes_the_supervisor_exit_74(hw_faulty, faults):
    """Case 6 (end to end): a survivor of SIGKILL ends the run with EXIT_UNKILLABLE, no restart."""
    hw = hw_faulty
    faults.make_checkpoints(hw.ckpt)
    before = faults.snapshot(hw.ckpt)
    args = hw.fast_args(**{"--checkpoint-dir": str(hw.ckpt), "--kill-timeout": "1"}) + [
        "--", *hw.trainer("--beats", "3", "--wedge", "--escape")]
    proc = hw.start_faulty("immortal", args)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_UNKILLABLE, err
    records = faults.check_journal(hw.run_dir)
    kill = next(r for r in records if r["event"] == "kill")
    assert [s["pid"] for s in kill["survivors"]] == [4_194_000]
    assert kill["survivors"][0]["state"] == "disk-sleep"
    assert kill["duration_s"] < 0.5 + 1 + 1.5, "grace + kill-timeout, bounded"
    assert [r["attempt"] for r in records if r["event"] == "attempt_started"] == [1], "no restart into a held GPU"
    finished = records[-1]
    assert finished["outcome"] == "gave_up" and finished["exit_code"] == EXIT_UNKILLABLE
    assert "survived SIGKILL" in finished["reason"]
    assert faults.snapshot(hw.ckpt) == before


@pytest.mark.slow
def test_journal_disk_full_stops_cleanly_with_the_tree_killed(hw_faulty, faults):
    """The journal cannot be appended (full disk): no supervision without a record, but
    nothing left running, no traceback for it, the documented internal-failure exit."""
    hw = hw_faulty
    args = hw.fast_args(**{"--stall-window": "60"}) + [
        "--", *hw.trainer("--beats", "1000", "--step-time", "0.05", "--escape")]
    proc = hw.start_faulty("journal", args)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 70, err
    assert "No space left on device" in err and "killing the tree and stopping" in err
    assert "Traceback" not in err
    assert not hw.alive()
