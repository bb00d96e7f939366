"""The signature a stack's innermost frames name: NCCL's watchdog and error backtraces, forked
children, MPI and Horovod collectives in native frames, joins at exit, DataLoader workers,
generate()'s stopping check, Ascend's synchronize, and extension loads under an import."""

from __future__ import annotations

import pytest

from diag_helpers import pasted_verdict, text_verdict

pytestmark = pytest.mark.timeout(60)


def test_engine_core_cut_in_get_response_waits_on_the_workers_queue():
    # An EngineCore log whose traceback is cut right below get_response (vllm#41125).
    assert pasted_verdict("vllm_41125_enginecore_log_dequeue_timeout") == "vllm-shm-broadcast-wait"


def test_aot_autograd_runtime_wrappers_are_not_a_compile():
    # ms-swift#8506's rank runs the compiled graph through AOTAutograd's runtime wrappers
    # (runtime_wrapper, call_func_at_runtime_with_args, forward in aot_autograd.py): the
    # compile-time patterns must not claim it.
    assert pasted_verdict("msswift_8506_header_glued_to_prose_symm_mem") != "torch-compile-stall"


def test_a_watchdog_stuck_outside_its_wait_still_counts(tmp_path):
    # The helper needs the watchdog's loop AND a condition-variable wait: a watchdog
    # thread stuck aborting a communicator is the stall.
    text = """\
SIGABRT(6), PID: 77, Thread 78: 
 frame #0: c10::FatalSignalHandler::stacktraceSignalHandler(bool) + 0x59 (0x7f0000000001 in /x/libc10.so)
frame #1: <unknown function> + 0x12980 (0x7f0000000002 in /lib/libpthread.so.0)
frame #2: usleep + 0x4d (0x7f0000000003 in /lib/libc.so.6)
frame #3: ncclCommAbort + 0x21 (0x7f0000000004 in /x/libnccl.so.2)
frame #4: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x98 (0x7f0000000005 in /x/libtorch_cuda.so)
"""
    assert text_verdict(tmp_path, text) == "process-group-destroy"


def test_an_error_backtrace_raised_elsewhere_is_still_the_stack(tmp_path):
    # Not the watchdog: a store get that timed out is where that thread waited.
    text = """\
RuntimeError: Socket Timeout
Exception raised from doWait at /pytorch/torch/csrc/distributed/c10d/TCPStore.cpp:550 (most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f1 in /x/libc10.so)
frame #1: c10d::TCPStore::doWait(c10::ArrayRef<std::string>, std::chrono::milliseconds) + 0x3a0 (0x7f2 in /x/libtorch_cpu.so)
frame #2: c10d::TCPStore::doGet(std::string const&) + 0x32 (0x7f3 in /x/libtorch_cpu.so)
"""
    assert text_verdict(tmp_path, text) == "store-wait"


# A forked DataLoader-style worker running its target: _bootstrap and the parent's
# popen_fork._launch are below run(), not within the innermost three frames.
FORKED_WORKER = """\
Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.10/threading.py", line 324 in wait
  File "/usr/lib/python3.10/multiprocessing/queues.py", line 113 in get
  File "/srv/app/work.py", line 12 in worker_fn
  File "/usr/lib/python3.10/multiprocessing/process.py", line 108 in run
  File "/usr/lib/python3.10/multiprocessing/process.py", line 315 in _bootstrap
  File "/usr/lib/python3.10/multiprocessing/popen_fork.py", line 71 in _launch
  File "/usr/lib/python3.10/multiprocessing/popen_fork.py", line 19 in __init__
  File "/srv/app/main.py", line 40 in <module>
"""


@pytest.mark.parametrize("text", [
    FORKED_WORKER,
    # its target blocked in C: the target's own frame is innermost
    "\n".join(line for line in FORKED_WORKER.splitlines() if "threading.py" not in line and "queues.py" not in line) + "\n",
])
def test_a_forked_child_running_its_target_is_not_an_inherited_lock(tmp_path, text):
    assert text_verdict(tmp_path, text) != "fork-inherited-lock"


def test_open_mpi_collective_in_native_frames_is_a_collective_wait(tmp_path):
    text = """\
Thread 1 (Thread 0x7f1 (LWP 10)):
#0  0x00007f01 in opal_progress () from /usr/lib/libopen-pal.so.40
#1  0x00007f02 in ompi_request_default_wait () from /usr/lib/libmpi.so.40
#2  0x00007f03 in ompi_coll_base_allreduce_intra_recursivedoubling () from /usr/lib/libmpi.so.40
#3  0x00007f04 in PMPI_Allreduce () from /usr/lib/libmpi.so.40
"""
    assert text_verdict(tmp_path, text) == "nccl-collective-wait"


def test_a_launcher_in_subprocess_wait_waits_for_its_child():
    """torch.distributed.launch (and any parent) in Popen.wait -> os.waitpid: the child is the
    one to look at, the same wait as multiprocessing's join."""
    assert pasted_verdict("pytorch_45042_launch_waitpid_traceback") == "child-process-wait"


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
    assert text_verdict(tmp_path, WORKER_IDLE) == "dataloader-worker-idle"  # alone: the loader that feeds it is where to look
    assert text_verdict(tmp_path, LOADER_WAITS) == "dataloader-wait"


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


def test_queue_finalizer_joining_its_feeder_is_a_shutdown_join(tmp_path):
    """_finalize_join is a multiprocessing.Queue's finalizer joining the feeder thread;
    with _run_finalizers cut off the paste the join was read as a plain lock wait, and
    with no 'Current thread' the joining thread (all standard library) was taken for a
    background idler: every thread 'idle'. A thread joining another is not an idler."""
    text = (
        "Thread 0x00008294 (most recent call first):\n"
        '  File "/usr/lib/python3.12/multiprocessing/connection.py", line 293 in _send_bytes\n'
        '  File "/usr/lib/python3.12/multiprocessing/queues.py", line 266 in _feed\n'
        '  File "/usr/lib/python3.12/threading.py", line 1012 in run\n'
        "\n"
        "Thread 0x00008210 (most recent call first):\n"
        '  File "/usr/lib/python3.12/threading.py", line 1169 in _wait_for_tstate_lock\n'
        '  File "/usr/lib/python3.12/threading.py", line 1149 in join\n'
        '  File "/usr/lib/python3.12/multiprocessing/queues.py", line 219 in _finalize_join\n'
    )
    assert text_verdict(tmp_path, text) == "shutdown-join"


PYSPY_WORKER_IN_CREATE_MODULE = """\
Process 4242: python server.py
Python v3.12.3 (/usr/bin/python3.12)

Thread 4242 (idle): "MainThread"
    select (selectors.py:468)
    _run_once (asyncio/base_events.py:1949)
    run_forever (asyncio/base_events.py:641)
    main (server.py:88)
    <module> (server.py:92)
Thread 4250 (idle): "stdin-reader"
    readline (server/transport.py:31)
    run (threading.py:1010)
    _bootstrap_inner (threading.py:1073)
    _bootstrap (threading.py:1030)
Thread 4251 (idle): "worker_0"
    _call_with_frames_removed (<frozen importlib._bootstrap>:488)
    create_module (<frozen importlib._bootstrap_external>:1289)
    module_from_spec (<frozen importlib._bootstrap>:813)
    _load_unlocked (<frozen importlib._bootstrap>:921)
    _find_and_load_unlocked (<frozen importlib._bootstrap>:1331)
    _find_and_load (<frozen importlib._bootstrap>:1360)
    <module> (numpy/_core/multiarray.py:11)
    _call_with_frames_removed (<frozen importlib._bootstrap>:488)
    exec_module (<frozen importlib._bootstrap_external>:995)
    <module> (numpy/__init__.py:122)
    embed (server/tools.py:40)
    run (concurrent/futures/thread.py:59)
    _worker (concurrent/futures/thread.py:93)
    run (threading.py:1010)
    _bootstrap_inner (threading.py:1073)
    _bootstrap (threading.py:1030)
"""


def test_worker_thread_in_create_module_is_the_load(tmp_path):
    """A request handler's lazy import on a pool thread, the event loop idle on the main
    thread: the verdict is the extension load, not the loop or the stdin reader."""
    assert text_verdict(tmp_path, PYSPY_WORKER_IN_CREATE_MODULE) == "extension-load-stuck"


GDB_GLIBC_DLOPEN = """\
(gdb) thread apply all bt

Thread 1 (Thread 0x7f3a1c2b7740 (LWP 901) "python"):
#0  __lll_lock_wait (futex=0x7f3a1c4e1990 <_rtld_global+2448>, private=0) at ./nptl/lowlevellock.c:49
#1  0x00007f3a1c0a1f02 in lll_mutex_lock_optimized (mutex=0x7f3a1c4e1990 <_rtld_global+2448>) at ./nptl/pthread_mutex_lock.c:48
#2  ___pthread_mutex_lock (mutex=0x7f3a1c4e1990 <_rtld_global+2448>) at ./nptl/pthread_mutex_lock.c:93
#3  0x00007f3a1c4b2e1c in _dl_open (file=0x7f3a1a1d2e10 "/opt/env/lib/python3.10/site-packages/torch/_C.cpython-310-x86_64-linux-gnu.so", mode=-2147483646, caller_dlopen=0x55d1c2a4b6f1, nsid=-2, argc=2, argv=0x7ffd6b1c4d58, env=0x7ffd6b1c4d70) at ./elf/dl-open.c:827
#4  0x00007f3a1c09d6bc in dlopen_doit (a=a@entry=0x7ffd6b1c1a50) at ./dlfcn/dlopen.c:56
#5  0x00007f3a1c4b0a98 in __GI__dl_catch_exception (exception=exception@entry=0x7ffd6b1c19b0, operate=<optimized out>, args=<optimized out>) at ./elf/dl-error-skeleton.c:208
#6  0x00007f3a1c09d1b8 in _dlerror_run (operate=operate@entry=0x7f3a1c09d660 <dlopen_doit>, args=args@entry=0x7ffd6b1c1a50) at ./dlfcn/dlerror.c:138
#7  0x00007f3a1c09d7a8 in dlopen_implementation (dl_caller=<optimized out>, mode=<optimized out>, file=<optimized out>) at ./dlfcn/dlopen.c:71
#8  ___dlopen (file=<optimized out>, mode=<optimized out>) at ./dlfcn/dlopen.c:81
#9  0x000055d1c2a4b6f1 in _PyImport_FindSharedFuncptr (prefix=0x55d1c2c1e2a3 "PyInit", shortname=0x7f3a1a1e4f30 "_C", pathname=0x7f3a1a1d2e10 "/opt/env/lib/python3.10/site-packages/torch/_C.cpython-310-x86_64-linux-gnu.so", fp=0x0) at ./Python/dynload_shlib.c:100
#10 0x000055d1c2a4a2c3 in _PyImport_LoadDynamicModuleWithSpec (spec=0x7f3a1a1e3f10, fp=0x0) at ./Python/importdl.c:137
#11 0x000055d1c2a49d8e in _imp_create_dynamic_impl (module=<optimized out>, file=<optimized out>, spec=0x7f3a1a1e3f10) at Python/import.c:2373
#12 _imp_create_dynamic (module=<optimized out>, args=<optimized out>, nargs=<optimized out>) at Python/clinic/import.c.h:352
#13 0x000055d1c29b1e22 in cfunction_vectorcall_FASTCALL (func=0x7f3a1c2f1a30, args=<optimized out>, nargsf=<optimized out>, kwnames=<optimized out>) at Objects/methodobject.c:430
#14 0x000055d1c29a52c4 in _PyEval_EvalFrameDefault (tstate=<optimized out>, f=<optimized out>, throwflag=<optimized out>) at Python/ceval.c:4231
"""


def test_gdb_glibc_dlopen_lock_wait_under_an_import(tmp_path):
    """glibc's form of the loader lock: the thread waits for dl_load_lock in _dl_open,
    reached from CPython's extension loader (_imp_create_dynamic)."""
    assert text_verdict(tmp_path, GDB_GLIBC_DLOPEN) == "extension-load-stuck"


PYSPY_IMPORT_OUTERMOST_ONLY = """\
Process 77: python train.py
Python v3.11.8 (/usr/bin/python3.11)

Thread 77 (idle): "MainThread"
    wait (threading.py:327)
    wait (threading.py:629)
    start (mylib/pool.py:51)
    <module> (mylib/__init__.py:12)
    _call_with_frames_removed (<frozen importlib._bootstrap>:241)
    exec_module (<frozen importlib._bootstrap_external>:940)
    _load_unlocked (<frozen importlib._bootstrap>:690)
    _find_and_load_unlocked (<frozen importlib._bootstrap>:1147)
    _find_and_load (<frozen importlib._bootstrap>:1176)
    <module> (train.py:3)
"""


def test_an_import_further_out_is_no_extension_load(tmp_path):
    """The rule is about the innermost frames: a module whose top-level code waits on an
    event is running Python, not loading a library."""
    assert text_verdict(tmp_path, PYSPY_IMPORT_OUTERMOST_ONLY) != "extension-load-stuck"


_IDLE_LOOP = """\
Thread 501461 (idle): "MainThread"
    select (selectors.py:469)
    _run_once (asyncio/base_events.py:1871)
    run_forever (asyncio/base_events.py:603)
{outer}"""


@pytest.mark.parametrize(("outer", "verdict"), [
    # the program's own asyncio.run(main()): main awaits something that never completes
    ("    run_until_complete (asyncio/base_events.py:636)\n    run (asyncio/runners.py:44)\n"
     "    scan_all_sources (bot/tasks.py:624)\n    <module> (bot/main.py:9)\n", "asyncio-blocked"),
    # a test's coroutine run by pytest-asyncio: the test should finish
    ("    run_until_complete (asyncio/base_events.py:678)\n    run (asyncio/runners.py:118)\n"
     "    _async_fixture_wrapper (pytest_asyncio/plugin.py:455)\n    pytest_fixture_setup (_pytest/fixtures.py:898)\n",
     "asyncio-blocked"),
    # a server's loop, started by its framework (under the program's main): idle between requests
    ("    run_until_complete (asyncio/base_events.py:678)\n    run (asyncio/runners.py:118)\n"
     "    run (uvicorn/server.py:65)\n    main (app.py:12)\n", "all-idle"),
    ("    run_until_complete (asyncio/base_events.py:678)\n    run (asyncio/runners.py:195)\n"
     "    run (streamlit/web/bootstrap.py:466)\n", "all-idle"),
    # run_forever called by the program: a loop that serves until stopped
    ("    main (server.py:88)\n    <module> (server.py:92)\n", "all-idle"),
    # nobody shown starting it (the paste is cut at asyncio.run)
    ("    run_until_complete (asyncio/base_events.py:636)\n    run (asyncio/runners.py:44)\n", "all-idle"),
])
def test_an_idle_event_loop_running_the_programs_coroutine_waits_on_it(tmp_path, outer, verdict):
    """An idle loop under asyncio.run is the program waiting for its coroutine, which never
    completes (a dead peer, a lost future, tasks awaiting each other); a server's loop,
    started by its framework, waits for requests. Before, every idle loop read as all-idle."""
    assert text_verdict(tmp_path, _IDLE_LOOP.format(outer=outer)) == verdict


@pytest.mark.parametrize(("stack", "verdict"), [
    # py-spy on Python 3.11+ names a method with its class: threading's Event.wait is no
    # device's event (before: "waits on the GPU")
    ("    Condition.wait (multiprocessing/synchronize.py:268)\n    Event.wait (multiprocessing/synchronize.py:357)\n"
     "    main (app.py:10)\n", "event-wait"),
    # another program's ZMQ client, MessageQueue, worker loop and broadcast are not vLLM's,
    # the DataLoader's or a collective (before: vllm-engine-core-ipc, vllm-shm-broadcast-wait,
    # dataloader-worker-stuck, nccl-collective-wait)
    ("    recv_multipart (zmq/sugar/socket.py:808)\n    fetch (client/rpc.py:41)\n    main (client/main.py:9)\n",
     "socket-read"),
    ("    get (queue.py:171)\n    MessageQueue.receive (app/bus.py:30)\n    main (app/main.py:9)\n", "queue-wait"),
    ("    readinto (socket.py:705)\n    _worker_loop (collector/feed.py:51)\n    main (collector.py:60)\n", "socket-read"),
    ("    sendall (ssl.py:1273)\n    Hub.broadcast (chat/hub.py:88)\n    main (chat/server.py:20)\n", "socket-read"),
    # CPython's own C modules under a C library wait are the standard library's (py-spy
    # --native): not a third-party extension whose wait says nothing
    ("    flock (libc.so.6)\n    fcntl_flock_impl (fcntlmodule.c:297)\n    fcntl_flock (fcntlmodule.c.h:165)\n"
     "    exclusive_lock (p_flock.py:6)\n    <module> (p_flock.py:7)\n", "file-lock-wait"),
], ids=["py311-event-wait", "pyzmq-client", "own-message-queue", "own-worker-loop", "own-broadcast", "native-fcntl"])
def test_library_names_in_any_program_are_read_by_their_library(tmp_path, stack, verdict):
    assert text_verdict(tmp_path, 'Thread 2600 (idle): "MainThread"\n' + stack) == verdict


def test_a_join_on_a_thread_blocked_outside_the_process_is_that_threads_wait(tmp_path):
    """The main thread joins a worker that sits in a socket read: the read is what the join
    waits for. Before, the verdict was the join (thread-join)."""
    text = """\
Thread 2600 (idle): "MainThread"
    _wait_for_tstate_lock (threading.py:1116)
    join (threading.py:1096)
    main (collector.py:60)
    <module> (collector.py:70)
Thread 2611 (idle): "collector-0"
    readinto (socket.py:705)
    readline (collector/feed.py:33)
    poll_feed (collector/feed.py:51)
    run (threading.py:953)
    _bootstrap_inner (threading.py:1016)
    _bootstrap (threading.py:973)
"""
    assert text_verdict(tmp_path, text) == "socket-read"


@pytest.mark.parametrize(("stack", "verdict"), [
    # a nested function's qualified name (py-spy, Python 3.11+) is read as its function
    ("    block_until_ready.<locals>.try_to_block (jax/_src/api.py:2907)\n    tree_map (jax/_src/tree_util.py:344)\n"
     "    block_until_ready (jax/_src/api.py:2912)\n    train_step (train_flax.py:77)\n", "cuda-synchronize-wait"),
    # gRPC's wait for a channel or a future: the RPC, not the Condition under it
    ("    wait (threading.py:324)\n    _block (grpc/_utilities.py:101)\n    result (grpc/_utilities.py:118)\n"
     "    connect (feature_store/client.py:40)\n", "socket-read"),
    # a notebook cell's own blocking call, though the kernel runs cells on its event loop
    ("    Condition.wait (threading.py:327)\n    Queue.get (queue.py:171)\n    <module> (3224563351.py:5)\n"
     "    InteractiveShell.run_code (IPython/core/interactiveshell.py:3577)\n"
     "    InteractiveShell.run_cell_async (IPython/core/interactiveshell.py:3334)\n"
     "    Kernel.dispatch_queue (ipykernel/kernelbase.py:545)\n    Handle._run (asyncio/events.py:84)\n"
     "    BaseEventLoop._run_once (asyncio/base_events.py:1936)\n    BaseEventLoop.run_forever (asyncio/base_events.py:608)\n",
     "queue-wait"),
], ids=["qualified-locals", "grpc-block", "notebook-cell"])
def test_the_call_a_thread_waits_in_is_named_through_its_library(tmp_path, stack, verdict):
    """Before: no wait (the nested name), event-wait (gRPC's Condition) and asyncio-blocked
    (the kernel's loop)."""
    assert text_verdict(tmp_path, 'Thread 1400 (idle): "MainThread"\n' + stack) == verdict


def test_vllm_v0s_cuda_graph_runner_replaying_is_vllms_graph_replay(tmp_path):
    """vLLM's V0 engine replays from CUDAGraphRunner.forward in its model runner's module
    (py-spy and faulthandler name the method without its class): the engine's own graph
    replay, with its advice (graphs off for the retry), not the generic one."""
    text = """\
Thread 0x00007fb1 (most recent call first):
  File "/usr/local/lib/python3.10/dist-packages/torch/cuda/graphs.py", line 88 in replay
  File "/usr/local/lib/python3.10/dist-packages/vllm/worker/model_runner.py", line 1809 in forward
  File "/usr/local/lib/python3.10/dist-packages/torch/nn/modules/module.py", line 1747 in _call_impl
  File "/usr/local/lib/python3.10/dist-packages/vllm/worker/model_runner.py", line 1719 in execute_model
  File "/usr/local/lib/python3.10/dist-packages/vllm/engine/llm_engine.py", line 1404 in step
"""
    assert text_verdict(tmp_path, text) == "vllm-cuda-graph-replay"
    # the model runner's other calls (no graph replay under them) are not it
    eager = text.replace("torch/cuda/graphs.py\", line 88 in replay", "torch/nn/functional.py\", line 2 in linear").replace(
        "line 1809 in forward", "line 1809 in _dummy_run")
    assert text_verdict(tmp_path, eager) != "vllm-cuda-graph-replay"
    # a path shortened to the package's folders
    short = text.replace("/usr/local/lib/python3.10/dist-packages/vllm/worker/", "worker/")
    assert text_verdict(tmp_path, short) == "vllm-cuda-graph-replay"


def test_a_native_programs_own_wait_names_its_family(tmp_path):
    """A gdb backtrace of a program that is no Python process (a service's event wait,
    QEMU's semaphore): the C library's wait called from the program's own code is the
    program's wait, named by its family, where in a Python process the same wait under an
    extension is the extension's private business (a Python call around it explains it)."""
    text = """\
Thread 1 (Thread 0x7f00 (LWP 4242)):
#0  0x00007f00 in futex_wait (private=0, expected=2, futex_word=0x55) at ../sysdeps/nptl/futex-internal.h:146
#1  __GI___lll_lock_wait (futex=0x55, private=0) at ./nptl/lowlevellock.c:49
#2  0x00007f01 in __pthread_cond_wait_common (cond=0x56, mutex=0x55) at ./nptl/pthread_cond_wait.c:503
#3  0x00005601 in CEventList::WaitForSessionEvent (this=0x57) at lsm/events.cpp:88
#4  0x00005602 in CService::Start (this=0x58) at lsm/service.cpp:120
#5  0x00005603 in main () at lsm/main.cpp:12
"""
    assert text_verdict(tmp_path, text) in ("event-wait", "lock-wait")


def test_a_native_servers_idle_loop_and_a_python_threads_excerpt_keep_no_family(tmp_path):
    """A native server's main thread in its event loop's epoll is idle between requests,
    not a stalled socket read; a thread named "python3" whose Python frames were not pasted
    is a Python process's, where an extension's condition wait stays its own business."""
    redis = """\
Thread 1 (Thread 0x7f1 (LWP 100) "redis-server"):
#0  0x00007f1 in epoll_wait (epfd=5, events=0x7f2, maxevents=10128, timeout=100) at ../sysdeps/unix/sysv/linux/epoll_wait.c:30
#1  0x0000561 in aeApiPoll (tvp=<optimized out>, eventLoop=0x7f3) at ae_epoll.c:112
#2  aeProcessEvents (eventLoop=0x7f3, flags=27) at ae.c:412
#3  0x0000562 in aeMain (eventLoop=0x7f3) at ae.c:496
#4  0x0000563 in main (argc=2, argv=0x7ff) at server.c:7145
"""
    assert text_verdict(tmp_path, redis) != "socket-read"
    excerpt = """\
Thread 1 (Thread 0x7f3c1a2b3740 (LWP 4242) "python3"):
#0  0x00007f3c1a4d0e96 in __futex_abstimed_wait_common () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007f3c1a4d3a41 in pthread_cond_wait@@GLIBC_2.3.2 () from /lib/x86_64-linux-gnu/libc.so.6
#2  0x00007f3c0e1b2c10 in ov::threading::CPUStreamsExecutor::wait () from /opt/intel/openvino/runtime/lib/intel64/libopenvino.so.2330
#3  0x00007f3c0e1a0b20 in ov::InferRequest::infer () from /opt/intel/openvino/runtime/lib/intel64/libopenvino.so.2330
#42 0x000055d0c3f1e0a5 in main ()
"""
    assert text_verdict(tmp_path, excerpt) != "event-wait"
