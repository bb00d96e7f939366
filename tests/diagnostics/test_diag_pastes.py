"""The tolerant reader for pasted dumps (``pastes.read_text``): every shape people
paste, what it reports about skipped text, and linear time on large input.

The small snippets below are synthetic, one per shape; the real pastes these
shapes come from are in data/pasted/ (see test_diag_corpus.py)."""

from __future__ import annotations

import time

import pytest

from diag_helpers import DATA
from hangwatch.diagnostics.errors import InputError
from hangwatch.diagnostics.pastes import read_text

PASTED = DATA / "pasted"


def _one(text: str):
    report = read_text(text)
    assert len(report.processes) == 1, report.processes
    return report, report.processes[0]


def _frames(thread) -> list[str]:
    return [f.render() for f in thread.frames]


def test_no_thread_header_is_one_unnamed_thread_with_low_confidence():
    report, proc = _one("```\n    main_loop (ray/_private/worker.py:935)\n    <module> (ray/_private/workers/default_worker.py:297)\n```\n")
    (t,) = proc.threads
    assert t.name == "" and _frames(t) == ["main_loop (worker.py:935)", "<module> (default_worker.py:297)"]
    assert report.confidence == "low" and any("without a 'Thread' header" in n for n in report.notes())


@pytest.mark.parametrize(
    ("header", "ident", "name", "active"),
    [
        ('Thread 0x7F4AA36D9700 (active): "MainThread"', "0x7f4aa36d9700", "MainThread", True),
        ('Thread (idle): "MainThread"', "?1", "MainThread", False),
        ('Thread (idle) "MainThread"', "?1", "MainThread", False),
        ("Thread 8283 (idle)", "8283", "", False),
        ("Thread 0x7F4AA36D9700 (active)", "0x7f4aa36d9700", "", True),
        ("Thread <PID> (active+gil)", "<PID>", "", True),
        ("MainThread (active, 100% CPU):", "?1", "MainThread", True),
        ("Thread 0x00007f13c65f5400 (most recent call first):", "0x00007f13c65f5400", "", None),
        ("decode pid=951 (MainThread active+gil):", "951", "MainThread", True),  # a reporter's caption
        ('Thread N (idle): "MainThread"', "?1", "MainThread", False),  # placeholder id
        ('Thread 0x7f... (active): "MainThread"', "?1", "MainThread", True),
    ],
)
def test_thread_header_shapes(header, ident, name, active):
    _, proc = _one(f"{header}\n    forward (model.py:12)\n")
    (t,) = proc.threads
    assert (t.ident, t.name, t.active) == (ident, name, active)
    assert _frames(t) == ["forward (model.py:12)"]


@pytest.mark.parametrize(
    ("line", "rendered"),
    [
        ("    wait (threading.py:320)", "wait (threading.py:320)"),
        ("wait (threading.py:320)", "wait (threading.py:320)"),  # unindented
        ("\twait (threading.py:320)", "wait (threading.py:320)"),  # tab
        ("    ... dequeue (vllm/shm_broadcast.py:779)", "dequeue (shm_broadcast.py:779)"),  # abbreviated
        ("    from_ipc_handle          (torch/cuda/streams.py:197)   <-- BLOCKS FOREVER", "from_ipc_handle (streams.py:197)"),
        ("    wait               (shm_broadcast.py:196)   <- the busy_loop_s branch", "wait (shm_broadcast.py:196)"),
        ("    dequeue      vllm/distributed/shm_broadcast.py:779", "dequeue (shm_broadcast.py:779)"),  # columns, no parens
        ("    (inside vllm/compilation/cuda_graph.py:254)", "? (cuda_graph.py:254)"),
        ("    __call__ (inside vllm/compilation/cuda_graph.py:254)", "__call__ (cuda_graph.py:254)"),
        ("    _find_and_load (<frozen importlib._bootstrap>:1007)", "_find_and_load (<frozen importlib._bootstrap>:1007)"),
        ("    <module> (vllm:8)", "<module> (vllm:8)"),
        ("    cuEventSynchronize (libcuda.so.1)", "cuEventSynchronize (libcuda.so.1)"),
        ("    0x7f259f401d71 (libc.so.6)", "0x7f259f401d71 (libc.so.6)"),
        ("    c10d::ProcessGroupNCCL::WorkNCCL::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >) (libtorch_cuda.so)",
         "c10d::ProcessGroupNCCL::WorkNCCL::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >) (libtorch_cuda.so)"),
        ("    replay (torch/cuda/", "replay (torch/cuda/…)"),  # cut mid-line
        ("    cuEventSynchronize       (libcuda.so.5", "cuEventSynchronize (libcuda.so.5)"),
        ('  File "/usr/lib/python3.12/queue.py", line 180 in get', "get (queue.py:180)"),  # faulthandler
        ("    shutdown (concurrent\\futures\\thread.py:229)", "shutdown (thread.py:229)"),  # Windows
        ("    \\_\\_call\\_\\_ (torch/\\_inductor/async\\_compile.py:12)", "__call__ (async_compile.py:12)"),  # markdown-escaped
        ("    _process_executor_events (airflow/jobs/scheduler_job.py:1242", "_process_executor_events (scheduler_job.py:1242)"),
        ("cudaLaunchKernel (libcudart.so…)", "cudaLaunchKernel (libcudart.so)"),  # a library name cut by the reporter
    ],
)
def test_frame_shapes(line, rendered):
    _, proc = _one('Thread 1 (idle): "MainThread"\n' + line + "\n")
    assert _frames(proc.threads[0]) == [rendered]


def test_windows_paths_and_labelled_headers_keep_what_the_classifier_needs():
    """Backslash paths are still standard library; a 'LABEL pid=N (MainThread state):'
    caption names the process (hordelib_old#221, the B300 NVLink notes in data/pasted)."""
    _, proc = _one('Thread 9 (idle): "MainThread"\n    join (threading.py:1089)\n    shutdown (concurrent\\futures\\thread.py:229)\n')
    assert all(f.is_stdlib for f in proc.threads[0].frames)
    _, proc = _one("decode pid=951 (MainThread active+gil):\n    all_reduce (torch/distributed/distributed_c10d.py:3068)\n")
    assert proc.pid == 951 and proc.threads[0].owns_gil


def test_old_double_colon_locals_blocks_are_skipped_silently():
    """py-spy 0.2-0.3 printed 'Arguments::' / 'Locals::' (airflow#7935)."""
    text = ('Thread 132 (idle): "MainThread"\n    _send (multiprocessing/connection.py:368)\n'
            "        Arguments::\n            self: <Connection at 0x7f5d>\n        Locals::\n            remaining: 1213\n"
            "    send (multiprocessing/connection.py:206)\n")
    report, proc = _one(text)
    assert [f.function for f in proc.threads[0].frames] == ["_send", "send"] and report.skipped == 0


@pytest.mark.parametrize("lead", ["When stuck, py-spy shows: ``` ", ""])
def test_a_dump_flattened_onto_one_line_is_split_back(lead):
    """Line breaks lost (a web page or digest flattened the paste, vllm#25890 in data/pasted)."""
    text = (lead + 'Process 1829647: VLLM::EngineCore Python v3.12.9 (envs/vllm/bin/python3.12) '
            'Thread 1829647 (active+gil): "MainThread" get_num_common_prefix_blocks (vllm/v1/core/kv_cache_coordinator.py:138) '
            "schedule (vllm/v1/core/sched/scheduler.py:540) step (vllm...\n")
    _, proc = _one(text)
    assert (proc.pid, proc.cmdline) == (1829647, "VLLM::EngineCore")
    (t,) = proc.threads
    assert t.name == "MainThread" and [f.function for f in t.frames] == ["get_num_common_prefix_blocks", "schedule", "step"]


def test_rank_labelled_lines_are_one_process_per_label():
    """'DP0,1,2: frame' / 'DP3..7:  frame': ranks folded onto labelled lines (GLM notes in data/pasted)."""
    text = ("   DP0,1,2: synchronize (torch/cuda/__init__.py:1083)\n"
            "              _make_launchers (torch/_inductor/runtime/triton_heuristics.py:646)\n"
            "   DP3..7:  broadcast (torch/distributed/distributed_c10d.py:2841)\n")
    procs = read_text(text).processes
    assert [(p.rank, [f.function for f in p.threads[0].frames]) for p in procs] == [
        (0, ["synchronize", "_make_launchers"]), (3, ["broadcast"])]


def test_pystack_threads_are_read_innermost_first():
    """pystack lists the outermost frame first, with source lines under each frame."""
    text = ("$ pystack remote 1904\n"
            "Traceback for thread 1904 (python3.12) [Has the GIL] (most recent call last):\n"
            '    (Python) File "/usr/lib/python3.12/runpy.py", line 88, in _run_code\n        exec(code, run_globals)\n'
            '    (Python) File "/app/train.py", line 40, in main\n        loss.item()\n'
            '    (C) File "???", line 0, in cuEventSynchronize (libcuda.so.1)\n')
    report, proc = _one(text)
    (t,) = proc.threads
    assert proc.pid == 1904 and t.ident == "1904" and t.owns_gil and report.skipped == 0
    assert _frames(t) == ["cuEventSynchronize (libcuda.so.1)", "main (train.py:40)", "_run_code (runpy.py:88)"]


def test_cluster_log_prefixes_and_terminal_colours_are_stripped():
    """Kubernetes/containerd log lines, `srun --label` task prefixes, ANSI colours."""
    text = ("2025-03-01T10:00:00.123456789Z stdout F Process 42: python train.py\n"
            '2025-03-01T10:00:00.123456789Z stdout F \x1b[1mThread 42 (idle): "MainThread"\x1b[0m\n'
            "2025-03-01T10:00:00.123456789Z stdout F     all_reduce (torch/distributed/distributed_c10d.py:2050)\n"
            '3: Thread 43 (active): "MainThread"\n3:     forward (model.py:12)\n')
    report = read_text(text)
    assert [(p.pid, [f.function for f in p.threads[0].frames]) for p in report.processes] == [(42, ["all_reduce"]), (43, ["forward"])]
    assert report.skipped == 0


def test_arrow_chains_are_frames_innermost_first():
    _, proc = _one("Process 1390: VLLM::Worker_TP1   ← back in its loop\n    ... dequeue (vllm/shm_broadcast.py:779) → worker_busy_loop\n")
    assert proc.cmdline == "VLLM::Worker_TP1"
    assert [f.function for f in proc.threads[0].frames] == ["dequeue", "worker_busy_loop"]


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
    _, proc = _one(text)
    (thread,) = proc.threads
    assert thread.ident == "30756" and _frames(thread) == ["poll (syscall-template.S)", "get (queues.py:131)", "pin_loop (loader.py:20)"]
    assert thread.frames[1].is_stdlib  # a Python 2 standard library path
    _, proc = _one("Thread 1 (Thread 0x7f384e2dc740 (LWP 237)):\n#2  0x00007f in ?? () from /lib64/libc.so.6\n"
                   "#4 Frame 0x7f3484000910, for file /usr/lib/python2.7/threading.py, line 358, in wait (self=<_Condition\n")
    assert proc.pid == 237 and proc.threads[0].name == "MainThread"
    assert _frames(proc.threads[0]) == ["? (libc.so.6)", "wait (threading.py:358)"]
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
    report, proc = _one(text)
    assert _frames(proc.threads[0]) == ["futex_abstimed_wait_cancelable (futex-internal.h)", "acquire (?)", "wait (threading.py:295)",
                                        "inner (worker.py:49)"]
    assert report.skipped == 2  # gdb's source line and its command; the py-bt source lines are not counted
    # A Python traceback (most recent call LAST) is still not a stack.
    report, proc = _one('Traceback (most recent call last):\n  File "/x/a.py", line 3, in f\nThread 7 (idle): "MainThread"\n    g (b.py:1)\n')
    assert _frames(proc.threads[0]) == ["g (b.py:1)"]


def test_nccl_watchdog_timeout_lines_are_one_rank_each_in_its_collective():
    """PyTorch's watchdog log is the only evidence many hang reports carry (Automodel#1574,
    PyTorch#20630, vLLM#6042 in data/pasted): each rank becomes a process waiting in the
    collective the watchdog names, at its sequence number; repeats of a rank are one;
    a WorkNCCL(...) wrapped onto the next line keeps the rank of the line before."""
    text = (
        "[rank2]:[E ProcessGroupNCCL.cpp:563] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4084, "
        "OpType=ALLREDUCE, NumelIn=48, NumelOut=48, Timeout(ms)=600000) ran for 600077 milliseconds before timing out.\n"
        "(RayWorkerWrapper pid=4009) [rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=4084, OpType=ALLREDUCE, NumelIn=48, NumelOut=48, Timeout(ms)=600000) ran for 600095 milliseconds.\n"
        "[rank1]:[E ProcessGroupNCCL.cpp:1414] [PG 1 Rank 1] Process group watchdog thread terminated with exception: [Rank 1] "
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4084, OpType=ALLREDUCE, NumelIn=48)\n"
        "  [rank7]: Watchdog caught collective operation timeout:\n"
        "    WorkNCCL(SeqNum=4084, OpType=BROADCAST, NumelIn=1, NumelOut=8, Timeout(ms)=60000)\n"
    )
    report = read_text(text)
    got = {p.rank: (p.pid, _frames(p.threads[0])) for p in report.processes}
    assert got == {2: (None, ["nccl:allreduce (SeqNum 4084)"]), 1: (4009, ["nccl:allreduce (SeqNum 4084)"]),
                   7: (None, ["nccl:broadcast (SeqNum 4084)"])}
    assert report.skipped == 0 and "3 rank(s) known only from NCCL watchdog timeout lines" in " ".join(report.notes())
    # A rank whose stack is pasted too keeps its stack.
    report = read_text(text + '=== rank 2 ===\nThread 9 (idle): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:2050)\n')
    assert [_frames(p.threads[0]) for p in report.processes if p.rank == 2] == [["all_reduce (distributed_c10d.py:2050)"]]


def test_a_ctrl_c_traceback_is_the_main_threads_stack_innermost_first():
    """Reporters press Ctrl+C on the hung process and paste the KeyboardInterrupt
    traceback (PyTorch#39570, icefall#1084, nunif#26 in data/pasted): outermost first,
    often without its 'Traceback' line, '^C' echoed in front. Other exceptions' tracebacks
    are error reports, not stacks; a traceback cut before its exception line is kept only
    when it is the paste's only stack."""
    text = (
        "^CTraceback (most recent call last):\n"
        '  File "train.py", line 10, in <module>\n'
        "    main()\n"
        '  File "/usr/lib/python3.8/multiprocessing/popen_fork.py", line 28, in poll\n'
        "    pid, sts = os.waitpid(self.pid, flag)\n"
        "               ^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        "KeyboardInterrupt\n"
        "Traceback (most recent call last):\n"
        '  File "/x/worker.py", line 3, in run\n'
        "    step()\n"
        "RuntimeError: boom\n"
    )
    report, proc = _one(text)
    assert proc.threads[0].name == "MainThread"
    assert _frames(proc.threads[0]) == ["poll (popen_fork.py:28)", "<module> (train.py:10)"]
    assert report.skipped == 4  # the second traceback: its header, frame, source line and error
    _, proc = _one('The loader thread hangs, I pressed Ctrl+C:\n  File "C:\\nunif\\train.py", line 22, in <module>\n    main()\nKeyboardInterrupt:\n')
    assert proc.threads[0].name == "MainThread"  # prose that mentions a thread is not a caption
    assert _frames(proc.threads[0]) == ["<module> (train.py:22)"]
    _, proc = _one('Traceback (most recent call last):\n  File "/x/loader.py", line 1132, in _try_get_data\n    data = q.get(timeout=ti\n')
    assert _frames(proc.threads[0]) == ["_try_get_data (loader.py:1132)"]
    report, proc = _one('Traceback (most recent call last):\n  File "/x/a.py", line 3, in f\n'
                        'Thread 7 (idle): "MainThread"\n    g (b.py:1)\n')
    assert _frames(proc.threads[0]) == ["g (b.py:1)"]  # a cut traceback next to a real stack is dropped
    _, proc = _one('  File "/x/a.py", line 3, in f\n    g()\n      wait (threading.py:320)\n      step (train.py:9)\n')
    assert _frames(proc.threads[0]) == ["wait (threading.py:320)", "step (train.py:9)"]  # py-spy frames end it


def test_format_stack_thread_dumps_and_named_faulthandler_threads():
    """Stack-dumping helpers print every thread with traceback.format_stack under a
    caption ("# Thread: NAME(ID)", 'File: "..."' in the common recipe): outermost
    first, no exception line; Python 3.14's faulthandler names threads in brackets."""
    text = (
        "# Thread: MainThread(140735120184128)\n"
        'File: "train.py", line 90, in <module>\n  main()\n'
        'File: "/usr/lib/python3.8/threading.py", line 1011, in join\n  self._wait_for_tstate_lock()\n\n'
        "# Thread: loader-0(139876)\n"
        'File: "/usr/lib/python3.8/threading.py", line 890, in _bootstrap\n  self._bootstrap_inner()\n'
        'File: "/app/data.py", line 12, in run\n  self.read()\n'
    )
    report, proc = _one(text)
    assert [(t.name, _frames(t)) for t in proc.threads] == [
        ("MainThread", ["join (threading.py:1011)", "<module> (train.py:90)"]),
        ("loader-0", ["run (data.py:12)", "_bootstrap (threading.py:890)"])]
    assert report.skipped == 0
    _, proc = _one('Current thread 0x00007604707c3780 [python] (most recent call first):\n  File "zi.py", line 14 in <module>\n')
    assert proc.threads[0].name == "python" and _frames(proc.threads[0]) == ["<module> (zi.py:14)"]


def test_a_traceback_cut_in_a_file_line_is_not_a_stack():
    """nccl#1438 in data/pasted: a Python traceback (most recent call last) cut inside
    'File "/x/...': faulthandler's cut frame only under its header or after its frames
    (the traceback itself, cut, counts only as a paste's only stack)."""
    text = 'Traceback (most recent call last):\n  File "/x/runpy.py", line 85, in _run_code\n    exec(code)\n  File "/idas/users/yaof\n'
    _, proc = _one(text)
    assert _frames(proc.threads[0]) == ["_run_code (runpy.py:85)"]
    with pytest.raises(InputError):
        read_text('RuntimeError: boom\n  File "/idas/users/yaof\n')
    _, proc = _one('Thread 0x00007f13 (most recent call first):\n  File "/x/queue.py", line 180 in get\n  File "/x/train.py\n')
    assert _frames(proc.threads[0]) == ["get (queue.py:180)", "? (/x/train.py…)"]


def test_a_call_in_quoted_code_is_not_a_frame_cut_mid_line():
    report, proc = _one('  rank_zero_warn(\nThread 7 (idle): "MainThread"\n    step (train.py:3)\n')
    assert _frames(proc.threads[0]) == ["step (train.py:3)"] and report.skipped == 1


def test_prose_and_traceback_lines_are_skipped_not_frames():
    text = (
        "The engine hangs (see below) after a while.\n"
        "Loading weights took 279.51 seconds (loader.py:447)\n"
        '  File "/x/train.py", line 12, in main\n'
        "Crashed in the driver (libcuda.so.1)\n"
        'Thread 7 (idle): "MainThread"\n'
        "    step (train.py:3)\n"
    )
    report, proc = _one(text)
    assert _frames(proc.threads[0]) == ["step (train.py:3)"]
    assert report.skipped == 4 and report.skipped_examples[0].startswith("The engine hangs")
    assert "skipped 4 line(s)" in " ".join(report.notes())


def test_prefixes_fences_html_prompts_and_locals():
    text = (
        "<details><summary>py-spy</summary>\n\n"
        "````Text\n"
        "user@host:~$ py-spy dump --pid 4242\n"
        "sglang-1  | [2025-10-29 11:25:58 TP3] Thread 4242 (active): \"MainThread\"\n"
        "> [rank3]: 2024-05-01T12:00:00Z     forward (model.py:1)\n"
        "    Arguments:\n"
        "        self: <Model at 0x7f>\n"
        "    step (train.py:2)\n"
        "(EngineCore pid=4242)     loop (core.py:3)\n"
        "````\n</details>\n"
    )
    report, proc = _one(text)
    assert proc.pid == 4242
    assert _frames(proc.threads[0]) == ["forward (model.py:1)", "step (train.py:2)", "loop (core.py:3)"]
    assert report.skipped == 0


def test_several_processes_and_their_separators():
    text = (
        "Process 10: python a.py\nPython v3.12.1 (/usr/bin/python3)\n\n"
        'Thread 10 (idle): "MainThread"\n    a (a.py:1)\n'
        "Stack dump for ddrl     20768  0.1  0.1 1751908 151888 pts/0  Sl   12:48   0:01 ray_worker\n"
        "Thread 0x7F4AACDE7700 (active)\n\t main_loop (ray/worker.py:1005)\n"
        "=== PID 30 ===\n"
        'Thread 31 (idle): "pool"\n    b (b.py:2)\n'
        "[rank5]: Process 50: python b.py\n[rank5]: Thread 50 (idle): \"MainThread\"\n[rank5]:     d (d.py:4)\n"
        "Pyspy dump for PID 40:\n"
        "    c (c.py:3)\n"
    )
    procs = read_text(text).processes
    assert [(p.pid, p.cmdline) for p in procs] == [(10, "python a.py"), (20768, "ray_worker"), (30, ""), (50, "python b.py"), (40, "")]
    assert procs[0].python == "v3.12.1" and procs[3].rank == 5


def test_condensed_headers_sharing_frames_are_separate_processes():
    text = (
        'Thread 688510 (active): "MainThread"\nThread 688511 (active): "MainThread"\n'
        "    broadcast (torch/distributed/distributed_c10d.py:1191)\n"
        '1 in:\nThread 688514 (idle): "MainThread"\n    _try_get_data (torch/utils/data/dataloader.py:1011)\n'
    )
    procs = read_text(text).processes
    assert [p.pid for p in procs] == [688510, 688511, 688514]  # the main thread's id is the pid
    assert [f.function for p in procs for f in p.threads[0].frames] == ["broadcast", "broadcast", "_try_get_data"]


def test_a_bare_thread_header_does_not_borrow_the_next_threads_frames():
    text = 'Thread 1 (idle): "MainThread"\n    a (a.py:1)\nThread 2 (idle): "empty"\nThread 3 (idle): "busy"\n    b (b.py:2)\n'
    (proc,) = read_text(text).processes
    assert [(t.name, len(t.frames)) for t in proc.threads] == [("MainThread", 1), ("busy", 1)]


def test_dump_starting_mid_way_keeps_the_orphan_frames():
    text = '    _bootstrap (threading.py:1032)\nThread 9 (idle): "MainThread"\n    run (x.py:1)\n'
    procs = read_text(text).processes
    assert sum(len(p.threads) for p in procs) == 2


def test_text_without_frames_is_the_only_failure():
    with pytest.raises(InputError, match="notes.txt: no py-spy stacks found"):
        read_text("just some notes\nand (more) notes\n", source="notes.txt")


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "kind",
    ["frames", "one_long_line", "nested_parens", "open_parens", "thread_like", "prefix_like", "cxx_like", "interleaved_pids",
     "banner_like", "collapsed_like"],
)
def test_two_megabytes_of_stack_shaped_text_read_in_linear_time(kind):
    size = 2_000_000
    text = {
        "frames": "    forward (model/layer.py:12)\n" * (size // 31),
        "one_long_line": "    f (" + "a/" * (size // 2) + "x.py:1)",
        "nested_parens": "f (" * (size // 3),
        "open_parens": ("    fn (" + "a (" * 1000 + "\n") * (size // 3008),
        "thread_like": ("Thread " + "x" * 40 + ' (idle (idle (idle "' * 20 + "\n") * (size // 448),
        "prefix_like": ("[rank0] " * 10 + "name  |  " * 10 + "    g (g.py:1)\n") * (size // 190),
        "cxx_like": ("frame #1: " + "a + 0x1 (0x2 in " * 250 + "\n") * (size // 4011),
        "banner_like": ("~" * 1000 + " Stack of " + "(" * 500 + " ~~~\n" + '  File "/a.py", line 1, in f\n') * (size // 1540),
        "collapsed_like": ("f (a.py:1);" * 300 + "g (b.py:2" + " 7\n") * (size // 3312),
        "interleaved_pids": "".join(f'(W pid={i % 50}) ERROR 01-12 02:58:31 [a.py:1]   File "/x/vll\nm/a.py", line 3, in f\n'
                                    for i in range(size // 78)),
    }[kind]
    assert len(text) >= size * 0.9
    start = time.perf_counter()
    try:
        read_text(text)
    except InputError:
        pass
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0, f"{kind}: {elapsed:.2f} s for {len(text)} characters"


def test_every_real_paste_in_the_corpus_parses():
    """Every paste with a whole frame left; one marked 'parse: refuse' in its .meta (two
    dumps interleaved character by character, ms-swift#4353) has none and is refused."""
    from hangwatch.diagnostics.corpus import read_meta  # noqa: PLC0415

    pastes = sorted(PASTED.glob("*.txt"))
    assert len(pastes) >= 58
    for path in pastes:
        text = path.read_text(encoding="utf-8")
        if read_meta(path.with_suffix(".meta")).get("parse") == "refuse":
            with pytest.raises(InputError):
                read_text(text, source=path.name)
            continue
        report = read_text(text, source=path.name)
        assert report.frames >= 1, path.name


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
    _, proc = _one(text)
    assert _frames(proc.threads[0]) == [
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
    _, proc = _one(text)
    (t,) = proc.threads
    assert t.name == "MainThread" and _frames(t) == [
        "syscall (libc.so.6)", "c10d::ProcessGroupNCCL::abort (libtorch_cuda.so)",
        "std::__atomic_futex_unsigned_base::_M_futex_wait_until_steady (libstdc++.so.6)"]
    text = (
        "(gdb) info threads\n"
        "  Id   Target Id         Frame\n"
        '* 1    Thread 0x7fc73ac5d700 (LWP 52422) "" select_poll_poll () at /src/Modules/clinic/selectmodule.c.h:219\n'
        '  5    Thread 0x7fc6b71e9700 (LWP 52742) "pt_worker" 0x00007fc739c909c8 in accept4 (fd=7, flags=524288) at ../sysdeps/accept4.c:40\n'
    )
    report, proc = _one(text)
    assert proc.pid == 52422 and [(t.ident, t.name) for t in proc.threads] == [("52422", "MainThread"), ("52742", "pt_worker")]
    assert _frames(proc.threads[1]) == ["accept4 (accept4.c)"] and report.skipped == 2


def test_vllm_trace_function_log_keeps_the_calls_still_open():
    """VLLM_TRACE_FUNCTION's "Call to"/"Return from" lines (vLLM#5170): the calls never
    returned from are the stack the process hung in, innermost first."""
    text = (
        "2024-06-03 16:53:30.700000 Call to __init__ in /v/vllm/distributed/device_communicators/pynccl.py:60 from init in /v/vllm/worker.py:10\n"
        "2024-06-03 16:53:30.710000 Call to helper in /v/vllm/utils.py:5 from __init__ in /v/vllm/distributed/device_communicators/pynccl.py:90\n"
        "2024-06-03 16:53:30.720000 Return from helper in /v/vllm/utils.py:7 to __init__ in /v/vllm/distributed/device_communicators/pynccl.py:90\n"
        "2024-06-03 16:53:30.748291 Call to synchronize in /v/torch/cuda/streams.py:93 from __init__ in /v/vllm/distributed/device_communicators/pynccl.py:101\n"
    )
    _, proc = _one(text)
    assert _frames(proc.threads[0]) == ["synchronize (streams.py:93)", "__init__ (pynccl.py:101)", "init (worker.py:10)"]


def test_py_spy_failing_on_a_process_is_recorded_as_not_dumped():
    """A paste that shows py-spy failing on a process (m4 notes in data/pasted: the rank in
    D state): that pid is recorded as not dumped, with py-spy's reason."""
    text = (
        'Thread 280064 (active): "MainThread"\n    barrier (torch/distributed/distributed_c10d.py:2784)\n'
        "$ py-spy dump --pid 280058\nProcess 280058: ...\nError: Failed to suspend process\nReason: EPERM: Operation not permitted\n"
    )
    report = read_text(text)
    assert [p.pid for p in report.processes] == [280064]
    assert report.undumped == {280058: "Failed to suspend process; EPERM: Operation not permitted"}
    assert any("could not dump" in n for n in report.notes())


def test_function_names_alone_next_to_frames_are_frames_and_prose_is_not():
    """A stack written by hand as bare names (sglang#22276: 'cuStreamSynchronize' over
    indented frames): code-shaped names adjacent to real frames are frames, by name
    only; ordinary words and names that no frame follows are skipped text."""
    text = ("```\n  cuStreamSynchronize\n    _local_scalar_dense_cuda (tensor.item())\n"
            "      update_single_wrapper (flashinfer_backend.py:1252)\n      process_batch_result\n```\n")
    report, proc = _one(text)
    assert _frames(proc.threads[0]) == ["cuStreamSynchronize (?)", "_local_scalar_dense_cuda (?)", "update_single_wrapper (flashinfer_backend.py:1252)",
                                        "process_batch_result (?)"]
    assert report.bare_frames == 3 and report.confidence != "high"
    report, proc = _one("See the log_watchdog output\nsome_setting_name\nThanks\n```\n    f (a.py:1)\n```\n")
    assert _frames(proc.threads[0]) == ["f (a.py:1)"] and report.skipped == 3
    report, proc = _one('stack_of_rank_0\nThread 7 (idle): "MainThread"\n    f (a.py:1)\n')  # a caption, not a frame
    assert _frames(proc.threads[0]) == ["f (a.py:1)"] and report.skipped == 1


def test_gdb_thread_headers_with_a_thread_name():
    """Newer gdb names threads in 'thread apply all bt' (TensorRT-LLM#2560 in data/pasted):
    the header still starts a thread, with that name."""
    _, proc = _one('Thread 7 (Thread 0x7f9356c7a000 (LWP 3271135) "executionLoop"):\n'
                   "#0  0x00007f9f12e0a85d in __lll_lock_wait () from /lib64/libpthread.so.0\n"
                   'Thread 1 (Thread 0x7f9356c7b000 (LWP 3271100) "python"):\n'
                   "#0  0x00007f9f12e0a85d in poll () from /lib64/libc.so.6\n")
    assert [(t.ident, t.name) for t in proc.threads] == [("3271135", "executionLoop"), ("3271100", "MainThread")]


def test_a_process_printing_its_own_stacks_is_read_below_the_printing_code():
    """A SIGINT handler that prints every thread's stack (the OpenVINO web UI in
    data/pasted) is innermost in the thread it interrupted: the dumper's frames and the
    handler are dropped, the wait it interrupted stays."""
    text = (
        "# Thread: MainThread(140735)\n"
        'File: "/app/worker.py", line 40, in loop\n  item = q.get()\n'
        'File: "/usr/lib/python3.10/queue.py", line 171, in get\n  self.not_empty.wait()\n'
        'File: "/app/util.py", line 156, in sigint_handler\n  dumpstacks()\n'
        'File: "/app/util.py", line 143, in dumpstacks\n  for f in traceback.extract_stack(stack):\n'
    )
    _, proc = _one(text)
    assert _frames(proc.threads[0]) == ["get (queue.py:171)", "loop (worker.py:40)"]


def test_gdb_names_in_an_anonymous_namespace_are_kept():
    """torch's C++ ops live in "(anonymous namespace)" (Megatron-LM#1679 in data/pasted):
    that parenthesis is part of the name, not its parameter list."""
    text = ("#10 0x00007f6804fedcb5 in c10d::ops::(anonymous namespace)::recv_CUDA(c10::ArrayRef<at::Tensor>, long, long) () "
            "from /t/libtorch_cpu.so\n")
    _, proc = _one(text)
    assert _frames(proc.threads[0]) == ["c10d::ops::(anonymous namespace)::recv_CUDA (libtorch_cpu.so)"]


def test_numbered_name_from_file_frames_are_read():
    """A mixed stack printed as "#N NAME from FILE:LINE" (sglang#10124 in data/pasted):
    a Python frame when FILE is a Python file, a native one in a library otherwise."""
    text = ("#55 ncclGroupEnd from /usr/lib/libnccl.so.2\n"
            "#56 forward from /sgl-workspace/sglang/python/sglang/srt/models/deepseek_v2.py:2083\n"
            "#57 _call_impl from /usr/local/lib/python3.12/dist-packages/torch/nn/modules/module.py:1784\n")
    _, proc = _one(text)
    assert _frames(proc.threads[0]) == ["ncclGroupEnd (libnccl.so.2)", "forward (deepseek_v2.py:2083)", "_call_impl (module.py:1784)"]


def test_ipython_tracebacks_are_stacks():
    """Jupyter/IPython tracebacks (ultralytics#6206 in data/pasted): the exception name and
    "Traceback (most recent call last)" on one line, "File PATH:LINE, in f(args)" or the
    older "PATH in f(args)", notebook cells, numbered source lines with "-->" arrows."""
    text = (
        "---------------------------------------------------------------------------\n"
        "Empty                                     Traceback (most recent call last)\n"
        "File C:\\ProgramData\\anaconda3\\Lib\\site-packages\\torch\\utils\\data\\dataloader.py:1132, in _MultiProcessingDataLoaderIter._try_get_data(self, timeout)\n"
        "   1131 try:\n"
        "-> 1132     data = self._data_queue.get(timeout=timeout)\n"
        "File C:\\ProgramData\\anaconda3\\Lib\\queue.py:179, in Queue.get(self, block, timeout)\n"
        "--> 179     raise Empty\n"
        "Empty: \n"
    )
    _, proc = _one(text)
    assert _frames(proc.threads[0]) == ["Queue.get (queue.py:179)", "_MultiProcessingDataLoaderIter._try_get_data (dataloader.py:1132)"]
    old = (
        "KeyboardInterrupt                         Traceback (most recent call last)\n"
        "<ipython-input-5-2a1c3f> in <module>\n"
        "----> 1 for batch in loader:\n"
        "~/env/lib/python3.7/site-packages/torch/utils/data/dataloader.py in _next_data(self)\n"
        "    973             self._shutdown_workers()\n"
        "--> 974         idx, data = self._get_data()\n"
    )
    _, proc = _one(old)
    assert _frames(proc.threads[0]) == ["_next_data (dataloader.py)", "<module> (<ipython-input-5>)"]


def test_gdb_frames_quoted_inline_in_prose_are_a_stack():
    """A reporter who names the frames gdb showed in a sentence, each in backticks in gdb's
    form (pytorch#15638 in data/pasted): those frames, not "not a dump"."""
    report, proc = _one("Looks like it hangs at `c10d::TCPStore::TCPStore(std::string const&, unsigned short, bool) ()`, "
                        "`c10d::tcputil::connect(std::string const&, unsigned short) ()`\n\nIt should return.\n")
    assert _frames(proc.threads[0]) == ["c10d::TCPStore::TCPStore (?)", "c10d::tcputil::connect (?)"]
    with pytest.raises(InputError):
        read_text("We call `init_process_group()` and `barrier()` and it hangs.\n")


def test_flight_recorder_stack_belongs_to_its_rank():
    """torch's flight recorder prints the timed-out rank's own stack under its watchdog line
    ("Stack trace of the failed collective:" then "#N f from /p/x.py:L", vlm-training#26 in
    data/pasted): one process, that rank, with those frames; not a second, unknown process."""
    text = (
        "[rank9]:[E607 23:46:59.25 ProcessGroupNCCL.cpp:689] [Rank 9] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=190346, OpType=_ALLGATHER_BASE, NumelIn=1, NumelOut=16, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.\n"
        "[rank9]:[E607 23:46:59.25 ProcessGroupNCCL.cpp:733] Stack trace of the failed collective: \n"
        "#0 all_gather_into_tensor from /env/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py:4186\n"
        "#1 wrapper from /env/lib/python3.12/site-packages/torch/distributed/c10d_logger.py:83\n"
    )
    _, proc = _one(text)
    assert proc.rank == 9 and _frames(proc.threads[0]) == ["all_gather_into_tensor (distributed_c10d.py:4186)", "wrapper (c10d_logger.py:83)"]


def test_a_numbered_list_is_not_a_numbered_frame():
    """'#12 Merge from upstream/main' in a changelog is not '#N name from FILE:LINE': the
    place after 'from' must be a Python file or a library."""
    with pytest.raises(InputError):
        read_text("#12 Merge from upstream/main\n#13 Revert from release\n")


def test_an_errors_traceback_is_the_stack_when_it_is_the_only_one():
    """A hung RPC or barrier often ends in its own timeout, and that traceback is all the
    reporter pastes (vllm#41530: get_response -> MessageQueue.dequeue -> TimeoutError;
    OpenRLHF#211: barrier -> DistBackendError 'Socket Timeout'). Its frames are where the
    thread waited: read them, say so, and still skip an error's traceback next to a stack."""
    text = (
        "  Traceback (most recent call last):\n"
        '    File "vllm/v1/executor/multiproc_executor.py", line 395, in get_response          \n'
        "      status, result = mq.dequeue(timeout=dequeue_timeout)                              \n"
        '    File "vllm/distributed/device_communicators/shm_broadcast.py", line 755, in dequeue  \n'
        "      with self.acquire_read(timeout, indefinite) as buf:                               \n"
        "  TimeoutError\n"
    )
    report, proc = _one(text)
    assert _frames(proc.threads[0]) == ["dequeue (shm_broadcast.py:755)", "get_response (multiproc_executor.py:395)"]
    assert report.error_tracebacks == 1 and any("exception's traceback" in n for n in report.notes())
    report, proc = _one(text + 'Thread 7 (idle): "MainThread"\n    g (b.py:1)\n')
    assert _frames(proc.threads[0]) == ["g (b.py:1)"] and report.error_tracebacks == 0


def test_interleaved_worker_tracebacks_are_read_per_pid_and_wrapped_paths_rejoined():
    """Two vLLM workers' tracebacks printed at once interleave line by line behind their
    "(Worker_TP2 pid=N) ERROR MM-DD hh:mm:ss [file.py:N]" prefixes, and the terminal wraps a
    long path onto an unprefixed line (llm-scaler#235 in data/pasted): one process per pid,
    each with its own frames; Ray's "ip=[IPv6]" and a log viewer's line number glued in front
    (OpenRLHF#1052) are prefixes too."""
    p2 = "(Worker_TP2 pid=291276) ERROR 01-12 02:58:31 [multiproc_executor.py:654] "
    p0 = "(Worker_TP0 pid=291274) ERROR 01-12 02:58:31 [multiproc_executor.py:654] "
    text = (
        p2 + "Traceback (most recent call last):\n"
        + p0 + "Traceback (most recent call last):\n"
        + p2 + '  File "/usr/lib/python3.12/dist-packages/vllm-0.10.3.egg/vll\n'
        'm/v1/worker/gpu_model_runner.py", line 3776, in _to_list\n'
        + p0 + '  File "/usr/lib/python3.12/dist-packages/vllm-0.10.3.egg/vll\n'
        'm/v1/executor/multiproc_executor.py", line 649, in worker_busy_loop\n'
        + p2 + "    self.transfer_event.synchronize()\n"
        + p2 + "RuntimeError: Native API failed. Native API returns: 20 (UR_RESULT_ERROR_DEVICE_LOST)\n"
        + p0 + "RuntimeError: Native API failed. Native API returns: 20 (UR_RESULT_ERROR_DEVICE_LOST)\n"
    )
    report = read_text(text)
    assert sorted((p.pid, _frames(p.threads[0])) for p in report.processes) == [
        (291274, ["worker_busy_loop (multiproc_executor.py:649)"]), (291276, ["_to_list (gpu_model_runner.py:3776)"])]
    ray = "(LLMRayActor pid=3823828, ip=[2605:340:cd51:4900:c06a:4260:c8a8:4be7])   "
    _, proc = _one(ray + 'File "/x/vllm/device_allocator/cumem.py", line 204 in sleep\n'
                   "49192" + ray + 'File "/x/vllm/v1/worker/gpu_worker.py", line 76 in sleep\n')
    assert _frames(proc.threads[0]) == ["sleep (cumem.py:204)", "sleep (gpu_worker.py:76)"]


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
    report, proc = _one(text)
    assert _frames(proc.threads[0]) == ["c10d::TCPStore::doGet (libtorch_cpu.so)", "barrier (distributed_c10d.py:3439)"]
    assert report.skipped == 1  # the "Exception raised from" line; the message ends the traceback
    dump = tmp_path / "dump.txt"
    dump.write_text(text)
    (incident,) = analyse([dump], load_signatures())
    assert incident.classification.signature_id == "nccl-comm-init"
    _, proc = _one("frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f79 in /x/libc10.so)\n"
                   "frame #2: c10d::TCPStore::doWait(c10::ArrayRef<std::string>) + 0xd8 (0x7f79ca652918 in \n"
                   "/opt/conda/lib/python3.10/site-packages/torch/lib/libtorch_cpu.so)\n")
    assert _frames(proc.threads[0]) == ["c10d::TCPStore::doWait (libtorch_cpu.so)"]
    with pytest.raises(InputError):  # the NCCL watchdog thread's own backtrace is not the hung stack
        read_text("frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x7ff2 in /x/libtorch_cuda.so)\n")


def test_a_stack_pasted_below_interleaved_worker_logs_borrows_no_pid():
    """Unprefixed lines continue the prefixed line above them (a terminal's wrap) only up
    to a blank line: a headerless stack pasted under interleaved worker logs is its own."""
    logs = "".join(f"(Worker_TP{n} pid={100 + n}) INFO 01-12 02:58:31 [a.py:1] step\n" for n in (0, 1, 0, 1))
    report = read_text(logs + "\n    all_reduce (torch/distributed/distributed_c10d.py:2050)\n    step (train.py:9)\n")
    (proc,) = report.processes
    assert proc.pid is None and _frames(proc.threads[0]) == ["all_reduce (distributed_c10d.py:2050)", "step (train.py:9)"]


def test_thread_banners_above_traceback_style_stacks_are_one_thread_each():
    """pytest-timeout prints '~~~ Stack of NAME (ident) ~~~' above each thread's stack,
    outermost first with source lines (ptvsd#1988, ros2cli#932); the hanging_threads
    package prints '---Thread N "NAME" hangs ---'. Every thread ran together as one
    cut traceback, so a tqdm monitor's frames were read as the main thread's."""
    text = (
        '  File "/usr/lib/python3.9/queue.py", line 164, in get\n'
        "    self.not_empty.wait()\n"
        "\n"
        "~~~~~~~~~~~ Stack of Thread-26 (139951743956544) ~~~~~~~~~~~\n"
        '  File "/usr/lib/python3.9/threading.py", line 937, in _bootstrap\n'
        "    self._bootstrap_inner()\n"
        '  File "/venv/site-packages/tqdm/_monitor.py", line 60, in run\n'
        "    self.was_killed.wait(self.sleep_interval)\n"
        "\n"
        "~~~~~~~~~~~ Stack of MainThread (139952591243072) ~~~~~~~~~~~\n"
        '  File "/work/train.py", line 9, in <module>\n'
        "    main()\n"
        '  File "/work/train.py", line 5, in main\n'
        "    dist.barrier()\n"
    )
    report = read_text(text)
    threads = [t for p in report.processes for t in p.threads]
    assert [(t.ident, t.name) for t in threads] == [("?1", ""), ("139951743956544", "Thread-26"), ("139952591243072", "MainThread")]
    assert _frames(threads[1]) == ["run (_monitor.py:60)", "_bootstrap (threading.py:937)"]
    assert _frames(threads[2]) == ["main (train.py:5)", "<module> (train.py:9)"]
    assert report.error_tracebacks == 0
    _, proc = _one(
        '---------Thread 133256667530752 "MainThread" hangs ---------\n'
        '        File "x/syn.py", line 49, in <module>\n'
        "                p.start()\n"
        '        File "x/multiprocessing/popen_fork.py", line 19, in __init__\n'
        "                self._launch(process_obj)\n"
    )
    (t,) = proc.threads
    assert (t.ident, t.name) == ("133256667530752", "MainThread")
    assert _frames(t) == ["__init__ (popen_fork.py:19)", "<module> (syn.py:49)"]


@pytest.mark.parametrize("name", ["pyspy_329_top_threadpool_gil_table", "pyspy_737_top_logging_acquire_no_lines",
                                  "pyspy_610_record_messages_only"])
def test_pyspy_top_and_record_output_is_refused_as_a_profile(name):
    with pytest.raises(InputError, match="py-spy top or record output"):
        read_text((PASTED / f"{name}.txt").read_text())


def test_collapsed_stacks_from_py_spy_record_are_never_read_as_a_stack():
    """py-spy record --format raw: one sampled stack per line, outermost first, ';'-joined,
    a sample count last. Read as frames, three samples became one stack in the wrong order."""
    raw = (
        "_bootstrap (threading.py:973);_bootstrap_inner (threading.py:1016);_worker (concurrent/futures/thread.py:83) 431\n"
        "<module> (train.py:40);main (train.py:33);train_step (train.py:20);backward (torch/_tensor.py:522) 977\n"
    )
    with pytest.raises(InputError, match="py-spy top or record output"):
        read_text(raw)
    report, proc = _one('Thread 7 (idle): "MainThread"\n    g (b.py:1)\n    <module> (b.py:9)\n\n' + raw)
    assert _frames(proc.threads[0]) == ["g (b.py:1)", "<module> (b.py:9)"]
    assert report.profile_lines == 2 and any("py-spy top/record" in n for n in report.notes())


def test_a_fatal_python_error_header_is_said_not_skipped():
    """faulthandler's 'Fatal Python error: X' says how the dump came about: on SIGABRT a
    hung process's threads where they waited (the Crystal deadlock write-up); on a crash
    (nogil#32's refcount assertion) where they were when it died, not a hang."""
    body = 'Thread 0x00007fa5749a8700 (most recent call first):\n  File "/w/worker.py", line 42 in _run_thread\n'
    report = read_text("Fatal Python error: Aborted\n\n" + body)
    assert report.fatal_error == "Aborted" and report.skipped == 0
    assert any("SIGABRT" in n for n in report.notes())
    report = read_text("Fatal Python error: Segmentation fault\n\n" + body)
    assert any("the process crashed" in n for n in report.notes())
