"""The generator's own timeouts as level 1's backstop, with real worker processes."""

from __future__ import annotations

import time

import pytest

from gen_helpers import fake_kwargs
from hangwatch.generator.colocated import ColocatedGenerator, Timeouts

pytestmark = pytest.mark.timeout(120)


@pytest.mark.slow
def test_a_weight_load_that_times_out_restarts_the_engine_like_a_generate_timeout(trainer, tmp_path, monkeypatch,
                                                                                   caplog):
    """The worker wedges in its weight load and the generator's load timeout fires (shorter than
    the supervisor's stall window, or no supervisor): the same engine restart as a generate
    timeout, graphs off, the batch retried. It once raised WorkerTimeout to the
    trainer: a crash, a job restart from the checkpoint with the policy unchanged, no evidence."""
    for name in ("HANGWATCH_DETECT_WITHIN", "HANGWATCH_CONTROL", "HANGWATCH_ENGINE_RECOVERY"):
        monkeypatch.delenv(name, raising=False)
    model, opt = trainer
    short = Timeouts(start=30, op=5, load=1.0, generate=10, grace=0.3)
    with ColocatedGenerator(model, opt, engine_kwargs=fake_kwargs(fake_wedge_on_load=2), log_dir=str(tmp_path),
                            timeouts=short) as gen:
        gen.generate(["p"], 1, seed=1, step=0)
        first = gen.worker_pid
        began = time.time()
        gen.generate(["p"], 1, seed=2, step=1)
        assert gen.worker_pid not in (None, first)
        assert gen.beat_info["cudagraphs"] == "off" and gen.beat_info["engine_restart_by"] == "generator"
        assert gen.applied is not None and gen.applied.cudagraph_mode == "NONE", "graphs off reached the fresh worker"
        assert gen.beat_info["engine_restart_step"] == 1
        assert began <= gen.beat_info["engine_restart_onset_wall"] <= gen.beat_info["engine_restart_killed_wall"] - 1.0
    assert "load phase in time" in caplog.text


class _Worker:
    """Alive for ``lives`` more polls (the supervisor's kill lands after its instruction)."""

    def __init__(self, pid: int, lives: int) -> None:
        self.pid, self.lives, self.polls = pid, lives, 0

    def alive(self) -> bool:
        self.polls += 1
        return self.polls <= self.lives


def test_once_the_supervisor_has_written_its_instruction_the_generator_leaves_it_the_kill(trainer, tmp_path,
                                                                                           monkeypatch):
    """The instruction is written just before the supervisor's kill: a generator that saw it in
    between killed the worker itself, and the supervisor found nothing to kill (no kill record,
    no device check, the restart journaled as the generator's)."""
    from hangwatch.contract.control import write_control

    control = tmp_path / "control.json"
    monkeypatch.setenv("HANGWATCH_CONTROL", str(control))
    monkeypatch.setenv("HANGWATCH_DETECT_WITHIN", "30")
    monkeypatch.delenv("HANGWATCH_ENGINE_RECOVERY", raising=False)
    model, opt = trainer
    gen = ColocatedGenerator(model, opt, engine_kwargs=fake_kwargs(), log_dir=str(tmp_path))
    try:
        write_control(control, {"seq": 1, "action": "restart_engine", "cudagraphs": "off", "pgids": [4242]})
        gen.worker, gen._failed_pid, gen._failed_at = _Worker(4242, lives=3), 4242, "generate"
        started = time.monotonic()
        gen._await_supervisor()
        assert gen.worker.polls == 4, "waited for the supervisor's kill, not only for its instruction"
        assert time.monotonic() - started < 5
        gen.worker = _Worker(4242, lives=10**9)  # a supervisor that never kills after all: bounded
        monkeypatch.setattr("hangwatch.generator.colocated._SUPERVISOR_KILL_S", 0.3)
        started = time.monotonic()
        gen._await_supervisor()
        assert time.monotonic() - started < 5
    finally:
        gen.worker = None
        gen.close()
