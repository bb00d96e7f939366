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
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from hangwatch.diagnostics.errors import InputError
from hangwatch.diagnostics.pastes import parse_frame_line, read_text
from hangwatch.diagnostics.stacks import Frame, ProcessDump, ThreadDump
from hangwatch.contract.private import trusted_which, untrusted_reason
from hangwatch.contract.tools import ToolResult, run_bounded

from hangwatch.contract.env import PYSPY as PYSPY_ENV
from hangwatch.contract.env import SUPERVISOR as SUPERVISOR_ENV

PTRACE_FIX = (
    "py-spy needs ptrace: run the supervisor as root or give it CAP_SYS_PTRACE "
    "(docker run --cap-add SYS_PTRACE, Kubernetes securityContext.capabilities.add: [SYS_PTRACE]), "
    "or allow attaching to non-children with `sysctl -w kernel.yama.ptrace_scope=0`"
)
MISSING_FIX = "install py-spy (pip install py-spy; it is a hangwatch dependency) or point HANGWATCH_PYSPY at the binary"


#: why the last ``find_pyspy`` passed over a py-spy (another user could change it), for the message
SKIPPED: list[str] = []


def find_pyspy(explicit: str | None = None) -> str | None:
    """The py-spy to run: explicit path, $HANGWATCH_PYSPY, PATH, or next to this Python
    (a venv's bin is often not on PATH when the supervisor is started by path).

    One that another user could change is passed over (``SKIPPED`` says why): it runs as
    us, root at a capture."""
    SKIPPED.clear()
    for candidate in (explicit, os.environ.get(PYSPY_ENV)):
        if candidate:
            why = untrusted_reason(candidate) if os.path.lexists(candidate) else None
            if why is None:
                return candidate  # one that is not there is reported missing, not replaced by another
            SKIPPED.append(why)
    found = trusted_which("py-spy", SKIPPED)
    if found:
        return found
    sibling = Path(sys.executable).parent / "py-spy"
    if sibling.exists():
        why = untrusted_reason(sibling)
        if why is None:
            return str(sibling)
        SKIPPED.append(why)
    return None


def _missing() -> str:
    passed = f" (passed over: {'; '.join(SKIPPED)})" if SKIPPED else ""
    return f"py-spy not found{passed}; {MISSING_FIX}"


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
        return DumpResult(pid, round_no, "", 0.0, problem="missing", message=_missing())
    argv = [pyspy, "dump", "--pid", str(pid), "--json"]
    if native:
        argv.append("--native")
    owner = dump_as(pid)
    result = run_bounded(argv, timeout) if owner is None else _run_as_owner(argv, owner, timeout)
    return _interpret(result, pid, round_no)


#: What py-spy keeps when it runs as the owner of the process it dumps: the one capability
#: it needs (to attach where Yama allows only descendants), no group, no new privileges.
_OWNER_PRIVILEGES = ("--clear-groups", "--nnp", "--inh-caps=-all,+sys_ptrace", "--ambient-caps=-all,+sys_ptrace",
                     "--bounding-set=-all,+sys_ptrace")


def dump_as(pid: int) -> tuple[int, int] | None:
    """The (uid, gid) py-spy runs as to dump ``pid``: its owner's, when we are root and it is
    another user's; None to run py-spy as we are.

    py-spy reads the interpreter's library from the path the process's memory map names,
    through ``/proc/PID/root``: in the process's own mount namespace, which its user controls
    (``unshare -Urm`` and a bind mount). Run as root, py-spy opened whatever that user mounted
    there, a root-only FIFO or a device such as ``/dev/watchdog`` (reproduced with a FIFO);
    run as the owner, it can open only what the owner could."""
    if os.geteuid() != 0:
        return None
    ids: dict[str, list[int]] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if key in ("Uid", "Gid"):
                    ids[key] = [int(x) for x in rest.split()]
    except (OSError, ValueError):
        return None  # gone: py-spy says so
    uids, gids = ids.get("Uid"), ids.get("Gid")
    if not uids or not gids or 0 in uids:
        return None  # root's own process (a setuid one included): nothing another user mounted for it
    return uids[0], gids[0]


def _run_as_owner(argv: list[str], owner: tuple[int, int], timeout: float) -> ToolResult:
    """py-spy as ``owner`` with only CAP_SYS_PTRACE (``setpriv``; without it, dropped with no
    capability, which attaches where same-user ptrace is allowed). The binary is opened here and
    run as ``/proc/self/fd/N``: the owner need not be able to reach its path (a venv under /root).
    Its environment is PATH and the supervisor's helper mark only: nothing of ours for the owner
    to read in ``/proc/PID/environ``."""
    try:
        fd = os.open(argv[0], os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return ToolResult(tuple(argv), None, "", "", 0.0, error=f"{argv[0]}: {exc.strerror or exc}")
    try:
        exe = [f"/proc/self/fd/{fd}", *argv[1:]]
        env = {k: os.environ[k] for k in ("PATH", SUPERVISOR_ENV) if k in os.environ}
        setpriv = trusted_which("setpriv")
        if setpriv is not None:
            return run_bounded([setpriv, f"--reuid={owner[0]}", f"--regid={owner[1]}", *_OWNER_PRIVILEGES, "--", *exe],
                               timeout, env=env, pass_fds=(fd,))
        return run_bounded(exe, timeout, env=env, run_as=owner, pass_fds=(fd,))
    finally:
        os.close(fd)


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
