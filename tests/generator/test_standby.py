"""The standby engine worker and the engine's step beacon, with real worker processes."""

from __future__ import annotations

import json
import os
import time

import pytest

from gen_helpers import fake_kwargs
from hangwatch.contract.heartbeat import beat, engine_beacon_file, read_heartbeat
from hangwatch.generator.beacon import EngineBeacon, instrument_llm
from hangwatch.generator.colocated import ColocatedGenerator, Timeouts, safer_policy
from hangwatch.generator.policy import RolloutPolicy

pytestmark = pytest.mark.timeout(120)
FAST = Timeouts(start=30, op=5, load=10, generate=10, grace=0.5)


@pytest.mark.slow
def test_the_worker_beats_its_engine_steps_and_says_when_the_request_ends(trainer, tmp_path, monkeypatch):
    base = tmp_path / "engine-heartbeat.json"
    monkeypatch.setenv("HANGWATCH_ENGINE_HEARTBEAT", str(base))
    model, opt = trainer
    with ColocatedGenerator(model, opt, engine_kwargs=fake_kwargs(), log_dir=str(tmp_path), timeouts=FAST) as gen:
        gen.generate(["p", "q"], 2, seed=1)
        beacon = engine_beacon_file(base, gen.worker_pid)
        last = read_heartbeat(beacon)
        assert last is not None and last.pid == gen.worker_pid
        assert last.phase == "idle" and last.step >= 2 * 2 * 8, "one step per token, over the worker's life"
        gen.generate(["p"], 1, seed=2)
        assert read_heartbeat(beacon).step > last.step
    assert not os.path.exists(beacon), "a closed worker's beat is removed with it"


@pytest.mark.slow
def test_a_standby_that_cannot_start_costs_a_warning_never_the_call(trainer, tmp_path, caplog):
    model, opt = trainer
    kwargs = fake_kwargs(fake_fail_start_without_graphs=True)  # the standby runs graphs off: it fails
    with ColocatedGenerator(model, opt, engine_kwargs=kwargs, log_dir=str(tmp_path), timeouts=FAST,
                            standby=True) as gen:
        out = gen.generate(["p"], 1, seed=0)
        assert len(out) == 1 and gen.standby is None
        gen.generate(["p"], 1, seed=1)
        assert gen.timings[-1].seconds.get("standby") is None, "not retried on every call"
    assert "standby engine worker did not start" in caplog.text


@pytest.mark.slow
def test_the_standby_sleeps_with_the_next_safer_policy_and_is_closed_with_the_generator(trainer, tmp_path):
    model, opt = trainer
    gen = ColocatedGenerator(model, opt, engine_kwargs=fake_kwargs(), log_dir=str(tmp_path), timeouts=FAST,
                             standby=True)
    try:
        gen.generate(["p"], 1, seed=0)
        standby = gen.standby
        assert standby is not None and standby.alive() and standby.pid != gen.worker_pid
        assert standby.engine_kwargs["compilation_config"] == {"cudagraph_mode": "NONE"}
        record = json.loads((tmp_path / "generator-standby.json").read_text())
        assert record["role"] == "standby" and record["applied"]["cudagraph_mode"] == "NONE"
    finally:
        gen.close()
    assert not standby.alive()


def test_safer_policy_steps():
    assert safer_policy(RolloutPolicy(True, False)) == RolloutPolicy(False, False)
    assert safer_policy(RolloutPolicy(False, False)) == RolloutPolicy(False, True)
    assert safer_policy(RolloutPolicy(False, True)) is None


def test_the_beacon_is_rate_limited_but_always_marks_begin_and_end(tmp_path):
    now = [0.0]
    path = tmp_path / "b.json"
    beacon = EngineBeacon(str(path), min_interval=0.2, clock=lambda: now[0])
    beacon.begin()
    first = read_heartbeat(path)
    for _ in range(50):
        beacon.step()  # same instant: no write
    assert read_heartbeat(path).seq == first.seq
    now[0] = 0.3
    beacon.step()
    assert read_heartbeat(path).step == 51
    beacon.end()
    assert read_heartbeat(path).phase == "idle"
    assert EngineBeacon(None).path == os.environ.get("HANGWATCH_ENGINE_HEARTBEAT")


@pytest.mark.slow
def test_the_generators_own_timeout_is_the_backstop_and_restarts_the_engine_once(trainer, tmp_path, caplog):
    """No supervisor instruction (no hangwatch, or no rule fired): the generate timeout kills the
    worker and retries the batch once with graphs off, on the standby."""
    model, opt = trainer
    short = Timeouts(start=30, op=5, load=10, generate=2.0, grace=0.3)
    kwargs = fake_kwargs(fake_wedge_at_seed=7)  # wedges only while graphs are on
    with ColocatedGenerator(model, opt, engine_kwargs=kwargs, log_dir=str(tmp_path), timeouts=short,
                            standby=True) as gen:
        gen.generate(["p"], 1, seed=1)
        first = gen.worker_pid
        began = time.time()
        rows = gen.generate(["p"], 1, seed=7, step=6)
        assert len(rows) == 1 and first is not None and gen.worker_pid != first
        assert gen.beat_info["cudagraphs"] == "off" and gen.beat_info["engine_restart_by"] == "generator"
        assert gen.beat_info["engine_worker"] == "standby"
        # No verdict came: the beats tell the supervisor which step wedged, and when (its journal timed
        # the restart from the first beat it saw of it, often steps later).
        info = gen.beat_info
        assert info["engine_restart_step"] == 6
        assert began <= info["engine_restart_onset_wall"] <= info["engine_restart_killed_wall"] - short.generate
        # The trainer's own next beat (a checkpoint's) carries it too: the supervisor reads only the
        # latest beat at a tick, and a checkpoint beat right after the retry once hid the restart.
        beat(step=7, phase="checkpoint", path=str(tmp_path / "hb.json"))
        told = read_heartbeat(tmp_path / "hb.json").info
        assert told["engine_worker"] == "standby" and told["rollouts_ok"] == 1 and told["cudagraphs"] == "off"
    beat(step=8, phase="train", path=str(tmp_path / "hb.json"))
    assert read_heartbeat(tmp_path / "hb.json").info == {}, "closed: no engine to speak for"
    assert "generate timeout is the backstop" in caplog.text


class _FakeLLMEngine:
    def __init__(self) -> None:
        self.steps_left = 0

    def step(self) -> list:
        self.steps_left -= 1
        return []

    def has_unfinished_requests(self) -> bool:
        return self.steps_left > 0


class _FakeLLM:
    """Shaped like vLLM's ``LLM``: ``generate`` drives ``llm_engine.step()`` to completion; ``chat`` calls generate."""

    def __init__(self) -> None:
        self.llm_engine = _FakeLLMEngine()

    def generate(self, prompts, steps=5):
        self.llm_engine.steps_left = steps
        while self.llm_engine.has_unfinished_requests():
            self.llm_engine.step()
        return ["done"] * len(prompts)

    def chat(self, messages):
        return self.generate([messages])


def test_an_in_process_engine_beats_its_steps_too(tmp_path):
    """TRL's colocate engine lives in the trainer process: ``apply_rollout_policy`` instruments it."""
    path = tmp_path / "engine-heartbeat.json"
    llm = _FakeLLM()
    assert instrument_llm(llm, EngineBeacon(str(path), min_interval=0.0))
    assert llm.generate(["a", "b"], steps=7) == ["done", "done"]
    last = read_heartbeat(path)
    assert last.phase == "idle" and last.step == 7 and last.pid == os.getpid()
    llm.chat("hi")
    assert read_heartbeat(path).phase == "idle" and read_heartbeat(path).step == 12
    assert not instrument_llm(llm, EngineBeacon(str(path))), "instrumented once"
    assert not instrument_llm(_FakeLLM(), EngineBeacon("")), "outside hangwatch: nothing to beat into, nothing changed"


def test_a_request_is_judged_from_its_first_step_not_while_its_inputs_are_prepared(tmp_path):
    """Tokenising a large batch can outlast the rule's timeout: until the first step starts the
    beat says 'prepare' (not judged); the first step says 'generate' before it runs, so a
    request whose very first step never returns is judged too."""
    path = tmp_path / "b.json"
    beacon = EngineBeacon(str(path), min_interval=0.2, clock=lambda: 0.0)
    beacon.begin()
    assert read_heartbeat(path).phase == "prepare"
    beacon.step_started()
    assert read_heartbeat(path).phase == "generate", "written before the step runs"
    seq = read_heartbeat(path).seq
    beacon.step_started()
    assert read_heartbeat(path).seq == seq, "once per request"
    beacon.end()
    beacon.begin()
    assert read_heartbeat(path).phase == "prepare"


def test_under_hangwatch_the_generate_timeout_never_fires_before_the_supervisors_detection(
        trainer, tmp_path, monkeypatch, caplog):
    """A backstop shorter than the supervisor's detection and capture would kill the wedged
    worker before py-spy saw it: it is raised to HANGWATCH_DETECT_WITHIN, with a warning."""
    model, opt = trainer
    monkeypatch.setenv("HANGWATCH_DETECT_WITHIN", "52")
    short = ColocatedGenerator(model, opt, log_dir=str(tmp_path), timeouts=Timeouts(generate=10.0))
    assert short.timeouts.generate == 52.0 and short.timeouts.op == Timeouts().op
    assert "raised to 52 s" in caplog.text
    assert ColocatedGenerator(model, opt, log_dir=str(tmp_path), timeouts=Timeouts(generate=300.0)).timeouts.generate == 300.0
    monkeypatch.setenv("HANGWATCH_DETECT_WITHIN", "soon")
    assert ColocatedGenerator(model, opt, log_dir=str(tmp_path), timeouts=Timeouts(generate=10.0)).timeouts.generate == 10.0


def _supervisor_acts_on(control, worker_pid: int, after_s: float, pgids: list[int]) -> None:
    """What hangwatch does at level 1, from outside: the instruction first, then SIGKILL the group."""
    import signal
    import threading
    import time

    def act():
        time.sleep(after_s)
        control.write_text(json.dumps({"seq": 1, "action": "restart_engine", "cudagraphs": "off",
                                       "enforce_eager": False, "pgids": pgids}))
        if worker_pid in pgids:
            os.killpg(worker_pid, signal.SIGKILL)

    threading.Thread(target=act, daemon=True).start()


@pytest.mark.slow
def test_a_wedge_late_in_a_request_waits_for_the_supervisor_to_take_the_evidence(
        trainer, tmp_path, monkeypatch, caplog):
    """The generate timeout fires first (it counts from the request's start, the engine rule
    from the last step): under hangwatch the generator waits for the supervisor, which kills
    the worker after its capture and leaves the instruction; no backstop restart of its own."""
    model, opt = trainer
    control = tmp_path / "control.json"
    monkeypatch.setenv("HANGWATCH_CONTROL", str(control))
    monkeypatch.setenv("HANGWATCH_DETECT_WITHIN", "6")
    timeouts = Timeouts(start=30, op=5, load=10, generate=6.0, grace=0.3)
    with ColocatedGenerator(model, opt, engine_kwargs=fake_kwargs(fake_wedge_at_seed=7), log_dir=str(tmp_path),
                            timeouts=timeouts) as gen:
        gen.generate(["p"], 1, seed=1)
        wedged = gen.worker_pid
        _supervisor_acts_on(control, wedged, after_s=8.0, pgids=[wedged])  # 2 s after our timeout
        assert len(gen.generate(["p"], 1, seed=7)) == 1
        assert gen.beat_info["cudagraphs"] == "off" and gen.beat_info["engine_restart_by"] == "supervisor"
        assert gen.beat_info["engine_restart_seq"] == json.loads(control.read_text())["seq"], \
            "names the instruction it followed (ranks share the heartbeat file)"
    assert "waiting up to 6 s for hangwatch" in caplog.text


@pytest.mark.slow
def test_an_instruction_for_another_ranks_worker_is_not_ours(trainer, tmp_path, monkeypatch, caplog):
    model, opt = trainer
    control = tmp_path / "control.json"
    monkeypatch.setenv("HANGWATCH_CONTROL", str(control))
    monkeypatch.setenv("HANGWATCH_DETECT_WITHIN", "2")
    timeouts = Timeouts(start=30, op=5, load=10, generate=2.0, grace=0.3)
    with ColocatedGenerator(model, opt, engine_kwargs=fake_kwargs(fake_wedge_at_seed=7), log_dir=str(tmp_path),
                            timeouts=timeouts) as gen:
        gen.generate(["p"], 1, seed=1)
        _supervisor_acts_on(control, gen.worker_pid, after_s=0.5, pgids=[4_194_001])  # another rank's worker
        assert len(gen.generate(["p"], 1, seed=7)) == 1
        assert gen.beat_info["engine_restart_by"] == "generator", "its own backstop, not the other rank's order"
        assert "engine_restart_seq" not in gen.beat_info


@pytest.mark.slow
def test_under_recovery_job_or_in_a_cohort_the_generator_never_restarts_its_engine_alone(
        trainer, tmp_path, monkeypatch):
    """One node's engine restart would desynchronise a multi-node job: the error goes to the trainer."""
    from hangwatch.generator.errors import WorkerTimeout

    model, opt = trainer
    monkeypatch.setenv("HANGWATCH_ENGINE_RECOVERY", "job")
    timeouts = Timeouts(start=30, op=5, load=10, generate=1.5, grace=0.3)
    with ColocatedGenerator(model, opt, engine_kwargs=fake_kwargs(fake_wedge_at_seed=7), log_dir=str(tmp_path),
                            timeouts=timeouts) as gen:
        gen.generate(["p"], 1, seed=1)
        with pytest.raises(WorkerTimeout):
            gen.generate(["p"], 1, seed=7)
        assert "engine_restart_by" not in gen.beat_info


@pytest.mark.slow
def test_under_recovery_job_no_standby_is_started(trainer, tmp_path, monkeypatch):
    """It could never take over (nothing restarts the engine alone): it only cost an engine start
    and a sleeping engine's CUDA context on the device for the whole run."""
    model, opt = trainer
    monkeypatch.setenv("HANGWATCH_ENGINE_RECOVERY", "job")
    with ColocatedGenerator(model, opt, engine_kwargs=fake_kwargs(), log_dir=str(tmp_path), timeouts=FAST,
                            standby=True) as gen:
        gen.generate(["p"], 1, seed=0)
        assert gen.standby is None and "standby" not in gen.timings[-1].seconds
    assert not (tmp_path / "generator-standby.json").exists()
