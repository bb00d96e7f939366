"""Which thread decides a process's verdict: helper and background threads (queue feeders,
tqdm's monitor, NCCL's watchdog, the driver's poller) never do, a thread waiting for the GIL
does not outrank its holder, and a worker is idle only where it waits for work."""

from __future__ import annotations

import pytest

from diag_helpers import DATA, pasted_verdict, text_verdict
from hangwatch.diagnostics.classify import process_verdicts
from hangwatch.diagnostics.pastes import read_text
from hangwatch.diagnostics.replay import analyse
from hangwatch.diagnostics.signatures import load_signatures
from hangwatch.diagnostics.stacks import group_series

pytestmark = pytest.mark.timeout(60)


PASTED = DATA / "pasted"


def test_queue_feeder_threads_never_decide():
    (incident,) = analyse([PASTED / "yolov5_12655_fatal_aborted_windows_paths.txt"], load_signatures())
    assert incident.classification.thread_ident == "0x00004350"  # the cut one, not a feeder


SIGS = load_signatures()


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
    assert incident.classification.signature_id == "gil-deadlock"


def test_only_idle_nccl_watchdog_threads_decide_nothing():
    # pytorch#94003's paste shows only NCCL watchdog threads waiting for their next check:
    # helpers, so nothing is stalled (read as frames, without the helper, they were 'unknown').
    assert pasted_verdict("pytorch_94003_sigabrt_crash_handler_watchdog_threads") == "all-idle"


def test_a_main_thread_in_unsymbolised_libcuda_is_not_idle():
    """gdb shows only '?? () from libcuda.so.1' under clock_gettime for the thread that called
    ncclAllReduce: it is inside the driver, and "every process waits for work" was wrong."""
    assert pasted_verdict("nccl_1766_gdb_main_spinning_in_libcuda") == "cuda-synchronize-wait"


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
    assert text_verdict(tmp_path, busy) == "unknown"  # (py-spy saw it running: no guess from its names)
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


def test_windows_feeder_threads_alone_are_idle(tmp_path):
    text = "".join(
        f"Thread 0x0000{n}7b8 (most recent call first):\n"
        '  File "D:\\Anaconda\\Lib\\threading.py", line 320 in wait\n'
        '  File "D:\\Anaconda\\Lib\\multiprocessing\\queues.py", line 231 in _feed\n'
        '  File "D:\\Anaconda\\Lib\\threading.py", line 975 in run\n\n'
        for n in (1, 2)
    )
    assert text_verdict(tmp_path, text) == "all-idle"


PYSPY_BACKGROUND_THREAD_ON_MODULE_LOCK = """\
Process 310: python serve.py
Python v3.11.8 (/usr/bin/python3.11)

Thread 310 (idle): "MainThread"
    select (selectors.py:468)
    _run_once (asyncio/base_events.py:1922)
    run_forever (asyncio/base_events.py:607)
    run_until_complete (asyncio/base_events.py:640)
    run (asyncio/runners.py:118)
    run (asyncio/runners.py:190)
Thread 322 (idle): "Thread-3"
    acquire (<frozen importlib._bootstrap>:169)
    __enter__ (<frozen importlib._bootstrap>:170)
    _find_and_load (<frozen importlib._bootstrap>:1172)
"""


def test_thread_shown_only_in_importlib_is_no_background_idler(tmp_path):
    """A thread whose frames left are all importlib's is importing (here: waiting for a
    module lock), not a pool thread waiting for work; it decides over an idle loop."""
    assert text_verdict(tmp_path, PYSPY_BACKGROUND_THREAD_ON_MODULE_LOCK) == "import-lock"


def test_the_only_thread_of_a_paste_decides_even_when_a_helper_signature_knows_it(tmp_path):
    """A paste of one thread of one process is the thread the reporter chose: a Redis read
    (a pub/sub listener's idle wait when it sits beside other threads) is its wait; the same
    thread as the only one of a second process stays a helper (cut before its main thread)."""
    reader = ('Thread 7 (idle): "Thread-1"\n'
              "    _read_from_socket (redis/connection.py:192)\n"
              "    read_response (redis/connection.py:300)\n")
    assert text_verdict(tmp_path, reader) == "socket-read"
    two = ("Process 10: python app.py\n"
           'Thread 10 (idle): "MainThread"\n'
           "    wait (threading.py:320)\n"
           "    wait_for_jobs (/app/jobs.py:40)\n"
           "Process 11: python app.py\n" + reader)
    verdicts = process_verdicts(group_series(read_text(two).processes), load_signatures())
    reader_verdict = next(v for v in verdicts if v.series.pid == 11)
    assert reader_verdict.state == "idle"


def test_a_thread_started_by_threading_is_not_the_main_thread_whatever_a_paste_calls_it(tmp_path):
    """Two traceback.print_stack blocks: the reader names the first MainThread, but it starts
    in threading's _bootstrap, and it is a debugger's timeout thread; the second (a queue
    get of a connection's worker that was never closed) is the one the reporter meant."""
    text = (
        'File "/usr/lib/python3.13/threading.py", line 1012, in _bootstrap\n'
        "  self._bootstrap_inner()\n"
        'File "/usr/lib/python3.13/threading.py", line 1041, in _bootstrap_inner\n'
        "  self.run()\n"
        'File "/ext/debugpy/_vendored/pydevd/_pydevd_bundle/pydevd_timeout.py", line 43, in _on_run\n'
        "  self._event.wait(wait_time)\n"
        'File "/usr/lib/python3.13/threading.py", line 656, in wait\n'
        "  with self._cond:\n"
        "\n"
        "What about the other thread?\n"
        "\n"
        'File "/usr/lib/python3.13/threading.py", line 1012, in _bootstrap\n'
        "  self._bootstrap_inner()\n"
        'File "/usr/lib/python3.13/threading.py", line 1041, in _bootstrap_inner\n'
        "  self.run()\n"
        'File "/venv/lib/python3.13/site-packages/sqlwrap/core.py", line 107, in run\n'
        "  tx_item = self._tx.get()\n"
    )
    assert text_verdict(tmp_path, text) == "queue-wait"


@pytest.mark.parametrize("sender", ["raven/transport/threaded.py", "sentry_sdk/worker.py"])
def test_an_error_reporters_sender_thread_does_not_decide_over_an_idle_worker(tmp_path, sender):
    """A prefork worker idle for its next task, next to an error reporter's own sender
    thread sending its events (celery#4049): the sender's network wait is the reporter's
    business, and the process is idle (a Celery child alone: its loop's id)."""
    text = f"""Thread 0x00007f28e5216700 (most recent call first):
  File "/usr/lib/python3/site-packages/raven/utils/http.py", line 57 in urlopen
  File "/usr/lib/python3/site-packages/{sender}", line 152 in _target
  File "/usr/lib/python3/threading.py", line 754 in run
  File "/usr/lib/python3/threading.py", line 801 in __bootstrap_inner
Current thread 0x00007f28f2c5c700 (most recent call first):
  File "/usr/lib/python3/site-packages/billiard/pool.py", line 396 in _recv
  File "/usr/lib/python3/site-packages/billiard/pool.py", line 428 in receive
  File "/usr/lib/python3/site-packages/billiard/pool.py", line 351 in workloop
"""
    assert text_verdict(tmp_path, text) == "task-queue-worker-idle"


def test_an_export_made_inline_in_a_request_thread_still_decides(tmp_path):
    """OpenTelemetry's SimpleSpanProcessor exports in the thread that ended the span: that
    request thread waiting on the collector is the wait, not a helper's."""
    text = """Thread 0x00007f28e5216700 (most recent call first):
  File "/usr/lib/python3.11/ssl.py", line 1134 in read
  File "/usr/lib/python3.11/site-packages/opentelemetry/sdk/trace/export/__init__.py", line 113 in on_end
  File "/usr/lib/python3.11/site-packages/opentelemetry/sdk/trace/__init__.py", line 941 in end
  File "/srv/app/views.py", line 40 in handle
  File "/usr/lib/python3.11/threading.py", line 982 in run
Current thread 0x00007f28f2c5c700 (most recent call first):
  File "/usr/lib/python3.11/selectors.py", line 468 in select
  File "/usr/lib/python3.11/site-packages/gunicorn/workers/gthread.py", line 214 in run
"""
    assert text_verdict(tmp_path, text) == "socket-read"


def test_a_background_thread_waiting_for_the_main_threads_work_gives_way_to_its_wait(tmp_path):
    """faulthandler names no thread: the one that starts in the script's top level is the
    main thread. A pytest-xdist receiver thread waiting (an Event) for the test the main
    thread runs waits on what that test waits on: here a Redis client's connect, cut above
    its socket call. Before, the receiver's event wait was the verdict."""
    lib = "/opt/hostedtoolcache/Python/3.12.10/x64/lib/python3.12"
    text = f"""\
Timeout (0:20:00)!
Thread 0x00007f00000020c8 (most recent call first):
  File "{lib}/threading.py", line 359 in wait
  File "{lib}/threading.py", line 655 in wait
  File "{lib}/site-packages/execnet/gateway_base.py", line 470 in waitall
  File "{lib}/site-packages/execnet/gateway_base.py", line 1239 in _terminate_execution
  File "{lib}/site-packages/execnet/gateway_base.py", line 1176 in _thread_receiver
  File "{lib}/threading.py", line 1012 in run
  File "{lib}/threading.py", line 1075 in _bootstrap_inner
  File "{lib}/threading.py", line 1032 in _bootstrap

Thread 0x00007f0000002274 (most recent call first):
  File "{lib}/site-packages/redis/connection.py", line 1566 in _connect
  File "{lib}/site-packages/redis/connection.py", line 1034 in connect_check_health
  File "{lib}/site-packages/redis/client.py", line 804 in _execute_command
  File "/home/runner/work/app/src/app/memory/features.py", line 96 in is_redis_running
  File "/home/runner/work/app/tests/test_memory.py", line 252 in test_record_execution
  File "{lib}/site-packages/_pytest/python.py", line 167 in pytest_pyfunc_call
  File "{lib}/site-packages/xdist/remote.py", line 427 in <module>
  File "{lib}/site-packages/execnet/gateway_base.py", line 1291 in executetask
  File "<string>", line 8 in <module>
"""
    assert text_verdict(tmp_path, text) == "socket-read"


def test_a_lock_acquire_in_native_frames_only_gives_way_to_a_main_thread_blocked_outside(tmp_path):
    """gdb without py-bt shows every Python wait (a pool worker's Queue.get for its next
    task, a Condition) as the interpreter's lock acquire: next to a main thread blocked in
    a socket read, that read is the verdict (a Twisted reactor blocked in a MySQL read,
    its thread pool idle). Before, the pool threads' lock acquire was."""
    text = """\
All of the thread pool threads are sitting waiting on locks:
#0  0x00007f549b340fd0 in sem_wait () from /lib/x86_64-linux-gnu/libpthread.so.0
#1  0x0000000000547525 in lock_PyThread_acquire_lock ()
#2  0x0000000000497ea4 in PyEval_EvalFrameEx ()
#3  0x00007f549b3399ca in start_thread () from /lib/x86_64-linux-gnu/libpthread.so.0
and the main thread:
#0  0x00007f549b341d2d in read () from /lib/x86_64-linux-gnu/libpthread.so.0
#1  0x00007f5497429112 in vio_read_buff () from /usr/lib/x86_64-linux-gnu/libmysqlclient.so.18
#2  0x00007f5497413f8b in mysql_next_result () from /usr/lib/x86_64-linux-gnu/libmysqlclient.so.18
#3  0x0000000000497ea4 in PyEval_EvalFrameEx ()
#4  0x00000000004aa8bd in Py_Main ()
#5  0x00007f549a05976d in __libc_start_main () from /lib/x86_64-linux-gnu/libc.so.6
"""
    assert text_verdict(tmp_path, text) == "socket-read"


def test_a_servers_accept_and_a_polling_sleep_explain_no_join_or_lock(tmp_path):
    """A listening thread's accept is no work a join waits for, and a main thread that
    sleeps in a loop explains no lock wait (a review found both named as the cause)."""
    join = ('Thread 1234 (idle): "MainThread"\n    _wait_for_tstate_lock (threading.py:1116)\n    join (threading.py:1096)\n'
            '    main (app.py:40)\nThread 1300 (idle): "worker"\n    wait (threading.py:320)\n    get (queue.py:171)\n'
            '    run (app.py:20)\n    _bootstrap_inner (threading.py:1016)\n'
            'Thread 1301 (idle): "Thread-2 (serve)"\n    accept (socket.py:293)\n    serve (app.py:70)\n'
            '    run (threading.py:953)\n    _bootstrap_inner (threading.py:1016)\n')
    assert text_verdict(tmp_path, join) == "thread-join"
    lock = ("Thread 2 (Thread 0x7f2b3a7fc700 (LWP 4322)):\n#0  0x00007f2b4c1d4ad3 in futex_wait_cancelable () from /lib/x86_64-linux-gnu/libpthread.so.0\n"
            "#1  0x000055d0c1b3e2a9 in PyThread_acquire_lock_timed () from /usr/bin/python3\n"
            "#2  0x00007f2b4c1ce6db in start_thread () from /lib/x86_64-linux-gnu/libpthread.so.0\n\n"
            "Thread 1 (Thread 0x7f2b4c5f6740 (LWP 4321)):\n#0  0x00007f2b4bec4d7f in clock_nanosleep () from /lib/x86_64-linux-gnu/libc.so.6\n"
            "#1  0x000055d0c1c2b2f0 in time_sleep () from /usr/bin/python3\n"
            "#2  0x00007f2b4be0cc87 in __libc_start_main () from /lib/x86_64-linux-gnu/libc.so.6\n")
    assert text_verdict(tmp_path, lock) == "lock-wait"


def test_the_thread_running_threadings_shutdown_is_the_main_thread(tmp_path):
    """A faulthandler dump at exit: the main thread shows only threading's _shutdown (the
    interpreter calls it with no Python frame below), waiting for a non-daemon thread that
    waits on an Event. The exit's wait decides, not the thread it waits for (read before
    as a helper's event wait)."""
    dump = ('Thread 0x00007fc2837a56c0 (most recent call first):\n'
            '  File "/usr/lib/python3.11/threading.py", line 331 in wait\n'
            '  File "/usr/lib/python3.11/threading.py", line 629 in wait\n'
            '  File "/srv/app/train.py", line 6 in heartbeat\n'
            '  File "/usr/lib/python3.11/threading.py", line 982 in run\n'
            '  File "/usr/lib/python3.11/threading.py", line 1045 in _bootstrap_inner\n'
            '  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap\n\n'
            'Current thread 0x00007fc2843f9b80 (most recent call first):\n'
            '  File "/usr/lib/python3.11/threading.py", line 1590 in _shutdown\n')
    assert text_verdict(tmp_path, dump) == "shutdown-join"


def test_a_pools_handler_threads_do_not_decide_where_the_pool_is_not_the_standard_librarys(tmp_path):
    """datasets' map runs dill's fork of multiprocessing (multiprocess, in site-packages):
    its Pool's _handle_tasks thread waiting for tasks is the pool's helper, as the standard
    library's is; the main thread waiting for results decides (a live hang read as the
    handler's lock wait)."""
    dump = ('Thread 15970 (idle): "MainThread"\n'
            '    Connection._recv (multiprocess/connection.py:398)\n'
            '    _ConnectionBase.recv (multiprocess/connection.py:253)\n'
            '    BaseProxy._callmethod (multiprocess/managers.py:822)\n'
            '    iflatmap_unordered (datasets/utils/py_utils.py:610)\n'
            '    Dataset.map (datasets/arrow_dataset.py:3627)\n'
            '    <module> (train.py:15)\n'
            'Thread 15978 (idle): "Thread-2 (_handle_tasks)"\n'
            '    PyThread_acquire_lock_timed (libpython3.11.so.1.0)\n'
            '    _queue_SimpleQueue_get_impl (_queuemodule.c:253)\n'
            '    Pool._handle_tasks (multiprocess/pool.py:531)\n'
            '    Thread.run (threading.py:982)\n'
            '    Thread._bootstrap_inner (threading.py:1045)\n'
            '    Thread._bootstrap (threading.py:1002)\n')
    assert text_verdict(tmp_path, dump) == "queue-wait"
