"""``hangwatch replay`` / ``bundle pack`` / ``report`` through the CLI entry points: text and
JSON output, suspects across processes and ranks, and pasted dumps read from files."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import time

import pytest

from diag_helpers import DATA, synthetic_bundle
from hangwatch.cli.main import main
from hangwatch.diagnostics.bundle import dumps_json, write_bundle
from hangwatch.diagnostics.replay import analyse, load_source
from hangwatch.diagnostics.signatures import load_signatures


TEXT_FIXTURES = ["gpu_model_runner_native.txt", "nccl_all_reduce.txt", "gdn_chunk.txt", "unknown_reward.txt"]


def _run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.timeout(30)
def test_replay_text_and_json_dumps_with_aggregate(capsys):
    paths = [str(DATA / f) for f in TEXT_FIXTURES] + [str(DATA / "cuda_graph_real.json"), str(DATA / "cuda_graph_and_sync.txt")]
    rc, out, err = _run(capsys, "replay", "--json", *paths)
    assert rc == 0, err
    data = json.loads(out)
    got = {i["source"].rsplit("/", 1)[-1]: i for i in data["incidents"]}
    assert got["gpu_model_runner_native.txt"]["signature_id"] == "cuda-synchronize-wait"
    assert got["nccl_all_reduce.txt"]["signature_id"] == "nccl-collective-wait"
    assert got["gdn_chunk.txt"]["signature_id"] == "gated-deltanet-kernel"
    assert got["cuda_graph_real.json"]["signature_id"] == "vllm-cuda-graph-replay"
    assert got["unknown_reward.txt"]["signature_id"] == "socket-read"  # no signature: its HTTP read's family
    assert "score_with_judge (judge.py:48)" in got["unknown_reward.txt"]["evidence"]
    for item in data["incidents"]:
        assert {"source", "signature_id", "title", "advice", "evidence"} <= set(item)
    agg = data["aggregate"]
    assert agg["incidents"] == 6
    assert agg["signatures"]["vllm-cuda-graph-replay"] == 2 and agg["signatures"]["socket-read"] == 1
    assert agg["call_tree"]["count"] == 6

    rc, text, _ = _run(capsys, "replay", *paths)
    assert rc == 0
    assert "vllm-cuda-graph-replay" in text and "merged call tree" in text


def test_replay_shows_the_recurring_frames_table(capsys, tmp_path):
    src = (DATA / "gpu_model_runner_native.txt").read_text()
    for i in range(3):
        (tmp_path / f"dump{i}.txt").write_text(src.replace("48213", str(100 + i)))
    rc, out, _ = _run(capsys, "replay", *[str(tmp_path / f"dump{i}.txt") for i in range(3)], str(DATA / "nccl_all_reduce.txt"))
    assert rc == 0
    assert "cuEventSynchronize (libcuda.so.1) appears in 3 of 4 incidents" in out
    assert "training_step (trainer.py) appears in 4 of 4 incidents" in out


@pytest.mark.timeout(30)
def test_whatif_thresholds_replayed_on_a_bundle(capsys, tmp_path):
    bundle = synthetic_bundle(tmp_path)
    rc, out, _ = _run(capsys, "replay", "--json", str(bundle))
    w = json.loads(out)["incidents"][0]["whatif"]
    assert rc == 0 and w["fired"] and w["kind"] == "stall"
    assert w["onset_after_s"] == 10.0 and w["detected_after_s"] == 30.0 and w["recorded_detected_after_s"] == 30.0

    rc, out, _ = _run(capsys, "replay", "--json", "--stall-window", "100", str(bundle))
    w = json.loads(out)["incidents"][0]["whatif"]
    assert not w["fired"] and "would NOT fire" in w["summary"]

    rc, out, _ = _run(capsys, "replay", "--stall-window", "5", "--gpu-busy", "95", str(bundle))
    assert "would fire stall at +15.0 s (onset +10.0 s)" in out

    rc, out, _ = _run(capsys, "replay", "--json", "--cpu-idle", "0.1", str(bundle))
    assert not json.loads(out)["incidents"][0]["whatif"]["fired"], "CPU at 0.3 % is above a 0.1 % idle threshold"

    # A run directory stands for all its bundles.
    rc, out, _ = _run(capsys, "replay", "--json", str(tmp_path / "run"))
    assert json.loads(out)["aggregate"]["incidents"] == 1


@pytest.mark.timeout(30)
def test_bundle_pack_and_replay_of_the_archive(capsys, tmp_path):
    bundle = synthetic_bundle(tmp_path)
    rc, out, _ = _run(capsys, "bundle", "pack", str(bundle))
    archive = bundle.with_name(bundle.name + ".tar.gz")
    assert rc == 0 and out.strip() == str(archive)
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert f"{bundle.name}/manifest.json" in names and f"{bundle.name}/stacks/round-1/pid-4242.json" in names

    rc, out, _ = _run(capsys, "bundle", "pack", str(bundle), "-o", str(tmp_path / "x" / "out.tar.gz"))
    assert rc == 0 and (tmp_path / "x" / "out.tar.gz").is_file()

    rc, out, _ = _run(capsys, "replay", "--json", str(archive))
    item = json.loads(out)["incidents"][0]
    assert item["signature_id"] == "vllm-cuda-graph-replay" and item["frozen"] is True and item["whatif"]["fired"]


def test_samples_only_bundle_replays_without_stacks(capsys, tmp_path):
    from hangwatch.supervisor.recover.fallback_capture import SamplesOnlyCapture  # noqa: PLC0415
    from diag_helpers import make_request  # noqa: PLC0415

    path = SamplesOnlyCapture()(make_request(tmp_path / "run", None))
    rc, out, _ = _run(capsys, "replay", "--json", str(path))
    item = json.loads(out)["incidents"][0]
    assert rc == 0 and item["signature_id"] is None and item["title"] == "no stacks" and item["whatif"]["fired"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["replay", "/no/such/dump.txt"], "/no/such/dump.txt: no such file or directory"),
        (["replay", "{tmp}/notes.txt"], "notes.txt: neither a hangwatch bundle nor a py-spy dump"),
        (["replay", "{tmp}/broken.json"], "broken.json: neither a hangwatch bundle nor a py-spy dump"),
        (["replay", "{tmp}/fake.tar.gz"], "fake.tar.gz: not a readable .tar.gz bundle"),
        (["replay", "--signatures", "{tmp}/bad.toml", str(DATA / "gdn_chunk.txt")], "bad.toml: invalid TOML: .*line 2"),
        (["replay", "--stall-window", "-3", "{bundle}"], "--stall-window must be a positive number"),
        (["bundle", "pack", "{tmp}"], "not a bundle directory"),
        (["report", "{tmp}/fake.tar.gz"], "not a readable .tar.gz bundle"),
    ],
)
def test_user_errors_exit_2_with_the_path_named(capsys, tmp_path, argv, message):
    (tmp_path / "notes.txt").write_text("just some notes\n")
    (tmp_path / "broken.json").write_text("[{\"frames\": ")
    (tmp_path / "fake.tar.gz").write_text("not gzip")
    (tmp_path / "bad.toml").write_text("[[signature]]\nid = = 3\n")
    bundle = synthetic_bundle(tmp_path)
    argv = [a.format(tmp=tmp_path, bundle=bundle) for a in argv]
    rc, out, err = _run(capsys, *argv)
    assert rc == 2
    assert err.startswith("hangwatch: error: ")
    import re  # noqa: PLC0415

    assert re.search(message, err), err
    assert "Traceback" not in err


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_replay_as_a_subprocess_from_any_directory(tmp_path):
    env = {"PATH": "/usr/bin:/bin"}
    ok = subprocess.run([sys.executable, "-m", "hangwatch.cli", "replay", str(DATA / "gdn_chunk.txt")],
                        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=30)
    assert ok.returncode == 0 and "gated-deltanet-kernel" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "hangwatch.cli", "replay", str(tmp_path / "missing")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=30)
    assert bad.returncode == 2 and "missing: no such file" in bad.stderr and "Traceback" not in bad.stderr


# --- pasted dumps, many processes, limits ------------------------------------------------

PASTED = DATA / "pasted"


@pytest.mark.timeout(30)
def test_cross_process_table_names_the_rank_in_graph_replay_among_all_reduce_victims(capsys):
    """Real dumps: eight BLOOM ranks waiting in all_reduce / recv (node 49) and the
    sglang rank whose forward thread sits in CUDA-graph replay (sglang#7254)."""
    victims, replaying = PASTED / "bloom_tr11_node49_collective_victims.txt", PASTED / "sglang_7254_forward_thread_graph_replay.txt"
    rc, out, err = _run(capsys, "replay", "--json", str(victims), str(replaying))
    assert rc == 0, err
    data = json.loads(out)
    assert len(data["processes"]) == 9
    row = {r["pid"]: r for r in data["processes"]}
    assert row[686181]["signature_id"] == "nccl-collective-wait" and row[392]["signature_id"] == "cuda-graph-replay"
    assert {"source", "pid", "rank", "state", "top_frames", "signature_id"} <= set(row[392])
    assert data["suspect"]["pid"] == 392 and data["suspect"]["signature_id"] == "cuda-graph-replay"
    assert "wait in a collective" in data["suspect"]["reason"]

    rc, text, _ = _run(capsys, "replay", str(victims), str(replaying))
    assert rc == 0
    assert "== 9 processes across 2 input(s)" in text
    assert "suspect: pid 392 (sglang_7254_forward_thread_graph_replay.txt)" in text


@pytest.mark.timeout(30)
def test_the_culprit_rank_on_another_node(capsys):
    """BLOOM-176B: node 49's ranks all wait in collectives; node 48 holds the rank
    stuck in the DataLoader among seven in broadcast."""
    rc, out, _ = _run(capsys, "replay", "--json", *(str(PASTED / f) for f in ("bloom_tr11_node49_collective_victims.txt", "bloom_tr11_node48_grouped_ranks.txt")))
    data = json.loads(out)
    got = {i["source"].rsplit("/", 1)[-1]: i for i in data["incidents"]}
    assert got["bloom_tr11_node49_collective_victims.txt"]["signature_id"] == "nccl-collective-wait"
    assert got["bloom_tr11_node49_collective_victims.txt"]["suspect"]["pid"] is None
    assert got["bloom_tr11_node48_grouped_ranks.txt"]["signature_id"] == "dataloader-wait"
    assert data["suspect"]["pid"] == 688514 and len(data["processes"]) == 16


def _py_spy_json(pid, frames):
    return json.dumps([{"pid": pid, "thread_id": pid, "os_thread_id": pid, "thread_name": "MainThread", "active": False, "owns_gil": False,
                        "frames": [{"name": n, "filename": f, "short_filename": f.rsplit("/", 1)[-1], "line": ln, "module": None} for n, f, ln in frames]}])


def test_a_process_py_spy_could_not_dump_is_the_suspect(capsys, tmp_path):
    victim = [("all_reduce", "/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", 2501), ("step", "/app/train.py", 9)]
    manifest = {"schema": 1, "kind": "hangwatch-incident", "verdict": {"kind": "stall"}, "captured": ["stacks"], "failed": {},
                "stacks": {"rounds": [{"round": 1, "dumps": [
                    {"pid": 100, "round": 1, "ok": True}, {"pid": 101, "round": 1, "ok": True},
                    {"pid": 102, "round": 1, "ok": False, "problem": "timeout", "message": "py-spy did not finish"}]}]}}
    files = {"manifest.json": dumps_json(manifest),
             "stacks/round-1/pid-100.json": _py_spy_json(100, victim), "stacks/round-1/pid-101.json": _py_spy_json(101, victim),
             "processes.json": dumps_json([{"pid": p, "cmdline": ["python", "train.py", f"--local_rank={p - 100}"]} for p in (100, 101, 102)])}
    bundle = write_bundle(tmp_path / "b" / "incidents" / "20260101T000000-attempt1-stall", files)
    rc, out, _ = _run(capsys, "replay", "--json", str(bundle))
    assert rc == 0
    data = json.loads(out)
    (incident,) = data["incidents"]
    assert incident["signature_id"] == "nccl-collective-wait" and incident["suspect"]["pid"] == 102
    assert "could not dump" in incident["suspect"]["reason"] and "timeout" in incident["suspect"]["reason"]
    rows = {r["pid"]: r for r in data["processes"]}
    assert rows[102]["state"] == "not dumped" and rows[100]["rank"] == 0


def test_a_suspect_without_a_pid_is_named_by_its_rank(capsys, tmp_path):
    """Pasted ranks often have no pid; the suspect is still in the input (not 'not in this input')."""
    dump = tmp_path / "ranks.txt"
    dump.write_text("DP0: synchronize (torch/cuda/__init__.py:1083)\n    _make_launchers (torch/_inductor/runtime/triton_heuristics.py:646)\n"
                    "DP3:  broadcast (torch/distributed/distributed_c10d.py:2841)\n")
    rc, text, _ = _run(capsys, "replay", str(dump))
    assert rc == 0 and "suspect: rank 0 (no pid in the paste)" in text and "torch-compile-stall" in text


def test_paste_report_says_what_was_skipped(capsys):
    rc, out, _ = _run(capsys, "replay", "--json", str(PASTED / "verl_340_two_frames_no_header.txt"))
    (incident,) = json.loads(out)["incidents"]
    assert incident["signature_id"] == "all-idle"
    assert incident["parse"]["confidence"] == "low" and incident["parse"]["frames"] == 2
    rc, text, _ = _run(capsys, "replay", str(PASTED / "lmcache_4419_columns_trailing_note.txt"))
    assert "read as: 1 process(es)" in text and "skipped 1 line(s)" in text and "neither" not in text


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["repeated", "all_unique", "many_processes"])
def test_two_megabytes_of_stack_text_through_replay_is_linear(capsys, tmp_path, kind):
    """2 MB without a Process header: parsed and classified in one pass (the
    bound is loose for a loaded 2-core machine; it is ~1-3 s)."""
    if kind == "repeated":
        block = "".join(f"    layer_{i % 97} (model/layers.py:{i})\n" for i in range(50)) + "some prose between blocks\n"
        text = block * (2_000_000 // len(block) + 1)
    elif kind == "all_unique":
        text = "".join(f"    func_{i} (pkg_{i}/mod_{i}.py:{i})\n" if i % 40 else "prose line\n" for i in range(62_000))
    else:
        text = "".join(f'Thread {100 + k} (idle): "MainThread"\n' + "".join(f"    g_{k}_{j} (m{k}/x{j}.py:{j})\n" for j in range(30)) for k in range(2300))
    big = tmp_path / "big.txt"
    big.write_text(text)
    assert big.stat().st_size >= 2_000_000
    start = time.process_time()  # CPU time: the machine's load does not count against the reader
    rc, out, err = _run(capsys, "replay", "--json", str(big))
    elapsed = time.process_time() - start
    assert rc == 0, err
    assert elapsed < 30.0, f"{kind}: {elapsed:.1f} s"
    assert json.loads(out)["incidents"][0]["parse"]["frames"] > 40_000


def test_an_oversized_dump_is_refused_with_exit_2(capsys, tmp_path, monkeypatch):
    from hangwatch.diagnostics import replay  # noqa: PLC0415

    monkeypatch.setattr(replay, "MAX_DUMP_BYTES", 1000)
    dump = tmp_path / "huge.txt"
    dump.write_text("    f (a.py:1)\n" * 200)
    rc, _, err = _run(capsys, "replay", str(dump))
    assert rc == 2 and "huge.txt: larger than" in err and "Traceback" not in err


def test_a_pasted_py_spy_failure_is_the_suspect(capsys):
    """The m4 notes (data/pasted): every rank py-spy could read waits in a barrier, and
    py-spy failed on rank 0 (EPERM, the process in D state): that one is the suspect."""
    rc, out, _ = _run(capsys, "replay", "--json", str(PASTED / "m4_accelerate_barrier_pyspy_eperm.txt"))
    assert rc == 0
    data = json.loads(out)
    (incident,) = data["incidents"]
    assert incident["signature_id"] == "nccl-collective-wait" and incident["suspect"]["pid"] == 280058
    assert "EPERM" in incident["suspect"]["reason"]
    assert {r["pid"]: r["state"] for r in data["processes"]} == {280064: "stalled", 280058: "not dumped"}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-8-sig"])
def test_a_dump_saved_in_another_encoding_is_read(tmp_path, encoding):
    # Windows PowerShell's "py-spy dump --pid N > dump.txt" writes UTF-16LE with a BOM.
    text = (PASTED / "accelerate_3104_zero3_allgather.txt").read_text()
    path = tmp_path / "dump.txt"
    path.write_bytes(text.encode(encoding))
    src = load_source(path)
    assert src.kind == "text" and any(t.frames for p in src.parse.processes for t in p.threads)


SIGS = load_signatures()


@pytest.mark.timeout(60)
def test_table_shows_top_frames_of_a_c_level_stack(tmp_path):
    # A gdb backtrace has no Python frame: the table's TOP FRAMES cell was blank.
    path = tmp_path / "gdb.txt"
    path.write_text("Thread 1 (Thread 0x7f22711b9700 (LWP 23578)):\n"
                    "#0  0x00007f22d64fff0d in poll () from /lib64/libc.so.6\n"
                    "#1  0x00007f22c0a1b2c3 in ncclProxyService () from /usr/lib/libnccl.so.2\n")
    (incident,) = analyse([path], SIGS)
    (verdict,) = incident.verdicts
    assert [f.function for f in verdict.top_frames()] == ["ncclProxyService"]


@pytest.mark.timeout(60)
def test_captions_name_other_processes_and_main_threads():
    # Two MainThread stacks under captions are two processes: the straggler is the suspect.
    (incident,) = analyse([PASTED / "biom3_xccl_backward_straggler_barrier_waiters.txt"], SIGS)
    assert len(incident.verdicts) == 2
    c = incident.classification
    assert c.signature_id == "nccl-collective-wait"
    assert c.suspect is not None and "somewhere else" in c.suspect.reason
    # "**Rank 1 (waiting):**" / "**Rank 0 (orchestrating):**" / "**Rank 0 worker (one of 8):**"
    (incident,) = analyse([PASTED / "msswift_omni_decord_worker_rank0_map_rank1_barrier.txt"], SIGS)
    assert [v.rank for v in incident.verdicts] == [1, 0, 0]
    # a rank and its workers are one rank against the crowd of one: rank 0 is the suspect
    assert incident.classification.suspect is not None and incident.classification.suspect.rank == 0


@pytest.mark.timeout(60)
def test_horovod_stall_warning_names_the_ranks_that_never_submitted(capsys):
    # horovod#364: six ranks ready in every stalled allreduce, ranks 1 and 5 never submit.
    rc = main(["replay", "--json", str(PASTED / "horovod_364_stall_warning_ready_ranks.txt")])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0
    (incident,) = data["incidents"]
    assert incident["signature_id"] == "nccl-collective-wait"
    assert sorted(r["rank"] for r in data["processes"]) == [0, 2, 3, 4, 6, 7]
    assert "rank 1, 5" in json.dumps(data)


@pytest.mark.timeout(60)
def test_shm_wait_lines_next_to_worker_stacks_do_not_take_the_suspect(tmp_path, capsys):
    # The engine core that logged the wait is waiting on its workers: with the workers'
    # stacks pasted, the odd worker out stays the suspect.
    from hangwatch.cli.main import main  # noqa: PLC0415

    line = ("(EngineCore pid=100) INFO 08-13 11:27:02 [shm_broadcast.py:802] No available shared memory broadcast "
            "block found in 60 seconds. This typically happens when some processes are hanging.\n")
    workers = "".join(
        f'Process {pid}: VLLM::Worker_TP{n}\nPython v3.12.3 (/usr/bin/python3)\n\nThread {pid} (active): "MainThread"\n'
        f"    {top}\n    execute_model (vllm/v1/worker/gpu_worker.py:300)\n"
        "    worker_busy_loop (vllm/v1/executor/multiproc_executor.py:973)\n\n"
        for n, (pid, top) in enumerate([(201, "all_reduce (torch/distributed/distributed_c10d.py:2050)"),
                                        (202, "all_reduce (torch/distributed/distributed_c10d.py:2050)"),
                                        (203, "synchronize (torch/cuda/__init__.py:1083)")]))
    path = tmp_path / "mix.txt"
    path.write_text(line + workers)
    main(["replay", "--json", str(path)])
    data = json.loads(capsys.readouterr().out)
    assert data["suspect"]["pid"] == 203
    assert 100 not in [p["pid"] for p in data["processes"]]


def test_replay_and_report_show_power_sm_clock_and_how_each_process_stacks_came(capsys, tmp_path):
    """'100 % utilisation at idle power' is how people recognise a spinning wedge: replay and the
    report show each GPU's power draw and SM clock, and how each process's stacks were taken."""
    frames = [("all_reduce", "/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", 2501), ("step", "/app/train.py", 9)]
    manifest = {"schema": 1, "kind": "hangwatch-incident", "verdict": {"kind": "stall"}, "captured": ["stacks", "gpu"], "failed": {},
                "stacks": {"rounds": [], "methods": [
                    {"pid": 100, "method": "py-spy", "why": None}, {"pid": 101, "method": "in-process", "why": "py-spy: ptrace_denied"},
                    {"pid": 102, "method": "none", "why": "not a Python process"}]}}
    state = {"nvml": {"available": True, "devices": [
        {"index": 0, "util_gpu_pct": 100, "mem_used_mib": 40000.0, "power_w": 61.0, "sm_clock_mhz": 1410}]}}
    files = {"manifest.json": dumps_json(manifest), "gpu/state.json": dumps_json(state),
             "stacks/round-1/pid-100.json": _py_spy_json(100, frames), "stacks/round-1/pid-101.json": _py_spy_json(101, frames)}
    bundle = write_bundle(tmp_path / "b" / "incidents" / "20260101T000000-attempt1-stall", files)
    rc, out, _ = _run(capsys, "replay", str(bundle))
    assert rc == 0
    assert "GPU 0: 100% util, 61 W, 1410 MHz SM (capture)" in out
    assert "stacks by: in-process 1, none 1, py-spy 1" in out
    rc, out, _ = _run(capsys, "replay", "--json", str(bundle))
    (incident,) = json.loads(out)["incidents"]
    assert incident["gpu"][0]["power_w"] == 61.0 and incident["stack_methods"] == {"py-spy": 1, "in-process": 1, "none": 1}
    report = tmp_path / "r.html"
    assert _run(capsys, "report", str(bundle), "-o", str(report))[0] == 0
    html = report.read_text()
    assert "<h2>GPUs</h2>" in html and "61 W" in html and "1410 MHz" in html
    assert "<td>pid 101</td><td>in-process</td><td>py-spy: ptrace_denied</td>" in html
