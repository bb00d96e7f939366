"""Replay on a tenth round of real pasted dumps (data/pasted/): Horovod gdb sessions over Gloo,
MPI and NCCL, an atexit handler joining Horovod's background thread, a JAX faulthandler abort
whose frames were column-aligned by hand, a torchrun agent from Chinese notes, and blocking
calls on event loops."""

from __future__ import annotations

import pytest

from diag_helpers import PASTED, pasted_verdict, text_verdict
from hangwatch.diagnostics.pastes import read_text

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("horovod_3352_gdb_rank0_gloo_allgather_background_loop", "nccl-collective-wait"),
        ("horovod_3352_gdb_rank1_thread18_gil_acquire_tensor_decref", "lock-wait"),
        ("horovod_361_gdb_openib_allreduce_both_nodes", "nccl-collective-wait"),
        ("horovod_1182_gdb_coordinator_pmpi_gather_missing_ranks", "nccl-collective-wait"),
        # Horovod's finalizer spinning on the GPU events of collectives that never complete.
        ("horovod_3611_gdb_waitforevents_yield_network_failure", "nccl-collective-wait"),
        ("horovod_2437_gdb_atexit_horovod_shutdown_join", "shutdown-join"),
        ("torchrun_agent_notes_zh_agent_threads_healthy", "all-idle"),
        ("qwen_tts_zh_rocm_apu_generate_item_hsa_signal", "cuda-synchronize-wait"),
        # No signature covers these; they must not read as idle or as a known cause.
        ("mrrc_zh_tornado_ioloop_pyaudio_stop_stream", "unknown"),
        ("radio_server_asyncio_sounddevice_raw_read_on_loop", "unknown"),
        ("pyautofit_1528_fatal_aborted_jax_array_value_print", "unknown"),
    ],
)
def test_round10_real_dumps(name, expected):
    assert pasted_verdict(name) == expected


def test_an_atexit_handler_joining_a_thread_in_native_frames_is_the_exit_wait(tmp_path):
    """gdb without py-bt: atexit_callfuncs -> horovod_shutdown -> std::thread::join. Every
    horovod:: frame counted as a collective, so the exit's join read as 'waiting on a peer'."""
    text = """\
Thread 2 (Thread 0x7feb32379100 (LWP 27)):
#0  0x00007feb312a163d in __pthread_timedjoin_ex () from /lib64/libpthread.so.0
#1  0x00007feb1dc2ee27 in std::thread::join() () from /lib64/libstdc++.so.6
#2  0x00007feae9964832 in horovod::common::horovod_shutdown () at horovod/common/operations.cc:727
#3  0x00007feb2ebbb09e in ffi_call_unix64 () from /lib64/libffi.so.6
#4  0x00007feb3191a8a2 in atexit_callfuncs () from /lib64/libpython3.8.so.1.0
#5  0x00007feb3193220d in Py_FinalizeEx () from /lib64/libpython3.8.so.1.0
"""
    assert text_verdict(tmp_path, text) == "shutdown-join"


def test_a_horovod_collective_in_native_frames_is_still_a_collective(tmp_path):
    text = """\
Thread 2 (Thread 0x7fe9be0b1700 (LWP 442)):
#0  0x00007fe934790bce in sched_yield () from /lib64/libc.so.6
#1  0x00007fe93f6c4d46 in horovod::common::(anonymous namespace)::RunLoopOnce (state=...) at horovod/common/operations.cc:1780
#2  0x00007fe93f6c7cab in horovod::common::(anonymous namespace)::BackgroundThreadLoop (state=...) at horovod/common/operations.cc:1650
"""
    assert text_verdict(tmp_path, text) == "nccl-collective-wait"


def test_faulthandler_frames_padded_before_line_are_read():
    """'File ".../array.py",    line 642 in _value': the columns aligned by hand. The padded
    lines were skipped, leaving two of four frames in two headerless lists."""
    report = read_text((PASTED / "pyautofit_1528_fatal_aborted_jax_array_value_print.txt").read_text())
    (proc,) = report.processes
    (thread,) = proc.threads
    assert [f.function for f in thread.frames] == ["_value", "wrapper", "__str__", "<module>"]


def test_a_traceback_frame_padded_before_line_is_read():
    text = """\
Traceback (most recent call last):
  File "/app/train.py",      line 40, in <module>
    main()
  File "/usr/lib/python3.10/threading.py",   line 1096, in join
    self._wait_for_tstate_lock()
"""
    report = read_text(text)
    (proc,) = report.processes
    assert [f.function for t in proc.threads for f in t.frames] == ["join", "<module>"]


def test_a_faulthandler_header_without_its_thread_id_is_a_header():
    """'Current thread (most recent call first):' with the id left out of the paste is the
    dump's own thread header, not stray text before a headerless frame list."""
    text = """\
Fatal Python error: Aborted
Current thread (most recent call first):
  File "/usr/lib/python3.10/threading.py", line 320 in wait
  File "/app/train.py", line 10 in main

Thread 0x... (most recent call first):
  File "/usr/lib/python3.10/queue.py", line 171 in get
"""
    report = read_text(text)
    assert report.headerless_threads == 0
    (proc,) = report.processes
    assert [[f.function for f in t.frames] for t in proc.threads] == [["wait", "main"], ["get"]]


GENERATE_STOP_CHECK = """\
Thread 512 (idle): "MainThread"
    _has_unfinished_sequences (transformers/generation/utils.py:2597)
    _sample (transformers/generation/utils.py:2779)
    generate (transformers/generation/utils.py:2564)
    main (serve.py:40)
"""


def test_generate_stopping_check_innermost_is_the_host_waiting_for_the_stream(tmp_path):
    """bool(tensor) in generate()'s per-token stopping check is a copy to the host: blocked
    there, the host waits for the GPU stream (read as 'unknown' before)."""
    assert text_verdict(tmp_path, GENERATE_STOP_CHECK) == "cuda-synchronize-wait"


def test_generate_stopping_check_with_synced_gpus_is_a_collective(tmp_path):
    """With synced_gpus the check all-reduces a flag first: a rank in that all_reduce waits
    for its peers, the collective wait wins."""
    text = GENERATE_STOP_CHECK.replace(
        '    _has_unfinished_sequences',
        '    all_reduce (torch/distributed/distributed_c10d.py:2501)\n    _has_unfinished_sequences',
    )
    assert text_verdict(tmp_path, text) == "nccl-collective-wait"
