"""Replay on a ninth round of real pasted dumps (data/pasted/): a traceback re-wrapped after
its line numbers (', line 235,' / ' in <module>'), a py-spy thread followed by a bare gdb
`bt` of the same thread, a main thread spinning in unsymbolised libcuda frames, and
torch.distributed.launch waiting in subprocess's wait for its training child."""

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
