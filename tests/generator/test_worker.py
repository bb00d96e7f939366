"""The fake engine in a REAL worker process: protocol, auth, weight proof, wedge, kill, parent death."""

import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import torch

from hangwatch.generator import offload as offload_module
from hangwatch.generator.colocated import ColocatedGenerator, Timeouts
from hangwatch.generator.errors import WeightMismatch, WorkerError, WorkerTimeout
from hangwatch.generator.process import WorkerProcess
from hangwatch.generator.staging import stage

from gen_helpers import fake_kwargs, named

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def worker(tmp_path):
    procs = []

    def make(**kwargs):
        proc = WorkerProcess("fake", fake_kwargs(**kwargs), log_dir=str(tmp_path / "logs"), grace_s=0.5)
        procs.append(proc)
        return proc

    yield make
    for proc in procs:
        if proc.proc is not None:
            proc.kill(grace_s=0.5)


@pytest.fixture(scope="module")
def started_worker(tmp_path_factory):
    """One started worker for the tests that only talk to it and leave it answering (a worker
    start is a torch import: seconds on a loaded machine); killed after the module."""
    proc = WorkerProcess("fake", fake_kwargs(), log_dir=str(tmp_path_factory.mktemp("logs")), grace_s=0.5)
    proc.start(30)
    proc.request("start", 30)  # the engine started, asleep
    yield proc
    if proc.proc is not None:
        proc.kill(grace_s=0.5)


def ready(proc, model, tmp_path):
    """Started and awake with the model's weights loaded; returns the staged file."""
    proc.request("start", 30)
    proc.request("wake_weights", 5)
    staged = stage(named(model), str(tmp_path))
    report = proc.request("load_weights", 10, path=staged.path, manifest=staged.manifest)
    assert report["digest"] == staged.digest
    proc.request("reset_prefix_cache", 5)
    proc.request("wake_kv", 5)
    return staged


@pytest.mark.slow
def test_full_generate_cycle(trainer, tmp_path, sim_gpu, monkeypatch):
    model, opt = trainer
    hb = tmp_path / "hb.json"
    monkeypatch.setenv("HANGWATCH_HEARTBEAT", str(hb))
    ids = [id(p) for p in model.parameters()]
    with ColocatedGenerator(model, opt, engine_kwargs=fake_kwargs(), log_dir=str(tmp_path)) as gen:
        out = gen.generate(["a prompt", "another"], 4, seed=11, step=2)
        again = gen.generate(["a prompt", "another"], 4, seed=11, step=3)
        pid = gen.worker_pid
        assert json.loads(sim_gpu.read_text())["holders"][str(pid)]["util_pct"] == 0, "asleep between calls"
    assert out == again
    assert [[c.index for c in row] for row in out] == [[0, 1, 2, 3]] * 2
    assert all(len(c.token_ids) == 8 for row in out for c in row)
    assert [id(p) for p in model.parameters()] == ids
    timing = gen.timings[0]
    assert timing.ok and set(timing.seconds) == {"offload", "stage", "start", "load", "generate", "sleep",
                                                 "restore", "total"}
    assert "start" not in gen.timings[1].seconds, "the worker is reused"
    beat = json.loads(hb.read_text())
    assert beat["phase"] == "restore" and beat["step"] == 3 and beat["info"]["cudagraphs"] == "on"
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert "op=generate" in (tmp_path / "generator-worker.log").read_text()


@pytest.mark.slow
def test_wrong_fingerprint_and_partial_load_are_refused(worker, trainer, tmp_path):
    model, _ = trainer
    proc = worker()
    proc.start(30)
    staged = ready(proc, model, tmp_path)
    name = "model.layers.0.mlp.up_proj.weight"
    wrong = json.loads(json.dumps(staged.manifest))
    wrong[name]["xxh3_128"] = "0" * 32
    with pytest.raises(WeightMismatch, match="up_proj") as info:
        proc.request("load_weights", 10, path=staged.path, manifest=wrong)
    assert info.value.log_path == proc.log_path and "worker log" in str(info.value)
    # Bytes changed after staging (the manifest is right, the file is not).
    with open(staged.path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))
    with pytest.raises(WeightMismatch, match="fingerprint mismatch"):
        proc.request("load_weights", 10, path=staged.path, manifest=staged.manifest)
    # Partial: one piece of a packed parameter, and a whole parameter, missing.
    for drop, message in [("model.layers.0.self_attn.k_proj.weight", "not fully covered"),
                          ("model.norm", "not loaded")]:
        partial = stage([(n, t) for n, t in named(model) if n != drop], str(tmp_path))
        with pytest.raises(WeightMismatch, match=message):
            proc.request("load_weights", 10, path=partial.path, manifest=partial.manifest)
    with pytest.raises(WorkerError, match="KeyError"):
        extra = stage(named(model) + [("model.extra.weight", torch.ones(2))], str(tmp_path))
        proc.request("load_weights", 10, path=extra.path, manifest=extra.manifest)


@pytest.mark.slow
def test_misuse_is_reported_not_fatal(started_worker):
    proc = started_worker
    with pytest.raises(WorkerError, match="EngineStateError: generate is illegal while the engine is asleep"):
        proc.request("generate", 5, prompts=["x"], n=1, seed=0)
    assert proc.request("ping", 5)["pid"] == proc.pid


@pytest.mark.slow
def test_unauthenticated_client_refused_and_nothing_deserialised(worker, tmp_path):
    marker = tmp_path / "unpickled"

    class Exploit:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    payload = pickle.dumps({"op": "close", "x": Exploit()})
    proc = worker()
    proc.spawn()
    deadline = time.monotonic() + 30
    while not os.path.exists(proc.socket_path):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # A stranger without the key: answers the challenge with a pickle, then keeps sending pickles.
    stranger = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # The worker binds first and accepts only after building its engine (a torch import: seconds on a
    # loaded machine), so the challenge may take a while; the wait is bounded, its length is not the point.
    stranger.settimeout(30)
    stranger.connect(proc.socket_path)
    stranger.recv(32)
    stranger.sendall(payload.ljust(64, b"\0") + payload)
    try:
        assert stranger.recv(64) == b"", "worker hangs up on a failed handshake"
    except ConnectionResetError:
        pass  # hung up with our unread bytes still queued: also a refusal
    stranger.close()
    # multiprocessing-style client with a wrong key gets the same treatment.
    with pytest.raises(Exception):
        proc.connect(5, key=b"not the key" * 3)
    proc.connect(10)  # the real controller still gets in
    assert proc.request("ping", 5, token="t")["token"] == "t"
    assert not marker.exists()
    assert "rejected a peer" in open(proc.log_path).read()


@pytest.mark.slow
def test_late_reply_is_skipped(started_worker):
    proc = started_worker
    skipped = proc.client.skipped_replies
    with pytest.raises(WorkerTimeout):
        proc.request("ping", 0.3, delay_s=1.0, token="abandoned")
    assert proc.request("ping", 10, token="current")["token"] == "current"
    assert proc.client.skipped_replies == skipped + 1


@pytest.mark.slow
def test_wedged_worker_ignores_sigterm_and_is_sigkilled(worker, trainer, tmp_path, sim_gpu):
    model, _ = trainer
    proc = worker(fake_wedge_on_generate=1)
    proc.start(30)
    ready(proc, model, tmp_path)
    with pytest.raises(WorkerTimeout):
        proc.request("generate", 1.0, prompts=["x"], n=2, seed=0)
    holders = json.loads(sim_gpu.read_text())["holders"]
    assert holders[str(proc.pid)]["util_pct"] == 100
    assert psutil.Process(proc.pid).cpu_percent(interval=0.3) < 20, "wedged means idle on the host"
    os.kill(proc.pid, signal.SIGTERM)
    time.sleep(0.3)
    assert proc.alive(), "SIGTERM does nothing to a wedged engine"
    exit = proc.kill(grace_s=0.5)
    assert exit.escalated_to_sigkill and exit.returncode == -signal.SIGKILL


@pytest.mark.slow
def test_a_wedged_worker_gives_its_own_stacks_on_the_attempts_signal(worker, trainer, tmp_path, sim_gpu, monkeypatch):
    """The engine worker arms its in-process dump as a trainer process does: where py-spy may not
    attach, the capture still gets the wedged engine's stacks (diagnostics.inprocess)."""
    from hangwatch.contract.capture import TreeProcess
    from hangwatch.diagnostics.inprocess import collect

    attempt = tmp_path / "attempt"
    attempt.mkdir()
    monkeypatch.setenv("HANGWATCH_ATTEMPT_DIR", str(attempt))
    model, _ = trainer
    proc = worker(fake_wedge_on_generate=1)
    proc.start(30)
    ready(proc, model, tmp_path)
    with pytest.raises(WorkerTimeout):
        proc.request("generate", 1.0, prompts=["x"], n=2, seed=0)
    p = psutil.Process(proc.pid)
    tp = TreeProcess(proc.pid, p.create_time(), p.ppid(), os.getpgid(proc.pid), os.getsid(proc.pid), p.name())
    (answer,) = collect([tp], attempt, 1, time.monotonic() + 10)
    assert answer.dump is not None, answer.message
    main = next(t for t in answer.dump.threads if t.name == "MainThread")
    assert any(f.function == "generate" for f in main.frames), [f.render() for f in main.frames]
    assert proc.alive()


@pytest.mark.slow
def test_wedge_detected_killed_then_trainer_restored(trainer, tmp_path, monkeypatch, capfd):
    model, opt = trainer
    ids = [id(p) for p in model.parameters()]
    state_before = {id(k): {s: v.clone() for s, v in st.items()} for k, st in opt.state.items()}
    seen = []
    original_restore = offload_module.TrainerOffload.restore

    def restore_checking(self):
        # On the failed call the worker must already be gone (and forgotten) here.
        seen.append(gen.worker_pid is None and pid_box[0] is not None and not _alive(pid_box[0]))
        return original_restore(self)

    pid_box = [None]
    monkeypatch.setattr(offload_module.TrainerOffload, "restore", restore_checking)
    gen = ColocatedGenerator(model, opt, engine_kwargs=fake_kwargs(fake_wedge_at_seed=2), log_dir=str(tmp_path),
                             timeouts=Timeouts(start=30, op=5, load=10, generate=1.5, grace=0.5))
    try:
        gen.generate(["p"], 2, seed=1)
        pid_box[0] = gen.worker_pid
        # The wedged call times out; the generator's backstop (no supervisor here) retries it
        # once on a fresh worker with graphs off, so the call itself returns.
        assert len(gen.generate(["p"], 2, seed=2)) == 1
        failed = gen.timings[-2]
        assert failed.error.startswith("WorkerTimeout") and "generator-worker.log" in failed.error
        assert seen[1] is True, "the wedged worker was gone before the trainer's tensors came back"
        assert "ignored SIGTERM" not in capfd.readouterr().err, "a worker that timed out is SIGKILLed at once"
        assert [id(p) for p in model.parameters()] == ids
        assert all(id(k) in state_before for k in opt.state)
        for k, st in opt.state.items():
            assert all(torch.equal(v, state_before[id(k)][s]) for s, v in st.items())
        assert gen.worker_pid != pid_box[0] and gen.beat_info["cudagraphs"] == "off"
        assert len(gen.generate(["p"], 2, seed=3)) == 1, "the fresh worker serves the next call"
    finally:
        gen.close()


@pytest.mark.slow
def test_no_wedge_with_graphs_off(trainer, tmp_path):
    """Through the worker process with the policy hangwatch applies first (graphs off); the engine
    kwargs reach the engine as given, and both ways of turning graphs off (enforce_eager too) are
    checked on the engine itself: engines/test_fake_engine.py::test_an_armed_wedge_never_fires_with_graphs_off."""
    model, opt = trainer
    off = {"compilation_config": {"cudagraph_mode": "NONE"}}
    with ColocatedGenerator(model, opt, engine_kwargs=fake_kwargs(fake_wedge_on_generate=1, **off),
                            log_dir=str(tmp_path), timeouts=Timeouts(generate=10, grace=0.5)) as gen:
        assert len(gen.generate(["p"], 1, seed=0)) == 1
        assert gen.beat_info["cudagraphs"] == "off"


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


PARENT = textwrap.dedent("""
    import sys, time
    from hangwatch.generator.process import WorkerProcess
    proc = WorkerProcess("fake", {"enable_sleep_mode": True}, log_dir=sys.argv[1])
    proc.start(30)
    print(proc.pid, flush=True)
    time.sleep(600)
""")


@pytest.mark.slow
def test_parent_death_takes_the_worker(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], cwd=str(Path(__file__).resolve().parents[2]),
                              stdout=subprocess.PIPE, text=True)
    try:
        worker_pid = int(parent.stdout.readline())
        assert _alive(worker_pid) and os.getsid(worker_pid) == worker_pid, "own session"
        parent.kill()
        parent.wait(5)
        deadline = time.monotonic() + 5
        while _alive(worker_pid):
            assert time.monotonic() < deadline, "worker outlived its parent"
            time.sleep(0.05)
    finally:
        parent.kill()
        parent.wait(5)
        parent.stdout.close()


@pytest.mark.slow
def test_an_engine_without_sleep_mode_keeps_working_and_is_said_once(trainer, tmp_path, caplog):
    """The fake on vLLM's CPU platform, as the real one: no sleep mode; the generator warns once and
    beats ``engine_sleep_mode``; rollouts work as before."""
    import logging

    model, opt = trainer
    with caplog.at_level(logging.WARNING, logger="hangwatch.generator.colocated"):
        with ColocatedGenerator(model, opt, engine_kwargs=fake_kwargs(fake_platform="cpu"),
                                log_dir=str(tmp_path)) as gen:
            first = gen.generate(["a prompt"], 2, seed=1, step=0)
            assert gen.generate(["a prompt"], 2, seed=1, step=1) == first
            assert gen.start_report["sleep_mode"] is False
            assert gen.beat_info["engine_sleep_mode"] == "unavailable (cpu platform)"
            assert gen.applied.cudagraph_mode == "NONE" and gen.applied.compile_mode == "DYNAMO_TRACE_ONCE"
    said = [r for r in caplog.records if "has no sleep mode" in r.getMessage()]
    assert len(said) == 1
