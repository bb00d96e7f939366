"""Reading pasted native backtraces: gdb (``bt``, ``thread apply all bt``, ``info threads``,
``py-bt``), lldb, pstack/eu-stack, pystack, C++ tracebacks (torch's ``frame #N``, Paddle's)
and torch's fatal-signal handler."""

from __future__ import annotations

import pytest

from diag_helpers import PASTED, frame_texts, one_process, text_verdict, thread_functions
from hangwatch.diagnostics.errors import InputError
from hangwatch.diagnostics.pastes import GIL_WAIT, read_text

pytestmark = pytest.mark.timeout(60)


def test_pystack_threads_are_read_innermost_first():
    """pystack lists the outermost frame first, with source lines under each frame."""
    text = ("$ pystack remote 1904\n"
            "Traceback for thread 1904 (python3.12) [Has the GIL] (most recent call last):\n"
            '    (Python) File "/usr/lib/python3.12/runpy.py", line 88, in _run_code\n        exec(code, run_globals)\n'
            '    (Python) File "/app/train.py", line 40, in main\n        loss.item()\n'
            '    (C) File "???", line 0, in cuEventSynchronize (libcuda.so.1)\n')
    report, proc = one_process(text)
    (t,) = proc.threads
    assert proc.pid == 1904 and t.ident == "1904" and t.owns_gil and report.skipped == 0
    assert frame_texts(t) == ["cuEventSynchronize (libcuda.so.1)", "main (train.py:40)", "_run_code (runpy.py:88)"]


def test_gdb_backtraces_and_py_bt_are_stacks_innermost_first():
    """gdb pastes (PyTorch#24927, PyTorch#12011, voltron#232 in data/pasted): a thread
    header or "Switching to thread", native bt lines, py-bt's one-line "#N Frame" form
    with locals wrapped and cut, and py-bt's "Traceback (most recent call first)" form
    with source lines under each frame. gdb's thread 1 is the main thread."""
    text = (
        "(gdb) thread 12\n"
        "[Switching to thread 12 (Thread 0x7f9d0cc00700 (LWP 30756))]\n"
        "#0  0x00007fa50b024fdd in poll () at ../sysdeps/unix/syscall-template.S:81\n"
        "81      in ../sysdeps/unix/syscall-template.S\n"
        "(gdb) py-bt\n"
        "#3 Frame 0x7fa3b9fec850, for file /opt/lib/python2.7/multiprocessing/queues.py, line 131, in get (self=<Queue(_writer=<Conn\n"
        "tions.deque at remote 0x7fa33ea056e0>, _closed=False, acquire=<built-in method acquire of _multiprocessing.SemLock obj...(trunca\n"
        "#4 Frame 0x7fa3b9fec9e0, for file /opt/app/loader.py, line 20, in pin_loop (q=<Queue at remote 0x1>)\n"
    )
    _, proc = one_process(text)
    (thread,) = proc.threads
    assert thread.ident == "30756" and frame_texts(thread) == ["poll (syscall-template.S)", "get (queues.py:131)", "pin_loop (loader.py:20)"]
    assert thread.frames[1].is_stdlib  # a Python 2 standard library path
    _, proc = one_process("Thread 1 (Thread 0x7f384e2dc740 (LWP 237)):\n#2  0x00007f in ?? () from /lib64/libc.so.6\n"
                   "#4 Frame 0x7f3484000910, for file /usr/lib/python2.7/threading.py, line 358, in wait (self=<_Condition\n")
    assert proc.pid == 237 and proc.threads[0].name == "MainThread"
    assert frame_texts(proc.threads[0]) == ["? (libc.so.6)", "wait (threading.py:358)"]
    text = (
        "0x00007f653b6ebd76 in futex_abstimed_wait_cancelable (private=0, abstime=0x0) at ../sysdeps/unix/sysv/linux/futex-internal.h:205\n"
        "205\t../sysdeps/unix/sysv/linux/futex-internal.h: No such file or directory.\n"
        "(gdb) py-bt\n"
        "Traceback (most recent call first):\n"
        "  <built-in method acquire of _thread.lock object at remote 0x7f6533d180a8>\n"
        '  File "/usr/lib/python3.6/threading.py", line 295, in wait\n'
        "    waiter.acquire()\n"
        '  File "/home/u/app/worker.py", line 49, in inner\n'
        "    res = q.get()\n"
    )
    report, proc = one_process(text)
    assert frame_texts(proc.threads[0]) == ["futex_abstimed_wait_cancelable (futex-internal.h)", "acquire (?)", "wait (threading.py:295)",
                                        "inner (worker.py:49)"]
    assert report.skipped == 2  # gdb's source line and its command; the py-bt source lines are not counted
    # A Python traceback (most recent call LAST) is still not a stack.
    report, proc = one_process('Traceback (most recent call last):\n  File "/x/a.py", line 3, in f\nThread 7 (idle): "MainThread"\n    g (b.py:1)\n')
    assert frame_texts(proc.threads[0]) == ["g (b.py:1)"]


def test_gdb_cxx_frames_keep_their_names_and_wrapped_libraries():
    """gdb prints a C++ frame with its own parameter list before the call's arguments,
    wraps "from LIB" onto the next line, and reporters re-type line numbers as "XXX"
    (torch-xpu-ops#1536, NCCL#1013, NCCL#1777 in data/pasted): every frame is kept,
    named without its parameter list, with its library."""
    text = (
        "#0  0x0000145afa2a9e40 in ccl_executor::wait(ccl_request const*) () from /opt/ccl/lib/libccl.so.1\n"
        "#1  0x0000145afa164cf1 in ccl_coll_create(ccl_coll_param&, ccl_coll_attr const&) ()\n"
        "   from /opt/ccl/lib/libccl.so.1\n"
        "#2  0x00007f21c7a5fc7a in c10d::NCCLComm::ncclCommAbort(c10::optional<std::basic_string<char, std::char_traits<char> > >) () from /t/libtorch_cuda.so\n"
        "#3  0x00007fefe4a7fe62 in c10d::ProcessGroupNCCL::abort() at ProcessGroupNCCL.cpp:XXX\n"
        "#4  0x00007f22220966a4 in at::native::_local_scalar_dense_cuda(at::Tensor const&)::{lambda()#1}::operator()() const [clone .isra.100] ()\n"
        "#5  0x00007f21c7a2ba38 in c10d::abortComm\n"
    )
    _, proc = one_process(text)
    assert frame_texts(proc.threads[0]) == [
        "ccl_executor::wait (libccl.so.1)", "ccl_coll_create (libccl.so.1)", "c10d::NCCLComm::ncclCommAbort (libtorch_cuda.so)",
        "c10d::ProcessGroupNCCL::abort (ProcessGroupNCCL.cpp)", "at::native::_local_scalar_dense_cuda (?)", "c10d::abortComm (?)"]


def test_lldb_backtrace_and_gdb_info_threads_are_stacks():
    """lldb's "bt" (pytorch#149153) and gdb's "info threads" table (pytorch#75147): thread
    #1 / gdb's thread 1 is the main thread; an info-threads row is a thread and its
    innermost frame."""
    text = (
        "* thread #1, name = 'python', stop reason = signal SIGSTOP\n"
        "  * frame #0: 0x00007fb0b7f0792d libc.so.6`syscall + 29\n"
        "    frame #1: 0x00007fb090db1068 libtorch_cuda.so`c10d::ProcessGroupNCCL::abort() + 664\n"
        "    frame #2: 0x00007fb08faef142 libstdc++.so.6`std::__atomic_futex_unsigned_base::_M_futex_wait_until_steady(this=<unavailable>, __addr=0x1) at futex.cc:217:18\n"
    )
    _, proc = one_process(text)
    (t,) = proc.threads
    assert t.name == "MainThread" and frame_texts(t) == [
        "syscall (libc.so.6)", "c10d::ProcessGroupNCCL::abort (libtorch_cuda.so)",
        "std::__atomic_futex_unsigned_base::_M_futex_wait_until_steady (libstdc++.so.6)"]
    text = (
        "(gdb) info threads\n"
        "  Id   Target Id         Frame\n"
        '* 1    Thread 0x7fc73ac5d700 (LWP 52422) "" select_poll_poll () at /src/Modules/clinic/selectmodule.c.h:219\n'
        '  5    Thread 0x7fc6b71e9700 (LWP 52742) "pt_worker" 0x00007fc739c909c8 in accept4 (fd=7, flags=524288) at ../sysdeps/accept4.c:40\n'
    )
    report, proc = one_process(text)
    assert proc.pid == 52422 and [(t.ident, t.name) for t in proc.threads] == [("52422", "MainThread"), ("52742", "pt_worker")]
    assert frame_texts(proc.threads[1]) == ["accept4 (accept4.c)"] and report.skipped == 2


def test_gdb_thread_headers_with_a_thread_name():
    """Newer gdb names threads in 'thread apply all bt' (TensorRT-LLM#2560 in data/pasted):
    the header still starts a thread, with that name."""
    _, proc = one_process('Thread 7 (Thread 0x7f9356c7a000 (LWP 3271135) "executionLoop"):\n'
                   "#0  0x00007f9f12e0a85d in __lll_lock_wait () from /lib64/libpthread.so.0\n"
                   'Thread 1 (Thread 0x7f9356c7b000 (LWP 3271100) "python"):\n'
                   "#0  0x00007f9f12e0a85d in poll () from /lib64/libc.so.6\n")
    assert [(t.ident, t.name) for t in proc.threads] == [("3271135", "executionLoop"), ("3271100", "MainThread")]


def test_gdb_names_in_an_anonymous_namespace_are_kept():
    """torch's C++ ops live in "(anonymous namespace)" (Megatron-LM#1679 in data/pasted):
    that parenthesis is part of the name, not its parameter list."""
    text = ("#10 0x00007f6804fedcb5 in c10d::ops::(anonymous namespace)::recv_CUDA(c10::ArrayRef<at::Tensor>, long, long) () "
            "from /t/libtorch_cpu.so\n")
    _, proc = one_process(text)
    assert frame_texts(proc.threads[0]) == ["c10d::ops::(anonymous namespace)::recv_CUDA (libtorch_cpu.so)"]


def test_gdb_frames_quoted_inline_in_prose_are_a_stack():
    """A reporter who names the frames gdb showed in a sentence, each in backticks in gdb's
    form (pytorch#15638 in data/pasted): those frames, not "not a dump"."""
    report, proc = one_process("Looks like it hangs at `c10d::TCPStore::TCPStore(std::string const&, unsigned short, bool) ()`, "
                        "`c10d::tcputil::connect(std::string const&, unsigned short) ()`\n\nIt should return.\n")
    assert frame_texts(proc.threads[0]) == ["c10d::TCPStore::TCPStore (?)", "c10d::tcputil::connect (?)"]
    with pytest.raises(InputError):
        read_text("We call `init_process_group()` and `barrier()` and it hangs.\n")


def test_torchs_cxx_backtrace_under_an_error_is_the_same_threads_inner_stack(tmp_path):
    """torch prints an error's Python traceback, the message, then "Exception raised from X
    (most recent call first):" and the raising thread's C++ frames ("frame #2:
    c10d::TCPStore::doGet(...) + 0x32 (0x7f.. in /x/libtorch_cpu.so)", OpenRLHF#211 in
    data/pasted): one thread, C++ frames innermost, read as communicator setup waiting for
    rank 0's ncclUniqueId; a backtrace pasted alone is a stack too, its library rejoined when
    the terminal wrapped it (ChatGLM-6B#1232)."""
    from hangwatch.diagnostics.replay import analyse  # noqa: PLC0415
    from hangwatch.diagnostics.signatures import load_signatures  # noqa: PLC0415

    text = (
        '  File "/env/torch/distributed/distributed_c10d.py", line 3439, in barrier\n'
        "    work = default_pg.barrier(opts=opts)\n"
        "torch.distributed.DistBackendError: [1] is setting up NCCL communicator and retrieving ncclUniqueId "
        "from [0] via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout\n"
        "Exception raised from doWait at ../torch/csrc/distributed/c10d/TCPStore.cpp:550 (most recent call first):\n"
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f63740f4d87 in /env/torch/lib/libc10.so)\n"
        "frame #1: <unknown function> + 0x15c0e0b (0x7f604e191e0b in /env/torch/lib/libtorch_cpu.so)\n"
        "frame #2: c10d::TCPStore::doGet(std::string const&) + 0x32 (0x7f6052460b32 in /env/torch/lib/libtorch_cpu.so)\n"
    )
    report, proc = one_process(text)
    assert frame_texts(proc.threads[0]) == ["c10d::TCPStore::doGet (libtorch_cpu.so)", "barrier (distributed_c10d.py:3439)"]
    assert report.skipped == 1  # the "Exception raised from" line; the message ends the traceback
    dump = tmp_path / "dump.txt"
    dump.write_text(text)
    (incident,) = analyse([dump], load_signatures())
    assert incident.classification.signature_id == "nccl-comm-init"
    _, proc = one_process("frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f79 in /x/libc10.so)\n"
                   "frame #2: c10d::TCPStore::doWait(c10::ArrayRef<std::string>) + 0xd8 (0x7f79ca652918 in \n"
                   "/opt/conda/lib/python3.10/site-packages/torch/lib/libtorch_cpu.so)\n")
    assert frame_texts(proc.threads[0]) == ["c10d::TCPStore::doWait (libtorch_cpu.so)"]
    with pytest.raises(InputError):  # the NCCL watchdog thread's own backtrace is not the hung stack
        read_text("frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x7ff2 in /x/libtorch_cuda.so)\n")


def test_pybt_without_thread_header_keeps_every_frame_innermost_first():
    # dd-trace-py#935: "```Traceback (most recent call first):" then frames with their
    # source lines; the first frame opened a process, which forgot it was py-bt.
    report = read_text((PASTED / "ddtrace_935_gdb_pybt_waiting_for_gil_sampler_lock.txt").read_text())
    (proc,) = report.processes
    (thread,) = proc.threads
    names = [f.function for f in thread.frames]
    assert names[:4] == [GIL_WAIT, "sample", "start_span", "trace"]
    assert names[-1] == "execute" and len(names) == 7


def test_pybt_builtin_method_lines_stay_in_the_same_thread():
    text = """Thread 1 Python stack
  Waiting for the GIL
  <built-in method _invoke_rpc_python_udf of PyCapsule object at remote 0x7f910957bea0>
  File "/opt/lib/python3.9/site-packages/torch/distributed/rpc/api.py", line 719, in _invoke_rpc
    fut = _invoke_rpc_python_udf(
  <built-in method then of PyCapsule object at remote 0x7f915235d210>
  File "/opt/lib/python3.9/site-packages/torch/futures/__init__.py", line 161, in then
    return cast(Future[S], super().then(callback))
"""
    assert thread_functions(text) == [[GIL_WAIT, "_invoke_rpc_python_udf", "_invoke_rpc", "then", "then"]]


def test_pybt_of_several_threads_without_their_gdb_lines_stay_apart():
    text = """Traceback (most recent call first):
  File "a.py", line 3, in f
    x()
  File "a.py", line 9, in <module>
    f()
Traceback (most recent call first):
  Waiting for the GIL
  File "b.py", line 4, in g
    y()
"""
    (proc,) = read_text(text).processes
    assert [[f.function for f in t.frames] for t in proc.threads] == [["f", "<module>"], [GIL_WAIT, "g"]]


def test_gdb_info_threads_rows_with_a_bare_lwp_target():
    # gdb without libthread_db (a process attached inside a container): "1    LWP 27334 ..."
    report = read_text((PASTED / "pytorch_39855_gdb_info_threads_rpc_spawn.txt").read_text())
    (proc,) = report.processes
    assert [t.ident for t in proc.threads][:3] == ["27334", "27340", "27362"]
    assert proc.threads[0].name == "MainThread"
    assert proc.threads[1].frames[0].function == "epoll_wait"
    assert proc.threads[0].frames[0].file == "/lib/x86_64-linux-gnu/libpthread.so.0"  # "target:" dropped


def test_paddle_cxx_traceback_is_read_outermost_first():
    text = """----------------------
C++ Traceback (most recent call last):
----------------------
0   paddle::framework::Run()
1   ncclAllReduce
2   ncclEnqueueCheck(ncclInfo*)

----------------------
Error Message Summary:
----------------------
"""
    (proc,) = read_text(text).processes
    assert [f.function for f in proc.threads[0].frames] == ["ncclEnqueueCheck", "ncclAllReduce", "paddle::framework::Run"]


def test_gdb_frames_each_wrapped_in_backticks_parse():
    # py-spy#565: a quoted gdb thread header, then every frame as inline code, one cut
    # before its closing backtick; before, no line looked like a frame.
    report = read_text((PASTED / "pyspy_565_quoted_backticked_gdb_rust_frames.txt").read_text())
    (proc,) = report.processes
    names = [f.function for t in proc.threads for f in t.frames]
    assert names[:2] == ["sccp", "waitpid"] and len(names) == 7
    assert names[-1].startswith("std::sys_common::backtrace::__rust_begin_short_backtrace")


def test_gdb_stop_line_names_the_thread_and_bt_does_not_repeat_it():
    # pytorch/xla#945: 'Thread 1 "python" received signal SIGINT', the stop location, a
    # source line, then bt whose "#0" is that location again. Before: two headerless
    # frame lists, and a lone unnamed thread read as idle.
    report = read_text((PASTED / "xla_945_gdb_sigint_sem_wait_model_save.txt").read_text())
    (proc,) = report.processes
    (thread,) = proc.threads
    assert thread.name == "MainThread"
    assert [f.function for f in thread.frames] == ["futex_abstimed_wait_cancelable", "do_futex_wait", "__new_sem_wait_slow"]


def test_gdb_thread_header_without_libthread_db():
    text = ("Thread 2 (LWP 3638147):\n#0  0x00007f39c9af010a in waitpid () at waitpid.c:6\n"
            "Thread 1 (LWP 3638146):\n#0  0x00007f39c9af0200 in poll () from /lib/libc.so\n"
            "#1  0x00007f39c9af0300 in ncclAllReduce () from /usr/lib/libnccl.so.2\n")
    (proc,) = read_text(text).processes
    assert [(t.ident, t.name, len(t.frames)) for t in proc.threads] == [("3638147", "", 1), ("3638146", "MainThread", 2)]


def test_gdb_stop_line_then_thread_apply_all_bt_is_one_process():
    # After the stop line, `thread apply all bt` prints the stopped thread again under its
    # own header: one process, the stop line's thread replaced by it, and another thread's
    # "#0" in the same function as the stop location kept.
    text = ('Thread 1 "python" received signal SIGINT, Interrupt.\n'
            "0x00007f01 in poll () from /lib/libc.so.6\n"
            "(gdb) thread apply all bt\n\n"
            "Thread 2 (Thread 0x7f02 (LWP 12)):\n"
            "#0  0x00007f03 in poll () from /lib/libc.so.6\n"
            "#1  0x00007f04 in helper_loop () from /usr/lib/libfoo.so\n\n"
            "Thread 1 (Thread 0x7f05 (LWP 11)):\n"
            "#0  0x00007f01 in poll () from /lib/libc.so.6\n"
            "#1  0x00007f06 in ncclAllReduce () from /usr/lib/libnccl.so.2\n")
    (proc,) = read_text(text).processes
    assert proc.pid == 11
    assert [(t.name, [f.function for f in t.frames]) for t in proc.threads] == [
        ("", ["poll", "helper_loop"]), ("MainThread", ["poll", "ncclAllReduce"])]


# torch's fatal-signal handler: one block per thread, the handler's own frame and the signal
# trampoline first. Thread 4242 is the main thread (its id is the pid).
CRASH_HANDLER = """\
SIGABRT(6), PID: 4242, Thread 4250: 
 frame #0: c10::FatalSignalHandler::stacktraceSignalHandler(bool) + 0x59 (0x7fe481bc0009 in /x/torch/lib/libc10.so)
frame #1: <unknown function> + 0x12980 (0x7fe4d2fb9980 in /lib/x86_64-linux-gnu/libpthread.so.0)
frame #2: pthread_cond_timedwait + 0x335 (0x7fe4d2fb5065 in /lib/x86_64-linux-gnu/libpthread.so.0)
frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdogInternal() + 0xbab (0x7fe482f08f0b in /x/torch/lib/libtorch_cuda.so)
frame #4: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x98 (0x7fe482f09678 in /x/torch/lib/libtorch_cuda.so)
frame #5: clone + 0x3f (0x7fe4d253261f in /lib/x86_64-linux-gnu/libc.so.6)

SIGABRT(6), PID: 4242, Thread 4242: 
 frame #0: c10::FatalSignalHandler::stacktraceSignalHandler(bool) + 0x59 (0x7fe481bc0009 in /x/torch/lib/libc10.so)
frame #1: <unknown function> + 0x12980 (0x7fe4d2fb9980 in /lib/x86_64-linux-gnu/libpthread.so.0)
frame #2: recv + 0x6f (0x7fe4d2fb8a1f in /lib/x86_64-linux-gnu/libpthread.so.0)
frame #3: c10d::TCPStore::doGet(std::string const&) + 0x32 (0x7f60aaaa0000 in /x/torch/lib/libtorch_cpu.so)
frame #4: c10d::TCPStore::get(std::string const&) + 0x55 (0x7f60aaaa1000 in /x/torch/lib/libtorch_cpu.so)
"""


def test_crash_handler_blocks_are_threads_of_the_process(tmp_path):
    # pytorch#94003/#99218: before, the 'SIGABRT(6), PID: n, Thread n:' headers were not
    # read and the frames under them were taken for an error's C++ backtrace and dropped.
    report = read_text(CRASH_HANDLER)
    (proc,) = report.processes
    assert proc.pid == 4242
    threads = {t.ident: t for t in proc.threads}
    assert set(threads) == {"4250", "4242"}
    assert threads["4242"].name == "MainThread"
    watchdog = [f.function for f in threads["4250"].frames]
    # the handler's frame and the trampoline under it are where the dump was printed from
    assert watchdog[0] == "pthread_cond_timedwait" and not any("SignalHandler" in f for f in watchdog)
    assert "c10d::ProcessGroupNCCL::ncclCommWatchdogInternal" in watchdog
    assert any("fatal-signal handler at SIGABRT(6)" in n for n in report.notes())
    # the main thread decides; the watchdog idle in its loop is a helper
    assert text_verdict(tmp_path, CRASH_HANDLER) == "store-wait"  # a store get, nothing of NCCL setup on its stack


def test_real_crash_handler_paste_reads_every_frame():
    report = read_text((PASTED / "pytorch_94003_sigabrt_crash_handler_watchdog_threads.txt").read_text())
    assert [p.pid for p in report.processes] == [15837]
    (thread,) = [t for t in report.processes[0].threads if t.ident == "15853"]
    assert [f.function for f in thread.frames][:3] == [
        "pthread_cond_timedwait", "c10d::ProcessGroupNCCL::ncclCommWatchdogInternal", "c10d::ProcessGroupNCCL::ncclCommWatchdog"]


def test_watchdog_raise_site_is_read_from_the_exception_header():
    # cache-dit#761: the block under 'Exception raised from run at .../ProcessGroupNCCL.cpp'
    # has only c10::Error and unnamed frames; the header says the watchdog raised it.
    report = read_text((PASTED / "cachedit_761_watchdog_exception_raised_from_run_rank_suffix.txt").read_text())
    frames = [f.function for p in report.processes for t in p.threads for f in t.frames]
    assert frames == ["nccl:collective"]
    assert any("NCCL watchdog's own error backtrace" in n for n in report.notes())


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


THREAD_1 = """
Thread 1 (Thread 0x7f00000b0740 (LWP 300) "python"):
#0  0x00007f0000001000 in cudaStreamSynchronize () from /usr/lib/libcudart.so.12
#1  0x00007f0000004000 in at::cuda::stream_synchronize () from /usr/lib/libtorch_cuda.so
"""


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


MACOS_SAMPLE = """\
Call graph:
    1000 Thread_11   DispatchQueue_1: com.apple.main-thread  (serial)
    + 1000 start  (in dyld) + 1942  [0x7ff8106a3386]
    +   1000 main  (in python3.11) + 33  [0x102ef5421]  python.c:15
    +     1000 _PyEval_EvalFrameDefault  (in python3.11) + 100  [0x102ef6000]  ceval.c:4000
    +       998 lock_PyThread_acquire_lock  (in python3.11) + 60  [0x102ef7000]  _threadmodule.c:80
    +       ! 998 _pthread_cond_wait  (in libsystem_pthread.dylib) + 1249  [0x7ff8109a1000]
    +       !   998 __psynch_cvwait  (in libsystem_kernel.dylib) + 10  [0x7ff8109b2000]
    +       2 _PyObject_Malloc  (in python3.11) + 12  [0x102ef8000]
    1000 Thread_12
    + 1000 thread_start  (in libsystem_pthread.dylib) + 15  [0x7ff8109a0000]
    +   1000 __select  (in libsystem_kernel.dylib) + 10  [0x7ff8109b3000]

Total number in stack (recursive counted multiple times):
"""


def test_a_macos_sample_call_graph_is_read_along_its_heaviest_path():
    """macOS `sample`: one tree per thread, outermost first, sample counts in front; the
    first path down (heaviest first) is the stack, a lighter branch is skipped."""
    report = read_text(MACOS_SAMPLE)
    (proc,) = report.processes
    main, other = proc.threads
    assert main.name == "MainThread"
    assert [f.function for f in main.frames] == ["__psynch_cvwait", "_pthread_cond_wait", "lock_PyThread_acquire_lock",
                                                 "_PyEval_EvalFrameDefault", "main", "start"]
    assert [f.function for f in other.frames] == ["__select", "thread_start"]


def test_a_spindump_thread_is_read_like_a_sample():
    text = ("Thread 0x1a2b3    DispatchQueue \"com.apple.main-thread\"(1)    500 samples (1-500)    priority 31\n"
            "  500  start + 1 (libdyld.dylib + 5121) [0x7fff6f0c5cc9]\n"
            "    500  main + 100 (python3.9 + 3000) [0x10000abcd]\n"
            "      500  __psynch_mutexwait + 10 (libsystem_kernel.dylib + 18542) [0x7fff6f1fe882]\n"
            "       *500  psynch_mtxcontinue + 0 (pthread + 17720) [0xffffff7f82b8e538]\n")
    (proc,) = read_text(text).processes
    assert [f.function for f in proc.threads[0].frames] == ["psynch_mtxcontinue", "__psynch_mutexwait", "main", "start"]


def test_a_systemd_coredump_stack_trace_is_read_per_thread():
    """coredumpctl's 'Stack trace of thread N:' blocks of '#N 0xADDR f (lib + 0xOFF)'
    frames (eu-stack prints the same frames under 'TID N:'): the first thread is the one
    the signal hit."""
    text = ("           PID: 4242 (python3)\n"
            "                Stack trace of thread 4242:\n"
            "                #0  0x00007f0000000001 __futex_abstimed_wait_common (libc.so.6 + 0x8a5e1)\n"
            "                #1  0x00007f0000000002 take_gil (libpython3.11.so.1.0 + 0x1a2b3c)\n"
            "                #2  0x00007f0000000003 n/a (_ext.cpython-311-x86_64-linux-gnu.so + 0x1234)\n"
            "\n"
            "                Stack trace of thread 4250:\n"
            "                #0  0x00007f0000000004 __poll (libc.so.6 + 0x10f0ff)\n")
    (proc,) = read_text(text).processes
    main, other = proc.threads
    assert main.name == "MainThread" and [f.function for f in main.frames] == ["__futex_abstimed_wait_common", "take_gil", "??"]
    assert [f.function for f in other.frames] == ["__poll"]


def test_windbg_kb_and_visual_studio_stacks_are_native_stacks(tmp_path):
    """WinDbg's "~*kb" (a thread header "Id: PID.TID Suspend:", the column header, frames
    "ADDR ADDR ARGS module!function+0xNN" innermost first; thread 0 is the main thread)
    and its "k" form with frame numbers and Child-SP; Visual Studio's call stack window."""
    text = (
        "   0  Id: 1a2c.2b40 Suspend: 1 Teb: 00000000`7ffdf000 Unfrozen\n"
        "ChildEBP RetAddr  Args to Child\n"
        "0012fc90 7c90df4a 7c91b158 00000148 00000000 ntdll!KiFastSystemCallRet\n"
        "0012fc94 7c91b158 00000148 00000000 00000000 ntdll!NtWaitForSingleObject+0xc\n"
        "0012fd1c 7c901046 0043a5e8 00401122 0043a5e8 ntdll!RtlpWaitOnCriticalSection+0x19c\n"
        "0012fd24 00401122 0043a5e8 00000000 00000000 ntdll!RtlEnterCriticalSection+0x46\n"
        "0012fd40 00401300 00000001 00000000 00000000 tool!Cache::Flush+0x22 [c:\\src\\cache.cpp @ 88]\n"
        "0012fd60 0040150a 00000000 00000000 00000000 tool+0x1300\n"
        "  .  1  Id: 1a2c.1f0c Suspend: 1 Teb: 00000000`7ffde000 Unfrozen\n"
        " # Child-SP          RetAddr               Call Site\n"
        "00 00000000`0014f8a8 00007ffb`1c1a2f4e     ntdll!NtWaitForSingleObject+0x14\n"
        "01 00000000`0014f8b0 00007ff6`5a3d1044     KERNELBASE!WaitForSingleObjectEx+0x8e\n"
    )
    _, proc = one_process(text)
    main, worker = proc.threads
    assert (main.ident, main.name) == (str(0x2b40), "MainThread") and worker.ident == str(0x1f0c)
    assert frame_texts(main)[3:6] == ["RtlEnterCriticalSection (ntdll)", "Cache::Flush (tool)", "? (tool)"]
    assert frame_texts(worker) == ["NtWaitForSingleObject (ntdll)", "WaitForSingleObjectEx (KERNELBASE)"]
    assert text_verdict(tmp_path, text) == "lock-wait"
    # x64 "kb": the arguments in a column between colons
    _, proc = one_process(
        ".  0  Id: 1c4.1c8 Suspend: 1 Teb: 000007ff`fffdd000 Unfrozen\n"
        "Child-SP          RetAddr           : Args to Child                         : Call Site\n"
        "00000000`0014f8a8 000007fe`fd5b10dc : 00000000`00000000 00000000`00000000 : ntdll!NtWaitForSingleObject+0xa\n"
        "00000000`0014f8b0 00000001`3f5a1044 : 00000000`00000000 00000000`00000000 : KERNELBASE!WaitForSingleObjectEx+0x79\n")
    (t,) = proc.threads
    assert t.name == "MainThread" and frame_texts(t) == ["NtWaitForSingleObject (ntdll)", "WaitForSingleObjectEx (KERNELBASE)"]
    _, proc = one_process(">\tpython311.dll!take_gil(_ts * tstate) Line 307\tC\n"
                          "\tpython311.dll!PyEval_RestoreThread(_ts * tstate) Line 466\tC\n"
                          "\tmyext.pyd!worker_loop(void * arg) Line 40\tC++\n")
    (t,) = proc.threads
    assert frame_texts(t) == ["take_gil (python311.dll)", "PyEval_RestoreThread (python311.dll)", "worker_loop (myext.pyd)"]


def test_eu_stack_frames_with_and_without_their_module(tmp_path):
    """eu-stack's own output ("TID N:" headers, "#0  0x.. function", "- MODULE" with -m): a
    thread in a mutex is a lock wait even with no Python frame on the stack."""
    text = ("PID 4242 - process\n"
            "TID 4242:\n"
            "#0  0x00007f3c1b2e8a35 __lll_lock_wait\n"
            "#1  0x00007f3c1b2e1e6c pthread_mutex_lock\n"
            "#2  0x00007f3c10a0bc21 Engine::step()\n"
            "TID 4250:\n"
            "#0  0x00007f3c1b2f3c7f __recv - /lib64/libc.so.6\n"
            "#1  0x00007f3c10a0bd00 Net::poll_loop - /opt/libnet.so\n")
    _, proc = one_process(text)
    main, net = proc.threads
    assert main.name == "MainThread" and [f.function for f in main.frames] == ["__lll_lock_wait", "pthread_mutex_lock", "Engine::step"]
    assert frame_texts(net) == ["__recv (libc.so.6)", "Net::poll_loop (libnet.so)"]
    assert text_verdict(tmp_path, text) == "lock-wait"


def test_pybt_innermost_source_line_names_the_c_call_it_blocks_in(tmp_path):
    """py-bt prints each frame's source line: the innermost one names the C call the
    thread sits in (``sock.recv``), which py-bt shows no frame for; it was read as
    'no known blocking call'."""
    text = ("(gdb) py-bt\nTraceback (most recent call first):\n"
            '  File "/usr/lib/python3/dist-packages/kvclient/_compat.py", line 71, in recv\n'
            "    return sock.recv(*args, **kwargs)\n"
            '  File "/usr/lib/python3/dist-packages/kvclient/connection.py", line 190, in fill\n'
            "    data = recv(self._sock, size)\n"
            '  File "/app/worker.py", line 9, in main\n'
            "    conn.fill()\n")
    (proc,) = read_text(text).processes
    (thread,) = proc.threads
    assert [f.function for f in thread.frames][:2] == ["sock.recv", "recv"]
    assert text_verdict(tmp_path, text) == "socket-read"


def test_glibc_backtrace_symbols_and_abseil_signal_frames_are_stacks():
    """A C program's own backtrace (glibc's backtrace_symbols: redis's watchdog) and
    abseil's failure-signal handler (Ray, TensorFlow) were refused as 'not a stack'."""
    glibc = ("--- WATCHDOG TIMER EXPIRED ---\n"
             "/opt/redis/src/redis-server *:6379(logStackTrace+0x43)[0x450ad3]\n"
             "/lib64/libc.so.6(close+0x10)[0x3a048db460]\n"
             "/lib64/libpthread.so.0[0x3a0540f710]\n"
             "/opt/redis/src/redis-server *:6379(redisLogRaw+0x1e3)[0x422393]\n")
    (proc,) = read_text(glibc).processes
    (thread,) = proc.threads
    # (the program's own stack printer, innermost, is dropped: the call it interrupted is the wait)
    assert [f.function for f in thread.frames] == ["close", "?", "redisLogRaw"]
    assert thread.frames[0].file == "/lib64/libc.so.6" and all(f.native for f in thread.frames)
    absl = ("(Actor pid=11471) *** SIGABRT received at time=1666400179 on cpu 14 ***\n"
            "(Actor pid=11471) PC: @     0x7f70d75e000b  (unknown)  raise\n"
            "(Actor pid=11471)     @     0x7f70d77a3420        944  (unknown)\n"
            "(Actor pid=11471)     @     0x7f70d77a4000         64  ray::core::CoreWorker::Get()\n"
            "(Actor pid=11471)     @ ... and at least 3 more frames\n")
    (proc,) = read_text(absl).processes
    (thread,) = proc.threads
    assert [f.function for f in thread.frames] == ["?", "ray::core::CoreWorker::Get"]  # (raise: the handler's)


def test_python_frames_in_a_wrapped_gdb_bt_are_read_with_their_native_frames(tmp_path):
    """A plain `bt` with python-gdb loaded shows each Python frame as the eval function's
    argument, wrapped over several lines: the wrapped lines started new stacks, and the
    Condition.wait inside them was lost (the lock under it decided: lock-wait)."""
    text = ("#0  sem_wait () at ../nptl/sysdeps/unix/sysv/linux/x86_64/sem_wait.S:85\n"
            "#1  0x000000000056e2a4 in PyThread_acquire_lock (lock=0x22b12e0, waitflag=1) at ../Python/thread_pthread.h:324\n"
            "#2  0x000000000060fba9 in lock_PyThread_acquire_lock (self=0x7f2716b74e00, args=()) at ../Modules/threadmodule.c:52\n"
            "#3  0x00000000004877aa in PyCFunction_Call (func=<built-in method acquire of thread.lock object at remote 0x7f27>,\n"
            "    arg=(), kw=0x0) at ../Objects/methodobject.c:81\n"
            "#4  0x00000000005222e1 in PyEval_EvalFrameEx (\n"
            "    f=Frame 0x23c2e90, for file /usr/lib/python2.7/threading.py, line 339, in wait (self=<_Condition(\n"
            "    _Condition__waiters=[<thread.lock at remote 0x7f2716b74e00>]) at remote 0x7f2716b5c920>, timeout=None),\n"
            "    throwflag=0) at ../Python/ceval.c:2666\n"
            "#5  0x00000000005222e1 in PyEval_EvalFrameEx (f=Frame 0x23c3000, for file /app/pool.py, line 12, in result (self=<Future>), throwflag=0) at ../Python/ceval.c:2666\n")
    (proc,) = read_text(text).processes
    (thread,) = proc.threads
    names = [f.function for f in thread.frames]
    assert names == ["sem_wait", "PyThread_acquire_lock", "lock_PyThread_acquire_lock", "PyCFunction_Call",
                     "PyEval_EvalFrameEx", "wait", "PyEval_EvalFrameEx", "result"]
    assert text_verdict(tmp_path, text) == "event-wait"


def test_a_lock_wait_under_the_interpreters_import_lock_is_the_import_lock(tmp_path):
    text = ("#0  sem_wait () at ../nptl/sysdeps/unix/sysv/linux/x86_64/sem_wait.S:85\n"
            "#1  0x00007fd4e591bb78 in PyThread_acquire_lock () from /usr/lib/x86_64-linux-gnu/libpython2.7.so.1.0\n"
            "#2  0x00007fd4e593659b in _PyImport_AcquireLock () from /usr/lib/x86_64-linux-gnu/libpython2.7.so.1.0\n"
            "#3  0x00007fd4e5936621 in PyImport_ImportModuleLevel () from /usr/lib/x86_64-linux-gnu/libpython2.7.so.1.0\n")
    assert text_verdict(tmp_path, text) == "import-lock"


def test_a_programs_own_stack_printer_on_top_of_a_native_stack_is_dropped(tmp_path):
    """A C program's watchdog prints its own backtrace from a signal handler: the printer
    and the trampoline sit over the call the signal interrupted, which is the wait."""
    text = ("/opt/app/bin/server(logStackTrace+0x43)[0x450ad3]\n"
            "/lib64/libpthread.so.0(__restore_rt+0x0)[0x3a0540f710]\n"
            "/lib64/libc.so.6(__poll+0x2a)[0x3a05409a2a]\n"
            "/lib64/libc.so.6(__libc_recv+0x1e)[0x3a05409a4e]\n"
            "/opt/app/bin/server(readReplica+0x1e3)[0x422393]\n")
    assert thread_functions(text) == [["__poll", "__libc_recv", "readReplica"]]
    assert text_verdict(tmp_path, text) == "socket-read"


def test_a_gdb_frame_with_an_unbalanced_argument_does_not_swallow_the_next_thread():
    """A string argument with a parenthesis ("waiting (for peer") left gdb's argument
    window open: the next thread's frames joined this one."""
    text = ('Thread 2 (Thread 0x7f01 (LWP 11)):\n'
            '#0  0x00007f in __lll_lock_wait () from /lib/x86_64-linux-gnu/libpthread.so.0\n'
            '#1  0x00007f in log_msg (fmt=0x55 "waiting (for peer") at log.c:12\n'
            '\n'
            'Thread 1 (Thread 0x7f00 (LWP 10)):\n'
            '#0  0x00007f in __libc_recv () from /lib/x86_64-linux-gnu/libc.so.6\n'
            '#1  0x00007f in read_reply (fd=3) at net.c:40\n')
    (proc,) = read_text(text).processes
    assert sorted([f.function for f in t.frames] for t in proc.threads) == [
        ["__libc_recv", "read_reply"], ["__lll_lock_wait", "log_msg"]]


def test_gdb_frame_arguments_written_with_entry_values_are_python_frames():
    text = ("#0  0x00007f in sem_wait () from /lib/x86_64-linux-gnu/libpthread.so.0\n"
            "#1  0x0000556 in PyEval_EvalFrameEx (f=f@entry=Frame 0x7f12, for file /usr/lib/python2.7/threading.py, "
            "line 359, in wait (self=<_Condition at remote 0x7f13>), throwflag=throwflag@entry=0) at ../Python/ceval.c:2666\n")
    assert thread_functions(text) == [["sem_wait", "PyEval_EvalFrameEx", "wait"]]


def test_a_pybt_source_line_of_an_outer_frame_is_not_the_innermost_call():
    """The innermost frame had no source line: the next frame's line is not where the
    thread waits."""
    text = ("Traceback (most recent call first):\n"
            '  File "/opt/venv/lib/python3.11/site-packages/fast/mod.pyx", line 71, in compute\n'
            '  File "/app/worker.py", line 20, in step\n'
            "    self.sock.recv(4096) if ready else self.compute()\n")
    assert thread_functions(text) == [["compute", "step"]]


@pytest.mark.parametrize("line", ["Caught SIGSEGV at address [0x7f3a2b001000]", "PC register value [0x401000]",
                                  "/var/log/app.log: checksum mismatch [0xdeadbeef]"])
def test_prose_ending_in_an_address_is_no_backtrace_symbols_frame(line):
    with pytest.raises(InputError):
        read_text(line + "\n")


def test_backtrace_symbols_of_a_program_run_by_a_relative_path_are_read():
    text = ("./server(wait_reply+0x1d)[0x400a8d]\n"
            "/lib/x86_64-linux-gnu/libc.so.6(__libc_start_main+0xf0)[0x7f0a2b3c4830]\n")
    assert thread_functions(text) == [["wait_reply", "__libc_start_main"]]


def test_pybt_garbage_collecting_stays_inside_its_thread():
    """py-bt prints "Garbage-collecting" where the collector runs in the stack: the
    finalizer above it was called from the code below it (it split the thread in two)."""
    text = ("Traceback (most recent call first):\n"
            '  File "/opt/lib/python3.8/site-packages/kv/connection.py", line 1232, in release\n'
            '  File "/opt/lib/python3.8/site-packages/kv/client.py", line 1426, in reset\n'
            '  File "/opt/lib/python3.8/site-packages/kv/client.py", line 1390, in __del__\n'
            "  Garbage-collecting\n"
            '  File "/opt/lib/python3.8/site-packages/kv/connection.py", line 900, in __init__\n'
            '  File "/opt/lib/python3.8/site-packages/kv/connection.py", line 1190, in make_connection\n')
    (proc,) = read_text(text).processes
    (thread,) = proc.threads
    assert [f.function for f in thread.frames] == ["release", "reset", "__del__", "<garbage collection>", "__init__",
                                                   "make_connection"]


def test_lldb_thread_info_lines_carry_each_threads_innermost_frame():
    """`thread info all` / `thread list`: one line per thread, its tid in hex and its
    innermost frame on the same line; they were read as headers without frames."""
    text = ("(lldb) thread info all\n"
            "thread #1: tid = 0x4b1ea2, 0x0000000101855e7e libsystem_kernel.dylib`__psynch_cvwait + 10, "
            "queue = 'com.apple.main-thread', stop reason = signal SIGSTOP\n\n"
            "thread #9: tid = 0x4b2214, 0x0000000101857592 libsystem_kernel.dylib`read + 10\n")
    (proc,) = read_text(text).processes
    assert [(t.ident, t.name, [f.function for f in t.frames]) for t in proc.threads] == [
        ("4923042", "MainThread", ["__psynch_cvwait"]), ("4923924", "", ["read"])]


def test_a_windows_stack_without_windbg_columns_is_read():
    """Process Explorer's thread stack: "module!symbol+0xNN" lines with no address columns."""
    text = ("Thread 10892:\n"
            "0x0000000000000000\n"
            "ntdll.dll!ZwYieldExecution+0x14\n"
            "KERNELBASE.dll!SwitchToThread+0x24\n"
            "libblas.dll!exec_blas+0x122\n"
            "_cython_blas.cp312-win_amd64.pyd+0xfd97\n"
            "KERNEL32.DLL!BaseThreadInitThunk+0x14\n")
    (proc,) = read_text(text).processes
    names = [f.function for t in proc.threads for f in t.frames]
    assert names == ["ZwYieldExecution", "SwitchToThread", "exec_blas", "?", "BaseThreadInitThunk"]


def test_a_fenced_list_of_c_library_names_with_notes_is_a_native_stack(tmp_path):
    """A gdb backtrace copied by hand as names with notes, the C library's internal names
    in it ('__libc_fork', '__pthread_clockjoin_ex'), a chain of Python calls after it:
    the names are that thread's stack (they were dropped at the chain, then refused)."""
    text = ("```\n"
            "__pthread_clockjoin_ex                ← pthread_join on a BLAS worker\n"
            "blas_thread_shutdown_                 ← the BLAS library's atfork handler\n"
            "__run_prefork_handlers\n"
            "__libc_fork                           ← fork()\n"
            "uv__spawn_and_init_child_fork\n"
            "create_subprocess_exec ← connect ← run_cron\n"
            "```\n")
    assert thread_functions(text)[0][:2] == ["__pthread_clockjoin_ex", "blas_thread_shutdown_"]
    assert text_verdict(tmp_path, text) == "thread-join"
    # snake_case Python names alone are still no stack
    with pytest.raises(InputError):
        read_text("```\nload_config\nbuild_model\nrun_training\nsave_outputs\n```\n")


def test_a_pybt_frame_wrapped_before_its_function_is_one_frame():
    """'#4 Frame 0x.., for file /p/sched.py, line 111,' then 'in run (self=...' on the next
    line, as a narrow terminal wraps py-bt."""
    text = ("(gdb) py-bt\n"
            "#4 Frame 0x1b7da60, for file /usr/lib/python2.7/sched.py, line 111,\n"
            "in run (self=<scheduler at remote 0x7fe1fa086758>)\n"
            "    delayfunc(time - now)\n"
            "#7 Frame 0x1b87e90, for file /usr/bin/dstat, line 2416,\n"
            "in main (interval=1)\n"
            "    scheduler.run()\n")
    functions = [f for t in thread_functions(text) for f in t]
    assert functions == ["run", "main"]


def test_gdb_info_threads_rows_whose_arguments_wrap_onto_the_next_line():
    """gdb's "info threads" pads its columns, so a frame with arguments wraps: "... "python"
    __futex_abstimed_wait_common64 (private=0, cancel=true, " / "    abstime=0x0, ...) at
    ./nptl/futex-internal.c:57". Refused before as 'no line looks like a stack frame'."""
    text = ("(gdb) info threads\n"
            "  Id   Target Id                                            Frame \n"
            '* 1    Thread 0x70df86a90740 (LWP 128088) "python"          __futex_abstimed_wait_common64 (private=<optimised out>, \n'
            "    cancel=true, abstime=0x0, op=393, expected=0, futex_word=0x70de98395330) at ./nptl/futex-internal.c:57\n"
            '  2    Thread 0x70df83600640 (LWP 128089) "python"          0x00007f0a in pthread_cond_wait@@GLIBC_2.3.2 (cond=0x1, \n'
            "    mutex=0x2) at ./nptl/pthread_cond_wait.c:627\n")
    (proc,) = read_text(text).processes
    assert [(t.name, [f.function for f in t.frames]) for t in proc.threads] == [
        ("MainThread", ["__futex_abstimed_wait_common64"]), ("python", ["pthread_cond_wait@@GLIBC_2.3.2"])]


def test_demangled_cxx_signatures_alone_on_their_lines_are_a_native_stack():
    """py-spy --native frames whose locations a paste cut off leave the demangled
    signatures, argument types and all ("torch_xla::XLAGraphExecutor::Compile(std::vector<
    c10::intrusive_ptr<...> >&, absl::Span<std::string const>)"): refused before, because
    a name with a space or over 300 characters was no name."""
    vec = "std::vector<c10::intrusive_ptr<torch_xla::XLATensor, c10::detail::intrusive_target_default_null_type<torch_xla::XLATensor> >, " * 3
    text = ("```\n"
            f"        torch_xla::XLAGraphExecutor::Compile({vec}absl::lts_20230802::Span<std::string const>)\n"
            f"        torch_xla::XLAGraphExecutor::SyncTensorsGraphInternal({vec}bool)\n"
            f"        torch_xla::XLAGraphExecutor::GetTensors({vec[:-2]})\n"
            "        torch_xla::bridge::XlaCreateTensorList(c10::IListRef<at::Tensor> const&)\n"
            "```\n")
    (proc,) = read_text(text).processes
    assert [f.function for f in proc.threads[0].frames] == [
        "torch_xla::XLAGraphExecutor::Compile", "torch_xla::XLAGraphExecutor::SyncTensorsGraphInternal",
        "torch_xla::XLAGraphExecutor::GetTensors", "torch_xla::bridge::XlaCreateTensorList"]
    with pytest.raises(InputError):
        read_text("See torch::foo(bar) and torch::baz(qux) when it hangs.\nAlso torch::a(b c) and torch::d(e f).\n")
    # a sentence that starts with a signature is prose, not the innermost frame
    prose = ("c10d::ProcessGroupNCCL::allreduce(std::vector<at::Tensor>&, c10d::AllreduceOptions const&) hangs on rank 1:\n"
             'Thread 7 (idle): "MainThread"\n    _wait_for_tstate_lock (threading.py:1116)\n    join (threading.py:1096)\n'
             "    main (train.py:9)\n")
    (proc,) = read_text(prose).processes
    assert [f.function for t in proc.threads for f in t.frames] == ["_wait_for_tstate_lock", "join", "main"]


def test_an_inlined_gdb_frame_whose_arguments_wrap_stays_in_its_backtrace():
    """gdb prints an inlined frame without an address; when its arguments wrap ("#13
    PyEval_EvalCode (co=<optimized out>, globals=<optimized out>," / "    locals=...) at
    ../Python/ceval.c:777") it was dropped and the backtrace split into two threads there."""
    text = ("#12 0x00000000005e9d7f in PyEval_EvalCodeEx () at ../Python/ceval.c:3986\n"
            "#13 PyEval_EvalCode (co=<optimized out>, globals=<optimized out>,\n"
            "    locals=<optimized out>) at ../Python/ceval.c:777\n"
            "#14 0x00000000005fe3d2 in run_mod () at ../Python/pythonrun.c:970\n")
    assert thread_functions(text) == [["PyEval_EvalCodeEx", "PyEval_EvalCode", "run_mod"]]
    # gdb may break right after the parenthesis
    text = ("#1  __futex_abstimed_wait_common (cancel=true, private=14) at ./nptl/futex-internal.c:87\n"
            "#2  __GI___futex_abstimed_wait_cancelable64 (\n"
            "    futex_word=futex_word@entry=0xb2bd50, expected=expected@entry=0)\n"
            "    at ./nptl/futex-internal.c:139\n"
            "#3  0x000071f9cfa93e9b in __pthread_cond_wait_common () at ./nptl/pthread_cond_wait.c:503\n")
    assert thread_functions(text) == [
        ["__futex_abstimed_wait_common", "__GI___futex_abstimed_wait_cancelable64", "__pthread_cond_wait_common"]]


@pytest.mark.parametrize("py_bt_first", [False, True])
def test_gdb_bt_and_py_bt_of_one_thread_are_one_thread(py_bt_first):
    """A gdb session's two steps, ``bt`` then ``py-bt`` (or the other way round), with no
    thread header between them: one thread, its native wait and its Python frames. Read as
    two, the Python half named no wait and the native half no code (a sleep read 'unknown')."""
    bt = ("(gdb) bt\n"
          "#0  0x00007fdf3ca31be3 in __select_nocancel () at ../sysdeps/unix/syscall-template.S:84\n"
          "#1  0x00000000005d1da4 in pysleep (secs=<optimized out>) at ../Modules/timemodule.c:1408\n"
          "#2  time_sleep () at ../Modules/timemodule.c:231\n"
          "#3  0x00000000004f5465 in call_function (oparg=<optimized out>, pp_stack=0x7fff62b184c0) at ../Python/ceval.c:4637\n"
          "#4  PyEval_EvalFrameEx () at ../Python/ceval.c:3185\n"
          "#5  0x00000000004cb8ef in main () at ../Programs/python.c:69\n")
    py_bt = ("(gdb) py-bt\n"
             "Traceback (most recent call first):\n"
             '  File "poller.py", line 9, in wait_for_flag\n'
             "    time.sleep(1000)\n"
             '  File "poller.py", line 5, in run_poller\n'
             "    wait_for_flag()\n")
    (proc,) = read_text(py_bt + bt if py_bt_first else bt + py_bt).processes
    (thread,) = proc.threads
    functions = [f.function for f in thread.frames]
    assert functions[:3] == ["__select_nocancel", "pysleep", "time_sleep"]
    assert functions.index("wait_for_flag") < functions.index("run_poller") < functions.index("PyEval_EvalFrameEx")
    # two native backtraces without headers stay two threads
    (proc,) = read_text(bt + bt.replace("pysleep", "other_sleep")).processes
    assert len(proc.threads) == 2


def test_a_note_aligned_far_right_of_a_name_is_still_a_note():
    """"cuStreamSynchronize" + 41 spaces + "<- never returns": the name, its note dropped."""
    from hangwatch.diagnostics.pastes.handwritten import _bare_frame_name
    assert _bare_frame_name("cuStreamSynchronize" + " " * 41 + "<- never returns") == "cuStreamSynchronize"


def test_a_native_thread_and_another_threads_python_stack_stay_two_threads():
    """Only py-bt's frames join a header-less gdb bt: a rank's Ctrl-C traceback or a
    faulthandler dump after a watchdog thread's bt is another thread (a review found them
    joined, the wait of one named with the code of the other)."""
    watchdog = ("#0  0x00007f0a in pthread_cond_timedwait () from /lib/x86_64-linux-gnu/libc.so.6\n"
                "#1  0x00007f0b in ncclCommWatchdog () from /opt/lib/libnccl.so.2\n"
                "#2  0x00007f0c in _PyEval_EvalFrameDefault () from /usr/lib/libpython3.11.so\n"
                "#3  0x00007f0d in start_thread () from /lib/x86_64-linux-gnu/libc.so.6\n"
                "#4  0x00007f0e in clone3 () from /lib/x86_64-linux-gnu/libc.so.6\n")
    for python in ("Traceback (most recent call last):\n"
                   '  File "/app/train.py", line 250, in <module>\n    batch = q.get()\n'
                   '  File "/usr/lib/python3.11/queue.py", line 171, in get\n    self.not_empty.wait()\nKeyboardInterrupt\n',
                   "Stack (most recent call first):\n"
                   '  File "/usr/lib/python3.11/queue.py", line 171 in get\n  File "/app/train.py", line 250 in <module>\n'):
        (proc,) = read_text(watchdog + "\nand on rank 0:\n\n" + python).processes
        assert len(proc.threads) == 2
    # py-bt of a started thread does not join a main thread's bt either
    main_bt = watchdog.replace("start_thread", "main").replace("clone3", "_start")
    py_bt = ("(gdb) py-bt\nTraceback (most recent call first):\n"
             '  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap\n')
    (proc,) = read_text(main_bt + py_bt).processes
    functions = [f.function for t in proc.threads for f in t.frames]
    assert functions.index("_bootstrap") > functions.index("_start")  # not moved in under the main thread's eval


def test_gdbs_pager_prompt_inside_a_backtrace_is_no_break_in_it():
    """gdb's pager prompt, old and new, on a line of its own (read as the end of the thread)
    or with the next frame after it on its line (that frame was lost)."""
    text = ("#0  0x00007f0a in __lll_lock_wait () from /lib/libc.so.6\n"
            "#1  0x00007f0b in PyThread_acquire_lock () from /usr/lib/libpython3.11.so\n"
            "---Type <return> to continue, or q <return> to quit---\n"
            "#2  0x00007f0c in import_module_level () from /usr/lib/libpython3.11.so\n"
            "--Type <RET> for more, q to quit, c to continue without paging--#3  0x00007f0d in main () from /usr/bin/python3\n")
    assert thread_functions(text) == [
        ["__lll_lock_wait", "PyThread_acquire_lock", "import_module_level", "main"]]


def test_lldb_frames_of_a_rust_extension_joining_a_thread(tmp_path):
    """lldb on macOS, a pyo3 extension's main thread joining its own thread
    (``_pthread_join`` over ``__ulock_wait``): Rust's symbol hashes and mangling escapes and
    lldb's "[opt]" note are no part of a name, and the wait is the join."""
    text = """* thread #1, queue = 'com.apple.main-thread', stop reason = signal SIGSTOP
  * frame #0: 0x000000018cbaa9b8 libsystem_kernel.dylib`__ulock_wait + 8
    frame #1: 0x000000018cbed0b0 libsystem_pthread.dylib`_pthread_join + 608
    frame #2: 0x000000015ccfaba4 ext.abi3.so`std::sys::pal::unix::thread::Thread::join::hc92f1072ed8c169c at thread.rs:316:28 [opt]
    frame #3: 0x000000015500cd50 ext.abi3.so`std::thread::JoinInner$LT$T$GT$::join::h626ba985ca8a16f5(self=<unavailable>) at mod.rs:1741:9
    frame #4: 0x00000001549f45a8 ext.abi3.so`ext::tracing::shutdown::h851386404889663a(self=0x0000600000a4cac0) at tracing.rs:172:13
"""
    assert thread_functions(text) == [["__ulock_wait", "_pthread_join", "std::sys::pal::unix::thread::Thread::join",
                                       "std::thread::JoinInner<T>::join", "ext::tracing::shutdown"]]
    assert text_verdict(tmp_path, text) == "thread-join"


def test_a_bt_cut_by_gdb_and_its_outer_frames_pasted_next_are_one_thread():
    """'bt 10' stops at "(More stack frames follow...)"; a 'bt -10' pasted after it shows
    the same thread's outer frames, numbered on: one thread, which reaches the process's
    entry (the main thread). Before, they were two threads, the blocked one no main thread."""
    text = """\
(gdb) bt 4
#0  0x00007f549b341d2d in read () from /lib/x86_64-linux-gnu/libpthread.so.0
#1  0x00007f5497429112 in vio_read_buff () from /usr/lib/x86_64-linux-gnu/libmysqlclient.so.18
#2  0x00007f549741bde8 in my_net_read () from /usr/lib/x86_64-linux-gnu/libmysqlclient.so.18
#3  0x0000000000497ea4 in PyEval_EvalFrameEx ()
(More stack frames follow...)
(gdb) bt -3
#69 0x00000000004aa8bd in Py_Main ()
#70 0x00007f549a05976d in __libc_start_main () from /lib/x86_64-linux-gnu/libc.so.6
#71 0x000000000041b9b1 in _start ()
(gdb) thread 2
#0  0x00007f549b340fd0 in sem_wait () from /lib/x86_64-linux-gnu/libpthread.so.0
#1  0x0000000000547525 in PyThread_acquire_lock ()
"""
    threads = [t for p in read_text(text).processes for t in p.threads]
    assert [[f.function for f in t.frames] for t in threads] == [
        ["read", "vio_read_buff", "my_net_read", "PyEval_EvalFrameEx", "Py_Main", "__libc_start_main", "_start"],
        ["sem_wait", "PyThread_acquire_lock"]]


HUNG_TASK = """\
[ 1158.473567] INFO: task python3:13282 blocked for more than 120 seconds.
[ 1158.479846]       Not tainted 5.15.0-91-generic #101-Ubuntu
[ 1158.484503] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.
[ 1158.490237] task:python3         state:D stack:    0 pid:13282 ppid: 13274 flags:0x00004000
[ 1158.490246] Call Trace:
[ 1158.490247]  <TASK>
[ 1158.490347]  __schedule+0x2a8/0x670
[ 1158.490360]  ? __switch_to_asm+0x40/0x70
[ 1158.490365]  schedule+0x2d/0x90
[ 1158.490366]  rwsem_down_write_slowpath+0x24b/0x4c0
[ 1158.490433]  os_acquire_rwlock_write+0x35/0x40 [nvidia]
[ 1158.490468]  _nv038505rm+0xc/0x30 [nvidia]
[ 1158.490484]  nvidia_ioctl+0x6cd/0x830 [nvidia]
[ 1158.490497]  __x64_sys_ioctl+0x8b/0xc0
[ 1158.490519]  do_syscall_64+0x33/0x80
[ 1158.490538]  entry_SYSCALL_64_after_hwframe+0x61/0xc6
[ 1158.490540]  </TASK>
"""


def test_a_hung_task_report_is_the_tasks_kernel_stack(tmp_path):
    """dmesg's hung-task report: the task (pid and command) and its kernel frames, a module's
    marked with it, the unwinder's unsure '?' frames left out; blocked in the GPU driver, it
    is a kernel wait (state D: no signal reaches it). Before, no line read as a frame."""
    (proc,) = read_text(HUNG_TASK).processes
    (thread,) = proc.threads
    assert (proc.pid, proc.cmdline, thread.name) == (13282, "python3", "python3")
    assert [(f.function, f.file) for f in thread.frames][:6] == [
        ("__schedule", "[kernel]"), ("schedule", "[kernel]"), ("rwsem_down_write_slowpath", "[kernel]"),
        ("os_acquire_rwlock_write", "[nvidia]"), ("_nv038505rm", "[nvidia]"), ("nvidia_ioctl", "[nvidia]")]
    assert all(f.native for f in thread.frames)
    assert text_verdict(tmp_path, HUNG_TASK) == "kernel-wait"


def test_a_tasks_proc_stack_reads_as_its_kernel_frames(tmp_path):
    """cat /proc/PID/stack: a task in futex_wait waits in user space on a lock or a
    condition (the kernel's stack says no more); one in a network filesystem's call waits
    in the kernel."""
    futex = ("[<0>] futex_wait_queue_me+0xbb/0x120\n[<0>] futex_wait+0x105/0x240\n[<0>] do_futex+0x10f/0x1e0\n"
             "[<0>] __x64_sys_futex+0x13d/0x1d0\n[<0>] do_syscall_64+0x38/0x90\n[<0>] entry_SYSCALL_64_after_hwframe+0x44/0xa9\n")
    assert thread_functions(futex)[0][:2] == ["futex_wait_queue_me", "futex_wait"]
    assert text_verdict(tmp_path, futex) == "lock-wait"
    nfs = ("[<0>] rpc_wait_bit_killable+0x1e/0x90 [sunrpc]\n[<0>] __rpc_execute+0x10e/0x440 [sunrpc]\n"
           "[<0>] nfs4_do_call_sync+0x6b/0xb0 [nfsv4]\n[<0>] nfs4_proc_getattr+0x80/0x120 [nfsv4]\n"
           "[<0>] vfs_statx+0x89/0x110\n[<0>] do_syscall_64+0x38/0x90\n")
    assert text_verdict(tmp_path, nfs) == "kernel-wait"


def test_native_stacks_in_the_shapes_a_paste_leaves_them():
    """A macOS ``sample`` report whose "Call graph:" line was elided (one process per
    "Analysis of sampling" header); a gdb backtrace whose "#" markdown ate (a heading); WinDbg's
    ``~*kvn`` with its argument columns and FPO notes; a WinDbg stack retyped as
    module!symbol lines. Before, none of them read as a frame."""
    sample = ("$ sample 35146 1\nAnalysis of sampling Python (pid 35146) every 1 millisecond\n"
              "Process:         Python [35146]\nPath:            /Library/Frameworks/Python.framework/Python\n...\n"
              "    +   830 lock_PyThread_acquire_lock  (in Python) + 60\n"
              "    +     830 _PyMutex_LockTimed  (in Python) + 464\n"
              "    +       830 __psynch_cvwait  (in libsystem_kernel.dylib) + 8\n\n"
              "Analysis of sampling Python (pid 39358) every 1 millisecond\n...\n"
              "    +   731 _multiprocessing_SemLock_acquire_impl  (in _multiprocessing.cpython-313-darwin.so) + 468\n"
              "    +     731 sem_wait  (in libsystem_kernel.dylib) + 8\n")
    procs = read_text(sample).processes
    assert [(p.pid, p.threads[0].name, p.threads[0].frames[0].function) for p in procs] == [
        (35146, "MainThread", "__psynch_cvwait"), (39358, "MainThread", "sem_wait")]

    unhashed = ("(gdb) bt\n0  0x00007f30c8dcffc0 in __pthread_clockjoin_ex () at /lib64/libpthread.so.0\n"
                "1  0x000055cbb716084b in qemu_thread_join (thread=0x55cbb881f418) at ../util/qemu-thread-posix.c:627\n"
                "10 0x000055cbb71851a2 in glib_pollfds_poll () at ../util/main-loop.c:232\n")
    assert thread_functions(unhashed) == [["__pthread_clockjoin_ex", "qemu_thread_join", "glib_pollfds_poll"]]
    assert thread_functions("1. first\n2  0x10 in the list\n3  steps to reproduce\n" + unhashed)[0][0] == "__pthread_clockjoin_ex"

    kvn = (".  0  Id: 572c.4c78 Suspend: 0 Teb: 00377000 Unfrozen\n # ChildEBP RetAddr  Args to Child\n"
           "00 0019fcc8 772d88f9 0000010c 00000000 00000000 ntdll_77b80000!NtWaitForSingleObject+0xc (FPO: [3,0,0])\n"
           "01 0019fd3c 772d8852 0000010c ffffffff 00000000 KERNELBASE!WaitForSingleObjectEx+0x99 (FPO: [SEH])\n"
           "03 0019fe44 004117c3 00411082 00411082 00376000 locktest!mainlock+0xc3 (FPO: [Non-Fpo]) (CONV: cdecl) "
           "[e:\\src\\locktest.cpp @ 49]\n")
    assert thread_functions(kvn) == [["NtWaitForSingleObject", "WaitForSingleObjectEx", "mainlock"]]
    bare = ("ntdll!NtWaitForSingleObject                                  <- never signalled\n"
            "KERNELBASE!WaitForSingleObjectEx\nlsm!CService::Start\nlsm!ServiceMain\n")
    assert thread_functions(bare) == [["NtWaitForSingleObject", "WaitForSingleObjectEx", "CService::Start", "ServiceMain"]]
    with pytest.raises(InputError):
        read_text("Wow!Amazing\nGreat!Thanks\n")


def test_native_stacks_shortened_by_hand_still_read(tmp_path):
    """A gdb backtrace a person cut down to its symbols, a note after some ("#6
    PyEval_RestoreThread    <- the GIL"), and one thread's ``sample`` tree pasted from its
    "N Thread_N" line, its id and some frames elided: both read as frames. A numbered
    list of words is no gdb frame."""
    gdb = ("#0  futex_wait                              \u2190 blocked\n#3  __pthread_cond_timedwait64\n"
           "#6  PyEval_RestoreThread                    \u2190 waiting to RE-ACQUIRE the GIL\n"
           "#11 _PyEval_EvalFrameDefault\n")
    assert thread_functions(gdb) == [["futex_wait", "__pthread_cond_timedwait64", "PyEval_RestoreThread",
                                      "_PyEval_EvalFrameDefault"]]
    assert text_verdict(tmp_path, gdb) == "gil-deadlock"
    with pytest.raises(InputError):
        read_text("#1 Introduction\n#2  Setup\n#3 Merge from upstream/main\n")
    sample = ("$ /usr/bin/sample 31009 1\n798 Thread_\u2026  DispatchQueue_1: com.apple.main-thread\n  \u2026\n"
              "    798 os_write  (in Python) + 124\n      798 _Py_write_impl  (in Python) + 144\n"
              "        798 write  (in libsystem_kernel.dylib) + 8\n")
    assert thread_functions(sample) == [["write", "_Py_write_impl", "os_write"]]


def test_a_julia_runtime_backtrace_reads_as_native_frames(tmp_path):
    """Julia's report of a stuck task (SIGUSR1, the profiler): "NAME at PATH:LINE [inlined]",
    "NAME at LIB (unknown line)", "unknown function (ip: 0x..)", innermost first; a C
    library's lock under it is a lock wait. A sentence naming a place is no frame."""
    dump = ("signal (10): User defined signal 1\n"
            "__pthread_rwlock_wrlock at /usr/lib/libc.so.6 (unknown line)\n"
            "unknown function (ip: 0x7ffa52104347)\n"
            "macro expansion at /home/u/.julia/packages/CUDA/6Jmwc/lib/cudadrv/libcuda.jl:4848 [inlined]\n"
            "#launch_configuration#901 at /home/u/.julia/packages/CUDA/6Jmwc/lib/cudadrv/occupancy.jl:59 [inlined]\n"
            "_copyto! at /home/u/.julia/packages/GPUArrays/Hd5Sk/src/host/broadcast.jl:56 [inlined]\n"
            "unknown function (ip: 0x7faa9cb16566) at (unknown file)\n")
    (funcs,) = thread_functions(dump)
    assert funcs == ["__pthread_rwlock_wrlock", "??", "macro expansion", "#launch_configuration#901", "_copyto!", "??"]
    assert text_verdict(tmp_path, dump) == "lock-wait"
    with pytest.raises(InputError):
        read_text("The crash happens at line 12.\nIt is at train.py:12 in my script.\nnothing at /etc/hosts\n")


def test_kernel_tasks_stay_apart_however_they_are_named_or_dumped():
    """A kernel thread named with a colon (kworker/u16:3), a SysRq header whose pid is
    padded (pid:  812), and a /proc stack pasted after a py-spy dump: each its own task or
    thread (a review found their frames appended to the stack before them)."""
    named = ("[ 7251.1] INFO: task python3:13282 blocked for more than 120 seconds.\n[ 7251.1] Call Trace:\n"
             "[ 7251.1]  __schedule+0x2e3/0x740\n[ 7251.1]  do_truncate+0x6a/0xc0\n"
             "[ 7251.1] INFO: task kworker/u16:3:412 blocked for more than 120 seconds.\n[ 7251.1] Call Trace:\n"
             "[ 7251.1]  io_schedule+0x16/0x40\n[ 7251.1]  nfs_writepages+0x1a0/0x2c0 [nfs]\n")
    assert [(p.pid, p.cmdline, len(p.threads[0].frames)) for p in read_text(named).processes] == [
        (13282, "python3", 2), (412, "kworker/u16:3", 2)]
    padded = ("task:python3         state:D stack:    0 pid:12345 ppid:  1200 flags:0x00004002\nCall Trace:\n"
              " __schedule+0x2cd/0x890\n rpc_wait_bit_killable+0x1e/0x90 [sunrpc]\n"
              "task:pt_data_worker  state:D stack:    0 pid:  812 ppid:   700 flags:0x00000000\nCall Trace:\n"
              " __schedule+0x2cd/0x890\n nvidia_ioctl+0x6cd/0x830 [nvidia]\n")
    assert [p.pid for p in read_text(padded).processes] == [12345, 812]
    after = ('Thread 1300 (active): "reader"\n    read (socket.py:700)\n    run (reader.py:20)\n\n'
             "$ sudo cat /proc/1234/stack\n[<0>] futex_wait_queue_me+0xbb/0x120\n[<0>] futex_wait+0x105/0x240\n")
    assert thread_functions(after) == [["read", "run"], ["futex_wait_queue_me", "futex_wait"]]


def test_a_third_party_module_file_is_not_the_interpreters(tmp_path):
    """numpy's multiarraymodule.c is the job's own native code, not CPython's (whose
    Modules/*module.c files are system frames): a thread in it is not idle."""
    text = ("Thread 1 (Thread 0x7f2b4c5f6740 (LWP 4321)):\n"
            "#0  0x00007f2b3c1a2b10 in PyArray_MatrixProduct2 (op1=0x7f, op2=0x7f, out=0x0) at numpy/core/src/multiarray/multiarraymodule.c:1020\n"
            "#1  0x000055d0c1a9f2e1 in _PyEval_EvalFrameDefault () from /usr/bin/python3\n"
            "#2  0x00007f2b4be0cc87 in __libc_start_main () from /lib/x86_64-linux-gnu/libc.so.6\n")
    assert text_verdict(tmp_path, text) == "unknown"
