"""The prewarmed launcher: the next attempt's tree root, started ahead and used once.

Why: a cold ``torchrun`` imports torch before it starts any rank, 1.5 s on an
idle 2-core machine and several seconds on a loaded one, on the path from a
kill to the next training step (docs/benchmarks.md). NVRx saves it by keeping
its agent alive across restarts; we do not, because a fresh process tree per
attempt is what the kill verification, the guardian and ``--resume`` rely on,
and it is what guarantees that nothing of a wedged attempt survives.

So during attempt N (once it has sent its first heartbeat, or 30 s after its
launch without one, so that it does not compete with N's own start-up) the
supervisor starts a *fresh* process for attempt N+1 in the user's interpreter
(``warmstart``). It imports the launcher's entry module and waits. It is not
part of attempt N: a helper (``HELPER_PIDS``), in its own session, in no
attempt cgroup, so never sampled, captured or killed with N. When N+1 is due,
``take`` moves it into N+1's cgroup, sends it the argv and environment and
adopts it exactly as ``launcher.launch`` adopts a cold child (its
stdout/stderr teed into N+1's logs); it then runs the launcher as
``__main__`` and is N+1's root. It never ran training code before, so a warm
start carries nothing over from attempt N: it was born after N began, but
owes N nothing.

What the warm process imports ahead (``plan``):

* a console script (``torchrun``: a file whose ``#!`` names a Python and that
  says ``from X import main``): module X (``torch.distributed.run``);
* ``python -m X``: X's parent package (``torch.distributed``), never X itself:
  running an imported module again as ``__main__`` would execute it twice;
* ``python script.py``: nothing;

plus ``--prewarm-import`` modules. Its environment at spawn is the attempt's,
less the ``HANGWATCH_*`` attempt variables (``contract.env.ATTEMPT_VARS``:
attempt number, heartbeat path, ``HANGWATCH_CUDAGRAPHS`` ...), which the next
attempt's values replace before its code runs; nothing in torch reads them at
import. ``take`` refuses a warm process whose environment (less those), command
shape or working directory differs from the attempt's, and one that is not
ready, died, or could not import: the attempt is then launched cold, and the
journal's ``attempt_started`` says ``launch: {"mode": "cold", "reason": ...}``.

Never used (the run ended, the supervisor exits): killed, identity-checked,
and reaped by ``close``; a SIGKILLed supervisor takes it along through its
parent-death signal.

On by default (``mode="auto"``) only for launchers known not to touch a GPU at
import (``known_launcher``: torchrun, ``python -m torch.distributed.run``,
``accelerate launch``, a plain ``python`` script, which imports nothing ahead);
``--prewarm-launcher`` (``mode="on"``) prewarms any Python launcher,
``--no-prewarm-launcher`` none. Whatever the mode, once the warm process says it
is ready its memory maps are read (``gpu_mappings``): a GPU driver or NVML
library, or a GPU device file, mapped into it means its imports touched a GPU
(a context, or a device query that holds the driver), so it is killed at once
and the next attempt is launched cold, saying why. CUDA *runtime* libraries
(libcudart, libnccl, libcublas ...) are only noted: a CUDA build of torch maps
them at ``import torch`` without touching any device, so refusing them would
make every torchrun on a GPU machine cold.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import select
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import psutil
import structlog

from hangwatch.contract import env as names
from hangwatch.contract.procid import ProcKey, kill_verified, same_process
from hangwatch.contract.tools import add_helper, forget_helper
from hangwatch.supervisor.contain.guardian import MARK_SLACK_S
from hangwatch.supervisor.contain.launcher import LOG_MAX_BYTES, LaunchError, TrainerProcess, child_setup, open_logs, tee

log = structlog.get_logger("hangwatch.prewarm")

#: the -c program: drop "" (the working directory) from sys.path before importing anything (warmstart)
BOOT = ("import sys\n"
        "if not sys.flags.safe_path and sys.path[:1] == ['']: del sys.path[0]\n"
        "from hangwatch.supervisor.contain.warmstart import main\n"
        "main()\n")
#: start the warm process this long after the launch when the attempt sends no heartbeat
WARM_WITHOUT_BEAT_S = 30.0
#: how long a launch waits for a warm process still importing (it is ahead of a cold start)
READY_WAIT_S = 10.0

_PYTHON = re.compile(r"python(\d+(\.\d+)*)?$")
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_ENTRY = re.compile(rb"^from\s+([A-Za-z_][\w.]*)\s+import\s+\w+\s*$", re.M)
#: interpreter options without a value that a warm process can be started with as they are
_PLAIN_FLAGS = frozenset("bBdEIOPqsSuv")

#: launcher entry modules known not to touch a GPU at import, with the subcommand they need (or None)
KNOWN_LAUNCHERS: dict[str, str | None] = {
    "torch.distributed.run": None,                     # torchrun, python -m torch.distributed.run
    "accelerate.commands.accelerate_cli": "launch",    # accelerate launch
    "accelerate.commands.launch": None,                # python -m accelerate.commands.launch
}
#: mapped into a process that has touched a GPU: the driver (a context, a device query), NVML, the device files
GPU_TOUCH = re.compile(r"(/libcuda\.so|/libnvidia-ml\.so|/libcudadebugger\.so|/libnvcuvid\.so|/libamdhip64\.so|"
                       r"/libhsa-runtime64\.so|^/dev/nvidia|^/dev/kfd|^/dev/dri/)")
#: CUDA runtime libraries a CUDA build of torch maps at import without touching a device: noted only
GPU_RUNTIME = re.compile(r"/(libcudart|libnccl|libcublas|libcublasLt|libcudnn|libcufft|libcurand|libcusparse|"
                         r"libcusolver|libnvrtc|libnvJitLink|libnvToolsExt)[^/]*\.so")
#: cap on the /proc/PID/maps read (a torch process maps a few thousand lines, ~0.5 MB)
MAPS_MAX_BYTES = 8 * 1024 * 1024


# -- the plan: pure ------------------------------------------------------------------------


@dataclass(frozen=True)
class WarmPlan:
    """How a cold start would run the command's launcher, as far as a warm process must match it."""

    interpreter: str            # what the warm process is started with
    flags: tuple[str, ...]      # interpreter options (the command's, or the script's #! line's)
    kind: str                   # "script" (python FILE, or a #! script) | "module" (python -m)
    target: str                 # the script as the interpreter receives it, or the module's name
    imports: tuple[str, ...]    # imported ahead
    orig0: str                  # sys.orig_argv[0] of a cold start
    skip: int                   # the command's own arguments start at argv[skip]
    entry: str = ""             # the launcher's entry module (a console script's, or python -m's); "" for a script

    def spec(self, command: Sequence[str]) -> str:
        """What the warm process is told at spawn; ``command``'s argv is what its imports see in sys.argv."""
        argv, orig_argv = self.argv(command)
        return json.dumps({"kind": self.kind, "target": self.target, "imports": list(self.imports),
                           "argv": argv, "orig_argv": orig_argv})

    def argv(self, command: Sequence[str]) -> tuple[list[str], list[str]]:
        """(``sys.argv``, ``sys.orig_argv``) of a cold start of ``command``."""
        rest = list(command[self.skip:])
        if self.kind == "module":  # runpy puts the module's file in sys.argv[0], as for ``python -m``
            return ["-m", *rest], [self.orig0, *self.flags, "-m", self.target, *rest]
        return [self.target, *rest], [self.orig0, *self.flags, self.target, *rest]


def plan(argv: Sequence[str], env: Mapping[str, str], extra_imports: Sequence[str] = (), *,
         which: Callable[[str, Mapping[str, str]], str | None] | None = None,
         head: Callable[[str], bytes | None] | None = None) -> WarmPlan | str:
    """The warm plan for ``argv``, or why it has none. ``which`` resolves a command like
    ``execvp`` over ``env``'s PATH; ``head`` reads a file's first bytes (None: unreadable)."""
    which = which or resolve
    head = head or read_head
    if not argv:
        return "no command"
    exe = which(argv[0], env)
    if exe is None:
        return f"{argv[0]!r} not found"
    data = head(exe) or b""
    if _PYTHON.match(os.path.basename(argv[0])) and not data.startswith(b"#!"):
        return _python_command(argv, exe, extra_imports, head)
    if not data.startswith(b"#!"):
        return f"{argv[0]} is not a Python launcher"
    line = data[2:].split(b"\n", 1)[0].decode(errors="replace").strip()
    interpreter, _, arg = line.partition(" ")
    if not _PYTHON.match(os.path.basename(interpreter)):
        return f"{argv[0]} runs {interpreter or 'nothing'}, not Python directly"
    flags = tuple(arg.split()) if arg.strip() else ()
    if any(not _plain_flag(f) for f in flags):
        return f"{argv[0]}'s #! line has interpreter options a warm start cannot repeat: {arg.strip()}"
    entry = _ENTRY.search(data)
    imports = (entry.group(1).decode(),) if entry and b"sys.exit(" in data else ()
    return WarmPlan(interpreter, flags, "script", exe, _unique(imports + tuple(extra_imports)), interpreter, 1,
                    imports[0] if imports else "")


def _python_command(argv: Sequence[str], exe: str, extra_imports: Sequence[str],
                    head: Callable[[str], bytes | None]) -> WarmPlan | str:
    flags: list[str] = []
    i = 1
    while i < len(argv):
        token = argv[i]
        if token in ("-X", "-W") and i + 1 < len(argv):
            flags += [token, argv[i + 1]]
            i += 2
            continue
        if token.startswith(("-X", "-W")) and len(token) > 2:
            flags.append(token)
        elif token.startswith("-m"):
            module = token[2:] or (argv[i + 1] if i + 1 < len(argv) else "")
            if not _MODULE.match(module):
                return f"python -m {module!r}: not a module name"
            parent = module.rpartition(".")[0]
            imports = tuple(m for m in (parent, *extra_imports) if m and m != module)
            return WarmPlan(exe, tuple(flags), "module", module, _unique(imports), argv[0], i + (1 if token[2:] else 2),
                            module)
        elif token.startswith("-") and token != "-":
            if not _plain_flag(token):
                return f"python {token}: an interpreter option a warm start does not repeat"
            flags.append(token)
        else:
            if head(token) is None:
                return f"python {token}: not a readable file"
            return WarmPlan(exe, tuple(flags), "script", token, _unique(tuple(extra_imports)), argv[0], i + 1)
        i += 1
    return "python without a script or -m module"


def _plain_flag(token: str) -> bool:
    return len(token) > 1 and token[0] == "-" and all(c in _PLAIN_FLAGS for c in token[1:])


def _unique(names_: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names_))


def known_launcher(warm_plan: WarmPlan, argv: Sequence[str]) -> str | None:
    """None when the default (``auto``) prewarms ``argv``'s launcher; otherwise why not.

    Known: a launcher whose entry module is in ``KNOWN_LAUNCHERS`` (with its subcommand), and one
    whose warm process imports nothing of its own ahead (a plain ``python script.py``, a ``#!``
    script without an entry module): an idle interpreter. ``--prewarm-import`` modules are the
    user's own request, checked like everything else by the memory maps once imported."""
    ahead = warm_plan.entry.rpartition(".")[0] if warm_plan.kind == "module" else warm_plan.entry
    if not ahead:
        return None  # nothing of the launcher's imported ahead: an idle interpreter
    if warm_plan.entry not in KNOWN_LAUNCHERS:
        return (f"{warm_plan.entry} is not a launcher known not to touch the GPU at import "
                "(--prewarm-launcher prewarms it anyway)")
    sub = KNOWN_LAUNCHERS[warm_plan.entry]
    if sub is not None and (len(argv) <= warm_plan.skip or argv[warm_plan.skip] != sub):
        return f"{warm_plan.entry} without {sub!r} is not a known launcher (--prewarm-launcher prewarms it anyway)"
    return None


def gpu_mappings(maps: str) -> tuple[list[str], list[str]]:
    """(what means a GPU was touched, CUDA runtime libraries) among the files of a
    ``/proc/PID/maps`` text, each as a sorted list of unique base names (device files in full)."""
    touch: set[str] = set()
    runtime: set[str] = set()
    for line in maps.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6:
            continue
        path = fields[5].strip()
        if GPU_TOUCH.search(path):
            touch.add(path if path.startswith("/dev/") else os.path.basename(path))
        elif GPU_RUNTIME.search(path):
            runtime.add(os.path.basename(path))
    return sorted(touch), sorted(runtime)


def read_maps(pid: int) -> str | None:
    """``/proc/PID/maps``, bounded; None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as handle:
            return handle.read(MAPS_MAX_BYTES).decode(errors="replace")
    except OSError:
        return None


def rss_mb(pid: int) -> float | None:
    try:
        return round(psutil.Process(pid).memory_info().rss / 2**20, 1)
    except psutil.Error:
        return None


def valid_module(name: str) -> bool:
    return bool(_MODULE.match(name))


def spawn_due(now: float, launched_at: float, beat_seen: bool) -> bool:
    """Start the next attempt's warm process once this attempt is up (its first heartbeat),
    or after ``WARM_WITHOUT_BEAT_S`` when it sends none: never during its own start-up."""
    return beat_seen or now - launched_at >= WARM_WITHOUT_BEAT_S


def warm_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The warm process's environment: the attempt's, less the HANGWATCH_* attempt variables."""
    return names.without_ours(env)


def resolve(name: str, env: Mapping[str, str]) -> str | None:
    """The path ``execvp`` (and so ``subprocess``) would run for ``name`` under ``env``."""
    if "/" in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    for folder in os.get_exec_path(dict(env)):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def read_head(path: str, size: int = 4096) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except OSError:
        return None


# -- the warm process: effects ---------------------------------------------------------------


class _Warm:
    """One warm process, from spawn to use or kill."""

    def __init__(self, warm_plan: WarmPlan, command: Sequence[str], env: dict[str, str],
                 clock: Callable[[], float]) -> None:
        self.plan, self.env, self.cwd, self.clock = warm_plan, env, os.getcwd(), clock
        # The guardian's mark for this process and all it will fork (``names.WARM``).
        self.mark = [f"{names.WARM}={secrets.token_hex(8)}", time.time() - MARK_SLACK_S]
        ours, theirs = socket.socketpair()
        try:
            # preexec_fn (the parent-death signal) makes this a fork from the main thread, like launch().
            self.popen = subprocess.Popen(
                [warm_plan.interpreter, *warm_plan.flags, "-c", BOOT, str(theirs.fileno()), warm_plan.spec(command)],
                env={**env, names.WARM: self.mark[0].partition("=")[2]}, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True, preexec_fn=child_setup(), pass_fds=(theirs.fileno(),))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        add_helper(self.popen.pid)  # not attempt N's: never sampled, captured, killed or reaped with it
        self.sock = ours
        self.key = ProcKey(self.popen.pid, _create_time(self.popen.pid))
        self.spawned_at = clock()
        self.ready_at: float | None = None
        self.status: dict[str, Any] | None = None
        self._buf = b""

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self, timeout: float = 0.0) -> None:
        """Read the status line if it has come (waiting at most ``timeout``)."""
        if self.status is not None:
            return
        deadline = self.clock() + timeout
        while self.status is None:
            ready, _, _ = select.select([self.sock], [], [], max(0.0, deadline - self.clock()))
            if not ready:
                return
            chunk = self.sock.recv(65536)
            if not chunk:
                self.status = {"ready": False, "error": None}
                return
            self._buf += chunk
            if b"\n" in self._buf:
                try:
                    self.status = json.loads(self._buf.split(b"\n", 1)[0])
                except ValueError:
                    self.status = {"ready": False, "error": "garbled status line"}
                if self.status.get("ready"):
                    self.ready_at = self.clock()
            elif len(self._buf) > 65536:
                self.status = {"ready": False, "error": "garbled status line"}

    def not_ready(self, wait: float) -> str | None:
        """None when ready to be used; otherwise why not (waiting at most ``wait`` for it)."""
        self.poll(timeout=wait)
        if self.status is None:
            return f"the warm process was not ready within {wait:g} s"
        if self.status.get("ready") and self.popen.poll() is None:
            return None
        code = self.popen.poll()
        why = self.status.get("error") or self._stderr_tail()
        died = f"exited with {code}" if code is not None else "ended its status channel"
        return f"the warm process {died} before it was used" + (f": {why}" if why else "")

    def start(self, message: Mapping[str, Any]) -> None:
        """Send the attempt; raises OSError when it cannot be delivered."""
        self.sock.settimeout(5.0)
        self.sock.sendall((json.dumps(message) + "\n").encode())
        self.sock.close()

    def _stderr_tail(self) -> str:
        """The last line the dead warm process wrote (why an import failed), bounded."""
        assert self.popen.stderr is not None
        fd = self.popen.stderr.fileno()
        try:
            ready, _, _ = select.select([fd], [], [], 0.5)
            data = os.read(fd, 65536) if ready else b""
        except OSError:
            return ""
        lines = [ln for ln in data.decode(errors="replace").splitlines() if ln.strip()]
        return lines[-1].strip()[:300] if lines else ""

    def kill(self) -> None:
        """Kill (identity-checked) and reap the unused process; close our ends."""
        proc = same_process(self.key)
        if proc is not None:
            kill_verified([proc], grace=2.0)
        try:
            self.popen.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            # Left a helper, so the tree never adopts it; its parent-death signal still ends it with us.
            log.warning("prewarm_kill", message=f"the unused warm process {self.pid} did not die within 2 s")
        else:
            forget_helper(self.pid)
        self.sock.close()
        for pipe in (self.popen.stdout, self.popen.stderr):
            if pipe is not None:
                pipe.close()


def _create_time(pid: int) -> float:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return 0.0


class Prewarmer:
    """Keeps at most one warm process: the next attempt's, spawned once per attempt.

    ``mode``: "auto" prewarms only launchers ``known_launcher`` accepts, "on" any Python launcher.
    ``notify(event, fields)``: journals ``prewarm_ready`` (pid, RSS, what it imported) and
    ``prewarm_discarded`` (pid, why). ``maps``: reads a pid's ``/proc/PID/maps`` (tests plant one)."""

    def __init__(self, extra_imports: Sequence[str] = (), *, clock: Callable[[], float] = time.monotonic,
                 ready_wait: float = READY_WAIT_S, mode: str = "on",
                 notify: Callable[[str, dict[str, Any]], None] | None = None,
                 maps: Callable[[int], str | None] = read_maps,
                 rss: Callable[[int], float | None] = rss_mb) -> None:
        self.extra_imports = tuple(extra_imports)
        self.clock = clock
        self.ready_wait = ready_wait
        self.mode = mode
        self.notify = notify or (lambda _event, _fields: None)
        self.maps = maps
        self.rss = rss
        self._warm: _Warm | None = None
        self._next: tuple[WarmPlan, list[str], dict[str, str]] | None = None  # what to spawn for the next attempt
        self._launched_at: float | None = None
        self._spawned = False  # one warm process per attempt: one that dies is not replaced
        self._checked = False  # its memory maps were read once it was ready
        self._why_cold = "the first attempt"

    def launched(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        """An attempt started (warm or cold): its command is the next one's, less resume arguments."""
        warm_plan = plan(argv, env, self.extra_imports)
        unknown = known_launcher(warm_plan, argv) if isinstance(warm_plan, WarmPlan) and self.mode == "auto" else None
        if isinstance(warm_plan, str):
            self._next, self._why_cold = None, f"no warm start for this command: {warm_plan}"
        elif unknown is not None:
            self._next, self._why_cold = None, f"no warm start by default: {unknown}"
        else:
            self._next = (warm_plan, list(argv), warm_environment(env))
            self._why_cold = ("the previous attempt ended before its warm process was due (its first "
                              f"heartbeat, or {WARM_WITHOUT_BEAT_S:g} s)")
        self._launched_at, self._spawned, self._checked = self.clock(), False, False

    def tick(self, beat_seen: bool) -> None:
        """Each sampling tick of the running attempt (main thread: the parent-death signal is per thread)."""
        if self._warm is not None:
            self._warm.poll()
            if not self._checked and self._warm.ready_at is not None:
                self._checked = True
                self._check_ready(self._warm)
            return
        if self._next is None or self._spawned or self._launched_at is None:
            return
        if not spawn_due(self.clock(), self._launched_at, beat_seen):
            return
        self._spawned = True
        warm_plan, command, env = self._next
        try:
            self._warm = _Warm(warm_plan, command, env, self.clock)
        except (OSError, subprocess.SubprocessError) as exc:
            self._why_cold = f"the warm process could not be started: {exc}"
            return
        log.info("prewarm_started", message=f"warm launcher for the next attempt: pid {self._warm.pid} "
                                            f"({warm_plan.interpreter}, importing {', '.join(warm_plan.imports) or 'nothing'})")

    def _gpu_refusal(self, warm: _Warm) -> tuple[str | None, list[str]]:
        """(why the warm process must not be used, its CUDA runtime libraries): its memory maps."""
        maps = self.maps(warm.pid)
        if maps is None:
            return "its memory maps could not be read, so it cannot be shown not to have touched a GPU", []
        touch, runtime = gpu_mappings(maps)
        if touch:
            return (f"its imports loaded GPU driver libraries or devices ({', '.join(touch[:6])}): it may hold a GPU "
                    "context, so it is not used"), runtime
        return None, runtime

    def _check_ready(self, warm: _Warm) -> None:
        """Once ready: no GPU touched (else killed now, not at the relaunch), and journaled with its memory."""
        why, runtime = self._gpu_refusal(warm)
        if why is not None:
            self._warm = None
            warm.kill()
            self._why_cold = f"the warm process was discarded: {why}"
            log.warning("prewarm_discarded", message=f"warm launcher {warm.pid} discarded: {why}")
            self.notify("prewarm_discarded", {"pid": warm.pid, "reason": why})
            return
        self.notify("prewarm_ready", {
            "pid": warm.pid, "create_time": warm.key.create_time, "rss_mb": self.rss(warm.pid),
            "imports": list(warm.plan.imports), "import_s": (warm.status or {}).get("import_s"),
            "ready_s": round((warm.ready_at or warm.spawned_at) - warm.spawned_at, 3),
            "cuda_runtime_libs": runtime[:12]})

    def take(self, argv: Sequence[str], env: Mapping[str, str], attempt_dir: Path, *, echo: bool = True,
             cgroup_procs: str | None = None, log_limit: Callable[[], int] = lambda: LOG_MAX_BYTES,
             death_signal: int = signal.SIGKILL) -> tuple[TrainerProcess | None, dict[str, Any]]:
        """The attempt started through the warm process, or (None, why it is launched cold).
        ``death_signal``: the root's parent-death signal from now on, as a cold ``launch`` has it
        (SIGSTOP while an armed guardian will kill the tree); the warm process sets it itself
        when told the attempt (it was spawned with SIGKILL, right for an unused helper)."""
        warm, self._warm = self._warm, None  # single use, whatever happens next
        if warm is None:
            return None, {"mode": "cold", "reason": self._why_cold}
        why = self._refusal(warm, argv, env)
        if why is None and cgroup_procs is not None:
            try:
                # Into the attempt's cgroup before it runs anything: all it forks is born inside.
                with open(cgroup_procs, "w") as procs:
                    procs.write(str(warm.pid))
            except OSError as exc:
                why = f"the warm process could not join the attempt's cgroup: {exc}"
        if why is not None:
            warm.kill()
            log.info("prewarm_unused", message=f"launching cold: {why}")
            return None, {"mode": "cold", "reason": why}
        try:
            logs = open_logs(attempt_dir)
        except LaunchError:
            warm.kill()
            raise
        sys_argv, orig_argv = warm.plan.argv(argv)
        forget_helper(warm.pid)  # from now on the attempt's root: a member of the tree
        try:
            warm.start({"argv": sys_argv, "orig_argv": orig_argv, "env": dict(env), "death_signal": int(death_signal)})
        except OSError as exc:
            logs.close()
            add_helper(warm.pid)
            warm.kill()
            return None, {"mode": "cold", "reason": f"the warm process could not be told the attempt: {exc}"}
        trainer = tee(warm.popen, warm.key.create_time, logs, echo=echo, log_limit=log_limit)
        now = self.clock()
        assert warm.ready_at is not None
        trainer.launch = {"mode": "warm", "rss_mb": self.rss(warm.pid), "import_s": (warm.status or {}).get("import_s"),
                          "ready_s": round(warm.ready_at - warm.spawned_at, 3), "idle_s": round(now - warm.ready_at, 3)}
        return trainer, trainer.launch

    def _refusal(self, warm: _Warm, argv: Sequence[str], env: Mapping[str, str]) -> str | None:
        wanted = plan(argv, env, self.extra_imports)
        if wanted != warm.plan:
            return "the command's launcher changed since the warm process started"
        if warm_environment(env) != warm.env:
            return "the environment (less HANGWATCH_* attempt variables) changed since the warm process started"
        if os.getcwd() != warm.cwd:
            return "the working directory changed since the warm process started"
        why = warm.not_ready(self.ready_wait)
        if why is None:  # its maps again: it may have become ready only now, or loaded something since
            why = self._gpu_refusal(warm)[0]
        return why

    @property
    def warm_pid(self) -> int | None:
        return self._warm.pid if self._warm is not None else None

    @property
    def warm_mark(self) -> list[Any] | None:
        """The guardian's mark ([entry, since]) of the warm process ``take`` would use."""
        return self._warm.mark if self._warm is not None else None

    def close(self) -> None:
        """The run is over: an unused warm process is killed and reaped."""
        warm, self._warm = self._warm, None
        if warm is not None:
            warm.kill()
