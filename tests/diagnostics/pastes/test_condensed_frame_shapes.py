"""Frames in the shapes other tools and reporters condense them to: ``path.py:12 in f``,
``f [path.py:12]``, ``path.py:f:12``, Python 2's py-bt, py-spy frames quoted in prose,
hand-written chains with locations, a thread's name alone as its caption, abbreviated
watchdog lines; and the blocking call on the innermost source line of pdb's and pystack's
stacks. Each snippet is synthetic, one per shape."""

from __future__ import annotations

import pytest

from diag_helpers import frame_texts, text_verdict, thread_functions
from hangwatch.diagnostics.errors import InputError
from hangwatch.diagnostics.pastes import read_text

pytestmark = pytest.mark.timeout(60)


def test_path_line_in_function_frames_outermost_first_are_turned_innermost_first():
    text = ("worker-1:\n"
            "  /usr/lib/python3.11/threading.py:1002 in _bootstrap\n"
            "  /usr/lib/python3.11/threading.py:980 in run\n"
            "  /app/jobs.py:40 in loop\n"
            "  /usr/lib/python3.11/queue.py:171 in get\n")
    assert thread_functions(text) == [["get", "loop", "run", "_bootstrap"]]


def test_path_line_in_function_frames_innermost_first_keep_their_order():
    text = ("Thread [pytest]:\n"
            "  psycopg/connection.py:484 in wait\n"
            "  ...\n"
            "  tests/conftest.py:31 in teardown          <- a note\n"
            "\n"
            "Thread [worker]:\n"
            "  app/worker.py:12 in loop\n"
            "  /usr/lib/python3.11/threading.py:1002 in _bootstrap\n")
    assert thread_functions(text) == [["wait", "teardown"], ["loop", "_bootstrap"]]


def test_a_guru_meditation_report_reads_outermost_first_under_its_thread_banners():
    text = ("------                  Thread #1397436                   ------\n\n"
            "/usr/lib/python3.9/site-packages/eventlet/hubs/hub.py:365 in run\n"
            "    `self.wait(sleep_time)`\n\n"
            "/usr/lib/python3.9/site-packages/eventlet/hubs/poll.py:77 in wait\n"
            "    `time.sleep(seconds)`\n")
    ((t,),) = [p.threads for p in read_text(text).processes]
    assert t.ident == "1397436" and [f.function for f in t.frames] == ["wait", "run"]


def test_a_pydev_stack_view_is_read_with_its_thread_names():
    text = ("    Thread-7 - pid123_seq4\n"
            "        read_all [packet.py:254]\n"
            "        run [transport.py:1760]\n"
            "        __bootstrap_inner [threading.py:810]\n")
    ((t,),) = [p.threads for p in read_text(text).processes]
    assert t.name == "Thread-7" and frame_texts(t)[0] == "read_all (packet.py:254)"


def test_path_function_line_frames_with_markdown_bold_are_read():
    text = ("`/lib/python2.7/site-packages/pkg/engine.py:**do_commit**:420\n"
            "/lib/python2.7/site-packages/pkg/base.py:_commit_impl:669\n")
    assert thread_functions(text) == [["do_commit", "_commit_impl"]]


def test_python2_py_bt_frames_are_read_innermost_first():
    text = ("(gdb) py-bt\n"
            "#2 <built-in method acquire of thread.lock object at remote 0x7f0a16edb840>\n"
            "#4 file '/usr/lib64/python2.6/threading.py', in 'wait'\n"
            "#8 file '/usr/lib64/python2.6/threading.py', in 'join'\n")
    assert thread_functions(text) == [["acquire", "wait", "join"]]


def test_python2_py_bt_lock_wait_lines_are_the_lock_the_frame_above_takes(tmp_path):
    """Python 2's libpython prints "Waiting for a lock (e.g. GIL)" for a frame in
    PyThread_acquire_lock: over an unbounded Queue.put (which only takes the queue's
    mutex) it is that lock; the line was skipped and the dump read as all idle."""
    text = ("(gdb) py-bt\n"
            "#4 Waiting for a lock (e.g. GIL)\n"
            "#5 Waiting for a lock (e.g. GIL)\n"
            "#7 Frame 0x7f8521b04bf0, for file /usr/lib64/python2.7/Queue.py, line 118, in put (self=<Queue at remote 0x7f85>)\n"
            "#11 Frame 0x7f8521b04de0, for file /opt/app/dispatch.py, line 40, in emit (self=<Handler at remote 0x7f86>)\n")
    assert thread_functions(text) == [["PyThread_acquire_lock", "put", "emit"]]
    assert text_verdict(tmp_path, text) == "lock-wait"


def test_a_py_spy_frame_quoted_in_prose_is_a_stack(tmp_path):
    text = ("We ran py-spy on the head node: rank 0 is stuck at `all_reduce (torch/distributed/distributed_c10d.py:2050)`\n"
            "inside our data loader while the other ranks train.\n")
    assert thread_functions(text) == [["all_reduce"]]
    assert text_verdict(tmp_path, text) == "nccl-collective-wait"


def test_a_chain_of_calls_with_locations_ends_in_the_call_it_blocks_in(tmp_path):
    text = ("    test_app.py:63 test_stop()\n"
            "      -> service.py:118 Service.stop()\n"
            "        -> listener.py:599 Listener.cancel() -> self.join()\n")
    (names,) = thread_functions(text)
    assert names == ["self.join", "Listener.cancel", "Service.stop", "test_stop"]
    assert text_verdict(tmp_path, text) == "thread-join"


def test_a_thread_name_alone_captions_the_frames_under_it():
    text = ("MainThread (event loop)\n"
            "    _wait_for_tstate_lock (threading.py:1116)\n"
            "    join (threading.py:1096)\n")
    ((t,),) = [p.threads for p in read_text(text).processes]
    assert t.name == "MainThread" and [f.function for f in t.frames] == ["_wait_for_tstate_lock", "join"]


def test_an_abbreviated_watchdog_line_is_a_collective_wait(tmp_path):
    text = "Watchdog caught collective operation timeout: WorkNCCL(..., OpType=ALLGATHER, ...)\n"
    assert text_verdict(tmp_path, text) == "nccl-collective-wait"


def test_pdbs_where_cut_below_its_last_frame_names_the_call_on_that_line(tmp_path):
    text = ("(Pdb) where\n"
            "  /home/u/run.py(15)<module>()\n"
            "-> out = collect(futures)\n"
            "  /home/u/run.py(9)collect()\n"
            "-> return fut.result()\n"
            "  /usr/lib/python3.11/concurr\n")
    assert text_verdict(tmp_path, text) == "future-wait"


def test_pystacks_innermost_source_line_entering_a_lock_is_its_acquire(tmp_path):
    text = ('Traceback for thread 12 (python3) [] (most recent call last):\n'
            '    (Python) File "/usr/lib/python3.11/threading.py", line 995, in _bootstrap\n'
            '        self._bootstrap_inner()\n'
            '    (Python) File "/home/u/app.py", line 10, in worker\n'
            '        with second_lock:\n')
    (names,) = thread_functions(text)
    assert names == ["second_lock.acquire", "worker", "_bootstrap"]
    assert text_verdict(tmp_path, text) == "lock-wait"


def test_a_chain_in_backticks_inside_prose_is_a_stack_outermost_first():
    text = "- **main thread**: `run_job → pthread_join_wrapper → __psynch_cvwait` (waits for the worker)\n"
    assert thread_functions(text) == [["__psynch_cvwait", "pthread_join_wrapper", "run_job"]]
    # two links are prose ("a -> b"), not a chain
    with pytest.raises(InputError):
        read_text("we went from `config -> model` in one step\n")


def test_a_chain_after_a_label_column_goes_on_under_it(tmp_path):
    text = ("main    _exit_function -> _run_finalizers -> _finalize_join -> join\n"
            "        -> _wait_for_tstate_lock\n"
            "feeder  _feed -> send_bytes -> _send        (blocked, pipe full)\n")
    assert thread_functions(text)[0] == ["_wait_for_tstate_lock", "join", "_finalize_join", "_run_finalizers", "_exit_function"]
    assert text_verdict(tmp_path, text) == "shutdown-join"


def test_a_label_column_with_state_and_quoted_names_holds_each_threads_innermost_frame():
    text = ('    MainThread (100% CPU):     replay (torch/cuda/graphs.py:186)\n'
            '                               forward (app/model.py:360)\n'
            '\n'
            '    "io-worker" (idle):  get (queue.py:171)   block=True, timeout=None\n'
            '                         _loop (app/io.py:263)\n')
    threads = [t for p in read_text(text).processes for t in p.threads]
    assert [(t.name, t.active, [f.function for f in t.frames]) for t in threads] == [
        ("MainThread", True, ["replay", "forward"]), ("io-worker", False, ["get", "_loop"])]


def test_a_call_written_above_the_frames_is_the_innermost_call(tmp_path):
    text = ("```\n"
            "queue.get()  <- never returns\n"
            "fetch_batch        (app/loader.py:43)\n"
            "main               (app/train.py:143)\n"
            "```\n")
    assert thread_functions(text) == [["queue.get", "fetch_batch", "main"]]
    assert text_verdict(tmp_path, text) == "queue-wait"


def test_faulthandlers_c_stack_goes_under_the_current_threads_python_frames():
    text = ('Current thread 0x00007f0e3c9a4740 [python] (most recent call first):\n'
            '  File "/app/main.py", line 20 in <module>\n'
            '\n'
            "Current thread's C stack trace (most recent call first):\n"
            '  Binary file "/usr/bin/python3.14", at _Py_DumpStack+0x4c [0x55d3c8]\n'
            '  Binary file "/lib/x86_64-linux-gnu/libc.so.6", at pthread_cond_wait+0x1f [0x7f0e3c]\n'
            '  Binary file "/usr/bin/python3.14", at +0x32dcbd [0x5b27f7d85cbd]\n'
            '  <truncated rest of calls>\n')
    ((t,),) = [p.threads for p in read_text(text).processes]
    assert [(f.function, f.native) for f in t.frames] == [("pthread_cond_wait", True), ("??", True), ("<module>", False)]


@pytest.mark.parametrize("handler", ["handle_abort", "close_sig_handler"])
def test_a_signal_handler_on_top_of_a_traceback_gives_way_to_the_code_it_interrupted(tmp_path, handler):
    """A worker killed on a timeout (gunicorn's handle_abort, a SIGTERM handler raising, a
    program's own SIGINT handler): the frame under the handler is where the process waited."""
    text = ('Traceback (most recent call last):\n'
            '  File "/app/views.py", line 40, in api\n'
            '    data = sock.recv(4096)\n'
            '  File "/usr/lib/python3.11/socket.py", line 705, in readinto\n'
            '    return self._sock.recv_into(b)\n'
            f'  File "/srv/lib/python3.11/site-packages/server/workers/base.py", line 204, in {handler}\n'
            '    sys.exit(1)\n'
            'SystemExit: 1\n')
    assert thread_functions(text) == [["readinto", "api"]]
    assert text_verdict(tmp_path, text) == "socket-read"


def test_a_captioned_format_stack_thread_blocked_in_a_c_call_on_its_last_line(tmp_path):
    """A whole format_stack dump (a Thread object's repr as each caption): the lock entered on
    a thread's innermost line is its acquire, and the join in the main thread names it."""
    text = ("<Thread(Worker-1, started daemon 140234)>\n"
            '  File "/usr/lib/python3.11/threading.py", line 995, in _bootstrap\n'
            "    self._bootstrap_inner()\n"
            '  File "/app/w.py", line 12, in run\n'
            "    with self._lock:\n"
            "\n"
            "<_MainThread(MainThread, started 140111)>\n"
            '  File "/app/main.py", line 20, in <module>\n'
            "    t.join()\n"
            '  File "/usr/lib/python3.11/threading.py", line 1112, in join\n'
            "    self._wait_for_tstate_lock()\n")
    threads = [(t.name, [f.function for f in t.frames]) for p in read_text(text).processes for t in p.threads]
    assert threads[0] == ("Worker-1", ["self._lock.acquire", "run", "_bootstrap"])
    assert threads[1][0] == "MainThread"
    assert text_verdict(tmp_path, text) == "lock-wait"


def test_pytests_short_traceback_is_read_outermost_first_with_its_source_lines(tmp_path):
    text = ("____________________________ test_hang ____________________________\n"
            "tests/test_x.py:12: in test_hang\n"
            "    worker.join()\n"
            "app/worker.py:40: in join\n"
            "    os.waitpid(self.pid, 0)\n"
            "E   Failed: Timeout >10.0s\n")
    assert thread_functions(text) == [["os.waitpid", "join", "test_hang"]]
    assert text_verdict(tmp_path, text) == "subprocess-wait"


def test_a_traceback_cut_inside_a_librarys_wrappers_names_the_call_made_into_it(tmp_path):
    text = ('Traceback (most recent call last):\n'
            '  File "/app/driver.py", line 567, in sample\n'
            '    info = ray.get(future)\n'
            '  File "/venv/lib/python3.12/site-packages/ray/_private/auto_init_hook.py", line 21, in auto_init_wrapper\n'
            '    return fn(*args, **kwargs)\n'
            '  File "/venv/lib/python3.12/site-packages/ray/_private/client_mode_hook.py", line 103, in wrapper\n'
            '    return func(*args, **kwargs)\n'
            '  File "/venv/lib/pyth\n')
    assert text_verdict(tmp_path, text) == "ray-get-wait"
    # a call of the program's own object ("self.pool.get") names no library: no call is made up
    own = text.replace("ray.get(future)", "self.pool.get(future)")
    assert text_verdict(tmp_path, own) != "ray-get-wait"


def test_the_last_lines_python_trace_printed_are_where_the_process_stopped(tmp_path):
    text = (" --- modulename: client, funcname: fetch\n"
            "client.py(40):         start = time.time()\n"
            "client.py(41):         reply = urllib.request.urlopen(\n"
            "client.py(42):             url, timeout=None)\n")
    assert thread_functions(text) == [["urllib.request.urlopen", "fetch"]]
    assert text_verdict(tmp_path, text) == "socket-read"


def test_sampled_stacks_with_counts_and_the_source_on_the_frame_line(tmp_path):
    """A sampling tool's most frequent stacks: a count line over each stack, its frames
    outermost first with the source on the same line. Each count starts another stack,
    and a ``with ..._lock:`` on the innermost frame's line is that lock's acquire."""
    text = ("Showing 2 most frequent samples:\n"
            "40\n"
            '  File "server.py", line 10, in handle self.serve(req)\n'
            '    File "store.py", line 22, in serve with self.table_lock:\n'
            "35\n"
            '  File "server.py", line 10, in handle self.serve(req)\n'
            '    File "store.py", line 30, in flush with self.table_lock:\n')
    assert thread_functions(text) == [["self.table_lock.acquire", "serve", "handle"], ["self.table_lock.acquire", "flush", "handle"]]
    assert text_verdict(tmp_path, text) == "lock-wait"


def test_an_eventlet_green_thread_report_is_one_stack_per_green_thread():
    """eventlet's debug report: "------ Green Thread ------" (no id), frames outermost first
    with a blank line between them; each frame was read as a stack of its own."""
    text = ("====                         Green Threads                          ====\n"
            "------                        Green Thread                        ------\n"
            "\n"
            "/venv/lib/python2.7/site-packages/eventlet/green/thread.py:41 in __thread_body\n"
            "    `func(*args, **kwargs)`\n"
            "\n"
            "/usr/lib64/python2.7/threading.py:784 in __bootstrap\n"
            "    `self.__bootstrap_inner()`\n"
            "\n"
            "/venv/lib/python2.7/site-packages/kafka/client_async.py:560 in poll\n"
            "    `responses.extend(self._fire_pending_completed_requests())`\n")
    assert thread_functions(text) == [["poll", "__bootstrap", "__thread_body"]]


def test_a_condensed_location_and_source_stack_is_read_outermost_first(tmp_path):
    """A reporter's "path.py:N   source   # note" lines (a pytest-timeout stack condensed
    by hand): no function names; outermost first; the last line's call is the wait."""
    text = ("test_integration.py:93            .translate()\n"
            "kerchunk/hdf.py:170               self._h5f.visititems(self._translator)\n"
            "zarr/core/sync.py:152             wait([future], timeout=None)   # <- blocks forever\n"
            "threading.py:355                  waiter.acquire()\n")
    (proc,) = read_text(text).processes
    (thread,) = proc.threads
    assert [(f.file, f.line) for f in thread.frames if not f.native][0] == ("threading.py", 355)
    assert thread.frames[0].function == "waiter.acquire"
    assert text_verdict(tmp_path, text) == "lock-wait"



def test_path_function_line_with_spaces_after_the_colons_is_a_frame(tmp_path):
    """gdb's Python frames retyped as "threading.py: wait: 309" (innermost first)."""
    text = ("threading.py: wait: 309\n"
            "threading.py: wait: 603\n"
            "execnet/gateway_base.py: waitall: 292\n"
            "execnet/multi.py: safe_terminate: 277\n")
    assert thread_functions(text) == [["wait", "wait", "waitall", "safe_terminate"]]


def test_an_arrow_chain_of_path_and_function_links_is_a_stack():
    """"→ torch/_inductor/graph.py: codegen" lines, and several links on one line
    ("→ cpp.py:select_tiling → _try_get_stride"): a chain written outermost first."""
    text = ("torch.compile(fn)(t)\n"
            "  → torch/_inductor/compile_fx.py: fx_codegen_and_compile\n"
            "  → torch/_inductor/graph.py: codegen\n"
            "  → cpp.py:select_tiling → _try_get_stride → stride_at\n")
    (names,) = thread_functions(text)
    assert names[:4] == ["stride_at", "_try_get_stride", "select_tiling", "codegen"]


def test_a_note_quoting_the_code_of_a_threads_innermost_frame_is_its_source_line(tmp_path):
    """py-spy prints no source line; a reporter who writes it in after the innermost frame
    ('<- `with _db_lock:`') says what the frame waits on. A note on an outer frame does not."""
    text = ('Thread 367112 (idle): "AnyIO worker thread"\n'
            "    _get_conn (app/database.py:434)                 <- `with _db_lock:` on the store path\n"
            "    _db_check (app/main.py:1443)\n"
            "    run (anyio/_backends/_asyncio.py:1002)\n")
    assert text_verdict(tmp_path, text) == "lock-wait"
    noted = ('Thread 367112 (idle): "AnyIO worker thread"\n'
             "    _get_conn (app/database.py:434)   <- stuck (forever) on `with _db_lock:`\n"
             "    _db_check (app/main.py:1443)\n")
    assert text_verdict(tmp_path, noted) == "lock-wait"  # a note with parentheses before its code
    outer = ('Thread 367112 (idle): "AnyIO worker thread"\n'
             "    _get_conn (app/database.py:434)\n"
             "    _db_check (app/main.py:1443)                 <- `with _db_lock:` was taken here\n")
    assert text_verdict(tmp_path, outer) != "lock-wait"


@pytest.mark.parametrize(("code", "family"), [("self._lock.acquire()", "lock-wait"), ("sock.recv(4096)", "socket-read"),
                                              ("q.get(timeout=None)", "queue-wait")])
def test_a_note_quoting_a_call_with_parentheses_is_read(tmp_path, code, family):
    text = (f'Thread 7 (idle): "Worker"\n    step (app/worker.py:12)     <- `{code}` never returns\n'
            "    run (app/worker.py:30)\n")
    assert text_verdict(tmp_path, text) == family


def test_a_hand_written_call_tree_indented_under_each_caller_is_outermost_first(tmp_path):
    """A reporter's call tree, each call one step deeper under its caller (import ->
    dlopen -> a static constructor -> exit -> an atexit handler -> a join): the last line
    is where the thread waits. The same names without the staircase keep the usual order,
    innermost first."""
    names = ["_dl_open", "_dl_init", "_GLOBAL__sub_I_numa_wrapper.cpp  (libx.so)", "__run_exit_handlers",
             "PTL::ThreadPool::destroy_threadpool()", "std::thread::join()"]
    tree = "".join(" " * i + name + "\n" for i, name in enumerate(names))
    (funcs,) = thread_functions(tree)
    assert funcs[0] == "std::thread::join" and funcs[-1] == "_dl_open"
    assert text_verdict(tmp_path, tree) == "thread-join"
    (funcs,) = thread_functions("".join(name + "\n" for name in names))
    assert funcs[0] == "_dl_open"


def test_a_staircase_flips_only_its_own_thread_and_not_an_innermost_first_tree(tmp_path):
    """The staircase is one thread's own: a gdb backtrace beside a hand-written tree keeps
    gdb's order (innermost first); and a tree whose first line is a blocking call
    (innermost first, indented by the writer) is not turned round."""
    gdb = ("(gdb) bt\n#0  0x00007f0d in __futex_abstimed_wait_common () from /lib/x86_64-linux-gnu/libc.so.6\n"
           "#1  0x00007f0d in pthread_cond_wait () from /lib/x86_64-linux-gnu/libc.so.6\n"
           "#2  0x00007f0d in ncclCommInitRank () from /usr/lib/libnccl.so.2\n#3  0x00007f0d in main () from /usr/bin/python3\n\n")
    tree = "Thread [loader]:\nmain (python3)\n Py_RunMain (libpython3.11.so)\n  init_module (libx.so)\n   Pool::shutdown (libx.so)\n    std::thread::join (libstdc++.so.6)\n"
    threads = thread_functions(gdb + tree)
    assert threads[0][0] == "__futex_abstimed_wait_common" and threads[-1][0] == "std::thread::join"
    inner_first = ("cudaStreamSynchronize (libcudart.so.12)\n at::native::copy_ (libtorch_cuda.so)\n  at::Tensor::item (libtorch_cpu.so)\n"
                   "   THPVariable_item (libtorch_python.so)\n    _PyEval_EvalFrameDefault (python3.11)\n")
    assert thread_functions(inner_first)[0][0] == "cudaStreamSynchronize"
    assert text_verdict(tmp_path, inner_first) == "cuda-synchronize-wait"
