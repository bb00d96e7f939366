"""The attempt's pure parts: its lifecycle's legal transitions, the graph policy's escalation, the
environment and command line each attempt is launched with."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hangwatch.contract import env as names
from hangwatch.contract.verdict import VerdictKind
from hangwatch.supervisor.decide.attempt import (
    AttemptLifecycle,
    AttemptState,
    GraphPolicy,
    IllegalTransition,
    attempt_argv,
    attempt_environment,
    escalate,
)


pytestmark = pytest.mark.timeout(30)


def test_illegal_transition_is_a_named_error():
    life = AttemptLifecycle(3)
    life.advance(AttemptState.WATCHING, 1.0)
    with pytest.raises(IllegalTransition, match="attempt 3: watching -> releasing"):
        life.advance(AttemptState.RELEASING, 2.0)
    life.advance(AttemptState.KILLING, 2.0)
    life.advance(AttemptState.ENDED, 3.0)
    with pytest.raises(IllegalTransition):
        life.advance(AttemptState.WATCHING, 4.0)


def test_pure_decisions():
    on, off, eager = GraphPolicy(), GraphPolicy(True), GraphPolicy(True, True)
    assert escalate(on, VerdictKind.STALL, after_stall="off", eager_escalation=True) == off
    assert escalate(off, VerdictKind.STALL, after_stall="off", eager_escalation=True) == eager
    assert escalate(off, VerdictKind.STALL, after_stall="off", eager_escalation=False) == off
    assert escalate(on, VerdictKind.STALL, after_stall="keep", eager_escalation=True) == on
    assert escalate(on, VerdictKind.SILENT_HANG, after_stall="off", eager_escalation=True) == on
    assert escalate(on, VerdictKind.CRASH, after_stall="off", eager_escalation=True) == on
    full, ours = attempt_environment(
        {"PATH": "/bin", names.ATTEMPT: "9", names.CONFIG: "c.toml", "HANGWATCH_STALE": "x"},
        run_dir=Path("/r"), attempt=2, attempt_dir=Path("/r/a2"), policy=off, resume_from=Path("/ck/checkpoint-5"))
    assert full["PATH"] == "/bin" and full[names.CONFIG] == "c.toml" and "HANGWATCH_STALE" not in full
    assert full[names.ATTEMPT] == "2" and ours[names.RESUME_FROM] == "/ck/checkpoint-5"
    assert ours[names.HEARTBEAT] == "/r/a2/heartbeat.json" and ours[names.CUDAGRAPHS] == "0"
    assert attempt_argv(["t.py"], "--resume_from_checkpoint={checkpoint}", Path("/c k/ck-1")) == [
        "t.py", "--resume_from_checkpoint=/c k/ck-1"]
    assert attempt_argv(["t.py"], "--r={checkpoint}", None) == ["t.py"]


def test_the_trainer_is_told_how_long_an_engine_wedge_takes_to_catch_and_capture():
    """The generator's own generate timeout must not fire first (it would kill the evidence)."""
    from hangwatch.supervisor.decide.attempt import engine_detect_within
    from hangwatch.supervisor.decide.detector import DetectorConfig
    assert engine_detect_within(DetectorConfig(interval=1.0, engine_step_timeout=30.0), 20.0) == 54.0
    no_rule = DetectorConfig(interval=1.0, stall_window=60.0, engine_step_timeout=None,
                             phase_timeouts={"generate": 90.0})
    assert engine_detect_within(no_rule, 20.0) == 114.0, "without the engine rule: the generate phase's window"
    _, ours = attempt_environment({}, run_dir=Path("/r"), attempt=1, attempt_dir=Path("/r/a1"), policy=GraphPolicy(),
                                  resume_from=None, detect_within=52.0, engine_recovery="job")
    assert ours[names.DETECT_WITHIN] == "52" and ours[names.ENGINE_RECOVERY] == "job"


@pytest.mark.parametrize("template", ['--resume_from_checkpoint="{checkpoint}"', "--resume_from_checkpoint={checkpoint}",
                                      "--resume '{checkpoint}'", '--resume "{checkpoint}" --strict'])
def test_resume_template_never_splits_on_the_checkpoint_name(template):
    hostile = Path('/ckpt/checkpoint-7" --evil "x \' --also')
    argv = attempt_argv(["python", "train.py"], template, hostile)
    assert "--evil" not in argv and "--also" not in argv
    assert sum(str(hostile) in a for a in argv) == 1
    assert argv[:2] == ["python", "train.py"]


def test_resume_template_fills_a_plain_path():
    assert attempt_argv(["t"], "--resume_from_checkpoint={checkpoint}", Path("/c/checkpoint-3")) == [
        "t", "--resume_from_checkpoint=/c/checkpoint-3"]
    assert attempt_argv(["t"], "--resume {checkpoint}", Path("/c/with space")) == ["t", "--resume", "/c/with space"]


def test_the_trainer_is_told_its_supervisor_and_stacks_signal_and_all_puts_the_hook_first_on_its_path():
    full, ours = attempt_environment({"PYTHONPATH": "/user/lib"}, run_dir=Path("/r"), attempt=1, attempt_dir=Path("/r/a1"),
                                     policy=GraphPolicy(), resume_from=None, supervisor_pid=4242,
                                     stacks_signal="SIGRTMIN+7", in_process_stacks="hangwatch")
    assert ours[names.SUPERVISOR_PID] == "4242" and ours[names.STACKS_SIGNAL] == "SIGRTMIN+7"
    assert ours[names.IN_PROCESS_STACKS] == "hangwatch" and full["PYTHONPATH"] == "/user/lib" and "PYTHONPATH" not in ours
    full, ours = attempt_environment({"PYTHONPATH": "/user/lib"}, run_dir=Path("/r"), attempt=1, attempt_dir=Path("/r/a1"),
                                     policy=GraphPolicy(), resume_from=None, in_process_stacks="all",
                                     startup_hook=Path("/r/startup-hook"))
    assert full["PYTHONPATH"] == ours["PYTHONPATH"] == f"/r/startup-hook{os.pathsep}/user/lib", \
        "the one change to the trainer's own variables, journaled with ours"
