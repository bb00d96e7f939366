"""Replay on an eighth round of real pasted dumps (data/pasted/, held out): an FSDP2
reduce-scatter watchdog record wrapped over lines, DistributedDataParallel's first broadcast
stuck creating its communicator, a process-group abort joining an NCCL thread (pstack), a
traceback excerpt of a collective mismatch in a checkpoint save, and gdb attached with
`gdb -p PID -ex "thread apply all bt" --batch`, whose attach preamble prints where the main
thread stopped before any thread header."""

from __future__ import annotations

import pytest

from diag_helpers import pasted_verdict
from hangwatch.diagnostics.pastes import read_text

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("olmo_core_829_fsdp2_reduce_scatter_worknccl_wrapped", "nccl-collective-wait"),
        ("pytorch_52916_gdb_ddp_ctor_ncclgroupend_getncclcomm", "nccl-comm-init"),
        ("deepep_330_pstack_ncclcommabort_commfree_join", "process-group-destroy"),
        ("megatron_4910_traceback_excerpt_all_gather_object_cut", "nccl-collective-wait"),
    ],
)
def test_round8_real_dumps(name, expected):
    assert pasted_verdict(name) == expected


# gdb attached to a live process: the libthread_db preamble, then where the attached (main)
# thread stopped, a bare "0x.. in f () from lib" with no "#N"; the bt repeats it as thread 1's "#0".
ATTACH_PREAMBLE = """\
[Thread debugging using libthread_db enabled]
Using host libthread_db library "/lib/x86_64-linux-gnu/libthread_db.so.1".
0x00007f0000001000 in cudaStreamSynchronize () from /usr/lib/libcudart.so.12

Thread 3 (Thread 0x7f00000a0640 (LWP 303) "pt_autograd_0"):
#0  0x00007f0000002000 in pthread_cond_wait () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007f0000003000 in start_thread () from /lib/x86_64-linux-gnu/libc.so.6
"""

THREAD_1 = """
Thread 1 (Thread 0x7f00000b0740 (LWP 300) "python"):
#0  0x00007f0000001000 in cudaStreamSynchronize () from /usr/lib/libcudart.so.12
#1  0x00007f0000004000 in at::cuda::stream_synchronize () from /usr/lib/libtorch_cuda.so
"""


def test_gdb_attach_stop_location_is_the_main_thread_when_its_bt_is_cut_off():
    """Cut before thread 1's bt, the stop location is all there is of the main thread; it was
    read as a thread of its own with no name (and headlined), beside the named helpers."""
    dump = read_text(ATTACH_PREAMBLE)
    (proc,) = dump.processes
    names = [t.name for t in proc.threads]
    assert "MainThread" in names
    main = next(t for t in proc.threads if t.name == "MainThread")
    assert [f.function for f in main.frames] == ["cudaStreamSynchronize"]
    assert dump.headerless_threads == 0


def test_gdb_attach_stop_location_is_not_a_second_main_thread_when_its_bt_follows():
    dump = read_text(ATTACH_PREAMBLE + THREAD_1)
    (proc,) = dump.processes
    assert sorted(t.name for t in proc.threads) == ["MainThread", "pt_autograd_0"]
    main = next(t for t in proc.threads if t.name == "MainThread")
    assert [f.function for f in main.frames][:2] == ["cudaStreamSynchronize", "at::cuda::stream_synchronize"]


@pytest.mark.parametrize(
    "command",
    [
        "`$ pstack 4119",  # DeepEP#330: pstack's command, opened as inline code
        "$ gstack 4119",
        'gdb -p 4119 -ex interrupt -ex "thread apply all bt" --batch',  # Triton-distributed#81
        "(gdb) attach 4119",
        "$ eu-stack -p 4119",
    ],
)
def test_the_pid_named_by_a_native_stack_command_is_the_process_that_follows(command):
    """Only py-spy's and pystack's commands gave the pid of the dump under them."""
    dump = read_text(
        command + "\n"
        'Thread 2 (Thread 0x7ff5dd789700 (LWP 4987) "cuda-EvtHandlr"):\n'
        "#0  0x00007ffa29e34ddd in poll () from /usr/lib64/libc.so.6\n"
    )
    (proc,) = dump.processes
    assert proc.pid == 4119


def test_prose_about_gdb_is_not_a_pid():
    dump = read_text(
        "I used gdb to attach 3 processes\n"
        'Thread 2 (Thread 0x7ff5dd789700 (LWP 4987) "cuda-EvtHandlr"):\n'
        "#0  0x00007ffa29e34ddd in poll () from /usr/lib64/libc.so.6\n"
    )
    (proc,) = dump.processes
    assert proc.pid is None
