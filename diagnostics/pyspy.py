"""Running py-spy and reading what it prints (``--json`` and pasted text).

Running: one ``py-spy dump --pid P --json`` per process, through
``hangwatch.contract.tools.run_bounded`` so a wedged py-spy is killed at its timeout and
its pid is not mistaken for part of the trainer's tree. py-spy has no timeout
option of its own, hence the external one.

Parsing text: people paste dumps from terminals, logs and issue trackers in many
shapes; ``pastes.read_text`` reads them (see there).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from hangwatch.diagnostics.errors import InputError
from hangwatch.diagnostics.pastes import parse_frame_line, read_text
from hangwatch.diagnostics.stacks import Frame, ProcessDump, ThreadDump
from hangwatch.contract.tools import ToolResult, run_bounded

from hangwatch.contract.env import PYSPY as PYSPY_ENV

PTRACE_FIX = (
    "py-spy needs ptrace: run the supervisor as root or give it CAP_SYS_PTRACE "
    "(docker run --cap-add SYS_PTRACE, Kubernetes securityContext.capabilities.add: [SYS_PTRACE]), "
    "or allow attaching to non-children with `sysctl -w kernel.yama.ptrace_scope=0`"
)
MISSING_FIX = "install py-spy (pip install py-spy; it is a hangwatch dependency) or point HANGWATCH_PYSPY at the binary"


def find_pyspy(explicit: str | None = None) -> str | None:
    """The py-spy to run: explicit path, $HANGWATCH_PYSPY, PATH, or next to this Python
    (a venv's bin is often not on PATH when the supervisor is started by path)."""
    for candidate in (explicit, os.environ.get(PYSPY_ENV)):
        if candidate:
            return candidate
    found = shutil.which("py-spy")
    if found:
        return found
    sibling = Path(sys.executable).parent / "py-spy"
    return str(sibling) if sibling.exists() else None


@dataclass(frozen=True)
class DumpResult:
    """One py-spy call: the parsed dump, or why there is none (``problem`` is a
    short code: missing, ptrace_denied, timeout, not_python, gone, failed, unparseable)."""

    pid: int
    round: int
    raw: str
    duration_s: float
    dump: ProcessDump | None = None
    problem: str | None = None
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "round": self.round,
            "duration_s": round(self.duration_s, 3),
            "ok": self.dump is not None,
            "problem": self.problem,
            "message": self.message,
        }


def dump_process(pyspy: str | None, pid: int, *, round_no: int, timeout: float, native: bool = False) -> DumpResult:
    if pyspy is None:
        return DumpResult(pid, round_no, "", 0.0, problem="missing", message=f"py-spy not found; {MISSING_FIX}")
    argv = [pyspy, "dump", "--pid", str(pid), "--json"]
    if native:
        argv.append("--native")
    result = run_bounded(argv, timeout)
    return _interpret(result, pid, round_no)


def _interpret(result: ToolResult, pid: int, round_no: int) -> DumpResult:
    def failed(problem: str, message: str) -> DumpResult:
        return DumpResult(pid, round_no, result.stdout, result.duration_s, problem=problem, message=message)

    if result.timed_out:
        return failed("timeout", f"py-spy did not finish within {result.duration_s:.1f} s (target may be in D state)")
    if result.error is not None:
        return failed("missing", f"{result.error}; {MISSING_FIX}")
    err = result.stderr.strip()
    first_err = err.splitlines()[0] if err else f"exit code {result.returncode}"
    if result.returncode != 0:
        low = err.lower()
        if "permission denied" in low or "operation not permitted" in low:
            return failed("ptrace_denied", f"{first_err}; {PTRACE_FIX}")
        if "failed to find python version" in low or "failed to find a python interpreter" in low:
            return failed("not_python", first_err)
        if "no such file" in low or "no such process" in low or "check that the process is running" in low:
            return failed("gone", first_err)
        return failed("failed", first_err)
    try:
        dump = parse_json(result.stdout, round_no=round_no)
    except InputError as exc:
        return failed("unparseable", str(exc))
    return DumpResult(pid, round_no, result.stdout, result.duration_s, dump=dump)


def parse_json(text: str, *, round_no: int = 1, source: str = "py-spy output") -> ProcessDump:
    """``py-spy dump --json``: a list of threads of one process."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{source}: not JSON ({exc})") from None
    if not isinstance(data, list) or not all(isinstance(t, dict) and "frames" in t for t in data):
        raise InputError(f"{source}: not py-spy --json output (expected a list of threads with 'frames')")
    return threads_from_json(data, round_no=round_no)


def threads_from_json(data: Sequence[dict[str, Any]], *, round_no: int = 1) -> ProcessDump:
    threads = []
    pid = None
    for t in data:
        pid = t.get("pid", pid)
        frames = tuple(_json_frame(f) for f in t.get("frames") or ())
        ident = t.get("os_thread_id") or t.get("thread_id")
        threads.append(
            ThreadDump(
                ident=str(ident),
                name=str(t.get("thread_name") or ""),
                frames=frames,
                active=t.get("active"),
                owns_gil=bool(t.get("owns_gil")),
            )
        )
    # py-spy lists threads in no stable order; sort so renderings diff cleanly,
    # with the main thread first.
    threads.sort(key=lambda th: (th.name != "MainThread", th.name, th.ident))
    return ProcessDump(int(pid) if pid is not None else None, tuple(threads), round=round_no)


def _json_frame(f: dict[str, Any]) -> Frame:
    filename = str(f.get("filename") or f.get("short_filename") or "?")
    line = f.get("line")
    # Native frames carry the shared library as module and line 0.
    native = bool(f.get("module")) and not filename.endswith(".py") and not line
    return Frame(str(f.get("name") or "?"), filename, None if native else (int(line) if line is not None else None), native)


# --- text ---------------------------------------------------------------------------


def parse_text(text: str, *, source: str = "text") -> tuple[ProcessDump, ...]:
    """Every process in a pasted ``py-spy dump``; a pid seen again is a later round.
    The tolerant reader is ``pastes.read_text``, which also says what it skipped."""
    return read_text(text, source=source).processes


def parse_frame_text(text: str) -> Frame:
    """One rendered frame (``Frame.render``) back into a Frame."""
    parsed = parse_frame_line(text.strip())
    if parsed is not None and len(parsed[0]) == 1:
        return parsed[0][0]
    return Frame(text.strip(), "?", None)
