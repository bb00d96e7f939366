"""What replay must not read into a paste: a list in prose as gdb frames, a log line as a
macOS sample tree, a SQLite page read as a lock wait; and helpers and exits it must still
know where their files are short or the library is dill's fork of multiprocessing. Each
case was found by a review of rules that were new, and failed on them."""

from __future__ import annotations

import pytest

from diag_helpers import text_verdict
from hangwatch.diagnostics.errors import InputError
from hangwatch.diagnostics.pastes import read_text


def test_a_numbered_list_in_prose_is_no_gdb_backtrace(tmp_path):
    """A symbol alone after "#N" is a frame only at a backtrace's "#0" or right under
    another frame: the list of what the reporter ruled out is no part of the thread."""
    dump = ('Thread 0x7f3a2c1b4740 (most recent call first):\n'
            '  File "/usr/lib/python3.10/threading.py", line 320 in wait\n'
            '  File "/usr/lib/python3.10/queue.py", line 171 in get\n'
            '  File "/srv/app/serve.py", line 88 in handle_requests\n'
            '  File "/srv/app/serve.py", line 120 in <module>\n\n'
            'What I ruled out so far:\n#1 cudaDeviceSynchronize\n#2 ncclCommInitRank\n')
    assert text_verdict(tmp_path, dump) == "queue-wait"
    with pytest.raises(InputError):
        read_text("Which versions did you try?\n#1 PyTorch\n#2 TensorFlow\n#3 JavaScript\n")


def test_a_log_line_shaped_like_a_sample_thread_opens_no_call_graph(tmp_path):
    dump = ("4242 Thread_1 waiting for batch\n"
            "0  0x00007f30c8dcffc0 in __pthread_clockjoin_ex () at /lib64/libpthread.so.0\n"
            "1  0x00007f30c8e0a111 in thread_join () at ./Modules/_threadmodule.c:1200\n")
    assert text_verdict(tmp_path, dump) == "thread-join"


def test_a_sqlite_page_read_is_no_lock_wait(tmp_path):
    """Only SQLite's busy handler waits for another connection's lock; a transaction's
    start reading a page from disk does not."""
    frames = ["__libc_pread64 (fd=5, buf=0x55d0, count=4096, offset=0) at ../sysdeps/unix/sysv/linux/pread64.c:25",
              "unixRead (id=0x55d1, pBuf=0x55d0, amt=4096, offset=0) at sqlite3.c:37891",
              "sqlite3PagerSharedLock (pPager=0x55d2) at sqlite3.c:60012", "lockBtree (pBt=0x55d3) at sqlite3.c:71234",
              "sqlite3BtreeBeginTrans (p=0x55d4, wrflag=0, pSchemaVersion=0x0) at sqlite3.c:71502",
              "sqlite3_step (pStmt=0x55d5) at sqlite3.c:88123",
              "_pysqlite_query_execute (self=0x7f1c, multiple=0) at ./Modules/_sqlite/cursor.c:843"]
    dump = 'Thread 1 (Thread 0x7f1c2d3e4740 (LWP 4242) "python3"):\n' + "".join(
        f"#{n}  0x00007f1c2b9d{n:04x} in {f}\n" for n, f in enumerate(frames))
    assert text_verdict(tmp_path, dump) != "file-lock-wait"


def test_a_queue_feeder_with_a_short_path_stays_a_helper(tmp_path):
    dump = ('Thread 0x00007f0000000002 (most recent call first):\n'
            '  File "threading.py", line 320 in wait\n  File "queues.py", line 231 in _feed\n'
            '  File "threading.py", line 953 in run\n  File "threading.py", line 1016 in _bootstrap_inner\n'
            '  File "threading.py", line 973 in _bootstrap\n\n'
            'Current thread 0x00007f0000000001 (most recent call first):\n'
            '  File "train.py", line 88 in compute_loss\n  File "train.py", line 120 in train_epoch\n'
            '  File "train.py", line 200 in <module>\n')
    assert text_verdict(tmp_path, dump) == "unknown"  # the main thread in its own code decides, not the feeder


def test_a_forked_child_of_dills_multiprocess_at_exit_waits_for_its_feeder(tmp_path):
    dump = ('Thread 14306 (idle): "MainThread"\n    _wait_for_tstate_lock (threading.py:1116)\n'
            '    join (threading.py:1096)\n    _finalize_join (multiprocess/queues.py:199)\n'
            '    __call__ (multiprocess/util.py:224)\n    _run_finalizers (multiprocess/util.py:300)\n'
            '    _exit_function (multiprocess/util.py:360)\n    _bootstrap (multiprocess/process.py:331)\n'
            '    _launch (multiprocess/popen_fork.py:71)\n    __init__ (multiprocess/popen_fork.py:19)\n'
            '    start (multiprocess/process.py:121)\n    <module> (train.py:40)\n')
    assert text_verdict(tmp_path, dump) == "shutdown-join"
