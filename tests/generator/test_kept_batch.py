"""The generator keeps the engine request in flight (worker and in-process engine), and runs a kept batch again."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pytest

from gen_helpers import fake_kwargs
from hangwatch.contract.batch import Batch, encode, make_record, parse_record, read_record
from hangwatch.generator.errors import WorkerDied
from hangwatch.generator.inflight_llm import keep_llm_batches, sampling_fields
from hangwatch.generator.process import WorkerProcess
from hangwatch.generator.reproduce import Settings, engine_kwargs_for, run_all, step_summary

pytestmark = pytest.mark.timeout(120)


def ready_worker(tmp_path, **extra):
    worker = WorkerProcess("fake", fake_kwargs(**extra), log_dir=str(tmp_path), inflight_dir=str(tmp_path),
                           grace_s=0.5)
    worker.start(60)
    worker.request("start", 60)
    for op in ("wake_weights", "reload_weights", "reset_prefix_cache", "wake_kv"):
        worker.request(op, 30)
    return worker


@pytest.mark.slow
def test_the_worker_keeps_a_wedged_request_in_flight_and_its_kill_removes_it(tmp_path):
    worker = ready_worker(tmp_path, fake_wedge_at_seed=9)
    try:
        done = worker.request("generate", 30, prompts=["fine"], n=1, seed=1, sampling={"max_tokens": 2},
                              step_times=True)
        assert len(done["step_times_s"]) >= 2 and all(t >= 0 for t in done["step_times_s"])
        path = tmp_path / f"inflight-{worker.pid}.json"
        assert not path.exists(), "a request that returned is no longer in flight"
        errors = []
        sender = threading.Thread(target=lambda: _expect_death(worker, errors), daemon=True)
        sender.start()
        deadline = time.monotonic() + 20
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        kept = read_record(path)
        assert kept["request"] == {"prompts": ["wedge me", {"prompt_ids": [1, 2]}], "n": 2, "seed": 9,
                                   "sampling": {"max_tokens": 3}}
        assert kept["engine"] == "fake" and kept["engine_kwargs"]["fake_wedge_at_seed"] == 9
        assert kept["policy"] == {"cudagraphs": "on", "enforce_eager": False}
        assert kept["applied"]["cudagraph_mode"] == "FULL_AND_PIECEWISE"
        assert kept["weights"]["source"] == "model" and kept["weights"]["digest"]
        assert kept["engine_call"] == 2 and kept["pid"] == worker.pid and kept["versions"]["torch"]
    finally:
        worker.kill(grace_s=0)
    sender.join(10)
    assert errors == ["WorkerDied"]
    assert not path.exists(), "a killed worker's request died with it"


def _expect_death(worker, errors):
    try:
        worker.request("generate", 60, prompts=["wedge me", {"prompt_token_ids": [1, 2]}], n=2, seed=9,
                       sampling={"max_tokens": 3})
    except WorkerDied:
        errors.append("WorkerDied")


class StandInLLM:
    """vLLM's ``LLM.generate(prompts, sampling_params)``, checking what is in flight while it runs."""

    def __init__(self, directory):
        self.directory = directory
        self.seen = None

    def generate(self, prompts, sampling_params=None, use_tqdm=True):
        self.seen = [json.loads(p.read_text()) for p in self.directory.glob("inflight-*.json")]
        return ["out"] * len(prompts)


def test_the_in_process_engine_keeps_each_request_in_flight_while_it_runs(tmp_path, monkeypatch):
    llm = StandInLLM(tmp_path)
    params = SimpleNamespace(n=4, seed=11, temperature=0.7, top_p=None, max_tokens=16, stop_token_ids=(2,))
    monkeypatch.setenv("HANGWATCH_ATTEMPT_DIR", str(tmp_path))
    assert keep_llm_batches(llm, {"model": "/m", "enforce_eager": True}, applied={"cudagraph_mode": "NONE"})
    assert llm.generate([{"prompt_token_ids": [3, 4]}, "text"], params, use_tqdm=False) == ["out", "out"]
    (kept,) = llm.seen
    assert kept["source"] == "in-process" and kept["model"] == "/m"
    assert kept["request"] == {"prompts": [{"prompt_ids": [3, 4]}, "text"], "n": 4, "seed": 11,
                               "sampling": {"temperature": 0.7, "max_tokens": 16, "stop_ids": [2]}}
    assert kept["policy"] == {"cudagraphs": "off", "enforce_eager": True}
    assert kept["applied"] == {"cudagraph_mode": "NONE"}
    assert list(tmp_path.glob("inflight-*.json")) == [], "cleared when the call returned"


def test_outside_hangwatch_the_in_process_engine_is_left_alone(monkeypatch):
    monkeypatch.delenv("HANGWATCH_ATTEMPT_DIR", raising=False)
    llm = SimpleNamespace(generate=lambda *a, **k: None)
    original = llm.generate
    assert keep_llm_batches(llm, {}) is False and llm.generate is original
    assert sampling_fields(None) == (1, None, {})
    assert sampling_fields([SimpleNamespace(n=2, seed=None)])[:2] == (2, None)


def batch(engine="fake", **kwargs):
    record = make_record(engine=engine, engine_kwargs={"seed": 0, **kwargs}, prompts=["p"], n=1, seed=1,
                         sampling={}, source="worker")
    return Batch.from_record(parse_record(encode(record)))


def test_each_policy_gives_the_engine_arguments_it_names():
    recorded, _ = engine_kwargs_for(batch(compilation_config={"level": 3}), "recorded")
    assert recorded == {"seed": 0, "compilation_config": {"level": 3}}
    off, _ = engine_kwargs_for(batch(compilation_config={"level": 3}, enforce_eager=True), "graphs-off")
    assert off == {"seed": 0, "compilation_config": {"level": 3, "cudagraph_mode": "NONE"}}
    eager, _ = engine_kwargs_for(batch(), "eager")
    assert eager == {"seed": 0, "enforce_eager": True}
    with pytest.raises(ValueError, match="unknown policy"):
        engine_kwargs_for(batch(), "graphs-maybe")


def test_the_real_engine_reads_its_weights_from_the_model_and_runs_alone():
    kwargs, notes = engine_kwargs_for(batch("vllm", model="/old", load_format="dummy",
                                            distributed_executor_backend="external_launcher"), "recorded", "/new")
    assert kwargs == {"seed": 0, "model": "/new", "load_format": "auto"}
    assert len(notes) == 2
    fake, notes = engine_kwargs_for(batch(load_format="dummy"), "recorded")
    assert fake["load_format"] == "dummy" and notes == [], "the fake engine has no weights on disk"


def test_step_summary_says_count_median_and_slowest():
    assert step_summary([]) == "no steps"
    assert step_summary([0.001, 0.003, 0.002]) == "3 steps, median 2.0 ms, slowest 3.0 ms"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_recorded_wedge_reproduces_and_the_same_batch_completes_with_graphs_off(tmp_path):
    wedge = batch(**{k: v for k, v in fake_kwargs(fake_wedge_at_seed=1).items()})
    captured = []

    def on_wedge(worker, run_dir, result):
        assert worker.alive(), "the evidence is taken while the engine is still wedged"
        assert (run_dir / f"inflight-{worker.pid}.json").exists()
        captured.append(result.index)
        return "bundle-path"

    kwargs, _ = engine_kwargs_for(wedge, "recorded")
    settings = Settings("fake", kwargs, wedge.prompts, wedge.n, wedge.seed, wedge.sampling, tmp_path / "rec",
                        step_timeout=2.0, start_timeout=60, load_timeout=60)
    (run,) = run_all(settings, 1, on_wedge=on_wedge)
    assert run.outcome == "wedged" and run.bundle == "bundle-path" and captured == [1]
    assert run.stuck_for_s >= 2.0 and run.steps == 0 and "no engine step" in run.error

    kwargs, _ = engine_kwargs_for(wedge, "graphs-off")
    settings = Settings("fake", kwargs, wedge.prompts, wedge.n, wedge.seed, wedge.sampling, tmp_path / "off",
                        step_timeout=2.0, start_timeout=60, load_timeout=60)
    runs = run_all(settings, 2)
    assert [r.outcome for r in runs] == ["completed", "completed"]
    assert all(r.steps == len(r.step_times_s) > 0 for r in runs)
    assert runs[0].applied["cudagraph_mode"] == "NONE" and set(runs[0].seconds) == {"start", "load", "generate"}


@pytest.mark.slow
def test_an_engine_that_cannot_start_stops_the_runs_as_could_not_run(tmp_path):
    broken = batch(**fake_kwargs(fake_worker_cudagraph_mode="BOGUS"))
    settings = Settings("fake", broken.engine_kwargs, broken.prompts, 1, 1, {}, tmp_path, step_timeout=2.0,
                        start_timeout=60)
    runs = run_all(settings, 3)
    assert len(runs) == 1 and runs[0].outcome == "failed" and "BOGUS" in runs[0].error
