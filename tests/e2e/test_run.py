"""End-to-end: the real CLI supervising real processes with real signals."""

from __future__ import annotations

import json
import signal
import time

import pytest
from run_checks import check_journal
from waiting import wait_for

from hangwatch.contract.exitcodes import EXIT_BUDGET, EXIT_CRASH_STOP, EXIT_USAGE

pytestmark = pytest.mark.timeout(90)


def test_wedge_is_caught_tree_killed_and_resumed_with_graphs_off(hw):
    trainer = hw.trainer(
        "--beats", "10", "--save-every", "3", "--checkpoint-dir", str(hw.ckpt),
        "--wedge", "--wedge-unless-graphs-off", "--escape",
    )
    # A half-written newer checkpoint (no trainer_state.json) must be skipped, not used.
    (hw.ckpt / "checkpoint-99").mkdir()
    result = hw.run(
        hw.fast_args() + ["--checkpoint-dir", str(hw.ckpt), "--resume-arg", "--resume_from_checkpoint={checkpoint}",
                          "--", *trainer]
    )
    assert result.returncode == 0, result.stderr
    check_journal(hw.run_dir)

    incidents = hw.events("incident")
    assert [i["kind"] for i in incidents] == ["stall"]
    # The window (2 s), less the detector's sample-jitter slack of 5 % of the 0.2 s interval.
    assert incidents[0]["latency_s"] >= 2.0 - 0.05 * 0.2

    kill = hw.events("kill")[0]
    escaped = hw.reported_pids()["escaped"][0]
    assert escaped in kill["escalated"], "the SIGTERM-ignoring escaped worker needed SIGKILL"
    assert kill["confirmed"] is True

    attempts = hw.events("attempt_started")
    assert len(attempts) == 2
    assert attempts[0]["env"]["HANGWATCH_CUDAGRAPHS"] == "1"
    assert attempts[1]["env"]["HANGWATCH_CUDAGRAPHS"] == "0"
    assert attempts[1]["resume_from"].endswith("checkpoint-9")
    assert "--resume_from_checkpoint=" + str(hw.ckpt / "checkpoint-9") in attempts[1]["argv"]
    assert "skipping" in result.stderr and "checkpoint-99" in result.stderr
    assert (hw.ckpt / "checkpoint-99").is_dir(), "an incomplete checkpoint is never deleted"

    assert hw.events("gpu_released")[0]["released"] is True
    assert hw.events("run_finished")[-1]["outcome"] == "success"
    bundle = hw.events("attempt_ended")[0]["evidence_path"]
    assert bundle and (hw.run_dir / "incidents").is_dir()
    assert not hw.alive()


def test_second_stall_with_graphs_off_escalates_to_enforce_eager_and_status_reads_the_journal(hw):
    trainer = hw.trainer("--beats", "2", "--wedge")
    result = hw.run(hw.fast_args(**{"--max-restarts": "2"}) + ["--", *trainer])
    assert result.returncode == EXIT_BUDGET
    envs = [a["env"] for a in hw.events("attempt_started")]
    assert [e.get("HANGWATCH_CUDAGRAPHS") for e in envs] == ["1", "0", "0"]
    assert [e.get("HANGWATCH_ENFORCE_EAGER") for e in envs] == [None, None, "1"]
    assert "restart budget exhausted" in hw.events("run_finished")[-1]["reason"]
    # `status` on this finished run (a run of its own, wedged the same way, only cost time).
    # --cudagraphs-after-stall keep, end to end: tests/supervisor/recover/test_recovery_levels.py.
    shown = hw.run(["status", str(hw.run_dir)])
    assert shown.returncode == 0
    assert "incident: attempt 1 stall" in shown.stdout
    assert "finished: gave_up" in shown.stdout
    as_json = json.loads(hw.run(["status", "--json", str(hw.run_dir)]).stdout)
    assert as_json["restarts"] == 2 and len(as_json["incidents"]) == 3


def test_crash_restarts_then_budget_exhausted_exit_code(hw):
    result = hw.run(hw.fast_args(**{"--max-restarts": "2"}) + ["--", *hw.trainer("--exit", "3")])
    assert result.returncode == EXIT_BUDGET
    ended = hw.events("attempt_ended")
    assert [e["kind"] for e in ended] == ["crash"] * 3
    assert [e["exit_code"] for e in ended] == [3] * 3
    finished = hw.events("run_finished")[-1]
    assert finished["exit_code"] == EXIT_BUDGET and "budget" in finished["reason"]
    assert "giving up" in result.stderr


def test_crash_loop_without_checkpoint_progress_stops(hw):
    result = hw.run(
        hw.fast_args(**{"--checkpoint-dir": str(hw.ckpt), "--no-progress-restarts": "2"})
        + ["--", *hw.trainer("--exit", "1")]
    )
    assert result.returncode == 72
    assert len(hw.events("attempt_started")) == 2


def test_on_crash_stop(hw):
    result = hw.run(hw.fast_args(**{"--on-crash": "stop"}) + ["--", *hw.trainer("--exit", "5")])
    assert result.returncode == EXIT_CRASH_STOP
    assert len(hw.events("attempt_started")) == 1


def test_done_kills_what_the_trainer_left_behind(hw):
    result = hw.run(hw.fast_args() + ["--", *hw.trainer("--beats", "2", "--escape")])
    assert result.returncode == 0
    kill = hw.events("kill")[0]
    assert hw.reported_pids()["escaped"][0] in kill["pids"]
    assert not hw.alive()


def test_silent_hang_without_gpu_probe(hw):
    args = hw.fast_args(**{"--gpu-probe": "none", "--progress-timeout": "1.5", "--max-restarts": "0"})
    result = hw.run(args + ["--", *hw.trainer("--beats", "3", "--hang")])
    assert result.returncode == EXIT_BUDGET
    assert [i["kind"] for i in hw.events("incident")] == ["silent_hang"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_supervisor_is_forwarded_and_leaves_nothing(hw, sig):
    proc = hw.start(hw.fast_args(**{"--stall-window": "60"}) + ["--", *hw.trainer("--beats", "1000", "--step-time", "0.1", "--escape", "--ignore-term")])
    wait_for(lambda: "escaped" in hw.reported_pids() and (hw.run_dir / "journal.jsonl").exists())
    time.sleep(0.5)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    # The supervisor exits with the trainer's status: SIGINT makes it exit 130
    # (KeyboardInterrupt); SIGTERM it ignores, so it is SIGKILLed after the grace: 128 + 9.
    assert proc.returncode == {signal.SIGINT: 130, signal.SIGTERM: 137}[sig], err
    finished = hw.events("run_finished")[-1]
    assert finished["outcome"] == "interrupted"
    # The trainer's death by the forwarded signal is the user's stop, not a crash.
    assert hw.events("attempt_ended")[-1]["kind"] == "stopped"
    assert not hw.alive()


def test_supervisor_sigkill_takes_the_tree_with_it(hw):
    proc = hw.start(hw.fast_args(**{"--stall-window": "60"}) + ["--", *hw.trainer("--beats", "1000", "--step-time", "0.1", "--escape")])
    wait_for(lambda: "escaped" in hw.reported_pids())
    wait_for(lambda: len(json.loads((hw.run_dir / "tree.json").read_text())["members"]) >= 2
              if (hw.run_dir / "tree.json").exists() else False)
    proc.kill()
    proc.wait(10)
    # The trainer dies by its parent-death signal, the escaped worker by the guardian.
    assert not hw.alive(timeout=10)


def test_resume_continues_journal_and_attempt_count(hw):
    proc = hw.start(hw.fast_args(**{"--stall-window": "60", "--checkpoint-dir": str(hw.ckpt)})
                    + ["--", *hw.trainer("--beats", "40", "--step-time", "0.05", "--save-every", "5",
                                         "--checkpoint-dir", str(hw.ckpt))])
    wait_for(lambda: any(hw.ckpt.glob("checkpoint-*/trainer_state.json")))
    proc.kill()
    proc.wait(10)
    assert not hw.alive(timeout=10)
    # The run's own command (a different one is refused: it would not be the same run).
    result = hw.run(["run", "--resume", str(hw.run_dir)])
    assert result.returncode == 0, result.stderr
    attempts = hw.events("attempt_started")
    assert [a["attempt"] for a in attempts] == [1, 2]
    assert attempts[1]["resume_from"] is not None
    assert len({r["run_id"] for r in hw.journal()}) == 1
    assert hw.events("run_resumed")


def test_resume_refuses_a_finished_run_and_a_live_one(hw):
    assert hw.run(hw.fast_args() + ["--", *hw.trainer("--beats", "2")]).returncode == 0
    result = hw.run(["run", "--resume", str(hw.run_dir)], timeout=30)
    assert result.returncode == EXIT_USAGE and "already finished (success" in result.stderr

    live = hw.tmp / "live"
    proc = hw.start(hw.fast_args(**{"--run-dir": str(live), "--stall-window": "60"})
                    + ["--", *hw.trainer("--beats", "1000", "--step-time", "0.05")])
    wait_for(lambda: (live / "journal.jsonl").exists() and "attempt_started" in (live / "journal.jsonl").read_text())
    result = hw.run(["run", "--resume", str(live)], timeout=30)
    assert result.returncode == EXIT_USAGE and "stop that supervisor first" in result.stderr
    assert proc.poll() is None, "the live run was left alone"
    proc.terminate()
    proc.communicate(timeout=30)
