"""What the capture reads from a process the trainer's user controls.

Any process can point its command line at as much of its own memory as it likes, without a
privilege (``prctl(PR_SET_MM, PR_SET_MM_MAP)``, the checkpoint/restore call). psutil read
``/proc/PID/cmdline`` whole: root's supervisor held half a GB per read of a 256 MiB one, and
the capture of a ``setpriv`` trainer with a 32 MiB one took 168 s past its 20 s deadline
(redacting it), 539 MB at its peak. Now every read is capped at 64 KiB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from hangwatch.contract.capture import CaptureRequest, TreeProcess
from hangwatch.contract.procid import CMDLINE_CUT, MAX_CMDLINE, read_cmdline
from hangwatch.contract.verdict import Verdict, VerdictKind
from hangwatch.diagnostics.capture import capture_incident
from hangwatch.diagnostics.proctable import process_table
from hangwatch.supervisor.watch.proctree import describe

pytestmark = pytest.mark.timeout(60)

#: A process that points its command line at SIZE bytes of its own memory, says so, and waits.
_HOSTILE = r"""
import ctypes, mmap, os, sys, time
size = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
buf.write(b"A" * (size - 1) + b"\0")
addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
f = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
g = lambda n: int(f[n - 3])
libc.sbrk.restype = ctypes.c_void_p
names = "start_code end_code start_data end_data start_brk brk start_stack arg_start arg_end env_start env_end"
class Map(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in names.split()] + [
        ("auxv", ctypes.c_void_p), ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_uint32)]
m = Map(g(26), g(27), g(45), g(46), g(47), libc.sbrk(0), g(28), addr, addr + size, g(50), g(51), None, 0, 0xFFFFFFFF)
ok = libc.prctl(35, 14, ctypes.byref(m), ctypes.sizeof(m), 0) == 0  # PR_SET_MM, PR_SET_MM_MAP
print("ok" if ok else "refused " + os.strerror(ctypes.get_errno()), flush=True)
time.sleep(60)
"""


@pytest.fixture
def hostile():
    """A real process whose command line is 8 MiB (as another user when we are root)."""
    size = 8 << 20
    argv = [sys.executable, "-c", _HOSTILE, str(size)]
    if os.geteuid() == 0:
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        said = proc.stdout.readline().strip()
        if said != "ok":
            pytest.skip(f"this kernel does not let a process move its command line: {said}")
        yield proc, size
    finally:
        proc.kill()
        proc.wait()


def test_a_process_with_a_huge_command_line_is_read_capped(hostile):
    proc, size = hostile
    with open(f"/proc/{proc.pid}/cmdline", "rb") as handle:
        assert len(handle.read()) == size  # the kernel really serves all of it
    args = read_cmdline(proc.pid)
    assert args[-1] == CMDLINE_CUT and sum(len(a) for a in args) <= MAX_CMDLINE + len(CMDLINE_CUT)
    # The supervisor's snapshot (incidents, early rounds, the cohort's launch check) ...
    tp = describe(psutil.Process(proc.pid))
    assert tp is not None and tp.cmdline[-1] == CMDLINE_CUT
    assert sum(map(len, tp.cmdline)) <= MAX_CMDLINE + len(CMDLINE_CUT)
    # ... and the capture's process table, which reads it again.
    (row,) = process_table([tp])
    assert row["cmdline"][-1] == CMDLINE_CUT
    assert sum(map(len, row["cmdline"])) <= MAX_CMDLINE + len(CMDLINE_CUT)


def test_the_capture_keeps_a_huge_snapshot_command_line_capped(tmp_path: Path):
    """A snapshot taken by any reader (a process gone by the capture): the bundle's tree and
    stacks are redacted from it, which took minutes for tens of MiB."""
    gone = TreeProcess(pid=2**22 + 7, create_time=1.0, ppid=1, pgid=-1, sid=-1, name="python",
                       cmdline=("python", "B" * (4 << 20)))
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    now = time.monotonic()
    verdict = Verdict(VerdictKind.STALL, now, now - 5, "test", 5.0)
    request = CaptureRequest(run, "r", 1, verdict, [], [gone], {}, {}, now + 20,
                             extra={"capture": {"rounds": 1}})
    bundle = capture_incident(request)
    manifest = json.loads((bundle / "manifest.json").read_text())
    (entry,) = manifest["tree"]
    assert entry["cmdline"][-1] == CMDLINE_CUT
    assert sum(map(len, entry["cmdline"])) <= MAX_CMDLINE + len(CMDLINE_CUT)
    assert max(p.stat().st_size for p in bundle.rglob("*") if p.is_file()) < 1 << 20


def test_a_huge_phase_never_stops_a_command_alert(tmp_path: Path):
    """The trainer's phase (its heartbeat, up to 64 KiB) reaches the command's event, which
    travels in one environment variable (128 KiB at most): 30 000 "é" is 180 KB as JSON, and
    every command alert failed to start ("Argument list too long")."""
    from hangwatch.supervisor.operate.notify import MAX_COMMAND_FIELD, CommandTarget

    out = tmp_path / "event.json"
    target = CommandTarget(f"cat > {out}")
    target.send({"event": "incident", "phase": "\u00e9" * 30000, "reason": "no progress"}, "t", "b", 20.0)
    got = json.loads(out.read_text())
    assert got["reason"] == "no progress"
    assert got["phase"].startswith("\u00e9" * MAX_COMMAND_FIELD) and got["phase"].endswith("[cut]")


def test_a_wide_tree_of_long_command_lines_shares_one_budget(tmp_path: Path, monkeypatch):
    """No privilege needed: 200 processes exec'd with 64 KiB of arguments each took the capture
    25.8 s past a 20 s budget and wrote a 13 MB manifest; a wider tree, one over the 32 MiB a
    bundle's reader accepts. The budget is made small here to keep the test fast."""
    from hangwatch.diagnostics import capture as capture_mod

    monkeypatch.setattr(capture_mod, "TREE_CMDLINE_BUDGET", 64 * 1024)
    tree = [TreeProcess(pid=2**22 + 100 + i, create_time=1.0, ppid=1, pgid=-1, sid=-1, name="sh",
                        cmdline=("sh", "-c", "sleep 90", "x", "C" * 8000)) for i in range(40)]
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    now = time.monotonic()
    request = CaptureRequest(run, "r", 1, Verdict(VerdictKind.STALL, now, now - 5, "test", 5.0), [], tree,
                             {}, {}, now + 20, extra={"capture": {"rounds": 1}})
    bundle = capture_incident(request)
    manifest = json.loads((bundle / "manifest.json").read_text())
    kept = [sum(map(len, entry["cmdline"])) for entry in manifest["tree"]]
    assert len(kept) == 40 and sum(kept) <= 64 * 1024 + 40 * len(CMDLINE_CUT)
    rows = json.loads((bundle / "processes.json").read_text())
    assert sum(sum(map(len, r["cmdline"])) for r in rows) <= 64 * 1024 + 40 * len(CMDLINE_CUT)
