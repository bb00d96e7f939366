"""py-spy, run by a root supervisor, never opens what the trainer's user puts in its path.

py-spy reads the interpreter's shared library from the path the target's memory map names,
through ``/proc/PID/root``, that is in the target's own mount namespace. A trainer's user
with unprivileged user namespaces (``unshare -Urm``) bind-mounts anything they can name over
that path: root's py-spy then opened it, a root-only FIFO here, ``/dev/watchdog`` on a real
node (opening it arms a reboot). py-spy now runs as the owner of the process it dumps.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from hangwatch.diagnostics.pyspy import dump_as, dump_process, find_pyspy

NOBODY = 65534
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("unshare") or find_pyspy() is None,
    reason="needs root, setpriv, unshare and py-spy")


def _runs_as_nobody(python: str) -> bool:
    try:
        return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "unshare", "-Urm",
                               python, "-c", "pass"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.timeout(60)
def test_pyspy_never_opens_what_the_trainers_user_mounted_over_its_library():
    python = next((p for p in ("/usr/bin/python3", sys.executable) if os.path.exists(p) and _runs_as_nobody(p)), None)
    if python is None:
        pytest.skip("no interpreter that nobody can run in a user namespace here")
    base = Path(tempfile.mkdtemp(prefix="hw-pyspy-"))
    proc = None
    try:
        os.chmod(base, 0o755)
        marks = base / "marks"
        marks.mkdir()
        os.chmod(marks, 0o777)
        lib = base / "libpython3.11.so.1.0"  # a name py-spy takes for the interpreter's library
        lib.write_bytes(b"\x7fELF" + bytes(8188))
        os.chmod(lib, 0o644)
        fifo = base / "root-only"
        os.mkfifo(fifo, 0o600)  # root's: nobody may open it, but may name it in a bind mount
        assert stat.S_IMODE(os.stat(fifo).st_mode) == 0o600
        target = (f"import mmap, time; f = open({str(lib)!r}, 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ | mmap.PROT_EXEC); "
                  f"open({str(marks / 'mapped')!r}, 'w').close(); time.sleep(60)")
        script = (f"{python} -c \"$TARGET\" & while [ ! -e {marks}/mapped ]; do sleep 0.02; done; "
                  f"mount --bind {fifo} {lib} && touch {marks}/mounted; wait")
        proc = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                                 "unshare", "-Urm", "sh", "-c", script], env={**os.environ, "TARGET": target},
                                start_new_session=True)
        deadline = time.monotonic() + 20
        while not (marks / "mounted").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the target did not get ready"
            time.sleep(0.02)
        pid = next(p.pid for p in psutil.Process(proc.pid).children(recursive=True) if "mmap" in " ".join(p.cmdline()))
        assert dump_as(pid) == (NOBODY, NOBODY)

        opened = threading.Event()
        stop = threading.Event()

        def watch() -> None:  # a writer can open a FIFO without blocking only while a reader has it open
            while not stop.is_set():
                try:
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                    opened.set()
                    return
                except OSError:
                    time.sleep(0.005)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            dump_process(find_pyspy(), pid, round_no=1, timeout=3.0)
        finally:
            stop.set()
            watcher.join(5)
        assert not opened.is_set(), "py-spy opened a root-only FIFO the trainer's user mounted over its library"
    finally:
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(10)
        shutil.rmtree(base, ignore_errors=True)


def test_our_own_processes_are_dumped_as_we_are():
    assert dump_as(os.getpid()) is None
