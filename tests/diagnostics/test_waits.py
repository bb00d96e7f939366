"""The blocking-primitive layer: what each thread waits on, from its innermost frames;
the family a dump gets when a primitive is its only evidence; ranking a blocking call
against a wrapper signature; ``waits_on`` in replay's text and --json."""

from __future__ import annotations

import json

import pytest

from diag_helpers import text_verdict
from hangwatch.cli.main import main
from hangwatch.diagnostics.classify import classify
from hangwatch.diagnostics.pastes import read_text
from hangwatch.diagnostics.primitives import FAMILIES, PRIMITIVES
from hangwatch.diagnostics.signatures import load_signatures
from hangwatch.diagnostics.stacks import Frame, ProcessDump, ProcessSeries, ThreadDump
from hangwatch.diagnostics.waits import wait_of

SITE = "/opt/venv/lib/python3.11/site-packages/"
STDLIB = "/usr/lib/python3.11/"
USER = Frame("train_step", "/home/u/train.py", 42)


def _py(function: str, file: str, line: int = 1) -> Frame:
    return Frame(function, file, line)


def _c(function: str, lib: str = "/lib/x86_64-linux-gnu/libc.so.6") -> Frame:
    return Frame(function, lib, None, native=True)


def _thread(*frames: Frame, name: str = "MainThread") -> ThreadDump:
    return ThreadDump("1", name, tuple(frames))


#: (the stack's innermost frames, above the user's call; the category it waits on)
PRIMITIVE_STACKS = [
    # database clients waiting for their server's reply
    ([_py("wait", SITE + "psycopg/connection.py")], "socket-read"),
    ([_py("do_execute", SITE + "sqlalchemy/engine/default.py"), _py("_execute_context", SITE + "sqlalchemy/engine/base.py")], "socket-read"),
    ([_py("execute_values", SITE + "psycopg2/extras.py")], "socket-read"),
    # logging's module lock
    ([_py("_acquireLock", STDLIB + "logging/__init__.py")], "lock-wait"),
    # JAX copying a result to the host waits for the device
    ([_py("_value", SITE + "jax/_src/array.py"), _py("__array__", SITE + "jax/_src/array.py")], "cuda-synchronize-wait"),
    ([_py("_read_bytes", SITE + "pymysql/connections.py"), _py("_read_packet", SITE + "pymysql/connections.py")], "socket-read"),
    # an SSH client (paramiko's transport thread, a client waiting for the server's reply)
    ([_py("read_all", SITE + "paramiko/packet.py"), _py("read_message", SITE + "paramiko/packet.py")], "socket-read"),
    ([_py("wait_for_response", SITE + "paramiko/auth_handler.py")], "socket-read"),
    # the green-thread hubs
    ([_py("wait", SITE + "eventlet/hubs/poll.py"), _py("run", SITE + "eventlet/hubs/hub.py")], "socket-read"),
    ([_py("wait", SITE + "gevent/_hub_primitives.py")], "socket-read"),
    # a download of huggingface_hub's
    ([_py("xet_get", SITE + "huggingface_hub/file_download.py")], "socket-read"),
    # a Pool task's result
    ([_py("wait", STDLIB + "threading.py"), _py("next", STDLIB + "multiprocessing/pool.py")], "future-wait"),
    # a codec's first lookup imports its module
    ([_py("search_function", STDLIB + "encodings/__init__.py")], "import-lock"),
    # threading's join named without its file (a chain written by name)
    ([Frame("_wait_for_tstate_lock", "?"), Frame("join", "?")], "thread-join"),
    # file locks
    ([_py("_acquire", SITE + "filelock/_unix.py"), _py("acquire", SITE + "filelock/_api.py")], "file-lock-wait"),
    ([_py("_acquire", SITE + "filelock/_windows.py")], "file-lock-wait"),
    ([_py("_acquire", SITE + "filelock/_soft.py")], "file-lock-wait"),
    ([_py("wait", SITE + "torch/utils/file_baton.py")], "file-lock-wait"),
    ([_py("lock", SITE + "portalocker/portalocker.py")], "file-lock-wait"),
    ([_c("flock")], "file-lock-wait"),
    # a vendored file-lock module (datasets' own copy of filelock), a lock file's module
    ([_py("_acquire", SITE + "datasets/utils/filelock.py"), _py("acquire", SITE + "datasets/utils/filelock.py")], "file-lock-wait"),
    ([_py("acquire", SITE + "somepkg/lockfile.py")], "file-lock-wait"),
    # the c10d store's client being created (init_process_group's rendezvous)
    ([_py("_create_c10d_store", SITE + "torch/distributed/rendezvous.py")], "store-wait"),
    ([Frame("TCPStore", "<call>", None, native=True), _py("_create_c10d_store", SITE + "torch/distributed/rendezvous.py")], "store-wait"),
    # RPC clients
    ([_py("wait", SITE + "rpyc/core/async_.py"), _py("sync_request", SITE + "rpyc/core/protocol.py")], "socket-read"),
    ([_py("single_request", STDLIB + "xmlrpc/client.py"), _py("request", STDLIB + "xmlrpc/client.py")], "socket-read"),
    # a GPU runtime's own frames, unsymbolised, under the job's GPU code
    ([_c("?", "/opt/rocm/lib/libhsa-runtime64.so.1"), _c("?", "/opt/rocm/lib/libamdhip64.so.6"),
      _c("ggml_backend_buffer_set_tensor", "/app/libggml-hip.so")], "cuda-synchronize-wait"),
    ([_c("??", "/usr/lib/x86_64-linux-gnu/libcuda.so.1")], "cuda-synchronize-wait"),
    # the DataLoader iterator of torch 1.0/1.1
    ([_py("poll", STDLIB + "multiprocessing/connection.py"), _py("_try_get_batch", SITE + "torch/utils/data/dataloader.py"),
      _py("_get_batch", SITE + "torch/utils/data/dataloader.py")], "dataloader-wait"),
    # macOS kernel waits
    ([_c("__psynch_cvwait", "/usr/lib/system/libsystem_kernel.dylib"), _c("_pthread_cond_wait", "/usr/lib/system/libsystem_pthread.dylib")],
     "event-wait"),
    ([_c("__psynch_mutexwait", "/usr/lib/system/libsystem_kernel.dylib")], "lock-wait"),
    # threading
    ([_py("wait", STDLIB + "threading.py"), _py("wait", STDLIB + "threading.py")], "event-wait"),
    ([_py("_wait_for_tstate_lock", STDLIB + "threading.py"), _py("join", STDLIB + "threading.py")], "thread-join"),
    ([_py("acquire", STDLIB + "threading.py")], "lock-wait"),
    ([_py("acquire", SITE + "tqdm/std.py")], "lock-wait"),
    ([_py("<waiting for the GIL>", "?")], "gil-deadlock"),
    # queues, pipes, futures, asyncio
    ([_py("wait", STDLIB + "threading.py"), _py("get", STDLIB + "queue.py")], "queue-wait"),
    ([_py("_recv_bytes", STDLIB + "multiprocessing/connection.py"), _py("recv", STDLIB + "multiprocessing/connection.py")], "queue-wait"),
    ([_py("get", STDLIB + "multiprocessing/queues.py")], "queue-wait"),
    # torch 0.x's DataLoader: __next__ reading the workers' queue itself
    ([_c("self.recv_bytes", "<call>"), _py("recv", SITE + "torch/multiprocessing/queue.py"),
      _py("get", STDLIB + "multiprocessing/queues.py"), _py("__next__", SITE + "torch/utils/data/dataloader.py")], "dataloader-wait"),
    # a library's own lock class entered with `with` (its acquire is a C call py-spy does not show)
    ([_py("__enter__", SITE + "httpcore/_synchronization.py"), _py("close", SITE + "httpcore/_async/connection_pool.py")], "lock-wait"),
    # an I/O loop's poll on a Ctrl-C traceback's last line (pika's BlockingConnection)
    ([_c("self._impl.ioloop.poll", "<call>")], "socket-read"),
    # Django's SQLite backend: a busy wait for the database file's lock, not a server
    ([_py("execute", SITE + "django/db/backends/sqlite3/base.py"), _py("_execute", SITE + "django/db/backends/utils.py")],
     "file-lock-wait"),
    # Django's database layer running the driver's cursor
    ([_py("_execute", SITE + "django/db/backends/utils.py"), _py("_execute_with_wrappers", SITE + "django/db/backends/utils.py")],
     "socket-read"),
    # a select.poll object kept as an attribute (pika's poller), and a pipe's poll beside it
    ([_c("self._poll.poll", "<call>")], "socket-read"),
    ([_c("self._conn.poll", "<call>")], "queue-wait"),
    # a send blocked on a full pipe whose reader does not read
    ([_py("_send", STDLIB + "multiprocessing/connection.py"), _py("_send_bytes", STDLIB + "multiprocessing/connection.py"),
      _py("send", STDLIB + "multiprocessing/connection.py")], "queue-wait"),
    # abseil's spin lock and mutex (gRPC, Ray, XLA)
    ([_c("syscall"), _c("AbslInternalSpinLockDelay_lts_20230125", "/opt/grpc/cygrpc.so"),
      _c("absl::lts_20230125::base_internal::SpinLock::SlowLock", "/opt/grpc/cygrpc.so")], "lock-wait"),
    ([_py("_callmethod", SITE + "multiprocess/managers.py")], "queue-wait"),
    ([_py("wait", STDLIB + "threading.py"), _py("result", STDLIB + "concurrent/futures/_base.py")], "future-wait"),
    # DDP's construction checking parameter shapes across ranks (an allgather in C++)
    ([_py("_verify_param_shape_across_processes", SITE + "torch/distributed/utils.py"),
      _py("__init__", SITE + "torch/nn/parallel/distributed.py")], "nccl-collective-wait"),
    ([_py("_sync_module_states", SITE + "torch/distributed/utils.py")], "nccl-collective-wait"),
    # Executor.map's generator, a traceback cut there (py-spy 0.4 qualifies it twice)
    ([_py("Executor.map.<locals>.result_iterator", STDLIB + "concurrent/futures/_base.py")], "future-wait"),
    ([_py("_result_or_cancel", STDLIB + "concurrent/futures/_base.py")], "future-wait"),
    ([_py("select", STDLIB + "selectors.py"), _py("_run_once", STDLIB + "asyncio/base_events.py"),
      _py("run_until_complete", STDLIB + "asyncio/base_events.py")], "asyncio-blocked"),
    # processes
    ([_py("_try_wait", STDLIB + "subprocess.py"), _py("_wait", STDLIB + "subprocess.py"), _py("wait", STDLIB + "subprocess.py")], "subprocess-wait"),
    ([_py("_communicate", STDLIB + "subprocess.py"), _py("communicate", STDLIB + "subprocess.py")], "subprocess-wait"),
    ([_py("poll", STDLIB + "multiprocessing/popen_fork.py"), _py("wait", STDLIB + "multiprocessing/popen_fork.py"),
      _py("join", STDLIB + "multiprocessing/process.py")], "subprocess-wait"),
    ([_py("wait", STDLIB + "threading.py"), _py("wait", STDLIB + "multiprocessing/pool.py"), _py("get", STDLIB + "multiprocessing/pool.py"),
      _py("map", STDLIB + "multiprocessing/pool.py")], "subprocess-wait"),
    ([_py("spawnv_passfds", STDLIB + "multiprocessing/util.py"), _py("ensure_running", STDLIB + "multiprocessing/resource_tracker.py")], "subprocess-wait"),
    ([_c("waitpid")], "subprocess-wait"),
    # sockets and HTTP
    ([_py("readinto", STDLIB + "socket.py"), _py("readline", STDLIB + "socket.py")], "socket-read"),
    ([_py("read", STDLIB + "ssl.py"), _py("recv_into", STDLIB + "ssl.py")], "socket-read"),
    ([_py("readinto", STDLIB + "socket.py"), _py("_read_status", STDLIB + "http/client.py"), _py("begin", STDLIB + "http/client.py"),
      _py("getresponse", STDLIB + "http/client.py"), _py("_make_request", SITE + "urllib3/connectionpool.py"),
      _py("send", SITE + "requests/adapters.py")], "socket-read"),
    ([_py("handle_request", SITE + "httpcore/_sync/connection_pool.py"), _py("_send_single_request", SITE + "httpx/_client.py")], "socket-read"),
    ([_py("recv_multipart", SITE + "zmq/sugar/socket.py")], "socket-read"),
    ([_c("epoll_wait")], "socket-read"),
    ([_py("recv_into", SITE + "OpenSSL/SSL.py")], "socket-read"),
    ([_c("__libc_recv")], "socket-read"),
    # the ecosystem
    ([_py("all_reduce", SITE + "torch/distributed/distributed_c10d.py"), _py("wrapper", SITE + "torch/distributed/c10d_logger.py")], "nccl-collective-wait"),
    ([_py("barrier", SITE + "torch/distributed/distributed_c10d.py")], "nccl-collective-wait"),
    ([_py("next_rendezvous", SITE + "torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py")], "store-wait"),
    # the elastic agent's exit barrier: a store barrier, no collective
    ([_py("get_all", SITE + "torch/distributed/elastic/utils/store.py"), _py("synchronize", SITE + "torch/distributed/elastic/utils/store.py"),
      _py("barrier", SITE + "torch/distributed/elastic/utils/store.py"), _py("_exit_barrier", SITE + "torch/distributed/elastic/agent/server/api.py")],
     "store-wait"),
    ([_c("c10d::TCPStore::doWait", "libtorch_cpu.so")], "store-wait"),
    ([_c("ncclCommInitRank", "libnccl.so.2")], "nccl-comm-init"),
    ([_c("ncclAllReduce", "libnccl.so.2")], "nccl-collective-wait"),
    ([_py("synchronize", SITE + "torch/cuda/__init__.py")], "cuda-synchronize-wait"),
    ([_py("synchronize", SITE + "torch/xpu/__init__.py")], "cuda-synchronize-wait"),
    ([_py("synchronize", SITE + "torch_npu/npu/streams.py")], "cuda-synchronize-wait"),
    ([_c("cuStreamSynchronize", "libcuda.so.1"), _c("cudaStreamSynchronize", "libcudart.so.12")], "cuda-synchronize-wait"),
    ([_c("at::native::_local_scalar_dense_cuda", "libtorch_cuda.so")], "cuda-synchronize-wait"),
    ([_py("get_objects", SITE + "ray/_private/worker.py"), _py("get", SITE + "ray/_private/worker.py")], "ray-get-wait"),
    ([_py("_try_get_data", SITE + "torch/utils/data/dataloader.py"), _py("_get_data", SITE + "torch/utils/data/dataloader.py")], "dataloader-wait"),
    ([_py("encode_batch", SITE + "tokenizers/implementations/base_tokenizer.py")], "tokenizer-wait"),
    ([_py("acquire", "<frozen importlib._bootstrap>"), _py("_find_and_load", "<frozen importlib._bootstrap>")], "import-lock"),
    # native waits
    ([_c("__futex_abstimed_wait_common"), _c("pthread_cond_wait@@GLIBC_2.3.2")], "event-wait"),
    ([_c("futex_wait"), _c("__lll_lock_wait"), _c("pthread_mutex_lock")], "lock-wait"),
    ([_c("do_futex_wait"), _c("sem_wait"), _c("PyThread_acquire_lock_timed", "python3.11")], "lock-wait"),
    ([_c("take_gil", "python3.11"), _c("PyEval_RestoreThread", "python3.11")], "gil-deadlock"),
    ([_c("__psynch_cvwait", "libsystem_kernel.dylib"), _c("take_gil", "python"), _c("PyEval_AcquireThread", "python"),
      _c("pybind11::gil_scoped_acquire::gil_scoped_acquire", "_C.so")], "gil-deadlock"),
    ([_c("pthread_cond_wait"), _c("drop_gil", "libpython3.11.so")], "gil-deadlock"),
    ([_c("clock_nanosleep"), _c("__nanosleep")], "sleep"),
    ([_c("pthread_join")], "thread-join"),
    # spin locks and read-write locks: glibc's, and a library's own wrapper named *_spin_lock
    ([_c("pthread_spin_lock", "/lib64/libpthread.so.0")], "lock-wait"),
    ([_c("pthread_spin_lock", "/lib64/libpthread.so.0"), _c("mylib_spin_lock", "/opt/lib/libmylib.so")], "lock-wait"),
    ([_c("__pthread_rwlock_wrlock_full"), _c("pthread_rwlock_wrlock")], "lock-wait"),
    # Windows (WinDbg, a minidump): critical sections, SRW locks, kernel object waits, sleeps
    ([_c("NtWaitForAlertByThreadId", "ntdll"), _c("RtlpWaitOnCriticalSection", "ntdll"),
      _c("RtlpEnterCriticalSectionContended", "ntdll"), _c("RtlEnterCriticalSection", "ntdll")], "lock-wait"),
    ([_c("NtWaitForSingleObject", "ntdll"), _c("WaitForSingleObjectEx", "KERNELBASE"), _c("WaitForSingleObject", "KERNELBASE")], "event-wait"),
    ([_c("AcquireSRWLockExclusive", "ntdll")], "lock-wait"),
    ([_c("NtDelayExecution", "ntdll"), _c("SleepEx", "KERNELBASE")], "sleep"),
    # queue.SimpleQueue's get, in C: the lock under it is the queue's
    ([_c("PyThread_acquire_lock_timed", "libpython3.11.so.1.0"), _c("_queue_SimpleQueue_get_impl", "_queuemodule.c")],
     "queue-wait"),
    # gdb names glibc's own calls by their internal alias
    ([_c("__GI_flock", "../sysdeps/unix/syscall-template.S"), _c("fcntl_flock_impl", "Modules/fcntlmodule.c")], "file-lock-wait"),
    ([_c("__GI___poll", "../sysdeps/unix/sysv/linux/poll.c")], "socket-read"),
    # SQLite's busy handler sleeping until another connection's lock on the database goes
    ([_c("clock_nanosleep"), _c("usleep"), _c("0x7f5147b8c1b5", "/usr/lib/libsqlite3.so.0.8.6"),
      _c("sqlite3InvokeBusyHandler", "/usr/lib/libsqlite3.so.0.8.6"), _c("sqlite3_step", "/usr/lib/libsqlite3.so.0.8.6")],
     "file-lock-wait"),
]


@pytest.mark.parametrize("frames, category", PRIMITIVE_STACKS, ids=[f"{c}:{fs[-1].function}" for fs, c in PRIMITIVE_STACKS])
def test_each_primitive_is_named_from_a_small_stack(frames, category):
    w = wait_of(_thread(*frames, USER, _py("<module>", "/home/u/train.py", 9)))
    assert w is not None and w.category == category, w
    assert w.caller == USER
    assert w.category in FAMILIES or any(s.id == w.category for s in load_signatures())


def test_a_file_lock_is_a_wait_whoever_takes_it(tmp_path):
    """py-spy --native of a sqlite3 execute on a database another connection holds locked:
    the busy handler's sleep under the sqlite3 module's own C frames is a file lock, not
    an extension's business (it read as "no known signature")."""
    dump = ("Thread 15430 (idle): \"MainThread\"\n    clock_nanosleep (libc.so.6)\n    nanosleep (libc.so.6)\n"
            "    usleep (libc.so.6)\n    0x7f5147b8c1b5 (libsqlite3.so.0.8.6)\n    sqlite3InvokeBusyHandler (libsqlite3.so.0.8.6)\n"
            "    sqlite3PagerSharedLock (libsqlite3.so.0.8.6)\n    sqlite3_prepare_v2 (libsqlite3.so.0.8.6)\n"
            "    pysqlite_statement_create (statement.c:60)\n    pysqlite_connection_execute (connection.c.h:708)\n"
            "    <module> (train.py:15)\n")
    assert text_verdict(tmp_path, dump) == "file-lock-wait"


def test_every_category_of_the_table_has_a_title_and_advice():
    ids = {s.id for s in load_signatures()}
    assert {p.category for p in PRIMITIVES} <= set(FAMILIES) | ids


def test_the_report_names_the_call_chain_and_the_callers_file_and_line():
    caller = _py("download_and_prepare", SITE + "datasets/builder.py", 123)
    w = wait_of(_thread(_py("_acquire", SITE + "filelock/_unix.py", 42), _py("acquire", SITE + "filelock/_api.py", 332), caller))
    assert w is not None and w.caller == caller and not w.cut
    text = w.describe("MainThread")
    assert text.startswith("MainThread waits on a file lock (")
    assert "filelock `_acquire` -> `fcntl.flock`" in text and text.endswith("called from `datasets/builder.py:123`")
    assert w.to_json()["caller"] == "download_and_prepare (builder.py:123)"


def test_the_outermost_primitive_names_the_wait_and_a_librarys_own_frames_belong_to_it():
    """DataLoader._next_data over queue.get over Condition.wait waits on the DataLoader;
    the DataLoader's __next__ (a row of its own, for torch 0.x which read the queue there)
    is part of the wait too."""
    w = wait_of(_thread(_py("wait", STDLIB + "threading.py"), _py("get", STDLIB + "queue.py"),
                        _py("_try_get_data", SITE + "torch/utils/data/dataloader.py"),
                        _py("__next__", SITE + "torch/utils/data/dataloader.py"), USER))
    assert w is not None and w.category == "dataloader-wait" and w.caller == USER
    assert w.calls[:2] == ("DataLoader `__next__`", "DataLoader `_get_data`") and w.calls[-1] == "`threading` `wait`"


def test_a_forked_childs_wait_ends_at_its_bootstrap(tmp_path):
    """A forked child runs on top of its parent's Popen._launch and start(): at exit its
    Queue finalizer joins the feeder thread (blocked writing a result nobody reads). That
    is the child's exit waiting for a thread, not a wait for a child process (which the
    parent's frames under _bootstrap seemed to say)."""
    mp = STDLIB + "multiprocessing/"
    child = _thread(_py("Thread._wait_for_tstate_lock", STDLIB + "threading.py"), _py("Thread.join", STDLIB + "threading.py"),
                    _py("Queue._finalize_join", mp + "queues.py"), _py("Finalize.__call__", mp + "util.py"),
                    _py("_run_finalizers", mp + "util.py"), _py("_exit_function", mp + "util.py"),
                    _py("BaseProcess._bootstrap", mp + "process.py"), _py("Popen._launch", mp + "popen_fork.py"),
                    _py("Popen.__init__", mp + "popen_fork.py"), _py("ForkProcess._Popen", mp + "context.py"),
                    _py("BaseProcess.start", mp + "process.py"), _py("<module>", "/home/u/train.py"))
    w = wait_of(child)
    assert w is not None and w.category == "thread-join"
    dump = "Thread 14306 (idle): \"MainThread\"\n" + "".join(
        f"    {f.function} ({f.file.rsplit('/', 2)[-2] + '/' if 'multiprocessing' in f.file else ''}{f.file.rsplit('/', 1)[-1]}:{f.line})\n"
        for f in child.frames)
    assert text_verdict(tmp_path, dump) == "shutdown-join"


def test_the_gil_is_the_innermost_wait_even_under_a_lock_acquire():
    """Python 2's lock.acquire re-taking the GIL after its own wait (PyEval_RestoreThread
    over PyThread_acquire_lock): the thread waits for the GIL, not for the lock."""
    w = wait_of(_thread(_c("do_futex_wait"), _c("sem_wait"), _c("PyThread_acquire_lock", "libpython2.7.so"),
                        _c("PyEval_RestoreThread", "libpython2.7.so"), _c("lock_PyThread_acquire_lock", "libpython2.7.so"), USER))
    assert w is not None and w.category == "gil-deadlock"


def test_a_gil_wait_called_by_an_extension_still_names_the_gil():
    """PyGILState_Ensure from a GUI toolkit's callback: the GIL is no business of the
    extension's, so the wait is not weak."""
    w = wait_of(_thread(_c("PyEval_RestoreThread", "libpython2.6.so"), _c("PyGILState_Ensure", "libpython2.6.so"),
                        _c("?", "/usr/lib/gtk-2.0/gtk/_gtk.so"), _c("g_main_loop_run", "/lib/libglib-2.0.so.0")))
    assert w is not None and w.category == "gil-deadlock" and not w.weak


def test_a_gil_wait_no_signature_names_gets_the_gil_family():
    c = _classify(_thread(_c("pthread_cond_wait"), _c("drop_gil", "libpython3.11.so"), _c("?", "/opt/ext/_native.so")))
    assert c is not None and c.signature_id == "gil-deadlock"


def test_a_gil_wait_the_lock_signature_matches_is_named_the_gil():
    """take_gil on a semaphore under a lock's acquire matches the generic lock-wait
    signature; the thread waits for the GIL, so the GIL family names it."""
    c = _classify(_thread(_c("do_futex_wait"), _c("sem_wait"), _c("PyThread_acquire_lock", "libpython2.7.so"),
                          _c("PyEval_RestoreThread", "libpython2.7.so"), _c("lock_PyThread_acquire_lock", "libpython2.7.so"),
                          _c("PyEval_EvalFrameEx", "libpython2.7.so")))
    assert c is not None and c.signature_id == "gil-deadlock"


def test_a_sleep_in_an_acquire_loop_is_a_polling_lock():
    """An acquire loop that tries and sleeps between tries (a soft file lock, a lock file):
    the ``time.sleep`` on a Ctrl-C traceback's innermost line is the lock's wait."""
    w = wait_of(_thread(Frame("time.sleep", "<call>", None, native=True), _py("acquire", SITE + "mylib/locking.py"), USER))
    assert w is not None and w.category == "file-lock-wait"
    plain = wait_of(_thread(Frame("time.sleep", "<call>", None, native=True), USER))
    assert plain is not None and plain.category == "sleep"


def test_a_lock_files_wait_on_a_tracebacks_innermost_line_is_a_file_lock():
    w = wait_of(_thread(Frame("baton.wait", "<call>", None, native=True), _py("_jit_compile", SITE + "torch/utils/cpp_extension.py")))
    assert w is not None and w.category == "file-lock-wait"


def test_an_exit_whose_innermost_wait_is_a_lock_file_is_the_lock():
    """A finalizer run at exit waits on a lock file: the exit waits for the lock."""
    c = _classify(_thread(_py("_acquire", SITE + "filelock/_soft.py"), _py("acquire", SITE + "filelock/_api.py"),
                          _py("close", "/home/u/cache.py", 7), _py("_run_finalizers", STDLIB + "multiprocessing/util.py"),
                          _py("_exit_function", STDLIB + "multiprocessing/util.py")))
    assert c is not None and c.signature_id == "file-lock-wait"


def test_a_thread_in_its_own_code_waits_on_nothing():
    assert wait_of(_thread(USER, _py("wait", STDLIB + "threading.py"))) is None
    assert wait_of(_thread(_py("dumps", STDLIB + "json/__init__.py"), USER)) is None


def test_a_stack_ending_at_an_api_call_was_cut_above_the_blocking_frame():
    cut = wait_of(_thread(_py("join", STDLIB + "multiprocessing/process.py"), USER))
    whole = wait_of(_thread(_py("poll", STDLIB + "multiprocessing/popen_fork.py"), _py("join", STDLIB + "multiprocessing/process.py"), USER))
    assert cut is not None and cut.cut and "cut above the blocking frame" in cut.describe()
    assert whole is not None and not whole.cut and whole.category == cut.category == "subprocess-wait"


def _classify(*threads: ThreadDump, pid: int = 7):
    series = (ProcessSeries(pid, (ProcessDump(pid, tuple(threads)),)),)
    return classify(series, load_signatures())


def test_a_dump_whose_only_evidence_is_a_primitive_gets_its_family():
    c = _classify(_thread(_py("_acquire", SITE + "filelock/_unix.py"), _py("acquire", SITE + "filelock/_api.py"), USER))
    assert c is not None and c.signature_id == "file-lock-wait"
    c = _classify(_thread(_py("readinto", STDLIB + "socket.py"), _py("getresponse", STDLIB + "http/client.py"), USER))
    assert c is not None and c.signature_id == "socket-read"


def test_a_bug_signature_stays_on_top_of_the_family():
    c = _classify(_thread(_py("wait", SITE + "torch/utils/file_baton.py"), _py("_jit_compile", SITE + "torch/utils/cpp_extension.py"), USER))
    assert c is not None and c.signature_id == "extension-build-lock"


@pytest.mark.parametrize("frames, expected", [
    ([_py("wait", STDLIB + "threading.py"), _py("wait", STDLIB + "threading.py")], "event-wait"),
    ([_py("wait", STDLIB + "threading.py"), _py("get", STDLIB + "queue.py")], "queue-wait"),
    ([_py("_wait_for_tstate_lock", STDLIB + "threading.py"), _py("join", STDLIB + "threading.py")], "thread-join"),
    ([_py("acquire", STDLIB + "threading.py")], "lock-wait"),
    ([_py("acquire", SITE + "logging/__init__.py")], "lock-wait"),
])
def test_generic_waits_are_not_called_lock_wait_too_eagerly(frames, expected):
    c = _classify(_thread(*frames, USER))
    assert c is not None and c.signature_id == expected


def test_a_collective_called_inside_a_graph_wrapper_outranks_the_wrapper():
    """The wrapped model calls all_reduce under vLLM's CUDAGraphWrapper.__call__: the
    collective is the innermost blocking call, the wrapper only contains it."""
    c = _classify(_thread(
        _py("all_reduce", SITE + "torch/distributed/distributed_c10d.py"),
        _py("all_reduce", SITE + "vllm/distributed/parallel_state.py"),
        _py("forward", SITE + "vllm/model_executor/models/llama.py"),
        _py("__call__", SITE + "vllm/compilation/cuda_graph.py"),
        _py("execute_model", SITE + "vllm/v1/worker/gpu_model_runner.py")))
    assert c is not None and c.signature_id == "nccl-collective-wait"


def test_a_wrapper_that_calls_the_wait_itself_keeps_it():
    """ACLGraph's __call__ synchronizing its own replay: the replay's wait."""
    c = _classify(_thread(
        _py("synchronize", SITE + "torch_npu/npu/streams.py"),
        _py("__call__", SITE + "vllm_ascend/compilation/acl_graph.py"),
        _py("_model_forward", SITE + "vllm_ascend/worker/model_runner_v1.py")))
    assert c is not None and c.signature_id == "cuda-graph-replay"


def test_a_graph_replay_with_nothing_blocking_above_it_stays_the_verdict():
    c = _classify(_thread(_py("replay", SITE + "torch/cuda/graphs.py"), _py("forward", SITE + "mymodel/runner.py")))
    assert c is not None and c.signature_id == "cuda-graph-replay"


FILELOCK_PASTE = """\
Thread 100 (idle): "MainThread"
    _acquire (filelock/_unix.py:42)
    acquire (filelock/_api.py:332)
    download_and_prepare (datasets/builder.py:123)
    main (train.py:40)
"""


def test_replay_text_says_what_each_thread_waits_on(capsys, tmp_path):
    path = tmp_path / "dump.txt"
    path.write_text(FILELOCK_PASTE)
    assert main(["replay", str(path)]) == 0
    out = capsys.readouterr().out
    assert "file-lock-wait: Waiting for a file lock" in out
    assert ("   waits on:\n     MainThread waits on a file lock (filelock `acquire` -> filelock `_acquire` -> `fcntl.flock`), "
            "called from `datasets/builder.py:123`") in out


def test_replay_json_carries_waits_on_per_thread(capsys, tmp_path):
    path = tmp_path / "dump.txt"
    path.write_text(FILELOCK_PASTE + '\nThread 101 (idle): "worker"\n    run (mylib/loop.py:3)\n')
    assert main(["replay", "--json", str(path)]) == 0
    data = json.loads(capsys.readouterr().out)
    (incident,) = data["incidents"]
    (w,) = incident["waits_on"]  # the thread of interest: the one that decides
    assert w["pid"] == 100 and w["thread"] == "MainThread" and w["decides"] is True
    assert w["category"] == "file-lock-wait" and w["what"] == "a file lock" and w["cut"] is False
    assert w["calls"] == ["filelock `acquire`", "filelock `_acquire` -> `fcntl.flock`"]
    assert w["frames"] == ["_acquire (_unix.py:42)", "acquire (_api.py:332)"]
    assert w["caller"] == "download_and_prepare (builder.py:123)" and w["text"].startswith("MainThread waits on a file lock")


def test_waits_on_names_a_thread_in_its_own_code_too(capsys, tmp_path):
    path = tmp_path / "dump.txt"
    path.write_text('Thread 5 (active): "MainThread"\n    compute (mylib/math.py:7)\n    main (train.py:3)\n')
    assert main(["replay", "--json", str(path)]) == 0
    (w,) = json.loads(capsys.readouterr().out)["incidents"][0]["waits_on"]
    assert w["category"] is None and "no known blocking call" in w["text"] and "compute (math.py:7)" in w["text"]
    assert "--native" not in w["text"]  # (running its own Python code: no C call to look for)


def test_an_idle_thread_in_its_own_code_points_at_the_c_call_the_dump_leaves_out(capsys, tmp_path):
    """py-spy without --native, a thread idle in the program's line (a lock's acquire, a
    sleep or a read made there shows no frame): replay says so and how to see it."""
    path = tmp_path / "dump.txt"
    path.write_text('Thread 5 (idle): "MainThread"\n    flush_metrics (train.py:8)\n    <module> (train.py:20)\n')
    assert main(["replay", "--json", str(path)]) == 0
    (w,) = json.loads(capsys.readouterr().out)["incidents"][0]["waits_on"]
    assert w["category"] is None and "py-spy dump --native" in w["text"]


def test_a_ctrl_c_traceback_names_the_call_on_its_innermost_source_line():
    text = ('^CTraceback (most recent call last):\n  File "/home/u/train.py", line 88, in <module>\n    main()\n'
            '  File "/home/u/train.py", line 80, in main\n    fcntl.flock(fd, fcntl.LOCK_EX)\nKeyboardInterrupt\n')
    (proc,) = read_text(text).processes
    w = wait_of(proc.threads[0])
    assert w is not None and w.category == "file-lock-wait" and w.caller is not None and w.caller.line == 80
    assert "`fcntl.flock()` on the innermost source line" in w.describe()


def test_a_sleep_on_the_source_line_of_a_cut_client_call_is_the_wait():
    """A traceback cut inside ``requests.get`` (an API whose own frames a whole stack shows
    under it) whose source line is ``time.sleep(60)``: the thread sleeps, it does not wait
    on the network; a cut client call with no such line stays a network wait."""
    head = ('Traceback (most recent call last):\n  File "/home/u/script.py", line 5, in call_api\n'
            '    requests.get("https://example.org")\n'
            '  File "/home/u/venv/lib/python3.8/site-packages/requests/api.py", line 71, in get\n')
    (proc,) = read_text(head + '    time.sleep(60)\nKeyboardInterrupt\n').processes
    w = wait_of(proc.threads[0])
    assert w is not None and w.category == "sleep" and w.caller is not None and w.caller.line == 5
    (proc,) = read_text(head + '    return request("get", url, params=params, **kwargs)\nKeyboardInterrupt\n').processes
    w = wait_of(proc.threads[0])
    assert w is not None and w.category == "socket-read"


def test_a_blocking_d_bus_call_waits_on_the_service():
    """dbus-python's proxy call (send_message_with_reply_and_block under it) interrupted by
    Ctrl-C: the thread waits for the D-Bus service's reply."""
    text = ('Traceback (most recent call last):\n  File "/opt/wicd/edgy.py", line 209, in auto_reconnect\n'
            '    daemon.AutoConnect(True)\n  File "/usr/lib/python3/dist-packages/dbus/proxies.py", line 169, in __call__\n'
            '    reply_message = self._connection.send_message_with_reply_and_block(message, timeout)\nKeyboardInterrupt\n')
    (proc,) = read_text(text).processes
    w = wait_of(proc.threads[0])
    assert w is not None and w.category == "socket-read" and "D-Bus" in w.what and w.caller is not None and w.caller.line == 209


def test_a_store_client_that_cannot_connect_waits_on_the_store():
    """init_process_group's TCPStore client never reaching the master: the store is
    what the rank waits on, though the process-group-init signature matches too."""
    c = _classify(_thread(_c("c10d::tcputil::connect", SITE + "torch/lib/libtorch_cpu.so"),
                          _c("c10d::TCPStore::TCPStore", SITE + "torch/lib/libtorch_cpu.so"),
                          _py("_create_c10d_store", SITE + "torch/distributed/rendezvous.py"), USER))
    assert c is not None and c.signature_id == "store-wait"


def test_a_store_based_barrier_waits_on_the_store():
    c = _classify(_thread(_py("_store_based_barrier", SITE + "torch/distributed/distributed_c10d.py"),
                          _py("new_group", SITE + "torch/distributed/distributed_c10d.py"), USER))
    assert c is not None and c.signature_id == "store-wait"


def test_a_store_get_for_nccls_unique_id_is_the_communicators_setup():
    c = _classify(_thread(_c("c10d::TCPStore::doGet", SITE + "torch/lib/libtorch_cpu.so"),
                          _c("c10d::ProcessGroupNCCL::broadcastUniqueNCCLID", SITE + "torch/lib/libtorch_cuda.so"),
                          _c("c10d::ProcessGroupNCCL::getNCCLComm", SITE + "torch/lib/libtorch_cuda.so"), USER))
    assert c is not None and c.signature_id == "nccl-comm-init"


def test_an_exit_joining_a_child_process_waits_on_the_child():
    """multiprocessing's exit handler joining a child that never ends: the child is what
    the exit waits on (dump it), not a thread of the exiting process."""
    c = _classify(_thread(_py("select", STDLIB + "selectors.py"), _py("wait", STDLIB + "multiprocessing/connection.py"),
                          _py("poll", STDLIB + "multiprocessing/popen_forkserver.py"), _py("wait", STDLIB + "multiprocessing/popen_fork.py"),
                          _py("join", STDLIB + "multiprocessing/process.py"), _py("_exit_function", STDLIB + "multiprocessing/util.py")))
    assert c is not None and c.signature_id == "child-process-wait"


def test_a_copy_to_the_host_is_a_synchronize_not_a_stuck_upload():
    """``.item()``'s device-to-host memcpy waits for everything queued on the stream: the
    GPU's work, not a host-to-device copy."""
    lib = SITE + "torch/lib/"
    c = _classify(_thread(_c("cuMemcpyDtoHAsync_v2", "/usr/lib/libcuda.so.1"), _c("cudaMemcpyAsync", lib + "libcudart.so.12"),
                          _c("at::native::_local_scalar_dense_cuda", lib + "libtorch_cuda.so"), USER))
    assert c is not None and c.signature_id == "cuda-synchronize-wait"
    c = _classify(_thread(_c("cudaMemcpyAsync", lib + "libcudart.so.12"), _py("copy_to_device", SITE + "returnn/util.py"), USER))
    assert c is not None and c.signature_id == "h2d-copy-stuck"


def test_a_barrier_on_the_store_is_a_store_wait_not_a_collective():
    """The elastic agent's exit barrier is a barrier on the c10d store, which the
    collective signature's generic `barrier` also matches: the store is what it waits on."""
    c = _classify(_thread(_py("barrier", SITE + "torch/distributed/elastic/utils/store.py"),
                          _py("_exit_barrier", SITE + "torch/distributed/elastic/agent/server/api.py"), USER))
    assert c is not None and c.signature_id == "store-wait"


def test_a_thread_whose_innermost_frame_is_the_import_machinery_is_loading_an_extension():
    """importlib's own frame innermost (py-spy shows no C frame under it): the call under
    it is an extension's C-level load. Module code run by an import shows above it."""
    boot = "<frozen importlib._bootstrap>"
    c = _classify(_thread(_py("_load_unlocked", boot, 688), _py("_find_and_load_unlocked", boot, 1006),
                          _py("_find_and_load", boot, 1027), _py("<module>", "/home/u/app.py", 3)))
    assert c is not None and c.signature_id == "extension-load-stuck"
    c = _classify(_thread(USER, _py("<module>", "/home/u/mod.py", 9), _py("_call_with_frames_removed", boot, 241),
                          _py("exec_module", "<frozen importlib._bootstrap_external>", 883), _py("_load_unlocked", boot, 688)))
    assert c is None or c.signature_id != "extension-load-stuck"


def test_a_libc_wait_called_by_an_accelerator_backend_is_the_device():
    """py-spy --native: an eventfd read under libtorch_npu's stream code, under a tensor
    copy: the backend waits for its device there."""
    npu = SITE + "torch_npu/lib/libtorch_npu.so"
    c = _classify(_thread(_c("read"), _c("eventfd_read"), _c("0xfffcfedd3074", npu), _c("c10_npu::NPUStream::stream", npu),
                          _c("at::_ops::copy_::call", SITE + "torch/lib/libtorch_cpu.so"), USER))
    assert c is not None and c.signature_id == "cuda-synchronize-wait"


def test_a_condition_waited_on_by_an_acquire_is_a_lock_wait():
    """A lock-like class of the program's own (a slot pool's ``_acquire_locked``) waiting on
    a Condition: the thread waits for that lock, not for an event."""
    w = wait_of(_thread(_py("wait", STDLIB + "threading.py"), _py("_acquire_slot", "/app/pool.py"), USER))
    assert w is not None and w.category == "lock-wait"
    w = wait_of(_thread(_py("wait", STDLIB + "threading.py"), _py("wait_for_batch", "/app/pool.py"), USER))
    assert w is not None and w.category == "event-wait"


def test_a_condition_waited_on_inside_a_finalizer_is_a_lock_wait():
    """The garbage collector runs ``__del__`` (or a weakref callback) in the thread it
    interrupts; a close from there that waits on a Condition waits for a lock that thread
    already holds: a self-deadlock, not an event that will come. A paste cut at the
    ``__del__`` still shows it (no thread starts in a ``__del__``)."""
    close = [_py("wait", STDLIB + "threading.py"), _py("_close", SITE + "rpclib/channel.py"), _py("close", SITE + "rpclib/channel.py")]
    for finalizer in (_py("__del__", SITE + "client/api.py"), _py("__call__", STDLIB + "weakref.py")):
        c = _classify(_thread(*close, finalizer, USER))
        assert c.signature_id == "lock-wait" and "finalizer" in c.title
    cut = ThreadDump("1", "", (*close, _py("__del__", SITE + "client/api.py")))
    assert _classify(cut).signature_id == "lock-wait"
    # the same close called by the program: an event wait
    assert _classify(_thread(*close, USER)).signature_id == "event-wait"


def test_a_finalizer_under_faulthandlers_garbage_collecting_line_is_where_it_ran():
    """faulthandler writes "Garbage-collecting" above the frames the collector interrupted
    (redis-py#3081: a PubSub ``__del__`` releasing a connection inside the pool's own
    locked call). Where that line stands is no place in the stack: the ``__del__`` is where
    the finalizer ran, and the network client's ``release`` above it re-entered the lock
    (it read as the client waiting on its server, once py-spy's short paths named the
    package)."""
    text = ("Current thread 0x00007fcd7c4abc80 (most recent call first):\n"
            "  Garbage-collecting\n"
            '  File "redis/connection.py", line 1113 in release\n'
            '  File "redis/client.py", line 669 in reset\n'
            '  File "redis/client.py", line 661 in __del__\n'
            '  File "redis/connection.py", line 129 in __init__\n'
            '  File "redis/connection.py", line 1086 in get_connection\n'
            '  File "/app/worker.py", line 12 in poll\n')
    (proc,) = read_text(text).processes
    c = _classify(*proc.threads)
    assert c is not None and c.signature_id == "lock-wait" and "finalizer" in c.title


def test_a_queue_put_blocked_on_the_queues_lock_is_a_lock_wait():
    put = wait_of(_thread(_py("__enter__", STDLIB + "multiprocessing/synchronize.py"), _py("put", STDLIB + "multiprocessing/queues.py"), USER))
    assert put is not None and put.category == "lock-wait"
    # a get behind the reader lock is an idle pool worker queued behind the one reading
    get = wait_of(_thread(_py("__enter__", STDLIB + "multiprocessing/synchronize.py"), _py("get", STDLIB + "multiprocessing/queues.py"), USER))
    assert get is not None and get.category == "queue-wait"


def test_a_pools_exit_join_is_the_join_not_a_future_wait():
    """Executor.__exit__ calls shutdown(wait=True): the pool's threads are joined."""
    w = wait_of(_thread(_py("_wait_for_tstate_lock", STDLIB + "threading.py"), _py("join", STDLIB + "threading.py"),
                        _py("shutdown", STDLIB + "concurrent/futures/thread.py"), _py("__exit__", STDLIB + "concurrent/futures/_base.py"), USER))
    assert w is not None and w.category == "thread-join"


def test_a_join_names_the_lock_the_other_thread_waits_on():
    """A main thread joining threads that wait on each other's locks (the lock-order deadlock
    shape): the lock wait is the cause, not the join."""
    main = _thread(_py("_wait_for_tstate_lock", STDLIB + "threading.py"), _py("join", STDLIB + "threading.py"), USER)
    worker = _thread(Frame("second.acquire", "<call>", None, native=True), _py("work", "/home/u/train.py", 10),
                     _py("run", STDLIB + "threading.py"), name="Thread-1")
    c = _classify(main, worker)
    assert c is not None and c.signature_id == "lock-wait"
    # with no thread waiting on a lock, the join stays the verdict
    busy = _thread(_py("work", "/home/u/train.py", 10), _py("run", STDLIB + "threading.py"), name="Thread-1")
    c = _classify(main, busy)
    assert c is not None and c.signature_id == "thread-join"


def test_an_idle_pool_worker_loses_to_the_parent_waiting_for_results():
    parent = _thread(_py("wait", STDLIB + "threading.py"), _py("next", STDLIB + "multiprocessing/pool.py"), USER)
    worker = _thread(_py("_recv", STDLIB + "multiprocessing/connection.py"), _py("get", STDLIB + "multiprocessing/queues.py"),
                     _py("worker", STDLIB + "multiprocessing/pool.py"), _py("run", STDLIB + "multiprocessing/process.py"))
    series = (ProcessSeries(7, (ProcessDump(7, (parent,)),)), ProcessSeries(8, (ProcessDump(8, (worker,)),)))
    c = classify(series, load_signatures())
    assert c is not None and c.signature_id == "future-wait"


def test_an_idle_worker_of_dills_multiprocess_fork_is_idle_too():
    """pathos's pools run on ``multiprocess`` (multiprocessing's fork): a worker idle in its
    task queue there is idle, and the parent blocked on the queue's reader lock decides."""
    parent = _thread(Frame("inqueue._rlock.acquire", "<call>", None, native=True), _py("_help_stuff_finish", SITE + "multiprocess/pool.py"), USER)
    worker = _thread(_py("_recv", SITE + "multiprocess/connection.py"), _py("get", SITE + "multiprocess/queues.py"),
                     _py("worker", SITE + "multiprocess/pool.py"))
    series = (ProcessSeries(7, (ProcessDump(7, (parent,)),)), ProcessSeries(8, (ProcessDump(8, (worker,)),)))
    c = classify(series, load_signatures())
    assert c is not None and c.signature_id == "lock-wait"


def test_a_thread_waiting_for_the_gil_names_a_main_thread_blocked_in_native_code():
    """Main blocked on a native mutex from an extension called by Python (the GIL held),
    another thread waiting in take_gil from a callback: a GIL inversion, named by the waiter."""
    main = _thread(_c("__lll_lock_wait"), _c("pthread_mutex_lock"), _c("ext_call", "/app/ext.so"),
                   _c("cfunction_call", "/usr/bin/python3.11"))
    waiter = _thread(_c("futex_wait"), _c("take_gil", "/usr/bin/python3.11"), _c("PyEval_RestoreThread", "/usr/bin/python3.11"),
                     _c("on_event", "/app/ext.so"), name="Thread-2")
    c = _classify(main, waiter)
    assert c is not None and c.signature_id == "gil-deadlock"


def test_a_forked_worker_stuck_in_loggings_own_code_inherited_its_lock():
    worker = _thread(_py("emit", STDLIB + "logging/__init__.py"), _py("handle", STDLIB + "logging/__init__.py"),
                     _py("init_process", SITE + "gunicorn/workers/base.py"), _py("spawn_worker", SITE + "gunicorn/arbiter.py"))
    c = _classify(worker)
    assert c is not None and c.signature_id == "fork-inherited-lock"
    # the same logging call in a process that was not forked is no inherited lock
    c = _classify(_thread(_py("emit", STDLIB + "logging/__init__.py"), _py("handle", STDLIB + "logging/__init__.py"), USER))
    assert c is None or c.signature_id != "fork-inherited-lock"
    # py-spy 0.4 names each method with its class: the same worker, the same verdict
    qualified = _thread(_py("StreamHandler.emit", STDLIB + "logging/__init__.py"),
                        _py("Handler.handle", STDLIB + "logging/__init__.py"),
                        _py("Worker.init_process", SITE + "gunicorn/workers/base.py"),
                        _py("Arbiter.spawn_worker", SITE + "gunicorn/arbiter.py"))
    c = _classify(qualified)
    assert c is not None and c.signature_id == "fork-inherited-lock"


@pytest.mark.parametrize("qualified", [False, True])
def test_a_thread_joining_another_is_no_background_helper(qualified):
    """A thread of only the standard library's frames is a helper (a pool's idler) unless
    it joins a thread: a Queue's finalizer joining its feeder is the program's wait, named
    ``Thread.join`` by py-spy 0.4 and ``join`` by older dumps alike."""
    from hangwatch.diagnostics.thread_roles import is_helper  # noqa: PLC0415

    q = "Thread." if qualified else ""
    joiner = _thread(_py(q + "_wait_for_tstate_lock", STDLIB + "threading.py"), _py(q + "join", STDLIB + "threading.py"),
                     _py(("Queue." if qualified else "") + "_finalize_join", STDLIB + "multiprocessing/queues.py"),
                     name="Thread-3")
    assert not is_helper(joiner, None, "", ())


def test_a_logging_call_inside_a_librarys_wait_waits_on_loggings_lock():
    """urllib3 logging a debug line while it makes a request: the thread waits on logging's
    lock, not on the socket the request will read."""
    w = wait_of(_thread(_py("_acquireLock", STDLIB + "logging/__init__.py"), _py("isEnabledFor", STDLIB + "logging/__init__.py"),
                        _py("debug", STDLIB + "logging/__init__.py"), _py("_make_request", SITE + "urllib3/connectionpool.py"), USER))
    assert w is not None and w.category == "lock-wait"


def test_a_main_thread_with_no_visible_wait_gives_way_to_a_thread_waiting_on_a_lock():
    main = _thread(_py("flush", "/app/flusher.py"), USER)
    worker = _thread(_py("_acquireLock", STDLIB + "logging/__init__.py"), _py("step", "/app/flusher.py"),
                     _py("run", STDLIB + "threading.py"), name="Thread-1")
    c = _classify(main, worker)
    assert c is not None and c.signature_id == "lock-wait"


def test_a_named_mutex_taken_by_an_extension_is_a_lock_wait_a_bare_futex_is_not():
    """A mutex, spin lock or critical section taken by the job's own native code is a lock
    whoever calls it; a bare futex or poll under an extension says nothing of its own."""
    ext = _c("Engine::submit", "/opt/app/libengine.so")
    w = wait_of(_thread(_c("__lll_lock_wait"), _c("pthread_mutex_lock"), ext, USER))
    assert w is not None and w.category == "lock-wait" and not w.weak
    w = wait_of(_thread(_c("RtlEnterCriticalSection", "ntdll"), _c("Log::write", "app"), USER))
    assert w is not None and w.category == "lock-wait" and not w.weak
    # abseil's Mutex (gRPC, Ray, TensorFlow, XLA), its futex-backed waiter innermost
    absl = "/envs/ray/lib/python3.9/site-packages/ray/libabsl_synchronization.so"
    w = wait_of(_thread(_c("absl::lts_20211102::synchronization_internal::Waiter::Wait", absl),
                        _c("absl::lts_20211102::Mutex::Block", absl), _c("absl::lts_20211102::Mutex::LockSlowWithDeadline", absl),
                        _c("absl::lts_20211102::Mutex::LockSlow", absl), ext))
    assert w is not None and w.category == "lock-wait" and not w.weak
    w = wait_of(_thread(_c("futex_wait"), ext, USER))
    assert w is not None and w.weak


def test_a_thread_joined_by_name_from_a_native_library_is_a_thread_join():
    """pthread_join (glibc's __pthread_clockjoin_ex) or std::thread::join called by a native
    library's own stop or destructor (PipeWire's pw_thread_loop_stop, a thread pool's
    destructor): a join whoever makes it, so its family decides, not "no known signature"."""
    lib = _c("pw_thread_loop_stop", "/lib/x86_64-linux-gnu/libpipewire-0.3.so.0")
    w = wait_of(_thread(_c("__futex_abstimed_wait_common64"), _c("__GI___futex_abstimed_wait_cancelable64"),
                        _c("__pthread_clockjoin_ex", "pthread_join_common.c"), lib, _c("main", "mpv")))
    assert w is not None and w.category == "thread-join" and not w.weak
    w = wait_of(_thread(_c("pthread_join"), _c("std::thread::join()", "/usr/lib/libstdc++.so.6"),
                        _c("Pool::~Pool", "/opt/app/libengine.so")))
    assert w is not None and w.category == "thread-join" and not w.weak


def test_a_host_wait_inside_an_nccl_collective_call_is_its_lazy_connection_setup():
    """A collective only enqueues work on the host: a thread blocked on the CPU (a condition,
    a socket read) inside NCCL's own code under ncclAllReduce waits for the connections NCCL
    sets up on first use; a thread under it in the driver is the collective's own wait."""
    nccl = "/opt/nccl/lib/libnccl.so.2"
    c = _classify(_thread(_c("pthread_cond_wait@@GLIBC_2.3.2"), _c("?", nccl), _c("?", nccl), _c("ncclAllReduce", nccl),
                          _c("Engine::allreduce", "/opt/app/libengine.so")))
    assert c is not None and c.signature_id == "nccl-comm-init"
    c = _classify(_thread(_c("ioctl"), _c("?", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"), _c("?", nccl), _c("ncclAllReduce", nccl),
                          _c("Engine::allreduce", "/opt/app/libengine.so")))
    assert c is not None and c.signature_id == "nccl-collective-wait"


def test_a_blocking_read_made_by_native_code_is_a_socket_read_a_poll_is_not():
    """gdb-only stacks: a recv/read under the job's own native library reads that
    descriptor whoever calls it; a poll or epoll_wait is an event loop's idle wait."""
    client = _c("Client::fetch", "/opt/lib/libclient.so")
    w = wait_of(_thread(_c("read"), client, USER))
    assert w is not None and w.category == "socket-read" and not w.weak
    w = wait_of(_thread(_c("__libc_recv"), client, USER))
    assert w is not None and w.category == "socket-read" and not w.weak
    w = wait_of(_thread(_c("epoll_wait"), _c("uv_run", "/opt/lib/libuv.so.1"), USER))
    assert w is not None and w.weak


def test_glibc_internal_aliases_and_compiler_clones_name_their_function():
    """Newer glibc's debug symbols name the internal alias (``__GI___lll_lock_wait``) and gcc
    clones (``lll_lock_wait.isra.0``): the same waits as their plain names."""
    ext = _c("Engine::submit", "/opt/app/libengine.so")
    w = wait_of(_thread(_c("futex_wait"), _c("__GI___lll_lock_wait"), _c("__GI___pthread_mutex_lock"), ext, USER))
    assert w is not None and w.category == "lock-wait" and not w.weak
    w = wait_of(_thread(_c("__lll_lock_wait.isra.0"), ext, USER))
    assert w is not None and w.category == "lock-wait" and not w.weak


def test_a_read_write_lock_taken_inside_the_driver_is_a_lock_wait():
    """A lock the driver takes itself (its profiler's rwlock): the thread waits for that
    lock's holder, not for the device."""
    cuda = "/lib/x86_64-linux-gnu/libcuda.so.1"
    w = wait_of(_thread(_c("futex_abstimed_wait"), _c("__pthread_rwlock_wrlock_full"), _c("__GI___pthread_rwlock_wrlock"),
                        _c("?", cuda), _c("?", cuda), USER))
    assert w is not None and w.category == "lock-wait"


#: A forked child's stack under its target: multiprocessing's entry, outermost last.
_FORK_CHILD = (_py("run", STDLIB + "multiprocessing/process.py"), _py("_bootstrap", STDLIB + "multiprocessing/process.py"),
               _py("_launch", STDLIB + "multiprocessing/popen_fork.py"))


@pytest.mark.parametrize("lock", [
    (_py("acquire", STDLIB + "threading.py"), _py("_acquireLock", STDLIB + "logging/__init__.py"),
     _py("getLogger", STDLIB + "logging/__init__.py")),
    (_py("acquire", STDLIB + "logging/__init__.py"), _py("handle", STDLIB + "logging/__init__.py"),
     _py("info", STDLIB + "logging/__init__.py")),
    (_c("__new_sem_wait"), _c("PyThread_acquire_lock_timed", "libpython3.11.so"), _py("_get_topology", SITE + "dbclient/client.py")),
])
def test_a_lock_wait_in_a_forked_child_is_a_lock_inherited_at_the_fork(lock):
    """The thread that held the lock in the parent does not exist in the child: nobody
    releases it (the dump was called a plain lock-wait, whose advice looks for a holder)."""
    assert _classify(_thread(*lock, USER, *_FORK_CHILD)).signature_id == "fork-inherited-lock"


def test_a_lock_wait_in_a_spawned_child_or_on_a_multiprocessing_lock_is_no_inherited_lock():
    spawned = (_py("run", STDLIB + "multiprocessing/process.py"), _py("_bootstrap", STDLIB + "multiprocessing/process.py"),
               _py("_main", STDLIB + "multiprocessing/spawn.py"), _py("spawn_main", STDLIB + "multiprocessing/spawn.py"))
    lock = (_py("acquire", STDLIB + "threading.py"), _py("work", SITE + "jobs/queue.py"))
    assert _classify(_thread(*lock, USER, *spawned)).signature_id == "lock-wait"
    shared = (_py("__enter__", STDLIB + "multiprocessing/synchronize.py"), _py("work", SITE + "jobs/queue.py"))
    assert _classify(_thread(*shared, USER, *_FORK_CHILD)).signature_id == "lock-wait"


def test_a_native_mutex_held_with_the_gil_while_another_thread_waits_for_the_gil_is_a_gil_deadlock():
    """pytorch#58239's shape from both sides: the main thread blocks in std::mutex::lock
    from a C++ call made with the GIL held; a callback thread holding that mutex waits to
    take the GIL. The generic lock-wait looked for a lock holder; the cure is the GIL's."""
    ext = "/opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_python.so"
    holder = ThreadDump("1", "MainThread", (
        _c("__lll_lock_wait"), _c("pthread_mutex_lock"), _c("std::mutex::lock", ext), _c("c10::ivalue::Future::wait", ext),
        _c("_PyEval_EvalFrameDefault", "/usr/lib/libpython3.11.so"), USER))
    waiter = ThreadDump("2", "callback", (
        _c("pthread_cond_timedwait"), _c("take_gil", "/usr/lib/libpython3.11.so"),
        _c("PyEval_RestoreThread", "/usr/lib/libpython3.11.so"), _c("c10::ivalue::Future::markCompleted", ext)))
    assert _classify(holder, waiter).signature_id == "gil-deadlock"
    # Python's own lock.acquire releases the GIL before it waits: a plain lock wait.
    py_lock = ThreadDump("1", "MainThread", (
        _c("sem_wait"), _c("PyThread_acquire_lock_timed", "/usr/lib/libpython3.11.so"),
        _c("acquire_timed", "/usr/lib/libpython3.11.so"), _c("lock_PyThread_acquire_lock", "/usr/lib/libpython3.11.so"),
        _py("acquire", STDLIB + "threading.py"), USER))
    assert _classify(py_lock, waiter).signature_id != "gil-deadlock"


def test_a_c_function_given_by_name_only_is_read_as_the_c_call():
    """A hand-written chain ("take_gil -> PyEval_AcquireThread") gives no file or library:
    its C functions were looked up as Python frames only, and the GIL wait was missed."""
    w = wait_of(_thread(Frame("take_gil", "?", None), Frame("PyEval_AcquireThread", "?", None), Frame("on_frame", "?", None)))
    assert w is not None and w.category == "gil-deadlock"


def test_a_gil_wait_under_the_childs_own_after_fork_code_is_the_inherited_lock():
    """uwsgi#2659: each respawned worker waits for the GIL in ``PyEval_RestoreThread`` from
    uwsgi's post-fork fixup: its holder was a thread of the master, gone in the child (it
    read as a GIL deadlock, whose advice looks for the holder in the same process). The
    parent's side of a fork, waiting in ``__libc_fork``'s prepare handlers, is no child."""
    libpython = "/usr/lib/libpython3.12.so"
    so = "/opt/venv/lib/python3.12/site-packages/pyuwsgi.so"
    gil = (_c("__futex_abstimed_wait_common"), _c("___pthread_cond_timedwait64"), _c("take_gil", libpython),
           _c("PyEval_RestoreThread", libpython))
    for after_fork in (_c("uwsgi_python_master_fixup", so), _c("PyOS_AfterFork_Child", libpython)):
        t = ThreadDump("1", "MainThread", (*gil, after_fork, _c("uwsgi_respawn_worker", so) if "uwsgi" in after_fork.function
                                            else _c("os_fork_impl", libpython), _c("main", so)))
        assert _classify(t).signature_id == "fork-inherited-lock"
    for parent_side in ((_c("prepare_handler", so), _c("__run_fork_handlers"), _c("__libc_fork"), _c("uwsgi_respawn_worker", so)),
                        (_c("PyOS_AfterFork_Parent", libpython), _c("os_fork_impl", libpython)),
                        (_c("jemalloc_postfork_parent", "/usr/lib/libjemalloc.so"), _c("__libc_fork")),
                        (_c("fork_child_process", so), _c("main", so))):
        assert _classify(ThreadDump("1", "MainThread", (*gil, *parent_side))).signature_id == "gil-deadlock"


def test_a_thread_pools_worker_thread_is_no_forked_child():
    """multiprocessing.pool.ThreadPool's threads run pool.py's worker too, in the same
    process: a lock wait there has a holder in this process."""
    pool_thread = (_py("worker", STDLIB + "multiprocessing/pool.py"), _py("run", STDLIB + "threading.py"),
                   _py("_bootstrap_inner", STDLIB + "threading.py"), _py("_bootstrap", STDLIB + "threading.py"))
    t = ThreadDump("2", "Thread-3", (_py("acquire", STDLIB + "threading.py"), _py("fetch", "/app/a.py"), *pool_thread))
    assert _classify(t).signature_id == "lock-wait"


def test_a_lock_guessed_from_a_name_in_a_forked_child_stays_a_guess():
    t = _thread(_py("take_slot_lock", SITE + "jobs/slots.py"), USER, *_FORK_CHILD)
    c = _classify(t)
    assert c.signature_id == "lock-wait" and "guessed" in c.title


def test_a_finalizer_waiting_inside_the_call_it_interrupted_is_a_self_deadlock():
    """redis-py's shape: a collection inside get_connection (which holds the pool's lock)
    runs a PubSub's __del__, which releases its connection to the pool: it waits for the
    lock its own thread holds. It was read as a socket read (redis is a network client)."""
    t = _thread(_py("release", SITE + "kv/connection.py"), _py("reset", SITE + "kv/client.py"),
                _py("__del__", SITE + "kv/client.py"), _py("__init__", SITE + "kv/connection.py"),
                _py("make_connection", SITE + "kv/connection.py"), _py("get_connection", SITE + "kv/connection.py"), USER)
    c = _classify(t)
    assert c.signature_id == "lock-wait" and "finalizer" in c.title
    # A lock shown under the finalizer too
    shown = _thread(_py("acquire", STDLIB + "threading.py"), _py("close", SITE + "kv/pool.py"),
                    _py("__del__", SITE + "kv/pool.py"), _py("step", "/app/loop.py"), USER)
    assert "finalizer" in _classify(shown).title


def test_a_finalizer_doing_io_or_run_by_its_own_thread_is_no_self_deadlock():
    io = _thread(_py("recv", STDLIB + "socket.py"), _py("close", SITE + "kv/conn.py"), _py("__del__", SITE + "kv/conn.py"),
                 _py("step", "/app/loop.py"), USER)
    assert _classify(io).signature_id == "socket-read"
    own = ThreadDump("3", "finalizer", (_py("acquire", STDLIB + "threading.py"), _py("_run_finalizer", STDLIB + "multiprocessing/util.py")))
    assert "finalizer" not in _classify(own).title
    # a paste cut at a __del__ that shows no wait under it says nothing of one
    bare = ThreadDump("4", "", (_py("__del__", SITE + "kv/conn.py"),))
    assert "finalizer" not in _classify(bare).title


def test_a_blocking_call_on_an_event_loops_thread_blocks_the_loop():
    """A coroutine calling a synchronous HTTP client: the socket read is what the loop's
    thread waits on, so the family is the read's own (a live requests.get inside an async
    handler, captured by py-spy and faulthandler), and the title and advice say it blocks
    every coroutine of the loop (make the call awaitable or move it off the loop)."""
    loop = (_py("_run", STDLIB + "asyncio/events.py"), _py("_run_once", STDLIB + "asyncio/base_events.py"),
            _py("run_forever", STDLIB + "asyncio/base_events.py"), _py("run_until_complete", STDLIB + "asyncio/base_events.py"))
    t = _thread(_py("readinto", STDLIB + "socket.py"), _py("getresponse", STDLIB + "http/client.py"),
                _py("fetch_quote", "/app/bot.py"), _py("on_tick", "/app/bot.py"), *loop)
    c = _classify(t)
    assert c.signature_id == "socket-read" and "synchronous call" in c.title and "to_thread" in c.advice
    # a future's result waited for on the loop: what would set it often needs that loop
    fut = _thread(_py("wait", STDLIB + "threading.py"), _py("result", STDLIB + "concurrent/futures/_base.py"),
                  _py("call_sync", "/app/bot.py"), _py("on_message", "/app/bot.py"), *loop)
    assert _classify(fut).signature_id == "asyncio-blocked"
    # the same read in an executor's thread blocks no loop
    worker = _thread(_py("readinto", STDLIB + "socket.py"), _py("getresponse", STDLIB + "http/client.py"),
                     _py("fetch_quote", "/app/bot.py"), _py("run", STDLIB + "concurrent/futures/thread.py"))
    assert _classify(worker).signature_id == "socket-read"


def test_a_thread_idle_in_h5pys_call_wrapper_waits_for_its_global_lock():
    """h5py wraps every call in ``with_phil`` (its global lock): a thread shown idle there
    waits for that lock, whoever holds it."""
    t = _thread(_py("h5py._objects.with_phil.wrapper", "h5py/_objects.pyx"), _py("__getitem__", SITE + "h5netcdf/core.py"), USER)
    w = wait_of(t)
    assert w is not None and w.category == "lock-wait" and "phil" in w.what


def test_a_wait_for_a_buffered_streams_lock_with_no_writer_in_view_is_a_fork_inherited_lock():
    """A print or flush waiting in CPython's buffered-stream lock (``_enter_buffered_busy``)
    while no thread of the process writes: the lock's holder was a thread of the parent at
    the fork (a child's first print, its exit's flush). A thread blocked writing to a full
    pipe holds it otherwise, and then it is that thread's wait."""
    lib = "/usr/bin/python3.11"
    flush = ThreadDump("1", "MainThread", (
        _c("do_futex_wait.constprop.0", "/lib/x86_64-linux-gnu/libpthread.so.0"),
        _c("__new_sem_wait_slow.constprop.0", "/lib/x86_64-linux-gnu/libpthread.so.0"),
        _c("PyThread_acquire_lock_timed", lib), _c("PyThread_acquire_lock", lib), _c("_enter_buffered_busy", lib),
        _c("_io__Buffered_flush_impl", lib), _py("flush", SITE + "app/log.py"), USER))
    assert _classify(flush).signature_id == "fork-inherited-lock"
    writer = ThreadDump("2", "Thread-1", (_c("__libc_write"), _c("_Py_write_impl", lib), _c("_bufferedwriter_raw_write", lib),
                                          _py("write", SITE + "app/log.py")))
    assert _classify(flush, writer).signature_id == "lock-wait"


def test_a_c_librarys_wait_inside_an_extension_gives_way_to_the_python_call_around_it():
    """libpq's poll under psycopg2 under SQLAlchemy's ``do_execute``: the poll alone is the
    extension's business (no family), the call around it is a wait for the server."""
    t = _thread(_c("__poll"), _c("0x7f7638d75fac", "/usr/lib/libpq.so.5"), _c("PQgetResult", "/usr/lib/libpq.so.5"),
                _c("pq_execute", SITE + "psycopg2/_psycopg.so"),
                _py("do_execute", SITE + "sqlalchemy/engine/default.py"), _py("_execute_context", SITE + "sqlalchemy/engine/base.py"), USER)
    w = wait_of(t)
    assert w is not None and w.category == "socket-read" and w.frames[0].function == "do_execute"
    assert _classify(t).signature_id == "socket-read"


def test_a_rank_that_shows_no_wait_is_guessed_to_wait_in_a_collective():
    """A rank of a distributed job whose stack ends in its own code (a cut traceback, a
    hook py-spy cannot show) most often waits for its peers: a collective, marked as a
    guess; the same stack outside a distributed job stays unknown."""
    own = (_py("scaled_global_norm", "/src/trainer/zero.py"), _py("step", "/src/trainer/zero.py"), USER)
    spawned = _thread(*own, _py("_wrap", SITE + "torch/multiprocessing/spawn.py"))
    c = _classify(spawned)
    assert c.signature_id == "nccl-collective-wait" and "guessed" in c.title
    assert _classify(_thread(*own)).signature_id is None  # unknown
    ranked = classify((ProcessSeries(7, (ProcessDump(7, (_thread(*own),), rank=3),)),), load_signatures())
    assert ranked.signature_id == "nccl-collective-wait"
    running = ThreadDump("1", "MainThread", (*own, _py("_wrap", SITE + "torch/multiprocessing/spawn.py")), active=True)
    assert _classify(running).signature_id != "nccl-collective-wait"


def test_an_extensions_wait_gives_way_only_to_the_call_right_around_it():
    """A pool worker running a task whose extension waits on a condition variable: the
    executor's work-queue frames further out are not the wait (the thread is busy in the
    task, not idle waiting for one)."""
    pool = ThreadDump("2", "ThreadPoolExecutor-0_0", (
        _c("do_futex_wait"), _c("pthread_cond_wait"), _c("faiss::IndexIVF::search", SITE + "faiss/_swigfaiss.so"),
        _py("run", STDLIB + "concurrent/futures/thread.py", 58), _py("_worker", STDLIB + "concurrent/futures/thread.py", 83),
        _py("run", STDLIB + "threading.py"), _py("_bootstrap_inner", STDLIB + "threading.py")))
    assert wait_of(pool).category != "queue-wait"
    # an API call around the extension is whole, not a paste cut above its blocking frame
    call = _thread(_c("__poll"), _c("PQgetResult", "/usr/lib/libpq.so.5"), _c("pq_execute", SITE + "psycopg2/_psycopg.so"),
                   _py("do_execute", SITE + "sqlalchemy/engine/default.py"), USER)
    assert not wait_of(call).cut


def test_a_lock_taken_in_a_del_at_the_bottom_of_a_traceback_is_a_plain_lock_wait():
    """CPython's 'Exception ignored in: <function Client.__del__>' traceback starts at the
    finalizer: a `with self._lock:` there may be a finalizer run at exit while another
    thread holds the lock, not a self-deadlock."""
    t = ThreadDump("1", "MainThread", (Frame("self._lock.acquire", "<call>", None, native=True),
                                       _py("close", "/home/u/client.py", 41), _py("__del__", "/home/u/client.py", 50)))
    c = _classify(t)
    assert c.signature_id == "lock-wait" and "finalizer" not in c.title


def test_a_take_gil_under_a_buffered_streams_lock_is_no_inherited_lock():
    """_enter_buffered_busy takes the stream's lock with the GIL released; a take_gil under
    it means the lock is held already and the thread waits for the GIL."""
    lib = "/usr/bin/python3.11"
    t = ThreadDump("1", "MainThread", (_c("pthread_cond_wait"), _c("take_gil", lib), _c("PyEval_RestoreThread", lib),
                                       _c("_enter_buffered_busy", lib), _c("_io__Buffered_flush_impl", lib), USER))
    assert _classify(t).signature_id != "fork-inherited-lock"


def test_a_rank_busy_in_its_data_or_tokenizer_code_is_not_guessed_a_collective():
    t = _thread(_py("tokenize", "/home/u/data.py", 40), _py("build_vocab", "/home/u/data.py", 88), USER,
                _py("_wrap", SITE + "torch/multiprocessing/spawn.py"))
    assert _classify(t).signature_id != "nccl-collective-wait"


def test_an_event_waited_on_by_a_retry_loops_back_off_is_a_sleep():
    """wandb's retry loop sleeps between attempts in an Event's wait (so it can be
    cancelled): the thread sleeps between retries of what keeps failing, no event is missing."""
    t = _thread(_py("wait", STDLIB + "threading.py"), _py("_sleep_check_cancelled", SITE + "wandb/sdk/lib/retry.py"),
                _py("__call__", SITE + "wandb/sdk/lib/retry.py"), USER)
    assert wait_of(t).category == "sleep"
    assert _classify(t).signature_id == "sleep"
    for caller in ("wait_for_result", "sleep_until_ready", "wait_for_playback_offset"):
        plain = _thread(_py("wait", STDLIB + "threading.py"), _py(caller, SITE + "jobs/runner.py"), USER)
        assert wait_of(plain).category == "event-wait", caller
    # a lock's acquire that backs off is still the lock
    locked = _thread(_py("wait", STDLIB + "threading.py"), _py("acquire_with_backoff", SITE + "jobs/slots.py"), USER)
    assert wait_of(locked).category == "lock-wait"


def test_a_rank_that_shows_no_wait_next_to_its_peers_in_a_collective_is_their_suspect():
    """Two ranks in all_reduce and one in its own code: that one is the odd one out (the
    culprit the incident names), not a third rank guessed to wait in the collective."""
    spawn = _py("_wrap", SITE + "torch/multiprocessing/spawn.py")
    waiting = (_py("all_reduce", SITE + "torch/distributed/distributed_c10d.py"), USER, spawn)
    wedged = (_py("replay", "/src/toy/model.py"), _py("forward", "/src/toy/model.py"), USER, spawn)
    series = tuple(ProcessSeries(pid, (ProcessDump(pid, (_thread(*frames),), rank=rank),))
                   for pid, rank, frames in ((10, 0, waiting), (11, 1, waiting), (12, 2, wedged)))
    c = classify(series, load_signatures())
    assert c.suspect is not None and c.suspect.pid == 12


def test_every_thread_with_the_same_extension_wait_gets_the_call_around_it():
    """Eight ranks of one job blocked in the same libpq poll under SQLAlchemy: each one's
    wait is the socket read the Python call around the extension names, not only the
    first one read (equal stacks of different threads share the table's cached answer)."""
    def stack() -> ThreadDump:
        libpq = "/usr/lib/libpq.so.5"
        return _thread(_c("poll"), _c("PQgetResult", libpq), _c("curs_execute", "psycopg/cursor_type.c"),
                       _py("do_execute", SITE + "sqlalchemy/engine/default.py"), USER)
    waits = [wait_of(stack()) for _ in range(8)]
    assert all(w is not None and w.category == "socket-read" and not w.weak for w in waits)


def test_a_python_lock_on_windows_is_a_lock_not_the_gil():
    """On Windows every Python lock waits in CPython's condition variable (PyCOND_TIMEDWAIT
    under EnterNonRecursiveMutex), which is the GIL's alone on POSIX: with no take_gil
    shown, the lock's acquire says whose it is. Before, it read as a GIL deadlock."""
    py = "python311"
    w = wait_of(_thread(_c("NtWaitForSingleObject", "ntdll"), _c("WaitForSingleObjectEx", "KERNELBASE"),
                        _c("PyCOND_TIMEDWAIT", py), _c("EnterNonRecursiveMutex", py), _c("PyThread_acquire_lock_timed", py),
                        _c("lock_PyThread_acquire_lock", py), USER))
    assert w is not None and w.category == "lock-wait"
    w = wait_of(_thread(_c("WaitForSingleObjectEx", "KERNELBASE"), _c("PyCOND_TIMEDWAIT", py), _c("take_gil", py),
                        _c("PyEval_RestoreThread", py), USER))
    assert w is not None and w.category == "gil-deadlock"


def test_a_store_get_from_python_is_a_store_wait():
    """c10d's socket under a TCPStore get made from Python (store.get of a key another rank
    should set): the store, not a communicator's setup."""
    torch = "/envs/t/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so"
    w = wait_of(_thread(_c("poll"), _c("c10d::detail::SocketImpl::waitForInput", torch),
                        _c("c10d::detail::TCPClient::receiveValueWithTimeout<c10d::detail::WaitResponseType>", torch),
                        _c("c10d::TCPStore::doWait", torch), _c("c10d::TCPStore::doGet", torch), _c("c10d::TCPStore::get", torch),
                        USER))
    assert w is not None and w.category == "store-wait" and not w.weak
