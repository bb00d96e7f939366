"""Reading pasted Python stacks that are not py-spy's: tracebacks (Ctrl-C, an error's, IPython's,
pytest's long ones), faulthandler dumps, ``traceback.format_stack`` thread dumps and pdb's ``where``."""

from __future__ import annotations

import pytest

from diag_helpers import PASTED, frame_texts, one_process, text_verdict
from hangwatch.diagnostics.errors import InputError
from hangwatch.diagnostics.pastes import parse_frame_line, read_text
from hangwatch.diagnostics.waits import wait_of

pytestmark = pytest.mark.timeout(60)


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
    report, proc = one_process(text)
    assert proc.threads[0].name == "MainThread"
    assert frame_texts(proc.threads[0]) == ["poll (popen_fork.py:28)", "<module> (train.py:10)"]
    assert report.skipped == 4  # the second traceback: its header, frame, source line and error
    _, proc = one_process('The loader thread hangs, I pressed Ctrl+C:\n  File "C:\\nunif\\train.py", line 22, in <module>\n    main()\nKeyboardInterrupt:\n')
    assert proc.threads[0].name == "MainThread"  # prose that mentions a thread is not a caption
    assert frame_texts(proc.threads[0]) == ["<module> (train.py:22)"]
    _, proc = one_process('Traceback (most recent call last):\n  File "/x/loader.py", line 1132, in _try_get_data\n    data = q.get(timeout=ti\n')
    # cut inside the frame: the blocking call on its source line is the innermost visible wait
    assert frame_texts(proc.threads[0]) == ["q.get (<call>)", "_try_get_data (loader.py:1132)"]
    report, proc = one_process('Traceback (most recent call last):\n  File "/x/a.py", line 3, in f\n'
                        'Thread 7 (idle): "MainThread"\n    g (b.py:1)\n')
    assert frame_texts(proc.threads[0]) == ["g (b.py:1)"]  # a cut traceback next to a real stack is dropped
    _, proc = one_process('  File "/x/a.py", line 3, in f\n    g()\n      wait (threading.py:320)\n      step (train.py:9)\n')
    assert frame_texts(proc.threads[0]) == ["wait (threading.py:320)", "step (train.py:9)"]  # py-spy frames end it


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
    report, proc = one_process(text)
    assert [(t.name, frame_texts(t)) for t in proc.threads] == [
        ("MainThread", ["join (threading.py:1011)", "<module> (train.py:90)"]),
        ("loader-0", ["self.read (<call>)", "run (data.py:12)", "_bootstrap (threading.py:890)"])]
    assert report.skipped == 0
    _, proc = one_process('Current thread 0x00007604707c3780 [python] (most recent call first):\n  File "zi.py", line 14 in <module>\n')
    assert proc.threads[0].name == "python" and frame_texts(proc.threads[0]) == ["<module> (zi.py:14)"]


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
    report, proc = one_process(text)
    assert frame_texts(proc.threads[0]) == ["dequeue (shm_broadcast.py:755)", "get_response (multiproc_executor.py:395)"]
    assert report.error_tracebacks == 1 and any("exception's traceback" in n for n in report.notes())
    report, proc = one_process(text + 'Thread 7 (idle): "MainThread"\n    g (b.py:1)\n')
    assert frame_texts(proc.threads[0]) == ["g (b.py:1)"] and report.error_tracebacks == 0


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
    _, proc = one_process(text)
    assert frame_texts(proc.threads[0]) == ["Queue.get (queue.py:179)", "_MultiProcessingDataLoaderIter._try_get_data (dataloader.py:1132)"]
    old = (
        "KeyboardInterrupt                         Traceback (most recent call last)\n"
        "<ipython-input-5-2a1c3f> in <module>\n"
        "----> 1 for batch in loader:\n"
        "~/env/lib/python3.7/site-packages/torch/utils/data/dataloader.py in _next_data(self)\n"
        "    973             self._shutdown_workers()\n"
        "--> 974         idx, data = self._get_data()\n"
    )
    _, proc = one_process(old)
    assert frame_texts(proc.threads[0]) == ["_next_data (dataloader.py)", "<module> (<ipython-input-5>)"]


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
    # a C call on a thread's innermost line has no frame of its own: it is where the thread is
    assert frame_texts(threads[1]) == ["self.was_killed.wait (<call>)", "run (_monitor.py:60)", "_bootstrap (threading.py:937)"]
    assert frame_texts(threads[2]) == ["dist.barrier (<call>)", "main (train.py:5)", "<module> (train.py:9)"]
    assert report.error_tracebacks == 0
    _, proc = one_process(
        '---------Thread 133256667530752 "MainThread" hangs ---------\n'
        '        File "x/syn.py", line 49, in <module>\n'
        "                p.start()\n"
        '        File "x/multiprocessing/popen_fork.py", line 19, in __init__\n'
        "                self._launch(process_obj)\n"
    )
    (t,) = proc.threads
    assert (t.ident, t.name) == ("133256667530752", "MainThread")
    assert frame_texts(t) == ["__init__ (popen_fork.py:19)", "<module> (syn.py:49)"]


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
    _, proc = one_process(text)
    assert frame_texts(proc.threads[0]) == ["get (queue.py:171)", "loop (worker.py:40)"]


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


def test_pdb_where_is_a_stack():
    text = """> /app/train.py(88)main()
-> dist.barrier()
(Pdb) where
  /usr/lib/python3.10/runpy.py(86)_run_code()
-> exec(code, run_globals)
  /app/train.py(120)<module>()
-> main()
  /app/train.py(88)main()
-> dist.barrier()
> /usr/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py(3685)barrier()->None
-> work.wait()
(Pdb)
"""
    (proc,) = read_text(text).processes
    (thread,) = proc.threads
    assert thread.name == "MainThread"
    assert [(f.function, f.line) for f in thread.frames] == [("barrier", 3685), ("main", 88), ("<module>", 120), ("_run_code", 86)]


def test_a_traceback_wrapped_after_its_line_number_is_one_stack():
    """'File "launch.py", line 235,' + ' in <module>': the wrapped lines were skipped, which
    cut the stack in two (runpy's frames alone as the main thread, read as idle)."""
    report = read_text((PASTED / "pytorch_45042_launch_waitpid_traceback.txt").read_text())
    (proc,) = report.processes
    (thread,) = proc.threads
    assert [f.function for f in thread.frames] == ["_try_wait", "wait", "main", "<module>", "_run_code", "_run_module_as_main"]
    assert report.skipped == 0


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


def test_a_traceback_frame_whose_path_was_elided_from_the_left_is_read():
    """pytest-timeout and other printers shorten a long path to '...\\a.py"', the opening
    quote gone with it: still a frame."""
    text = """  File ...\\aba_support_model.py", line 153, in _add_minimal_support
    if any(existing <= candidate for existing in supports):
+++++++++++++++++++++++++++++++++++ Timeout +++++++++++++++++++++++++++++++++++
"""
    report = read_text(text)
    (proc,) = report.processes
    assert [f.function for t in proc.threads for f in t.frames] == ["_add_minimal_support"]


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


def test_faulthandler_lines_without_file_prefix_are_frames(tmp_path):
    """'path, line N in f' (faulthandler with 'File \"...\"' trimmed) was not a frame:
    replay refused the whole paste as 'not a dump'."""
    text = (
        "Thread 0x00000df0 (a worker):\n"
        "  mylib/compute.py, line 11 in crunch\n"
        "  mylib/app.py, line 95\n"
        "  <frozen importlib._bootstrap>, line 1360 in _find_and_load\n"
    )
    assert text_verdict(tmp_path, text) == "unknown"
    frames, _, _ = parse_frame_line("<frozen importlib._bootstrap_external>, line 1293 in create_module")
    assert (frames[0].function, frames[0].file, frames[0].line) == (
        "create_module", "<frozen importlib._bootstrap_external>", 1293)
    frames, _, _ = parse_frame_line("numpy/__init__.py, line 122")
    assert (frames[0].function, frames[0].line) == ("?", 122)
    # Prose with ", line " is not a frame.
    assert parse_frame_line("see the log file, line 3 in the output") is None


def test_faulthandler_line_cut_after_its_number_is_a_frame():
    frames, _, cut = parse_frame_line('File "C:\\Python312\\Lib\\multiprocessing\\util.py", line 227')
    assert cut and (frames[0].function, frames[0].file, frames[0].line) == (
        "?", "C:/Python312/Lib/multiprocessing/util.py", 227)


PYTEST_LONG = """\
    def fetch(self, url):
        conn = self._connect(url)
>       return conn.getresponse()

/home/u/proj/client.py:40: 
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _

self = <http.client.HTTPConnection object at 0x7f00>

    def getresponse(self):
        response = self.response_class(self.sock)
        try:
>           response.begin()

/usr/lib/python3.11/http/client.py:1390: 
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _

>   ???
E   Failed: Timeout >300.0s

/usr/lib/python3.11/socket.py:720: Failed
"""


def test_a_pytest_long_traceback_is_read_outermost_first_with_each_def_as_its_function(tmp_path):
    """pytest's long traceback: each frame's source with a '>' on its line, then
    'path.py:N: '; the function is the 'def' shown above it, '<unknown>' when the paste
    starts mid-function; a timeout's traceback is where the test waited."""
    _, proc = one_process(PYTEST_LONG)
    assert [(f.function, f.file, f.line) for f in proc.threads[0].frames] == [
        ("<unknown>", "/usr/lib/python3.11/socket.py", 720),
        ("getresponse", "/usr/lib/python3.11/http/client.py", 1390),
        ("fetch", "/home/u/proj/client.py", 40),
    ]
    assert text_verdict(tmp_path, PYTEST_LONG) == "socket-read"


def test_a_pytest_traceback_cut_mid_function_names_the_blocking_call_on_its_marked_line(tmp_path):
    """The paste starts inside the function and has no 'def': its file (asyncio's event
    loop) and the call on the '>' line (a select) still say what it waited on."""
    text = ("        else:\n"
            ">           event_list = self._selector.select(timeout)\n"
            "\n"
            "/usr/lib/python3.9/asyncio/base_events.py:1823: \n"
            "_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _\n")
    assert text_verdict(tmp_path, text) == "asyncio-blocked"


def test_an_ipython_frame_without_its_traceback_header_opens_the_traceback(tmp_path):
    """IPython's '[backtrace omitted]' or a cut paste: the old-style 'path in f(args)'
    and the new 'File path:N, in f' headers start the traceback on their own."""
    old = ("RuntimeError\n[backtrace omitted]\n"
           "~/.venv/lib/python3.8/asyncio/base_events.py in run_until_complete(self, future)\n"
           "    590         if not future.done():\n"
           "--> 591             raise RuntimeError('Event loop stopped before Future completed.')\n"
           "RuntimeError: Event loop stopped before Future completed.\n")
    assert text_verdict(tmp_path, old) == "asyncio-blocked"
    new = ("File ~/.venv/lib/python3.11/site-packages/filelock/_api.py:330, in BaseFileLock.acquire(self, timeout)\n"
           "    329 while True:\n"
           "--> 330     time.sleep(poll_interval)\n"
           "KeyboardInterrupt: \n")
    _, proc = one_process(new)
    assert frame_texts(proc.threads[0])[-1].startswith("BaseFileLock.acquire")


def test_traceback_style_frames_under_a_most_recent_call_first_header_are_innermost_first():
    """A signal handler's own dump: faulthandler's "(most recent call first)" header over
    traceback-style frame lines, each with its source line: innermost first, as it says."""
    text = ("Signal received, printing stack traces.\n"
            "Thread 0x7f00aa000700 (most recent call first):\n"
            '  File "/app/vendor/_lock.py", line 118, in _acquire\n'
            "    return inner(*args)\n"
            '  File "/app/vendor/_lock.py", line 252, in __enter__\n'
            "    return self._acquire(self.wrapped.__enter__)\n"
            '  File "/app/worker.py", line 62, in start\n'
            "    with self._lock:\n")
    (proc,) = read_text(text).processes
    (t,) = proc.threads
    assert [f.function for f in t.frames] == ["_acquire", "__enter__", "start"]
    w = wait_of(t)
    assert w is not None and w.category == "lock-wait"


def test_colab_frames_copied_as_markdown_links_are_frames():
    """Colab renders each frame's path as a link; copied as Markdown it reads
    "[/usr/.../x.py](https://localhost:8080/#) in f(args)": the paste was refused."""
    text = ("KeyboardInterrupt                         Traceback (most recent call last)\n"
            "[/usr/local/lib/python3.10/dist-packages/colbert/trainer.py](https://localhost:8080/#) in train(self, checkpoint)\n"
            "     29         launcher = Launcher(train)\n"
            "---> 31         return launcher.launch(self.config)\n"
            "\n"
            "[/usr/local/lib/python3.10/dist-packages/colbert/infra/launcher.py](https://localhost:8080/#) in launch(self, config)\n"
            "---> 70         p.join()\n")
    (proc,) = read_text(text).processes
    assert [f.function for f in proc.threads[0].frames][-2:] == ["launch", "train"]


def test_ipython_frames_in_frozen_importlib_are_frames(tmp_path):
    """Older IPython writes importlib's frames as "<frozen importlib._bootstrap> in f(args)":
    the space in the name dropped them, and the import lock wait under them was lost."""
    text = ("KeyboardInterrupt                         Traceback (most recent call last)\n"
            "/home/u/train.py in main()\n"
            "---> 42     import foo\n"
            "\n"
            "<frozen importlib._bootstrap> in _find_and_load(name, import_)\n"
            "\n"
            "<frozen importlib._bootstrap> in _lock_unlock_module(name)\n"
            "\n"
            "<frozen importlib._bootstrap> in acquire(self)\n"
            "\n"
            "KeyboardInterrupt: \n")
    assert text_verdict(tmp_path, text) == "import-lock"



def test_a_traceback_whose_indentation_was_trimmed_keeps_its_311_markers_inside_it():
    """A Python 3.11+ Ctrl-C traceback pasted where every line lost its indentation (a
    forum's or a chat tool's rendering): its "~~~~^^" marker lines ended the traceback at
    the first frame, which then read as the innermost, and the subprocess wait was lost."""
    text = ("Traceback (most recent call last):\n"
            'File "/srv/gate.py", line 571, in <module>\n'
            "main()\n"
            "~~~~^^\n"
            'File "/srv/gate.py", line 361, in run_contained\n'
            "proc.wait(timeout=timeout)\n"
            "~~~~~~~~~^^^^^^^^^^^^^^^^^\n"
            'File "/usr/lib/python3.14/subprocess.py", line 1279, in wait\n'
            "return self._wait(timeout=timeout)\n"
            "~~~~~~~~~~^^^^^^^^^^^^^^^^^\n"
            'File "/usr/lib/python3.14/subprocess.py", line 2078, in _wait\n'
            "time.sleep(delay)\n"
            "~~~~~~~~~~^^^^^^^\n"
            "KeyboardInterrupt\n")
    (proc,) = read_text(text).processes
    assert [f.function for f in proc.threads[0].frames][-4:] == ["_wait", "wait", "run_contained", "<module>"]


def test_a_markdown_tilde_fence_is_no_311_marker_line():
    """Two cut tracebacks (no exception line) each in its "~~~" fence: two stacks."""
    text = ("~~~\n"
            'Traceback (most recent call last):\n  File "/app/a.py", line 3, in <module>\n    main()\n'
            '  File "/app/a.py", line 9, in main\n    wait_for_peer()\n'
            "~~~\n~~~\n"
            'Traceback (most recent call last):\n  File "/app/b.py", line 5, in handler\n    serve()\n'
            '  File "/app/b.py", line 7, in serve\n    sock.recv(1)\n'
            "~~~\n")
    report = read_text(text)
    assert sum(len(p.threads) for p in report.processes) == 2


def test_a_frame_line_clipped_at_its_start_is_still_a_frame():
    """A tool kept only the tail of a test's output, cutting the first frame line mid-path
    ('rc=1 atrick\\...\\close.py", line 170, in wait_until_warm'): the frame and the call on
    its source line are still there to read."""
    text = ('rc=1 atrick\\uct-worktrees\\rail\\api\\services\\close.py", line 170, in wait_until_warm\n'
            '    sleep(wait)\n'
            '+++++++++++++++++++++++++++++++++++ Timeout +++++++++++++++++++++++++++++++++++\n')
    (proc,) = read_text(text).processes
    frames = proc.threads[0].frames
    assert frames[-1].function == "wait_until_warm" and frames[-1].file.endswith("api/services/close.py")
    assert frames[-1].line == 170 and [f.function for f in frames[:-1]] == ["sleep"]
    # prose that only mentions a frame's location is no frame
    with pytest.raises(InputError):
        read_text('see the error at x.py", line 3, in f for details\n')


@pytest.mark.timeout(15)
def test_a_run_of_blanks_inside_frame_lines_reads_in_linear_time():
    """A traceback frame line with thousands of blanks inside its function name (a hostile or
    mangled paste): each line is read in time linear in its length, so 400 of them finish
    well inside the test's timeout (the same-line source's match used to be quadratic)."""
    line = '  File "/home/u/lib/python3.5/threading.py", line 1288, in _shut' + " " * 3000 + "down"
    with pytest.raises(InputError):
        read_text("\n".join([line] * 400))


_HUNG = """\
^CTraceback (most recent call last):
  File "/app/run.py", line 16, in <module>
    llm = LLM(model="m", data_parallel_size=2)
  File "/opt/venv/lib/python3.12/site-packages/vllm/v1/utils.py", line 127, in wait_for_startup
    if self.reader.recv()["status"] != "READY":
  File "/usr/lib/python3.12/multiprocessing/connection.py", line 250, in recv
    buf = self._recv_bytes()
  File "/usr/lib/python3.12/multiprocessing/connection.py", line 395, in _recv
    chunk = read(handle, remaining)
KeyboardInterrupt
"""
_AT_EXIT = """\
^CException ignored in atexit callback: <function _exit_function at 0x7fe5e99b85e0>
Traceback (most recent call last):
  File "/usr/lib/python3.12/multiprocessing/util.py", line 360, in _exit_function
    p.join()
  File "/usr/lib/python3.12/multiprocessing/process.py", line 149, in join
    res = self._popen.wait(timeout)
  File "/usr/lib/python3.12/multiprocessing/popen_fork.py", line 27, in poll
    pid, sts = os.waitpid(self.pid, flag)
KeyboardInterrupt:
"""


def test_an_exit_handlers_traceback_after_the_ctrl_c_is_not_where_the_program_hung(tmp_path):
    """Ctrl-C pressed again while the exit joins a child: the first traceback is where the
    program hung (waiting for the engine's READY on a pipe); the exit handler's, after
    CPython's "Exception ignored in atexit callback", is what the first Ctrl-C started."""
    assert text_verdict(tmp_path, _HUNG + _AT_EXIT) == "queue-wait"
    # a program that hung at its exit shows the exit handler's traceback alone: that one
    assert text_verdict(tmp_path, _AT_EXIT) in ("shutdown-join", "child-process-wait")


def test_an_exit_handlers_traceback_stays_when_the_first_shows_no_wait_or_is_another_process(tmp_path):
    """Ctrl-C stopped training in its own computation and the exit then hung joining a
    child: the exit handler's traceback is the hang. And another process's exit handler
    (its own pid caption) is that process's stack, kept beside the first."""
    computing = _HUNG.replace('    llm = LLM(model="m", data_parallel_size=2)\n', "    loss = model(batch).sum()\n").split(
        '  File "/opt/venv')[0] + "KeyboardInterrupt\n"
    assert text_verdict(tmp_path, computing + _AT_EXIT) in ("child-process-wait", "shutdown-join")
    two = "pid 4101:\n" + _HUNG + "\npid 4102:\n" + _AT_EXIT
    report = read_text(two)
    assert len(report.processes) == 2
