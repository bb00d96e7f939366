"""Reading pasted dumps (``pastes.read_text``): thread headers and frame lines in every
shape people paste them, and the paths, names and line numbers read from them.

The small snippets are synthetic, one per shape; the real pastes these shapes come from are
in ../data/pasted/ (see test_replay_corpus.py)."""

from __future__ import annotations

import pytest

from diag_helpers import PASTED, frame_texts, one_process, text_verdict
from hangwatch.diagnostics.pastes import parse_frame_line, parse_location, parse_thread_header, read_text

pytestmark = pytest.mark.timeout(60)


def test_no_thread_header_is_one_unnamed_thread_with_low_confidence():
    report, proc = one_process("```\n    main_loop (ray/_private/worker.py:935)\n    <module> (ray/_private/workers/default_worker.py:297)\n```\n")
    (t,) = proc.threads
    assert t.name == "" and frame_texts(t) == ["main_loop (worker.py:935)", "<module> (default_worker.py:297)"]
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
def test_every_thread_header_shape_is_read(header, ident, name, active):
    _, proc = one_process(f"{header}\n    forward (model.py:12)\n")
    (t,) = proc.threads
    assert (t.ident, t.name, t.active) == (ident, name, active)
    assert frame_texts(t) == ["forward (model.py:12)"]


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
def test_every_frame_shape_is_read(line, rendered):
    _, proc = one_process('Thread 1 (idle): "MainThread"\n' + line + "\n")
    assert frame_texts(proc.threads[0]) == [rendered]


def test_windows_paths_and_labelled_headers_keep_what_the_classifier_needs():
    """Backslash paths are still standard library; a 'LABEL pid=N (MainThread state):'
    caption names the process (hordelib_old#221, the B300 NVLink notes in data/pasted)."""
    _, proc = one_process('Thread 9 (idle): "MainThread"\n    join (threading.py:1089)\n    shutdown (concurrent\\futures\\thread.py:229)\n')
    assert all(f.is_stdlib for f in proc.threads[0].frames)
    _, proc = one_process("decode pid=951 (MainThread active+gil):\n    all_reduce (torch/distributed/distributed_c10d.py:3068)\n")
    assert proc.pid == 951 and proc.threads[0].owns_gil


def test_old_double_colon_locals_blocks_are_skipped_silently():
    """py-spy 0.2-0.3 printed 'Arguments::' / 'Locals::' (airflow#7935)."""
    text = ('Thread 132 (idle): "MainThread"\n    _send (multiprocessing/connection.py:368)\n'
            "        Arguments::\n            self: <Connection at 0x7f5d>\n        Locals::\n            remaining: 1213\n"
            "    send (multiprocessing/connection.py:206)\n")
    report, proc = one_process(text)
    assert [f.function for f in proc.threads[0].frames] == ["_send", "send"] and report.skipped == 0


def test_arrow_chains_are_frames_innermost_first():
    _, proc = one_process("Process 1390: VLLM::Worker_TP1   ← back in its loop\n    ... dequeue (vllm/shm_broadcast.py:779) → worker_busy_loop\n")
    assert proc.cmdline == "VLLM::Worker_TP1"
    assert [f.function for f in proc.threads[0].frames] == ["dequeue", "worker_busy_loop"]


def test_function_names_alone_next_to_frames_are_frames_and_prose_is_not():
    """A stack written by hand as bare names (sglang#22276: 'cuStreamSynchronize' over
    indented frames): code-shaped names adjacent to real frames are frames, by name
    only; ordinary words and names that no frame follows are skipped text."""
    text = ("```\n  cuStreamSynchronize\n    _local_scalar_dense_cuda (tensor.item())\n"
            "      update_single_wrapper (flashinfer_backend.py:1252)\n      process_batch_result\n```\n")
    report, proc = one_process(text)
    assert frame_texts(proc.threads[0]) == ["cuStreamSynchronize (?)", "_local_scalar_dense_cuda (?)", "update_single_wrapper (flashinfer_backend.py:1252)",
                                        "process_batch_result (?)"]
    assert report.bare_frames == 3 and report.confidence != "high"
    report, proc = one_process("See the log_watchdog output\nsome_setting_name\nThanks\n```\n    f (a.py:1)\n```\n")
    assert frame_texts(proc.threads[0]) == ["f (a.py:1)"] and report.skipped == 3
    report, proc = one_process('stack_of_rank_0\nThread 7 (idle): "MainThread"\n    f (a.py:1)\n')  # a caption, not a frame
    assert frame_texts(proc.threads[0]) == ["f (a.py:1)"] and report.skipped == 1


def test_numbered_name_from_file_frames_are_read():
    """A mixed stack printed as "#N NAME from FILE:LINE" (sglang#10124 in data/pasted):
    a Python frame when FILE is a Python file, a native one in a library otherwise."""
    text = ("#55 ncclGroupEnd from /usr/lib/libnccl.so.2\n"
            "#56 forward from /sgl-workspace/sglang/python/sglang/srt/models/deepseek_v2.py:2083\n"
            "#57 _call_impl from /usr/local/lib/python3.12/dist-packages/torch/nn/modules/module.py:1784\n")
    _, proc = one_process(text)
    assert frame_texts(proc.threads[0]) == ["ncclGroupEnd (libnccl.so.2)", "forward (deepseek_v2.py:2083)", "_call_impl (module.py:1784)"]


def test_a_bare_thread_header_does_not_borrow_the_next_threads_frames():
    text = 'Thread 1 (idle): "MainThread"\n    a (a.py:1)\nThread 2 (idle): "empty"\nThread 3 (idle): "busy"\n    b (b.py:2)\n'
    (proc,) = read_text(text).processes
    assert [(t.name, len(t.frames)) for t in proc.threads] == [("MainThread", 1), ("busy", 1)]


def test_dump_starting_mid_way_keeps_the_orphan_frames():
    text = '    _bootstrap (threading.py:1032)\nThread 9 (idle): "MainThread"\n    run (x.py:1)\n'
    procs = read_text(text).processes
    assert sum(len(p.threads) for p in procs) == 2


def test_arrow_chain_head_is_the_line_above_and_chains_are_innermost_first():
    text = "Representative stack:\n\nA.run_loop\n  -> step(x=1)\n  -> Queue.get\n  -> wait / sched_yield\nthat is all\n"
    report = read_text(text)
    (proc,) = report.processes
    (thread,) = proc.threads
    assert [f.function for f in thread.frames] == ["wait", "Queue.get", "step", "A.run_loop"]
    assert report.skipped == 2  # the caption and the closing prose, not the chain's head


def test_a_frame_with_its_line_number_left_out_is_read():
    (proc,) = read_text("    barrier (torch/distributed/distributed_c10d.py:...)\n    main (train.py:N)\n").processes
    assert [(f.function, f.line) for f in proc.threads[0].frames] == [("barrier", None), ("main", None)]


def test_star_bulleted_frames_with_source_on_the_same_line():
    # tensorflow#5289: '***  File: "x.py", line 79, in main_thread2  session2.run(...)'.
    report = read_text((PASTED / "tensorflow_5289_star_prefixed_file_lines_session_run.txt").read_text())
    (proc,) = report.processes
    (thread,) = proc.threads
    assert [(f.function, f.line) for f in thread.frames] == [
        ("asarray", 531), ("_run", 938), ("run", 767), ("main_thread2", 79), ("<module>", 93)]


def test_markdown_bullets_before_py_spy_frames():
    text = 'Thread 7 (idle): "MainThread"\n* wait (threading.py:320)\n\u2022 get (queue.py:171)\n* main (train.py:9)\n'
    (proc,) = read_text(text).processes
    assert [f.function for f in proc.threads[0].frames] == ["wait", "get", "main"]


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
    ("inner", "path"),
    [
        # Windows: "\\_" before a "_module" folder is a separator like the others.
        ("torch\\utils\\_contextlib.py:115", "torch/utils/_contextlib.py"),
        ("jdocmunch_mcp\\tools\\_git.py:122", "jdocmunch_mcp/tools/_git.py"),
        ("torch\\_dynamo\\eval_frame.py:600", "torch/_dynamo/eval_frame.py"),
        # Markdown-escaped underscores in a POSIX path are still unescaped.
        ("torch/\\_inductor/compile_fx.py:3", "torch/_inductor/compile_fx.py"),
        ("tqdm/\\_monitor.py:60", "tqdm/_monitor.py"),
    ],
)
def test_windows_underscore_folders_are_separated(inner, path):
    loc = parse_location(inner)
    assert loc is not None and loc[0] == path


def test_frame_line_keeps_windows_separator_before_underscore():
    """The whole line was unescaped before its location was read: 'tools\\_git.py'
    became 'tools_git.py'. The function name is still unescaped."""
    frames, _, _ = parse_frame_line("_git (jdocmunch_mcp\\tools\\_git.py:122)")
    assert (frames[0].function, frames[0].file) == ("_git", "jdocmunch_mcp/tools/_git.py")
    frames, _, _ = parse_frame_line("\\_\\_call\\_\\_ (torch/nn/modules/module.py:12)")
    assert (frames[0].function, frames[0].file) == ("__call__", "torch/nn/modules/module.py")


def test_pyd_extension_frames_are_native():
    """A Windows extension module (.pyd) is a native library, like .so and .dll: its
    frames must not count as the thread's innermost Python frames."""
    frames, _, _ = parse_frame_line("PyInit__overlapped (_overlapped.pyd)")
    assert frames[0].native and frames[0].file == "_overlapped.pyd"


@pytest.mark.parametrize(
    ("line", "header"),
    [
        ('Thread "jdocmunch-embed-warmup"', (None, "unknown", "jdocmunch-embed-warmup")),
        ("Thread 0x00000df0 (the anyio worker running the tool body):", ("0x00000df0", "unknown", "")),
        # py-spy's own header is read as before.
        ('Thread 0x7F76 (idle): "MainThread"', ("0x7F76", "idle", "MainThread")),
    ],
)
def test_trimmed_thread_headers_are_read(line, header):
    assert parse_thread_header(line) == header


def test_a_thread_named_in_front_of_its_frame_is_that_thread():
    """A dump condensed by hand to one line per thread: 'MainThread: f (a.py:1)', a note
    after it; prose with a colon stays prose."""
    text = ("worker (pid 77)\n"
            "  MainThread: _shutdown (threading.py:1567)      <- stuck at exit\n"
            "  Thread-2 (sender): run (app/net.py:40)\n"
            "Note: the sender never stops\n")
    report = read_text(text)
    threads = [(t.name, [f.function for f in t.frames]) for p in report.processes for t in p.threads]
    assert threads == [("MainThread", ["_shutdown"]), ("Thread-2 (sender)", ["run"])]


def test_thread_headers_with_a_name_where_py_spy_puts_the_id(tmp_path):
    """A hand-trimmed dump heads each thread 'Thread MainThread (idle):' or, with a name
    that has spaces, 'Thread "Thread-1 (_do_shutdown)" (idle):': three threads, named.
    asyncio.run's close waiting for its default executor's shutdown, whose helper joins a
    worker stuck in a subprocess, is the program's exit waiting."""
    text = """Thread MainThread (idle):
    run_until_complete (asyncio/base_events.py)
    close (asyncio/runners.py:74)
    run (textual/app.py)
Thread "Thread-1 (_do_shutdown)" (idle):
    join (threading.py)
    shutdown (concurrent/futures/thread.py:273)
    _do_shutdown (asyncio/base_events.py:621)
Thread "asyncio_3" (idle):
    communicate (subprocess.py)
    run_git (app/git.py:50)
"""
    report = read_text(text)
    assert [t.name for p in report.processes for t in p.threads] == ["MainThread", "Thread-1 (_do_shutdown)", "asyncio_3"]
    assert text_verdict(tmp_path, text) == "shutdown-join"
