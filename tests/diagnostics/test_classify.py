"""Classification against the shipped signatures: priorities, frozen threads, suspects among
ranks, and the signatures on library and native frames."""

from __future__ import annotations

import pytest

from diag_helpers import DATA
from hangwatch.diagnostics.classify import classify
from hangwatch.diagnostics.pyspy import parse_json, parse_text
from hangwatch.diagnostics.signatures import load_signatures
from hangwatch.diagnostics.stacks import Frame, group_series, ProcessDump, ProcessSeries, ThreadDump


SIGS = load_signatures()


def _classify(name: str, signatures=SIGS):
    path = DATA / name
    dumps = [parse_json(path.read_text())] if name.endswith(".json") else parse_text(path.read_text())
    return classify(group_series(dumps), signatures)


@pytest.mark.parametrize(
    ("fixture", "signature", "evidence"),
    [
        ("gpu_model_runner_native.txt", "cuda-synchronize-wait", "cuEventSynchronize (libcuda.so.1)"),
        ("nccl_all_reduce.txt", "nccl-collective-wait", "all_reduce (distributed_c10d.py:2501)"),
        ("gdn_chunk.txt", "gated-deltanet-kernel", "chunk_gated_delta_rule (chunk.py:311)"),
        ("cuda_graph_real.json", "vllm-cuda-graph-replay", "CUDAGraphWrapper.replay (cuda_graph.py:14)"),
    ],
)
def test_each_fixture_dump_matches_its_signature(fixture, signature, evidence):
    c = _classify(fixture)
    assert c.signature_id == signature
    assert evidence in [f.render() for f in c.evidence]
    assert c.thread_name == "MainThread" and c.advice


def test_cuda_graph_replay_anywhere_beats_the_synchronize_it_causes():
    c = _classify("cuda_graph_and_sync.txt")
    assert c.signature_id == "vllm-cuda-graph-replay"
    assert c.thread_name == "cuda-graph-runner"
    assert "cuda-synchronize-wait" in {m.signature_id for m in c.also}


def test_unknown_reports_innermost_own_frames():
    # With no signature, an HTTP read is named by its blocking call's family; its evidence
    # is still the innermost own frames.
    c = _classify("unknown_reward.txt")
    assert c.signature_id == "socket-read"
    # ssl.py and socket.py are standard library: the first telling frame is the HTTP client
    # library or the user's code, never stdlib.
    assert all(not f.is_stdlib for f in c.evidence)
    assert [f.render() for f in c.evidence] == [
        "_make_request (connectionpool.py:537)",
        "urlopen (connectionpool.py:793)",
        "send (adapters.py:667)",
        "post (api.py:115)",
        "score_with_judge (judge.py:48)",
    ]
    own = (Frame("score", "judge.py", 3), Frame("main", "train.py", 1))
    c = classify(group_series([ProcessDump(1, (ThreadDump("1", "MainThread", own),))]), SIGS)
    assert c.signature_id is None and c.title.startswith("No known signature")
    assert [f.render() for f in c.evidence] == ["score (judge.py:3)", "main (train.py:1)"]


def test_a_frozen_match_beats_a_thread_that_moved():
    replay = (Frame("replay", "vllm/compilation/cuda_graph.py", 10),)
    # The waiter runs own code (engine.py): a worker thread, not a helper.
    lock = (Frame("Event.wait", "/usr/lib/python3.11/threading.py", 629), Frame("wait_for_result", "engine.py", 40))
    r1 = ProcessDump(1, (ThreadDump("1", "MainThread", replay), ThreadDump("2", "waiter", lock)), round=1)
    r2 = ProcessDump(1, (ThreadDump("1", "MainThread", (Frame("replay", "vllm/compilation/cuda_graph.py", 11),)), ThreadDump("2", "waiter", lock)), round=2)
    c = classify(group_series([r1, r2]), SIGS)
    assert c.signature_id == "event-wait" and c.frozen is True  # (Event.wait: the lock-wait signature, refined)
    c_all_moving = classify((ProcessSeries(1, (r1, r2)),), [s for s in SIGS if s.id != "lock-wait"])
    assert c_all_moving.signature_id == "vllm-cuda-graph-replay" and c_all_moving.frozen is False


# --- thread roles ---------------------------------------------------------------------
# Synthetic stacks (frames as py-spy prints them), one per rule.

def _proc(*threads, pid=999, cmd=""):
    return group_series([ProcessDump(pid, tuple(ThreadDump(str(i), name, tuple(frames)) for i, (name, frames) in enumerate(threads, 1)), cmd)])


TQDM = ("Thread-2", [Frame("wait", "threading.py", 359), Frame("wait", "threading.py", 655), Frame("run", "tqdm/_monitor.py", 60)])


RAY_IMPORT = ("ray_import_thread", [Frame("wait", "threading.py", 359), Frame("_run", "ray/_private/import_thread.py", 70)])


def test_a_helpers_lock_wait_never_outranks_the_main_thread():
    main = ("MainThread", [Frame("forward", "model/block.py", 88), Frame("training_step", "trainer.py", 10)])
    c = classify(_proc(main, TQDM, RAY_IMPORT), SIGS)
    assert c.signature_id is None and c.thread_name == "MainThread"
    assert "forward (block.py:88)" in [f.render() for f in c.evidence]


def test_only_idle_helpers_left_is_idle_no_signature():
    c = classify(_proc(TQDM, RAY_IMPORT, ("ThreadPoolExecutor-0_0", [Frame("_worker", "concurrent/futures/thread.py", 90)])), SIGS)
    assert c.signature_id == "all-idle" and c.title.startswith("Idle, no signature")


POOL_WORKER = ThreadDump("1", "MainThread", (Frame("get", "multiprocessing/queues.py", 365), Frame("worker", "multiprocessing/pool.py", 114),
                                                 Frame("run", "multiprocessing/process.py", 108)))


def test_pool_workers_idle_without_their_parent_point_upstream():
    """Idle Pool workers dumped alone are no lost wake-up of the whole job: the parent that
    feeds them (not dumped) is where the work stopped, and their loop's id says so. Dumped
    with a busy parent, the parent decides; a Celery consumer and child idle together are a
    whole idle worker."""
    workers = group_series([ProcessDump(101, (POOL_WORKER,)), ProcessDump(102, (POOL_WORKER,))])
    c = classify(workers, SIGS)
    assert c.signature_id == "pool-worker-idle" and "parent" in c.advice
    child = ProcessDump(37, (ThreadDump("1", "MainThread", (Frame("_recv", "billiard/connection.py", 425),)),))
    consumer = ProcessDump(10, (ThreadDump("1", "MainThread", (Frame("poll", "kombu/utils/eventio.py", 83),)),))
    assert classify(group_series([child]), SIGS).signature_id == "task-queue-worker-idle"
    assert classify(group_series([child, consumer]), SIGS).signature_id == "all-idle"


def test_an_idle_loop_is_idle_not_a_lock_wait():
    engine = ("MainThread", [Frame("wait", "threading.py", 320), Frame("get", "queue.py", 171),
                             Frame("_process_input_queue", "vllm/v1/engine/core.py", 1249), Frame("run_busy_loop", "vllm/v1/engine/core.py", 1227)])
    assert classify(_proc(engine), SIGS).signature_id == "all-idle"
    # ... but a stall that outranks the loop still wins: a worker parked in its message queue.
    worker = ("MainThread", [Frame("acquire_read", "vllm/distributed/device_communicators/shm_broadcast.py", 698),
                             Frame("dequeue", "vllm/distributed/device_communicators/shm_broadcast.py", 779),
                             Frame("worker_busy_loop", "vllm/v1/executor/multiproc_executor.py", 973)])
    assert classify(_proc(worker), SIGS).signature_id == "vllm-shm-broadcast-wait"


def test_a_main_thread_without_a_name_is_known_by_its_id():
    main = ("", [Frame("all_reduce", "torch/distributed/distributed_c10d.py", 2948)])
    c = classify(group_series([ProcessDump(7, (ThreadDump("7", "", tuple(main[1])),))]), SIGS)
    assert c.signature_id == "nccl-collective-wait"


# --- the new signatures, on synthetic stacks shaped like the libraries' own frames -----

@pytest.mark.parametrize(
    ("frames", "expected"),
    [
        ([("replay", "torch/cuda/graphs.py", 88), ("run_fullgraph", "vllm/v1/worker/gpu/cudagraph_utils.py", 301),
          ("execute_model", "vllm/v1/worker/gpu/model_runner.py", 700)], "vllm-cuda-graph-replay"),
        ([("replay", "torch/cuda/graphs.py", 88), ("replay", "sglang/srt/model_executor/cuda_graph_runner.py", 700)], "cuda-graph-replay"),
        ([("ncclCommWindowRegister", "libnccl.so.2", None), ("register_symm", "sglang/srt/distributed/device_communicators/pynccl_allocator.py", 90)],
         "symm-mem-registration"),
        ([("rendezvous", "torch/distributed/_symmetric_memory/__init__.py", 140), ("forward", "model.py", 3)], "symm-mem-registration"),
        ([("__call__", "tilelang/jit/kernel.py", 120), ("forward", "attn.py", 3)], "custom-kernel-launch"),
        ([("__call__", "cutlass/cute/runtime.py", 55), ("gemm", "ops.py", 3)], "custom-kernel-launch"),
        ([("_init_handles", "triton/compiler/compiler.py", 473), ("run", "triton/runtime/jit.py", 756)], "custom-kernel-launch"),
        ([("wait", "torch/_inductor/async_compile.py", 300), ("compile_fx_inner", "torch/_inductor/compile_fx.py", 600),
          ("_compile", "torch/_dynamo/convert_frame.py", 700)], "torch-compile-stall"),
        ([("fsync", "libc.so.6", None), ("write_record", "torch/serialization.py", 800), ("save", "torch/serialization.py", 650),
          ("_save_checkpoint", "transformers/trainer.py", 3000)], "checkpoint-write"),
        ([("serialize_file", "safetensors/torch.py", 286), ("save_file", "safetensors/torch.py", 300)], "checkpoint-write"),
        ([("scatter", "torch/distributed/distributed_c10d.py", 3230), ("save", "torch/distributed/checkpoint/state_dict_saver.py", 176)],
         "checkpoint-write"),
        ([("acquire", "<frozen importlib._bootstrap>", 100), ("_find_and_load", "<frozen importlib._bootstrap>", 1007), ("load", "plugin.py", 3)],
         "import-lock"),
        ([("_store_based_barrier", "torch/distributed/distributed_c10d.py", 4000), ("init_process_group", "torch/distributed/c10d_logger.py", 79)],
         "store-wait"),
        ([("synchronize", "torch/cuda/streams.py", 102), ("__init__", "vllm/distributed/device_communicators/pynccl.py", 121)], "nccl-comm-init"),
        ([("get_objects", "ray/_private/worker.py", 900), ("get", "ray/_private/worker.py", 2800), ("fit", "trainer.py", 3)], "ray-get-wait"),
        ([("_wait_for_tstate_lock", "threading.py", 1169), ("join", "threading.py", 1149), ("_shutdown", "threading.py", 1624)], "shutdown-join"),
        ([("copy_to_device", "returnn/torch/frontend/_backend.py", 168), ("step", "train.py", 3)], "h2d-copy-stuck"),
        ([("encode_batch", "tokenizers/implementations/base_tokenizer.py", 250), ("tokenize", "data.py", 3)], "tokenizer-deadlock"),
        ([("recv", "torch/distributed/distributed_c10d.py", 1002), ("recv", "deepspeed/runtime/pipe/p2p.py", 83)], "nccl-collective-wait"),
        ([("hipStreamSynchronize", "libamdhip64.so", None), ("item", "ops.py", 3)], "cuda-synchronize-wait"),
        ([("ur::level_zero::urEventWait", "libur_adapter_level_zero.so.0", None), ("build", "vllm/v1/attention/backends/gdn_attn.py", 307)],
         "cuda-synchronize-wait"),  # namespaced native names
        # second corpus collection (data/pasted) and the shapes around it
        ([("wait", "torch/utils/file_baton.py", 42), ("_jit_compile", "torch/utils/cpp_extension.py", 1522),
          ("jit_load", "deepspeed/ops/op_builder/builder.py", 480)], "extension-build-lock"),
        ([("get_num_common_prefix_blocks", "vllm/v1/core/kv_cache_coordinator.py", 138),
          ("schedule", "vllm/v1/core/sched/scheduler.py", 540), ("step", "vllm/v1/engine/core.py", 287)], "vllm-scheduler-spin"),
        ([("synchronize", "torch/cuda/__init__.py", 1083), ("_make_launchers", "torch/_inductor/runtime/triton_heuristics.py", 646)],
         "torch-compile-stall"),
        ([("destroy_process_group", "torch/distributed/distributed_c10d.py", 2100), ("main", "train.py", 90)], "process-group-destroy"),
        ([("wait_tensor", "torch/distributed/_functional_collectives.py", 144), ("forward", "model.py", 9)], "nccl-collective-wait"),
        # third corpus collection (data/pasted)
        ([("cuLibraryGetModule", "libcuda.so.1.1", None), ("cudaLaunchKernel", "libcudart.so", None),
          ("embedding", "paddle/nn/functional/input.py", 336)], "cuda-module-load"),
        # a module load under Triton's launcher is where that launch waits
        ([("cuModuleLoadData", "libcuda.so.590.48.01", None), ("loadBinary", "cuda_utils.cpython-312-x86_64-linux-gnu.so", None),
          ("_init_handles", "triton/compiler/compiler.py", 466), ("run", "triton/runtime/jit.py", 743)], "cuda-module-load"),
        ([("backend_compile", "jax/_src/compiler.py", 321), ("compile_or_get_cached", "jax/_src/compiler.py", 400)], "torch-compile-stall"),
        # a worker idle in its loop, dumped without the process that feeds it: the work is stuck upstream
        ([("_recv", "billiard/connection.py", 425)], "task-queue-worker-idle"),
        # ... but Celery's consumer is the feeder: idle alone, the whole worker idles
        ([("poll", "kombu/utils/eventio.py", 83), ("drain_events", "kombu/connection.py", 300)], "all-idle"),
        ([("get", "multiprocessing/queues.py", 113), ("_worker_loop", "torch/utils/data/_utils/worker.py", 300),
          ("run", "multiprocessing/process.py", 108)], "dataloader-worker-idle"),  # a DataLoader worker waiting for its next index
        ([("select", "selectors.py", 415), ("wait", "multiprocessing/connection.py", 931),
          ("join", "torch/multiprocessing/spawn.py", 99), ("main", "train.py", 3)], "spawn-launcher-wait"),  # mp.spawn's launcher, alone: its ranks are stuck
        # torchrun's agent alone, in its monitor loop's sleep (py-spy shows no sleep frame): its ranks are the ones to dump
        ([("SimpleElasticAgent._invoke_run", "torch/distributed/elastic/agent/server/api.py", 923),
          ("SimpleElasticAgent.run", "torch/distributed/elastic/agent/server/api.py", 745),
          ("launch_agent", "torch/distributed/launcher/api.py", 374)], "torchrun-agent-monitor"),
    ],
)
def test_signatures_on_library_frames(frames, expected):
    thread = ("MainThread", [Frame(fn, file, line, native=line is None) for fn, file, line in frames])
    assert classify(_proc(thread), SIGS).signature_id == expected


def test_library_frames_far_from_the_stall_do_not_match():
    # An import that is running a model's code (not waiting on the lock) is not import-lock,
    # and a worker executing a step is not "waiting for work".
    busy_import = ("MainThread", [Frame("matmul", "kernels.py", 9), Frame("init_weights", "model.py", 8), Frame("<module>", "model.py", 1),
                                  Frame("_call_with_frames_removed", "<frozen importlib._bootstrap>", 241),
                                  Frame("acquire", "<frozen importlib._bootstrap>", 100)])
    assert classify(_proc(busy_import), SIGS).signature_id is None
    # "eagle_worker.py" is not torch's DataLoader "worker.py".
    eagle = ("MainThread", [Frame("draft", "eagle_worker.py", 397), Frame("run_batch", "scheduler.py", 1573)])
    assert classify(_proc(eagle), SIGS).signature_id is None


# --- many processes, one story --------------------------------------------------------

def _series(*procs):
    return group_series([ProcessDump(pid, (ThreadDump(str(pid), "MainThread", tuple(frames)),), cmd) for pid, frames, cmd in procs])


ALL_REDUCE = [Frame("all_reduce", "torch/distributed/distributed_c10d.py", 2501), Frame("train_step", "train.py", 5)]


def test_the_rank_stuck_elsewhere_is_the_suspect_and_its_stall_the_headline():
    series = _series((10, ALL_REDUCE, "train.py --local_rank=0"), (11, ALL_REDUCE, "train.py --local_rank=1"),
                     (12, [Frame("_try_get_data", "torch/utils/data/dataloader.py", 1011), Frame("train_step", "train.py", 4)], "train.py --local_rank=2"))
    c = classify(series, SIGS)
    assert c.signature_id == "dataloader-wait" and c.pid == 12
    assert c.suspect.pid == 12 and "wait in a collective" in c.suspect.reason


def test_a_rank_back_in_its_idle_loop_is_the_suspect_but_the_collective_is_the_stall():
    idle = [Frame("dequeue", "vllm/distributed/device_communicators/shm_broadcast.py", 779), Frame("worker_busy_loop", "multiproc_executor.py", 973)]
    c = classify(_series((1, ALL_REDUCE, "VLLM::Worker_TP0"), (2, idle, "VLLM::Worker_TP1")), SIGS)
    assert c.signature_id == "nccl-collective-wait" and c.pid == 1
    assert c.suspect.pid == 2 and "idle loop" in c.suspect.reason


def test_everyone_in_the_collective_says_the_culprit_is_elsewhere():
    c = classify(_series((1, ALL_REDUCE, ""), (2, ALL_REDUCE, "")), SIGS)
    assert c.signature_id == "nccl-collective-wait" and c.suspect.pid is None
    assert "not among them" in c.suspect.reason


def test_all_ranks_in_the_collective_name_the_ranks_missing_from_the_input():
    """NCCL watchdog lines from ranks 1-5 and none from rank 0 (profam#286 in data/pasted):
    the rank that never arrived is most likely the one not shown."""
    procs = [ProcessDump(100 + r, (ThreadDump(str(100 + r), "MainThread", tuple(ALL_REDUCE)),), rank=r) for r in (1, 2, 3, 5)]
    c = classify(group_series(procs), SIGS)
    assert c.suspect.pid is None and "not in this input: rank 0, 4, look there first" in c.suspect.reason
    procs = [ProcessDump(100 + r, (ThreadDump(str(100 + r), "MainThread", tuple(ALL_REDUCE)),), rank=r) for r in (0, 1)]
    assert "look there first" not in classify(group_series(procs), SIGS).suspect.reason


def test_one_rank_in_a_different_collective_is_the_odd_one():
    other = [Frame("broadcast", "torch/distributed/distributed_c10d.py", 1191), Frame("sync_flags", "train.py", 9)]
    c = classify(_series(*[(p, ALL_REDUCE, "") for p in range(1, 5)], (9, other, "")), SIGS)
    assert c.suspect.pid == 9 and "mismatched collectives" in c.suspect.reason


def test_a_lone_native_stack_decides_and_is_not_called_idle():
    """A gdb/lldb paste of one thread (no 'MainThread' name) blocked in the job's own
    native code: it decides its process (it is no helper), a signature matches NCCL's
    "pnccl*" aliases, and with no signature it is unknown, never a standard-library wait
    (NCCL#1013, torch-xpu-ops#1536, JAX#9767 in data/pasted)."""
    def one(*frames: Frame):
        return classify(group_series([ProcessDump(None, (ThreadDump("?1", "", frames),))]), SIGS)

    c = one(Frame("__pthread_clockjoin_ex", "./nptl/pthread_join_common.c", None, True), Frame("?", "/lib/libnccl.so.2", None, True),
            Frame("pncclCommAbort", "/lib/libnccl.so.2", None, True))
    assert c.signature_id == "process-group-destroy"
    c = one(Frame("ccl_executor::wait", "/opt/libccl.so.1", None, True), Frame("ccl_comm::allgather", "?", None, True))
    assert c.signature_id == "nccl-collective-wait"
    c = one(Frame("poll", "/lib64/libc.so.6", None, True), Frame("absl::Mutex::Block", "/x/xla_extension.so", None, True))
    assert c.signature_id is None and [f.function for f in c.evidence] == ["absl::Mutex::Block"]
    c = one(*[Frame("?", "/lib64/libcuda.so.1", None, True)] * 4, Frame("at::native::_local_scalar_dense_cuda", "?", None, True))
    assert c.signature_id == "cuda-synchronize-wait"  # tensor.item() waiting for the stream


def test_shm_broadcast_queue_waiting_for_its_readers_at_start_up():
    """vLLM's MessageQueue blocks in wait_until_ready while it is created, until every
    reader connected (vllm#6355 in data/pasted): the shared-memory queue's wait."""
    frames = (Frame("wait_until_ready", "vllm/distributed/device_communicators/shm_broadcast.py", 284),
              Frame("create_from_process_group", "vllm/distributed/device_communicators/shm_broadcast.py", 489))
    c = classify(group_series([ProcessDump(None, (ThreadDump("?1", "MainThread", frames),))]), SIGS)
    assert c.signature_id == "vllm-shm-broadcast-wait"


def test_native_threads_of_an_excerpt_without_its_main_thread_decide():
    """gdb threads pasted without thread 1 (horovod#26, lightning-thunder#462 in data/pasted):
    a C-level thread in ncclAllReduce decides (it is no idle helper; blocked on the CPU in
    NCCL's own code, it waits for the communicator's lazy set-up); a c10 thread-pool
    worker parked in pthread_cond_wait is a helper and never does."""
    nccl = ThreadDump("69796", "", (Frame("pthread_cond_wait", "pthread_cond_wait.S", None, True), Frame("?", "/x/libnccl.so.2", None, True),
                                    Frame("ncclAllReduce", "/x/libnccl.so.2", None, True)))
    cuda = ThreadDump("80993", "", (Frame("sem_wait", "sem_wait.S", None, True), Frame("?", "/usr/lib/libcuda.so.1", None, True)))
    pool = ThreadDump("87", "", (Frame("pthread_cond_wait", "/lib/libc.so.6", None, True),
                                 Frame("c10::ThreadPool::main_loop", "/t/libc10.so", None, True)))
    c = classify(group_series([ProcessDump(None, (nccl, cuda))]), SIGS)
    assert c.signature_id == "nccl-comm-init" and c.thread_ident == "69796"
    c = classify(group_series([ProcessDump(None, (pool, pool))]), SIGS)
    assert c.signature_id == "all-idle"


@pytest.mark.parametrize(("frames", "expected"), [
    # torch's C++ collective and p2p entry points (Megatron-LM#1679, sglang#10124)
    ((Frame("c10d::ProcessGroupNCCL::recv", "/t/libtorch_cuda.so", None, True),), "nccl-collective-wait"),
    ((Frame("c10d::ProcessGroup::_reduce_scatter_base", ":0", None, True),), "nccl-collective-wait"),
    # the c10d store under init_process_group (pytorch#15638): the store is what it waits on
    ((Frame("c10d::tcputil::connect", "?", None, True), Frame("c10d::TCPStore::TCPStore", "?", None, True)), "store-wait"),
    # a parent joining a child that never exits (the Ascend fork troubleshooting page)
    ((Frame("poll", "multiprocessing/popen_fork.py", 27), Frame("wait", "multiprocessing/popen_fork.py", 47),
      Frame("join", "multiprocessing/process.py", 149), Frame("_terminate_pool", "multiprocessing/pool.py", 729)), "child-process-wait"),
])
def test_native_collectives_store_connect_and_child_join_signatures(frames, expected):
    c = classify(group_series([ProcessDump(None, (ThreadDump("1", "MainThread", frames),))]), SIGS)
    assert c.signature_id == expected


def test_a_collective_under_vllms_graph_wrapper_is_not_a_replay():
    """vLLM's CUDAGraphWrapper.__call__ runs the model itself when it has no graph for the
    batch (or is capturing one): a thread deep in an all_reduce under that frame
    (ms-swift#8506 in data/pasted) waits in the collective; a replay has the wrapper at
    the top of the stack."""
    under = (Frame("__call__", "torch/_ops.py", 1209), Frame("all_reduce", "vllm/distributed/device_communicators/symm_mem.py", 148),
             Frame("all_reduce", "vllm/distributed/parallel_state.py", 132), Frame("call", "cnm2xsczc.py", 1317),
             Frame("run", "torch/_inductor/utils.py", 3220), Frame("__call__", "vllm/compilation/piecewise_backend.py", 343),
             Frame("__call__", "vllm/compilation/cuda_graph.py", 223), Frame("forward", "<eval_with_key>.110", 590))
    replay = (Frame("replay", "torch/cuda/graphs.py", 88), Frame("__call__", "vllm/compilation/cuda_graph.py", 209),
              Frame("forward", "vllm/model_executor/models/llama.py", 400))
    for frames, expected in ((under, "nccl-collective-wait"), (replay, "vllm-cuda-graph-replay")):
        c = classify(group_series([ProcessDump(None, (ThreadDump("1", "MainThread", frames),))]), SIGS)
        assert c.signature_id == expected


def test_a_file_system_watchers_queue_wait_never_decides():
    """watchdog's observer thread waits on its event queue for the life of a Streamlit or
    a dev server's process: beside an idle event loop the process is idle, not a queue wait."""
    loop = ThreadDump("1", "MainThread", (Frame("select", "selectors.py", 323), Frame("_run_once", "asyncio/base_events.py", 1961),
                                         Frame("run_forever", "asyncio/base_events.py", 645), Frame("run", "streamlit/web/bootstrap.py", 466)))
    observer = ThreadDump("2", "Thread-1", (Frame("wait", "threading.py", 355), Frame("get", "queue.py", 171),
                                            Frame("dispatch_events", "watchdog/observers/api.py", 379),
                                            Frame("run", "watchdog/observers/api.py", 213), Frame("_bootstrap_inner", "threading.py", 1075)))
    assert classify(group_series([ProcessDump(27300, (loop, observer))]), SIGS).signature_id == "all-idle"


def test_a_native_thread_that_starts_where_the_process_starts_is_the_main_thread():
    """gdb numbers threads its own way ("Thread 3", "Thread 1", no names): the one whose
    stack starts in the C runtime's entry (__libc_start_main, Py_BytesMain) is the
    process's initial thread, and names the verdict when all wait alike."""
    def waiting(ident, *outer):
        return ThreadDump(ident, "", (Frame("do_futex_wait", "libpthread.so.0", None, True),
                                      Frame("PyThread_acquire_lock_timed", "python3", None, True),
                                      *(Frame(f, "python3", None, True) for f in outer)))
    worker = waiting("3", "start_thread", "clone")
    main = waiting("1", "Py_BytesMain", "__libc_start_main", "_start")
    c = classify(group_series([ProcessDump(None, (worker, main))]), SIGS)
    assert c.signature_id == "lock-wait" and c.thread_ident == "1"
