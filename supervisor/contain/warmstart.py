"""The warm process's side of ``prewarm``: import the launcher ahead, then become the attempt.

Started by the supervisor, in the user's interpreter with the user's
interpreter options, as::

    PYTHON [FLAGS] -c BOOT FD SPEC

``BOOT`` (``prewarm.BOOT``) drops the ``-c`` entry ("" = the working
directory) from ``sys.path`` before anything is imported, so a ``hangwatch/``
folder where the user works cannot stand in for this module, then calls
``main``. Not ``-P``, unlike hangwatch's helpers (``contract.pyexec``): this
process becomes the user's launcher, and ``-P`` would stay in ``sys.flags``,
which ``multiprocessing``'s spawn copies onto every Python child. ``SPEC`` is
JSON: how a cold start would run the launcher (``kind`` "script" or "module",
``target``), what to import ahead (``imports``), and the ``argv`` and
``orig_argv`` those imports see (the current attempt's command). ``FD`` is our end of a
socket pair with the supervisor.

The life of the process, and why it keeps the fresh-tree guarantee:

1. It puts ``sys.path[0]`` where a cold start of the launcher would have it,
   imports ``imports`` (e.g. ``torch.distributed.run`` for torchrun: the
   seconds of a cold start) and writes one status line, ``{"ready": true}``.
   It runs nothing else: no training code, no rank, no thread of its own.
2. It blocks reading FD. End of file (the supervisor closed it, or died: the
   parent-death signal kills us too) ends it; nothing was started, nothing is
   left.
3. One message arrives, the attempt: ``argv`` (``sys.argv`` as a cold start
   has it), ``orig_argv`` and the attempt's whole environment. It replaces
   ``os.environ`` (``HANGWATCH_ATTEMPT`` and the others appear only now; they
   were absent at import, as the supervisor made sure), closes FD, and runs the
   launcher as ``__main__``: a script's code in the real ``__main__`` module
   (as ``python script.py`` does), a module through runpy (as ``python -m``).
   From here on this process *is* the attempt's tree root: the supervisor
   started it in its own session with the parent-death signal (SIGKILL; the
   message names the root's, SIGSTOP while an armed guardian will kill the tree,
   and it is set before the launcher runs), reads its
   stdout/stderr into the attempt's logs, moved it into the attempt's cgroup
   before sending the message, and kills it with the attempt.

Only the standard library: what this module imports stays in the launcher's
``sys.modules``.
"""

from __future__ import annotations

import json
import os
import sys
import time

#: cap on the one message (argv and environment) the supervisor sends
MAX_MESSAGE = 16 * 1024 * 1024


def main() -> None:
    parent = os.getppid()  # the supervisor
    fd, spec = int(sys.argv[1]), json.loads(sys.argv[2])
    kind, target = spec["kind"], spec["target"]
    started = time.monotonic()
    # What the launcher's imports would see in a cold start of this attempt's command (the next
    # attempt's differs at most by resume arguments, and gets its own in step 3).
    sys.argv[:] = spec.get("argv", sys.argv)
    sys.orig_argv[:] = spec.get("orig_argv", sys.orig_argv)
    if not sys.flags.safe_path:  # -P / -I / PYTHONSAFEPATH: a cold start puts nothing there either
        sys.path.insert(0, os.getcwd() if kind == "module" else os.path.dirname(os.path.realpath(target)))
    for name in spec["imports"]:
        try:
            __import__(name)
        except BaseException as exc:  # noqa: BLE001  (any failure: the supervisor launches cold and says why)
            _send(fd, {"ready": False, "error": f"cannot import {name}: {type(exc).__name__}: {exc}"})
            os._exit(3)
    _send(fd, {"ready": True, "import_s": round(time.monotonic() - started, 3)})
    message = _receive(fd)
    if message is None:
        os._exit(0)  # never used: nothing ran, nothing to clean up
    os.close(fd)
    _death_signal(message.get("death_signal"), parent)
    _become(kind, target, message)


def _death_signal(sig: object, parent: int) -> None:
    """Our parent-death signal as the attempt's root, as a cold launch sets it (SIGSTOP while an
    armed guardian will kill the tree: nothing below us sees a parent die and reacts). It
    replaces the SIGKILL we were spawned with at once; a supervisor that died before that
    killed us, one that dies after it finds the new one. No ctypes import unless needed: it
    would stay in the launcher's ``sys.modules``."""
    if not isinstance(sig, int) or isinstance(sig, bool) or sig == 9 or not 0 < sig < 65:
        return
    import ctypes  # noqa: PLC0415

    ctypes.CDLL(None, use_errno=True).prctl(1, sig, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(127)  # the supervisor is gone already: nobody watches this attempt


def _become(kind: str, target: str, message: dict) -> None:
    os.environ.clear()
    os.environ.update(message["env"])
    sys.argv[:] = list(message["argv"])
    sys.orig_argv[:] = list(message["orig_argv"])
    namespace = sys.modules["__main__"].__dict__
    for name in [n for n in namespace if not (n.startswith("__") and n.endswith("__"))]:
        del namespace[name]  # the boot program's own names: the launcher starts from a bare __main__
    if kind == "module":
        import runpy  # noqa: PLC0415  (``python -m`` imports it too, and only then)

        runpy._run_module_as_main(target, alter_argv=True)  # noqa: SLF001  (exactly what ``-m`` runs)
        return
    # ``python script.py``: the script's code runs in the real __main__ module's namespace,
    # with __file__ the script joined to the working directory (not normalised), as Python sets it.
    from importlib.machinery import SourceFileLoader  # noqa: PLC0415  (loaded at startup already)

    path = target if os.path.isabs(target) else os.path.join(os.getcwd(), target)
    with open(target, "rb") as handle:
        code = compile(handle.read(), path, "exec", dont_inherit=True)
    builtins = namespace["__builtins__"]
    namespace.clear()
    namespace.update(__name__="__main__", __doc__=None, __package__=None, __spec__=None, __annotations__={},
                     __builtins__=builtins, __loader__=SourceFileLoader("__main__", path), __file__=path,
                     __cached__=None)
    exec(code, namespace)  # noqa: S102  (the user's launcher, as a cold start would run it)


def _send(fd: int, status: dict) -> None:
    data = (json.dumps(status) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def _receive(fd: int) -> dict | None:
    """The attempt's message, or None at end of file (not used, or the supervisor is gone)."""
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return None
        buf += chunk
        if len(buf) > MAX_MESSAGE:
            return None
    return json.loads(buf)
