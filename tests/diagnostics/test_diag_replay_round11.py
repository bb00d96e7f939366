"""Replay on an eleventh round of real pasted dumps (data/pasted/): an ncclCommAbort stuck in
its stream synchronize, survivors of a killed all-reduce peer, an NCCL proxy-pool deadlock in
eu-stack frames, and vLLM-Ascend workers whose dummy batch waits on the NPU stream."""

from __future__ import annotations

import pytest

from diag_helpers import pasted_verdict, text_verdict

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("nccl_585_gdb_survivor_custreamsynchronize_peer_killed", "cuda-synchronize-wait"),
        ("vllm_ascend_zh_weight_sync_dummy_batch_aclgraph_sync_padded", "cuda-graph-replay"),
        ("vllm_ascend_pdsep_dummy_run_item_npu_native_zh", "cuda-synchronize-wait"),
        # Thread 1 cut after two unnamed libcuda frames: the abort thread beside it decides.
        ("nccl_829_gdb_commabort_strongstream_synchronize_cut", "process-group-destroy"),
        ("sglang_pr17870_native_ipc_deleter_custreamsync_bare_names", "cuda-synchronize-wait"),
        ("traccc_569_gdb_bt_cudastreamsync_fitting_kernel", "cuda-synchronize-wait"),
    ],
)
def test_round11_real_dumps(name, expected):
    assert pasted_verdict(name) == expected


def test_a_worker_running_an_rpc_under_its_busy_loop_is_not_idle(tmp_path):
    """worker_busy_loop also runs every RPC it is sent: within six frames of it a worker
    synchronizing an unknown device stream was read as 'idle in its loop' (all-idle, the
    advice then says the work never arrived). Idle means reading the message queue."""
    busy = (
        'Thread 7 (active): "MainThread"\n'
        "    wait_done (mylib/streams.py:85)\n"
        "    forward (mylib/model.py:12)\n"
        "    _dummy_run (mylib/runner.py:40)\n"
        "    execute_dummy_batch (mylib/worker.py:533)\n"
        "    worker_busy_loop (vllm/v1/executor/multiproc_executor.py:858)\n"
    )
    assert text_verdict(tmp_path, busy) == "unknown"
    parked = (
        'Thread 7 (idle): "MainThread"\n'
        "    poll (zmq/sugar/poll.py:106)\n"
        "    wait (vllm/distributed/device_communicators/shm_broadcast.py:186)\n"
        "    acquire_read (vllm/distributed/device_communicators/shm_broadcast.py:674)\n"
        "    dequeue (vllm/distributed/device_communicators/shm_broadcast.py:755)\n"
        "    worker_busy_loop (vllm/v1/executor/multiproc_executor.py:963)\n"
    )
    # Parked in the queue the loop is still recognised (alone, its queue wait is the verdict).
    assert text_verdict(tmp_path, parked) == "vllm-shm-broadcast-wait"


def test_ascend_runtime_synchronize_and_item_are_a_synchronize_wait(tmp_path):
    """CANN's stream synchronize (aclrtSynchronizeStreamWithTimeout -> rtStreamSynchronize...)
    and torch_npu's item() (at::ops::local_scalar_dense, no underscore) matched nothing."""
    native = (
        'Thread 100 (idle): "MainThread"\n'
        "    nanosleep (libc.so.6)\n"
        "    rtStreamSynchronizeWithTimeout (libruntime.so)\n"
        "    aclrtSynchronizeStreamWithTimeoutImpl (libacl_rt_impl.so)\n"
        "    step (mylib/loop.py:10)\n"
    )
    assert text_verdict(tmp_path, native) == "cuda-synchronize-wait"
    item = (
        'Thread 100 (idle): "MainThread"\n'
        "    at::ops::local_scalar_dense::call (libtorch_cpu.so)\n"
        "    at::native::item (libtorch_cpu.so)\n"
        "    step (mylib/loop.py:10)\n"
    )
    assert text_verdict(tmp_path, item) == "cuda-synchronize-wait"
    py = (
        'Thread 100 (active): "MainThread"\n'
        "    synchronize (torch_npu/npu/streams.py:85)\n"
        "    step (mylib/loop.py:10)\n"
    )
    assert text_verdict(tmp_path, py) == "cuda-synchronize-wait"


def test_a_pyspy_thread_header_glued_to_the_end_of_a_sentence_is_read():
    """'...卡死栈信息Thread 100777 (idle): "MainThread"' then the frames: the header was prose,
    so the frames had no thread (pid ?, an unnamed thread)."""
    from hangwatch.diagnostics.pastes import read_text

    frames = "\nwait (mylib/streams.py:85)\nstep (mylib/loop.py:10)\n"
    for glue in ("原因是卡死，栈信息", "the stack was: "):
        report = read_text(f'{glue}Thread 100777 (idle): "MainThread"' + frames)
        (proc,) = report.processes
        (thread,) = proc.threads
        assert (thread.ident, thread.name, len(thread.frames)) == ("100777", "MainThread", 2)
    # A sentence that merely names a thread is no header.
    report = read_text('see Thread 12 (idle) in the log\nwait (mylib/streams.py:85)\nstep (mylib/loop.py:10)\n')
    assert [t.name for p in report.processes for t in p.threads] != ["MainThread"]


def test_a_fenced_list_of_native_names_alone_is_a_stack(tmp_path):
    """sglang#17870: a `py-spy dump --native` copied as bare names, one per line, notes after
    some; nothing else in the paste is a stack. It was refused as 'not a dump'."""
    paste = (
        "The native stack of the diverged rank:\n\n```\n"
        "THPVariable_dealloc\n"
        "c10::TensorImpl::~TensorImpl\n"
        "c10::StorageImpl::release_resources\n"
        "THPStorage_newSharedCuda(...)::{lambda(void*)#1}::_FUN   <- the deleter\n"
        "cudaStreamSynchronize\n"
        "cuStreamSynchronize                                       <- never returns\n"
        "```\n"
    )
    assert text_verdict(tmp_path, paste) == "cuda-synchronize-wait"


@pytest.mark.parametrize(
    "names",
    [
        ["gpu_memory_utilization", "max_model_len", "tensor_parallel_size", "enforce_eager"],
        ["LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM", "GemmaForCausalLM"],
    ],
)
def test_a_fenced_list_of_config_keys_or_class_names_is_still_no_dump(tmp_path, names):
    from hangwatch.diagnostics.errors import DiagnosticsError

    with pytest.raises(DiagnosticsError):
        text_verdict(tmp_path, "Supported:\n```\n" + "\n".join(names) + "\n```\n")


def test_a_main_thread_with_a_named_native_frame_still_decides(tmp_path):
    """The opaque-main rule is for a thread 1 that names nothing: one blocked in a named
    driver call (cudaStreamSynchronize) keeps deciding over a background thread."""
    paste = (
        "Thread 2 (Thread 0x7f01 (LWP 12)):\n"
        "#0  0x00007f in ncclCommAbort () from /usr/lib/libnccl.so.2\n"
        "\n"
        "Thread 1 (Thread 0x7f02 (LWP 11)):\n"
        "#0  0x00007f in ?? () from /lib64/libcuda.so.1\n"
        "#1  0x00007f in cudaStreamSynchronize () from /usr/lib/libcudart.so.12\n"
    )
    assert text_verdict(tmp_path, paste) == "cuda-synchronize-wait"


def test_two_containers_pid_1_are_two_processes_not_two_looks():
    """Every container's first process is pid 1: two dumps of 'Process 1' whose other
    threads share no id are two processes (marin#7344 read as one process looked at twice,
    and the second look's event-loop thread made it 'all-idle')."""
    from hangwatch.diagnostics.stacks import Frame, ProcessDump, ThreadDump, group_series

    def dump(rnd, *idents):
        threads = (ThreadDump("1", "MainThread", (Frame("step", "train.py", 3),)),) + tuple(
            ThreadDump(i, "worker", (Frame("select", "selectors.py", 468),)) for i in idents)
        return ProcessDump(1, threads, round=rnd)

    assert [len(s.dumps) for s in group_series([dump(1, "1440", "1441"), dump(2, "1439")])] == [1, 1]
    # The same process looked at twice keeps its threads: one series of two looks.
    assert [len(s.dumps) for s in group_series([dump(1, "1440", "1441"), dump(2, "1441")])] == [2]
    # Only the main thread shown: nothing says they differ.
    assert [len(s.dumps) for s in group_series([dump(1), dump(2)])] == [2]
