"""Replay on a ninth round of real pasted dumps (data/pasted/): a traceback re-wrapped after
its line numbers (', line 235,' / ' in <module>'), a py-spy thread followed by a bare gdb
`bt` of the same thread, a main thread spinning in unsymbolised libcuda frames,
torch.distributed.launch waiting in subprocess's wait for its training child, a py-spy dump
quoted in a source comment, and an idle vLLM deployment dumped whole."""

from __future__ import annotations

import pytest

from diag_helpers import PASTED, pasted_verdict, text_verdict
from hangwatch.diagnostics.pastes import read_text

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # "Python:" py-spy thread, then "And native:" gdb bt without a thread header.
        ("returnn_1811_ctc_loss_python_then_native_bt", "cuda-synchronize-wait"),
        ("nccl_613_gdb_fragment_memcpy_behind_nccl_kernel", "h2d-copy-stuck"),
        ("pytorch_126624_rank_prefixed_faulthandler_inductor_precompile_sync", "torch-compile-stall"),
        ("mitmproxy_4451_stacktracer_idle_pool_workers", "all-idle"),
        ("sglang_xpu_tp_first_allreduce_oneccl_wrong_nic", "nccl-collective-wait"),
        ("flydsl_megamoe_inline_arrow_synchronize_divergent_ranks", "cuda-synchronize-wait"),
        ("sglang_pd_two_node_pynccl_warmup_sync_launcher_waits", "nccl-comm-init"),
        ("smg_tokenspeed_refit_trainer_broadcast_engines_idle", "nccl-collective-wait"),
    ],
)
def test_round9_real_dumps(name, expected):
    assert pasted_verdict(name) == expected


def test_a_traceback_wrapped_after_its_line_number_is_one_stack():
    """'File "launch.py", line 235,' + ' in <module>': the wrapped lines were skipped, which
    cut the stack in two (runpy's frames alone as the main thread, read as idle)."""
    report = read_text((PASTED / "pytorch_45042_launch_waitpid_traceback.txt").read_text())
    (proc,) = report.processes
    (thread,) = proc.threads
    assert [f.function for f in thread.frames] == ["_try_wait", "wait", "main", "<module>", "_run_code", "_run_module_as_main"]
    assert report.skipped == 0


def test_a_launcher_in_subprocess_wait_waits_for_its_child():
    """torch.distributed.launch (and any parent) in Popen.wait -> os.waitpid: the child is the
    one to look at, the same wait as multiprocessing's join."""
    assert pasted_verdict("pytorch_45042_launch_waitpid_traceback") == "child-process-wait"


def test_a_main_thread_in_unsymbolised_libcuda_is_not_idle():
    """gdb shows only '?? () from libcuda.so.1' under clock_gettime for the thread that called
    ncclAllReduce: it is inside the driver, and "every process waits for work" was wrong."""
    assert pasted_verdict("nccl_1766_gdb_main_spinning_in_libcuda") == "unknown"


DRIVER_POLLER = """\
Thread 2 (Thread 0x7f0000000200 (LWP 101) "cuda-EvtHandlr"):
#0  0x00007f0000003000 in poll () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007f0000004000 in ?? () from /usr/lib/x86_64-linux-gnu/libcuda.so.1
#2  0x00007f0000005000 in ?? () from /usr/lib/x86_64-linux-gnu/libcuda.so.1
#3  0x00007f0000006000 in start_thread () from /lib/x86_64-linux-gnu/libc.so.6
#4  0x00007f0000007000 in clone () from /lib/x86_64-linux-gnu/libc.so.6
"""


def test_a_thread_the_driver_started_stays_idle(tmp_path):
    """libcuda's own event poller (start_thread -> ?? libcuda -> poll), the only thread of a
    gdb excerpt: it waits for driver events, it is not the job blocked on the device."""
    assert text_verdict(tmp_path, DRIVER_POLLER) == "all-idle"


def test_a_bare_native_bt_under_a_python_stack_decides(tmp_path):
    """The bare bt is the native half of the pasted thread: its synchronize is the verdict
    even though the Python frames alone match nothing."""
    text = (
        'Thread 7 (active): "MainThread"\n'
        "    step (mytrainer/loop.py:40)\n"
        "    <module> (train.py:3)\n"
        "```\n"
        "And native:\n"
        "```\n"
        "#0  0x00007f0000001000 in ?? () from /lib64/libcuda.so.1\n"
        "#1  0x00007f0000002000 in cudaStreamSynchronize () from /usr/lib/libcudart.so.12\n"
    )
    assert text_verdict(tmp_path, text) == "cuda-synchronize-wait"


def test_a_dump_quoted_in_a_source_comment_is_read():
    """Every line behind '# ' (a py-spy dump kept in a code comment): refused as 'no line
    looks like a stack frame'. It is the exiting executor joining its own children."""
    report = read_text((PASTED / "loky_executor_code_comment_exit_join_children.txt").read_text())
    (proc,) = report.processes
    assert proc.pid == 73472
    assert [f.function for f in proc.threads[0].frames][:5] == ["select", "wait", "poll", "wait", "join"]
    assert pasted_verdict("loky_executor_code_comment_exit_join_children") == "shutdown-join"


def test_gdb_frame_numbers_are_no_comment_marker():
    report = read_text("#0  0x00007f0000001000 in cudaStreamSynchronize () from /usr/lib/libcudart.so.12\n")
    assert report.processes[0].threads[0].frames[0].function == "cudaStreamSynchronize"


def test_workers_waiting_for_an_idle_engine_are_idle():
    """A vLLM worker parked in its message queue and the engine core waiting for requests:
    nobody is stuck, the work never arrived (was: 'waiting on the shm_broadcast queue')."""
    assert pasted_verdict("vllm_idle_worker_dequeue_and_enginecore_input_queue") == "all-idle"


def test_workers_waiting_for_a_busy_engine_stay_a_queue_wait(tmp_path):
    """The same worker next to an engine core stuck waiting for the workers' replies is
    the queue wait, not idleness."""
    text = (PASTED / "vllm_idle_worker_dequeue_and_enginecore_input_queue.txt").read_text()
    engine_idle = ("    wait (threading.py:355)\n    get (queue.py:171)\n"
                   "    _process_input_queue (vllm/v1/engine/core.py:1480)\n    run_busy_loop (vllm/v1/engine/core.py:1458)")
    engine_waiting = ("    dequeue (vllm/distributed/device_communicators/shm_broadcast.py:794)\n"
                      "    get_response (vllm/v1/executor/multiproc_executor.py:387)\n"
                      "    step (vllm/v1/engine/core.py:300)\n    run_busy_loop (vllm/v1/engine/core.py:1458)")
    assert engine_idle in text
    text = text.replace(engine_idle, engine_waiting)
    assert text_verdict(tmp_path, text) == "vllm-shm-broadcast-wait"



WORKER_STUCK = """\
Thread 339 (idle): "MainThread"
    read (fsspec/caching.py:120)
    __getitem__ (mydata/shards.py:88)
    fetch (torch/utils/data/_utils/fetch.py:52)
    _worker_loop (torch/utils/data/_utils/worker.py:308)
    run (multiprocessing/process.py:108)
    _bootstrap (multiprocessing/process.py:314)
    _launch (multiprocessing/popen_fork.py:71)
"""
WORKER_IDLE = """\
Thread 340 (idle): "MainThread"
    wait (threading.py:331)
    get (multiprocessing/queues.py:113)
    _worker_loop (torch/utils/data/_utils/worker.py:275)
    run (multiprocessing/process.py:108)
"""
LOADER_WAITS = """\
Thread 41 (idle): "MainThread"
    wait (threading.py:331)
    get (queue.py:180)
    _try_get_data (torch/utils/data/dataloader.py:1133)
    _get_data (torch/utils/data/dataloader.py:1294)
    _next_data (torch/utils/data/dataloader.py:1332)
    __next__ (torch/utils/data/dataloader.py:631)
    train (train.py:80)
"""


def test_a_dataloader_worker_stuck_in_its_dataset_is_not_the_loader_waiting(tmp_path):
    """A worker process (its stack under _worker_loop) stuck in the dataset's code was read
    as 'DataLoader waiting for a worker', which sends the reader to look for the worker it is."""
    assert text_verdict(tmp_path, WORKER_STUCK) == "dataloader-worker-stuck"
    assert pasted_verdict("rich_2046_dataloader_worker_rich_live_lock") == "dataloader-worker-stuck"
    assert text_verdict(tmp_path, WORKER_IDLE) == "all-idle"
    assert text_verdict(tmp_path, LOADER_WAITS) == "dataloader-wait"
