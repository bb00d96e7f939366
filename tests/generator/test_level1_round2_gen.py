"""The generator's own timeouts as level 1's backstop, with real worker processes."""

from __future__ import annotations

import time

import pytest

from gen_helpers import fake_kwargs
from hangwatch.generator.colocated import ColocatedGenerator, Timeouts

pytestmark = pytest.mark.timeout(120)


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
