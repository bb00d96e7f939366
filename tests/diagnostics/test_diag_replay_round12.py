"""Replay on a twelfth round of real pasted dumps (data/pasted/): Windows dumps (an idle
proactor loop under py-spy --native, a loader-lock wait in OpenBLAS's DllMain, a numpy
import stuck in create_module copied as trimmed faulthandler lines)."""

from __future__ import annotations

import pytest

from diag_helpers import pasted_verdict, text_verdict
from hangwatch.diagnostics.pastes import parse_frame_line, parse_location, parse_thread_header

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("mcp_3411_windows_proactor_idle_baseline_native", "all-idle"),
        # A native loader-lock wait under an import (round 13's signature).
        ("jdocmunch_118_windows_native_loader_lock_dllmain_arrows", "extension-load-stuck"),
        ("suews_1762_windows_numpy_import_create_module_condensed_faulthandler", "extension-load-stuck"),
        # A Queue's exit finalizer joining its feeder, cut before _run_finalizers.
        ("pytest_13137_windows_faulthandler_queue_finalize_join_feeder_send_cut", "shutdown-join"),
        ("mplogging_64_keyboardinterrupt_atexit_finalize_join_traceback_cut", "shutdown-join"),
    ],
)
def test_round12_real_dumps(name, expected):
    assert pasted_verdict(name) == expected


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
def test_trimmed_thread_headers(line, header):
    assert parse_thread_header(line) == header


def test_prose_is_not_a_thread_header():
    assert parse_thread_header('Thread "safety" is a word people write in prose.') is None
    assert parse_thread_header("Thread 12 (see above) was idle") is None


def test_faulthandler_lines_without_file_prefix_are_frames(tmp_path):
    """'path, line N in f' (faulthandler with 'File \"...\"' trimmed) was not a frame:
    replay refused the whole paste as 'not a dump'."""
    text = (
        "Thread 0x00000df0 (a worker):\n"
        "  mylib/locks.py, line 11 in wait_forever\n"
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


def test_queue_finalizer_joining_its_feeder_is_a_shutdown_join(tmp_path):
    """_finalize_join is a multiprocessing.Queue's finalizer joining the feeder thread;
    with _run_finalizers cut off the paste the join was read as a plain lock wait, and
    with no 'Current thread' the joining thread (all standard library) was taken for a
    background idler: every thread 'idle'. A thread joining another is not an idler."""
    text = (
        "Thread 0x00008294 (most recent call first):\n"
        '  File "/usr/lib/python3.12/multiprocessing/connection.py", line 293 in _send_bytes\n'
        '  File "/usr/lib/python3.12/multiprocessing/queues.py", line 266 in _feed\n'
        '  File "/usr/lib/python3.12/threading.py", line 1012 in run\n'
        "\n"
        "Thread 0x00008210 (most recent call first):\n"
        '  File "/usr/lib/python3.12/threading.py", line 1169 in _wait_for_tstate_lock\n'
        '  File "/usr/lib/python3.12/threading.py", line 1149 in join\n'
        '  File "/usr/lib/python3.12/multiprocessing/queues.py", line 219 in _finalize_join\n'
    )
    assert text_verdict(tmp_path, text) == "shutdown-join"


def test_faulthandler_line_cut_after_its_number_is_a_frame():
    frames, _, cut = parse_frame_line('File "C:\\Python312\\Lib\\multiprocessing\\util.py", line 227')
    assert cut and (frames[0].function, frames[0].file, frames[0].line) == (
        "?", "C:/Python312/Lib/multiprocessing/util.py", 227)


@pytest.mark.parametrize(
    ("path", "stdlib"),
    [
        ("C:/Users/me/AppData/Local/Programs/Python/Python312/Lib/threading.py", True),
        ("D:/Anaconda/Lib/multiprocessing/queues.py", True),
        ("C:/venv/Lib/site-packages/torch/utils/data/dataloader.py", False),
        ("C:/work/project/train.py", False),
    ],
)
def test_windows_standard_library_paths(path, stdlib):
    """A Windows install keeps the standard library in '<install>\\Lib\\': a drive-letter
    path was never standard library, so a feeder thread looked like the job's own code."""
    from hangwatch.diagnostics.stacks import Frame

    assert Frame("f", path, 1).is_stdlib is stdlib


def test_windows_feeder_threads_alone_are_idle(tmp_path):
    text = "".join(
        f"Thread 0x0000{n}7b8 (most recent call first):\n"
        '  File "D:\\Anaconda\\Lib\\threading.py", line 320 in wait\n'
        '  File "D:\\Anaconda\\Lib\\multiprocessing\\queues.py", line 231 in _feed\n'
        '  File "D:\\Anaconda\\Lib\\threading.py", line 975 in run\n\n'
        for n in (1, 2)
    )
    assert text_verdict(tmp_path, text) == "all-idle"
