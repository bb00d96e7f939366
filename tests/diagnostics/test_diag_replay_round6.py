"""Replay on a sixth round of real pasted dumps (data/pasted/, held out): the frames a
thread is *in* decide over the loop it was called from (a DataLoader joining a worker
that never exits), a collective that is still creating its communicator, AOTAutograd's
compile, Inductor's runtime autotuning synchronize, NCCL's own background threads,
gdb frames wrapped in backticks, and Horovod's stall warning."""

from __future__ import annotations

import json

import pytest

from diag_helpers import PASTED, pasted_verdict
from hangwatch.cli.main import main
from hangwatch.diagnostics.pastes import read_text

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # _next_data -> _shutdown_workers -> join -> os.waitpid: a worker that never exits,
        # not a loader waiting for data
        ("pytorch_26072_ctrl_c_shutdown_workers_waitpid", "child-process-wait"),
        # [rank9]: C++ frames: allreduce -> getNCCLComm -> broadcastUniqueNCCLID
        ("pytorch_131781_rank_prefixed_cpp_frames_unique_id", "nccl-comm-init"),
        # a traceback cut inside AOTAutograd's aot_dispatch_autograd
        ("pytorch_118492_compile_forever_traceback_cut", "torch-compile-stall"),
        # Inductor's runtime autotuning (do_bench synchronizes), cut before the synchronize
        ("pytorch_133053_autotune_traceback_dev_shm_paths_cut", "cuda-synchronize-wait"),
        # only NCCL's proxy and IB async-event threads were pasted: nothing decides
        ("nccl_719_gdb_proxy_and_ib_helper_threads", "all-idle"),
    ],
)
def test_round6_real_dumps(name, expected):
    assert pasted_verdict(name) == expected


def test_aot_autograd_runtime_wrappers_are_not_a_compile():
    # ms-swift#8506's rank runs the compiled graph through AOTAutograd's runtime wrappers
    # (runtime_wrapper, call_func_at_runtime_with_args, forward in aot_autograd.py): the
    # compile-time patterns must not claim it.
    assert pasted_verdict("msswift_8506_header_glued_to_prose_symm_mem") != "torch-compile-stall"


def test_gdb_frames_each_wrapped_in_backticks_parse():
    # py-spy#565: a quoted gdb thread header, then every frame as inline code, one cut
    # before its closing backtick; before, no line looked like a frame.
    report = read_text((PASTED / "pyspy_565_quoted_backticked_gdb_rust_frames.txt").read_text())
    (proc,) = report.processes
    names = [f.function for t in proc.threads for f in t.frames]
    assert names[:2] == ["sccp", "waitpid"] and len(names) == 7
    assert names[-1].startswith("std::sys_common::backtrace::__rust_begin_short_backtrace")


def test_star_bulleted_frames_with_source_on_the_same_line():
    # tensorflow#5289: '***  File: "x.py", line 79, in main_thread2  session2.run(...)'.
    report = read_text((PASTED / "tensorflow_5289_star_prefixed_file_lines_session_run.txt").read_text())
    (proc,) = report.processes
    (thread,) = proc.threads
    assert [(f.function, f.line) for f in thread.frames] == [
        ("asarray", 531), ("_run", 938), ("run", 767), ("main_thread2", 79), ("<module>", 93)]


def test_markdown_bullets_before_py_spy_frames():
    text = 'Thread 7 (idle): "MainThread"\n* wait (threading.py:320)\n\u2022 get (queue.py:171)\n* main (train.py:9)\n'
    (proc,) = read_text(text).processes
    assert [f.function for f in proc.threads[0].frames] == ["wait", "get", "main"]


def test_horovod_stall_warning_names_the_ranks_that_never_submitted(capsys):
    # horovod#364: six ranks ready in every stalled allreduce, ranks 1 and 5 never submit.
    rc = main(["replay", "--json", str(PASTED / "horovod_364_stall_warning_ready_ranks.txt")])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0
    (incident,) = data["incidents"]
    assert incident["signature_id"] == "nccl-collective-wait"
    assert sorted(r["rank"] for r in data["processes"]) == [0, 2, 3, 4, 6, 7]
    assert "rank 1, 5" in json.dumps(data)


def test_horovod_stall_ops_on_one_line_and_missing_ranks():
    # Older logs put every stalled op on the warning's line; newer ones list missing ranks.
    text = ("WARNING: One or more tensors were submitted to be reduced ... Stalled ops: "
            "allreduce.conv1.weight [ready ranks: 1, 0, 3], allreduce.bn1.bias [ready ranks: 1, 0, 3], "
            "broadcast.step [missing ranks: 2]\n")
    report = read_text(text)
    assert sorted(p.rank for p in report.processes) == [0, 1, 3]
    assert {p.threads[0].frames[0].function for p in report.processes} == {"horovod:allreduce"}
    assert {p.threads[0].frames[0].file for p in report.processes} == {"conv1.weight"}


def test_gdb_stop_line_names_the_thread_and_bt_does_not_repeat_it():
    # pytorch/xla#945: 'Thread 1 "python" received signal SIGINT', the stop location, a
    # source line, then bt whose "#0" is that location again. Before: two headerless
    # frame lists, and a lone unnamed thread read as idle.
    report = read_text((PASTED / "xla_945_gdb_sigint_sem_wait_model_save.txt").read_text())
    (proc,) = report.processes
    (thread,) = proc.threads
    assert thread.name == "MainThread"
    assert [f.function for f in thread.frames] == ["futex_abstimed_wait_cancelable", "do_futex_wait", "__new_sem_wait_slow"]


def test_gdb_thread_header_without_libthread_db():
    text = ("Thread 2 (LWP 3638147):\n#0  0x00007f39c9af010a in waitpid () at waitpid.c:6\n"
            "Thread 1 (LWP 3638146):\n#0  0x00007f39c9af0200 in poll () from /lib/libc.so\n"
            "#1  0x00007f39c9af0300 in ncclAllReduce () from /usr/lib/libnccl.so.2\n")
    (proc,) = read_text(text).processes
    assert [(t.ident, t.name, len(t.frames)) for t in proc.threads] == [("3638147", "", 1), ("3638146", "MainThread", 2)]


@pytest.mark.parametrize(
    ("name", "missing"),
    [
        # Keras tensor names with "/" and no op prefix, only "[missing ranks: ...]" lines
        ("horovod_457_missing_ranks_metric_average", (0, 1, 3, 4)),
        # TensorFlow op names ("HorovodBroadcast_..."), "Stalled ops:" on its own line
        ("horovod_534_broadcast_missing_rank0", (0,)),
    ],
)
def test_horovod_missing_ranks_lines(name, missing):
    report = read_text((PASTED / f"{name}.txt").read_text())
    assert report.horovod_missing is not None and report.horovod_missing[1] == missing
    assert any("never submitted" in n for n in report.notes())
    assert pasted_verdict(name) == "nccl-collective-wait"


def test_horovod_ready_ranks_with_tensorflow_op_names_on_one_line():
    # horovod#134: every stalled op on the warning's own line, names like
    # "v0/tower_0/HorovodAllreduce_..._0 [ready ranks: 2]".
    report = read_text((PASTED / "horovod_134_one_line_ready_rank_tf_names.txt").read_text())
    assert sorted(p.rank for p in report.processes) == [2, 3]
    assert {p.threads[0].frames[0].function for p in report.processes} == {"horovod:allreduce"}


def test_ddp_reducer_waiting_for_its_gradient_allreduce_in_native_frames():
    # Lightning#16307: py-spy --native, no thread header, only C++ frames: Future::wait
    # under c10d::Reducer::finalize_backward.
    assert pasted_verdict("lightning_pr16307_pyspy_native_only_reducer_future_wait") == "nccl-collective-wait"


def test_gdb_stop_line_then_thread_apply_all_bt_is_one_process():
    # After the stop line, `thread apply all bt` prints the stopped thread again under its
    # own header: one process, the stop line's thread replaced by it, and another thread's
    # "#0" in the same function as the stop location kept.
    text = ('Thread 1 "python" received signal SIGINT, Interrupt.\n'
            "0x00007f01 in poll () from /lib/libc.so.6\n"
            "(gdb) thread apply all bt\n\n"
            "Thread 2 (Thread 0x7f02 (LWP 12)):\n"
            "#0  0x00007f03 in poll () from /lib/libc.so.6\n"
            "#1  0x00007f04 in helper_loop () from /usr/lib/libfoo.so\n\n"
            "Thread 1 (Thread 0x7f05 (LWP 11)):\n"
            "#0  0x00007f01 in poll () from /lib/libc.so.6\n"
            "#1  0x00007f06 in ncclAllReduce () from /usr/lib/libnccl.so.2\n")
    (proc,) = read_text(text).processes
    assert proc.pid == 11
    assert [(t.name, [f.function for f in t.frames]) for t in proc.threads] == [
        ("", ["poll", "helper_loop"]), ("MainThread", ["poll", "ncclAllReduce"])]
