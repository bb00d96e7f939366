"""One rule for log prefixes no pattern knows: the prefix shape that many frame lines
share is learned from the paste and stripped from every line that has it; a paste that
reads no stack so loses the prefix nearly every line shares."""

from __future__ import annotations

import pytest

from diag_helpers import text_verdict
from hangwatch.diagnostics.errors import InputError
from hangwatch.diagnostics.pastes import prefixes, read_text
from hangwatch.diagnostics.pastes.prefixes import learn, shape

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/app/train.py", line 50, in <module>',
    "    main()",
    '  File "/opt/venv/lib/python3.11/site-packages/datasets/builder.py", line 123, in download_and_prepare',
    "    with FileLock(lock_path):",
    '  File "/opt/venv/lib/python3.11/site-packages/filelock/_unix.py", line 42, in _acquire',
    "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)",
    "KeyboardInterrupt",
]
PYSPY = ['Thread 4567 (idle): "MainThread"', "    wait (threading.py:320)", "    get (queue.py:171)", "    run (mylib/loop.py:20)"]


def _prefixed(prefixes, lines):
    return "\n".join(f"{prefixes[i % len(prefixes)]}{line}" for i, line in enumerate(lines)) + "\n"


@pytest.mark.parametrize("prefixes", [
    ["(VllmWorker rank=0 pid=1234) ERROR 04-10 12:00:00 [multiproc_executor.py:470] "],
    ["(RayWorkerWrapper pid=4567, ip=10.0.0.2) "],
    ["[rank0]: "],
    ["2024-05-01 12:00:00,123 - ERROR - ", "2024-05-01 12:00:01,007 - ERROR - "],
    ["worker-3 | "],
    ["I0501 12:00:00.123456 140 trainer.cc:42] "],
    ["[2024-05-01T12:00:00Z INFO  train::log] ", "[2024-05-01T12:00:09Z WARN  train::log] "],
    ["E       "],
], ids=["vllm", "ray", "rank", "timestamp-level", "compose", "glog", "bracketed-level", "pytest-error-marker"])
def test_a_ctrl_c_traceback_behind_any_log_prefix_is_read(prefixes):
    report = read_text(_prefixed(prefixes, TRACEBACK))
    (proc,) = report.processes
    assert [f.function for f in proc.threads[0].frames] == ["_acquire", "download_and_prepare", "<module>"]


@pytest.mark.parametrize("prefix", ["(VllmWorker rank=1 pid=88) INFO 01-02 03:04:05 [x.py:1] ", "app-7 | 2024-01-01 00:00:00 | "])
def test_a_py_spy_dump_behind_an_unknown_prefix_is_read(prefix):
    (proc,) = read_text(_prefixed([prefix], PYSPY)).processes
    assert [f.render() for f in proc.threads[0].frames] == ["wait (threading.py:320)", "get (queue.py:171)", "run (loop.py:20)"]


def test_the_shape_folds_changing_numbers_words_and_blanks():
    assert shape("(VllmWorker rank=0 pid=12)") == shape("(EngineCore rank=13 pid=4)") == "(a a=9 a=9)"
    assert shape("INFO  12:00:00 |") == shape("ERROR 09:10:11 |")


def test_prose_lines_are_not_stripped_into_frames():
    """Sentences mentioning frames have no delimited prefix in common: nothing is
    learned, and the prose is not read as a stack."""
    prose = [
        "The main thread is stuck in wait (threading.py:320) for hours",
        "I think the worker hangs in get (queue.py:171) but not sure",
        "We also see run (mylib/loop.py:20) in the other dump",
        "and sometimes forward (model.py:12) shows up instead",
    ]
    assert learn(prose) is None
    with pytest.raises(InputError):
        read_text("\n".join(prose))


def test_a_prefix_needs_several_frame_lines_and_a_delimiter():
    assert learn(["[x] " + line for line in TRACEBACK[:2]]) is None  # one frame line
    assert learn(["note " + line for line in PYSPY[1:] * 2]) is None  # a word, no delimiter


def test_lines_a_dialect_reads_whole_keep_their_leading_fields():
    """gdb's `info threads` numbers and pystack's (Python) markers are not prefixes."""
    rows = [f'  {n}   Thread 0x7f22711b97{n:02d} (LWP 2357{n}) "python" 0x00007f in poll () from /lib64/libc.so.6' for n in range(4)]
    assert learn(rows) is None
    pystack = [f'    (Python) File "/app/a.py", line {n}, in f{n}' for n in range(4)]
    assert learn(pystack) is None


def test_a_two_frame_traceback_behind_a_prefix_is_read():
    """Too few frame lines to learn a prefix from them alone (a cut two-frame traceback,
    the first line's prefix followed by the error): the lines around them that start the
    same way make it a prefix."""
    tag = "(Worker pid=7) ERROR 06-13 01:30:49 utils.py:225] "
    text = (tag + "Exception in worker: Timed out, Traceback (most recent call last):\n"
            + tag + '  File "/x/a.py", line 222, in run\n'
            + tag + "    output = executor()\n"
            + tag + '  File "/usr/lib/python3.11/threading.py", line 320, in wait\n'
            + tag + "    waiter.acquire()\n")
    (proc,) = read_text(text).processes
    assert [f.function for f in proc.threads[0].frames] == ["wait", "run"]


def test_one_pytest_marked_line_under_a_py_spy_dump_strips_nothing_else():
    """A single 'E   File ...' line is no prefix: its letter-run shape would take the
    first word off every line (a thread's function, a source line's 'return')."""
    text = "\n".join(PYSPY + ['Thread 4568 (idle): "Thread-1"', "    acquire_lock (mylib/locks.py:12)",
                              "    run (threading.py:953)", "Some notes below", 'E   File "/x/y.py", line 3, in foo',
                              "Nothing else here"]) + "\n"
    report = read_text(text)
    functions = [[f.function for f in t.frames] for p in report.processes for t in p.threads]
    assert ["wait", "get", "run"] in functions and ["acquire_lock", "run"] in functions


GDB = ["#0  0x00007f0a1 in __futex_abstimed_wait_common64 () from /lib/x86_64-linux-gnu/libc.so.6",
       "#1  0x00007f0a2 in pthread_cond_wait@@GLIBC_2.3.2 () from /lib/x86_64-linux-gnu/libc.so.6",
       "#2  0x00007f0a3 in take_gil (tstate=0x1) at Python/ceval_gil.c:294",
       "#3  PyEval_RestoreThread (tstate=0x1) at Python/ceval_gil.c:511"]


@pytest.mark.parametrize("prefix", ["Jan 01 12:00:01 host python3[4242]: ", "2026-01-01 12:00:01,123 INFO [rank0]: ", "- "])
def test_a_gdb_backtrace_behind_an_unknown_prefix_is_read(prefix):
    """A bare gdb backtrace (no thread header) through a journal, a logger or a list: the
    prefix is learned from gdb's frames like a traceback's (it was learned only from
    Python's frame shapes, and the backtrace was refused)."""
    (proc,) = read_text(_prefixed([prefix], GDB)).processes
    assert [f.function for f in proc.threads[0].frames] == [
        "__futex_abstimed_wait_common64", "pthread_cond_wait@@GLIBC_2.3.2", "take_gil", "PyEval_RestoreThread"]


def test_issue_cross_references_in_prose_are_no_gdb_frames():
    """"#1234 deadlock (closed)" lines above a dump look like gdb's "#N f (" but are prose: no
    prefix is learned from them (one was, and it stripped the dump's own lines)."""
    prose = "Related: #1234 deadlock (closed)\nRelated: #2345 hang (open)\nRelated: #3456 freeze (open)\n"
    (proc,) = read_text(prose + "\n".join(TRACEBACK) + "\n").processes
    assert [f.function for f in proc.threads[0].frames][-3:] == ["_acquire", "download_and_prepare", "<module>"]


def test_bulleted_issue_links_are_no_gdb_frames():
    """"- #1234 hang (py3.8) at exit": gdb-shaped, but no gdb arguments and no file:line."""
    links = "- #1234 hang (py3.8) at exit\n- #2345 deadlock (macOS) at shutdown\n- #3456 freeze (py3.9) at import\n\n"
    (proc,) = read_text(links + "\n".join(PYSPY) + "\n").processes
    assert [f.function for t in proc.threads for f in t.frames] == ["wait", "get", "run"]


def test_a_prefix_every_line_shares_is_taken_off_a_paste_that_reads_no_stack_with_it(tmp_path):
    """journalctl's "Jan 01 12:00:01 host python3[4242]: " before each line of pdb's
    ``where`` (a shape whose frame lines the frame-line rule does not anchor on): the paste
    reads as it does without the prefix. A prefix on too few lines, or a bullet alone, is
    no logger's."""
    body = ["(Pdb) where", "  /home/u/train.py(88)<module>()", "-> main()", "  /home/u/train.py(80)main()",
            "-> step()", "> /home/u/train.py(70)step()", "-> self._lock.acquire()"]
    logged = "".join(f"Jan 01 12:00:0{i} host python3[4242]: {line}\n" for i, line in enumerate(body))
    assert text_verdict(tmp_path, logged) == text_verdict(tmp_path, "\n".join(body) + "\n") == "lock-wait"
    assert prefixes.shared_prefix(logged.splitlines()) is not None
    assert prefixes.shared_prefix([f"- item {i}" for i in range(9)]) is None
    assert prefixes.shared_prefix(logged.splitlines()[:2] + body) is None


def test_pytests_own_traceback_lines_behind_a_comment_prefix_are_learned(tmp_path):
    """pytest's "path.py:74: in func" lines quoted in a code comment (every line behind
    "    #        "): the prefix is learned from them as from a traceback's File lines."""
    lines = ["tests/test_gateway.py:21: in test_start", "    gw = get_java_gateway()",
             "../site-packages/lolopy/loloserver.py:74: in get_java_gateway",
             "    _port = int(proc.stdout.readline())", "E   Failed: Timeout >10.0s"]
    assert text_verdict(tmp_path, _prefixed(["    #        "], lines)) == "socket-read"
