"""Replay on a thirteenth round of real pasted dumps (data/pasted/): imports stuck loading a
native extension inside the dynamic loader (Windows' loader lock under LdrLoadDll, a numpy
import that never leaves importlib's create_module), and the same mechanism in the shapes
other tools print it (gdb under glibc's dlopen, py-spy with the job's own frames below)."""

from __future__ import annotations

import pytest

from diag_helpers import pasted_verdict, text_verdict

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    "name",
    [
        "jdocmunch_118_windows_native_loader_lock_dllmain_arrows",
        "suews_1762_windows_numpy_import_create_module_condensed_faulthandler",
        "ombrebrain_25_windows_pyspy_numpy_first_import_create_module_elided",
        # Three threads, no current-thread marker: the importing one is cut below
        # create_module, so only importlib's frames are left of it.
        "ohmypi_7343_windows_faulthandler_timeout_matplotlib_numpy_create_module",
    ],
)
def test_round13_extension_load_dumps(name):
    assert pasted_verdict(name) == "extension-load-stuck"


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
