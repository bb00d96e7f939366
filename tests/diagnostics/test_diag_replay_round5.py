"""Replay on a fifth round of real pasted dumps (data/pasted/, held out): gdb's py-bt
without its header, GIL waits, gdb 'info threads' without libthread_db, hand-written
call chains, PaddlePaddle's C++ traceback, a `ray stack` paste cut after a helper
thread; and saved files in other encodings and line ends."""

from __future__ import annotations

import pytest

from diag_helpers import PASTED, pasted_verdict
from hangwatch.cli.main import main
from hangwatch.diagnostics.classify import process_verdicts
from hangwatch.diagnostics.errors import InputError
from hangwatch.diagnostics.pastes import GIL_WAIT, read_text
from hangwatch.diagnostics.replay import analyse, load_source
from hangwatch.diagnostics.signatures import load_signatures
from hangwatch.diagnostics.stacks import group_series

pytestmark = pytest.mark.timeout(60)

SIGS = load_signatures()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # py-bt: "Waiting for the GIL" under a caption instead of py-bt's header (GIL vs allocator lock)
        ("pytorch_97833_gdb_pybt_waiting_for_gil", "lock-wait"),
        # gdb: the GIL's condition-variable wait, cut at PyCOND_TIMEDWAIT
        ("pytorch_119262_gdb_gil_deadlock_autograd_futex", "lock-wait"),
        # gdb: take_gil under pybind11's gil_scoped_acquire in a tensor's decref
        ("pytorch_pr61588_gdb_take_gil_tensor_decref", "lock-wait"),
        # Paddle's numbered C++ traceback, outermost first, into ncclAllReduce
        ("rccl_429_paddle_cpp_traceback_allreduce", "nccl-collective-wait"),
        # arrow chains written out by the reporter
        ("vllm_ascend_13648_arrow_chain_engine_core_dequeue", "vllm-shm-broadcast-wait"),
        ("vllm_ascend_13648_arrow_chain_worker_aclgraph_sync", "cuda-graph-replay"),
        # `ray stack` cut after the last worker's profiler thread: that helper does not decide
        ("ray_3417_ray_stack_tab_workers_between_tasks", "all-idle"),
    ],
)
def test_round5_real_dumps(name, expected):
    assert pasted_verdict(name) == expected


def test_pybt_without_thread_header_keeps_every_frame_innermost_first():
    # dd-trace-py#935: "```Traceback (most recent call first):" then frames with their
    # source lines; the first frame opened a process, which forgot it was py-bt.
    report = read_text((PASTED / "ddtrace_935_gdb_pybt_waiting_for_gil_sampler_lock.txt").read_text())
    (proc,) = report.processes
    (thread,) = proc.threads
    names = [f.function for f in thread.frames]
    assert names[:4] == [GIL_WAIT, "sample", "start_span", "trace"]
    assert names[-1] == "execute" and len(names) == 7


def test_pybt_builtin_method_lines_stay_in_the_same_thread():
    text = """Thread 1 Python stack
  Waiting for the GIL
  <built-in method _invoke_rpc_python_udf of PyCapsule object at remote 0x7f910957bea0>
  File "/opt/lib/python3.9/site-packages/torch/distributed/rpc/api.py", line 719, in _invoke_rpc
    fut = _invoke_rpc_python_udf(
  <built-in method then of PyCapsule object at remote 0x7f915235d210>
  File "/opt/lib/python3.9/site-packages/torch/futures/__init__.py", line 161, in then
    return cast(Future[S], super().then(callback))
"""
    (proc,) = read_text(text).processes
    (thread,) = proc.threads
    assert [f.function for f in thread.frames] == [GIL_WAIT, "_invoke_rpc_python_udf", "_invoke_rpc", "then", "then"]


def test_gdb_info_threads_rows_with_a_bare_lwp_target():
    # gdb without libthread_db (a process attached inside a container): "1    LWP 27334 ..."
    report = read_text((PASTED / "pytorch_39855_gdb_info_threads_rpc_spawn.txt").read_text())
    (proc,) = report.processes
    assert [t.ident for t in proc.threads][:3] == ["27334", "27340", "27362"]
    assert proc.threads[0].name == "MainThread"
    assert proc.threads[1].frames[0].function == "epoll_wait"
    assert proc.threads[0].frames[0].file == "/lib/x86_64-linux-gnu/libpthread.so.0"  # "target:" dropped


def test_arrow_chain_head_is_the_line_above_and_chains_are_innermost_first():
    text = "Representative stack:\n\nA.run_loop\n  -> step(x=1)\n  -> Queue.get\n  -> wait / sched_yield\nthat is all\n"
    report = read_text(text)
    (proc,) = report.processes
    (thread,) = proc.threads
    assert [f.function for f in thread.frames] == ["wait", "Queue.get", "step", "A.run_loop"]
    assert report.skipped == 2  # the caption and the closing prose, not the chain's head


def test_paddle_cxx_traceback_is_read_outermost_first():
    text = """----------------------
C++ Traceback (most recent call last):
----------------------
0   paddle::framework::Run()
1   ncclAllReduce
2   ncclEnqueueCheck(ncclInfo*)

----------------------
Error Message Summary:
----------------------
"""
    (proc,) = read_text(text).processes
    assert [f.function for f in proc.threads[0].frames] == ["ncclEnqueueCheck", "ncclAllReduce", "paddle::framework::Run"]


def test_a_lone_known_helper_thread_does_not_decide_its_process():
    # The second process was cut before its main thread: only tqdm's monitor is left.
    text = """Process 10: python train.py
Thread 10 (idle): "MainThread"
    _worker_loop (torch/utils/data/_utils/worker.py:300)
Process 11: python train.py
Thread 12 (idle): "Thread-1"
    wait (threading.py:324)
    run (tqdm/_monitor.py:60)
"""
    verdicts = process_verdicts(group_series(read_text(text).processes), SIGS)
    lone = next(v for v in verdicts if v.pid == 11)
    assert lone.state == "idle" and lone.signature_id is None


@pytest.mark.parametrize("line_end", ["\r\n", "\r"])
def test_line_ends_crlf_and_lone_cr(line_end):
    text = 'Thread 1 (idle): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:2050)\n    main (train.py:9)\n'
    (proc,) = read_text(text.replace("\n", line_end)).processes
    assert [f.function for f in proc.threads[0].frames] == ["all_reduce", "main"]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-8-sig"])
def test_saved_dump_in_other_encodings(tmp_path, encoding):
    # Windows PowerShell's "py-spy dump --pid N > dump.txt" writes UTF-16LE with a BOM.
    text = (PASTED / "accelerate_3104_zero3_allgather.txt").read_text()
    path = tmp_path / "dump.txt"
    path.write_bytes(text.encode(encoding))
    src = load_source(path)
    assert src.kind == "text" and any(t.frames for p in src.parse.processes for t in p.threads)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00" * 5000,
        bytes(range(256)) * 200,
        "\u00e9\u00e8 nothing here at all".encode("utf-16"),
        b"\x1b[31m\x1b[0m\r\n\t\r\n",
    ],
    ids=["empty", "nuls", "binary", "utf16-prose", "ansi-only"],
)
def test_junk_files_get_a_clear_error_not_a_traceback(tmp_path, capsys, data):
    path = tmp_path / "junk.txt"
    path.write_bytes(data)
    with pytest.raises(InputError):
        load_source(path)
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hangwatch: error:") and "Traceback" not in err


def test_a_single_arrow_under_prose_is_not_a_chain():
    text = 'Thread 1 (idle): "MainThread"\n    wait (threading.py:320)\nSo the fix is\n  -> done\n'
    (proc,) = read_text(text).processes
    assert [[f.function for f in t.frames] for t in proc.threads] == [["wait"]]


def test_json_log_records_and_html_escaped_pastes():
    import json

    dump = 'Thread 7 (idle): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:2050)\n    <module> (train.py:9)\n'
    # Docker's json-file driver: one record a line, the text under "log" with its newline.
    docker = "".join(json.dumps({"log": line + "\n", "stream": "stdout", "time": "2024-01-01T00:00:00Z"}) + "\n"
                     for line in dump.splitlines())
    escaped = dump.replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    for text in (docker, json.dumps({"message": dump}), escaped):
        (proc,) = read_text(text).processes
        (thread,) = proc.threads
        assert thread.name == "MainThread"
        assert [f.function for f in thread.frames] == ["all_reduce", "<module>"]


def test_table_shows_top_frames_of_a_c_level_stack(tmp_path):
    # A gdb backtrace has no Python frame: the table's TOP FRAMES cell was blank.
    path = tmp_path / "gdb.txt"
    path.write_text("Thread 1 (Thread 0x7f22711b9700 (LWP 23578)):\n"
                    "#0  0x00007f22d64fff0d in poll () from /lib64/libc.so.6\n"
                    "#1  0x00007f22c0a1b2c3 in ncclProxyService () from /usr/lib/libnccl.so.2\n")
    (incident,) = analyse([path], SIGS)
    (verdict,) = incident.verdicts
    assert [f.function for f in verdict.top_frames()] == ["ncclProxyService"]


def test_pybt_of_several_threads_without_their_gdb_lines_stay_apart():
    text = """Traceback (most recent call first):
  File "a.py", line 3, in f
    x()
  File "a.py", line 9, in <module>
    f()
Traceback (most recent call first):
  Waiting for the GIL
  File "b.py", line 4, in g
    y()
"""
    (proc,) = read_text(text).processes
    assert [[f.function for f in t.frames] for t in proc.threads] == [["f", "<module>"], [GIL_WAIT, "g"]]


def test_pytorch_test_harness_process_number_is_a_rank_not_a_pid():
    report = read_text((PASTED / "pytorch_pr54818_faulthandler_process_timed_out_barrier.txt").read_text())
    (proc,) = report.processes
    assert proc.pid is None and proc.rank == 3


def test_engine_core_cut_in_get_response_waits_on_the_workers_queue():
    # An EngineCore log whose traceback is cut right below get_response (vllm#41125).
    assert pasted_verdict("vllm_41125_enginecore_log_dequeue_timeout") == "vllm-shm-broadcast-wait"


@pytest.mark.parametrize("invisible", ["\u200b", "\ufeff", "\u00ad", "\u200e", "\u2060"])
def test_invisible_characters_from_web_copies_are_ignored(invisible):
    text = 'Thread 7 (idle): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:2050)\n    main (train.py:9)\n'
    (proc,) = read_text(text.replace(" (", invisible + " (").replace("Main", "Main" + invisible)).processes
    (thread,) = proc.threads
    assert thread.name == "MainThread" and [f.function for f in thread.frames] == ["all_reduce", "main"]


def test_compressed_and_archived_dumps(tmp_path, capsys):
    import gzip
    import zipfile

    text = (PASTED / "accelerate_3104_zero3_allgather.txt").read_bytes()
    gz = tmp_path / "dump.txt.gz"
    gz.write_bytes(gzip.compress(text))
    assert load_source(gz).kind == "text"
    bomb = tmp_path / "bomb.gz"
    bomb.write_bytes(gzip.compress(bytes(20 << 20)))  # 20 MiB of zeros in ~20 KB
    zipped = tmp_path / "dump.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("dump.txt", text)
    junk = tmp_path / "core.bin"
    junk.write_bytes(bytes((i * 7919) % 251 for i in range(200_000)))
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"  \n\t\n")
    for path, says in ((bomb, "once decompressed"), (zipped, "zip archive"), (junk, "binary data"), (empty, "empty")):
        assert main(["replay", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("hangwatch: error:") and says in err and "Traceback" not in err, err


def test_a_thread_waiting_for_the_gil_does_not_outrank_the_thread_holding_it(tmp_path):
    # A main thread busy in Python (active+gil) makes another thread queue in take_gil:
    # that is no lock wait of the queued thread's; the holder decides.
    path = tmp_path / "busy.txt"
    path.write_text('''Process 42: python train.py
Thread 42 (active+gil): "MainThread"
    _compute_stats (myproj/metrics.py:88)
    main (myproj/train.py:200)
Thread 57 (idle): "Thread-3 (_writer)"
    take_gil (libpython3.11.so.1.0)
    PyEval_RestoreThread (libpython3.11.so.1.0)
    write (myproj/writer.py:30)
    run (threading.py:982)
''')
    (incident,) = analyse([path], SIGS)
    c = incident.classification
    assert c.signature_id is None and c.thread_name == "MainThread"
    # Without a holder in the paste, the GIL wait is the verdict (a GIL deadlock).
    path.write_text(path.read_text().replace("(active+gil)", "(idle)"))
    (incident,) = analyse([path], SIGS)
    assert incident.classification.signature_id == "lock-wait"


def test_frame_with_its_line_number_left_out():
    (proc,) = read_text("    barrier (torch/distributed/distributed_c10d.py:...)\n    main (train.py:N)\n").processes
    assert [(f.function, f.line) for f in proc.threads[0].frames] == [("barrier", None), ("main", None)]


def test_py_spy_top_flattened_onto_one_line_is_refused():
    with pytest.raises(InputError, match="py-spy top or record"):
        load_source(PASTED / "vllm_idle_cpu_pyspy_top_flattened_digest.txt")


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


def test_pdb_where_is_a_stack():
    text = """> /app/train.py(88)main()
-> dist.barrier()
(Pdb) where
  /usr/lib/python3.10/runpy.py(86)_run_code()
-> exec(code, run_globals)
  /app/train.py(120)<module>()
-> main()
  /app/train.py(88)main()
-> dist.barrier()
> /usr/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py(3685)barrier()->None
-> work.wait()
(Pdb)
"""
    (proc,) = read_text(text).processes
    (thread,) = proc.threads
    assert thread.name == "MainThread"
    assert [(f.function, f.line) for f in thread.frames] == [("barrier", 3685), ("main", 88), ("<module>", 120), ("_run_code", 86)]
