"""What the frames around a wait say about it: a forked child, a finalizer, an event loop. Pure.

``waits`` names the blocking call a thread sits in; the rest of its stack can change what
that wait means, whatever the call:

* a lock wait in a child forked from a threaded parent waits for a lock the fork copied
  held, whose holder does not exist in the child (``inherited_lock``);
* a finalizer that interrupted a call of its own thread and waits inside it waits for a
  lock that call holds (``reentered_from_finalizer``);
* a synchronous wait made on an asyncio event loop's own thread stops the loop and every
  coroutine on it (``blocks_event_loop``);
* an idle event loop that the program's own code (or a test) started to run one coroutine
  to its end waits on that coroutine, which never completes; a server's loop started by
  its framework waits for requests (``awaits_its_coroutine``).

``classify`` applies these to a generic verdict (the lock wait, a family) only; a
bug-specific signature keeps its own.
"""

from __future__ import annotations

import re
from typing import Sequence

from hangwatch.diagnostics.named_waits import named_frames, words
from hangwatch.diagnostics.signatures import Signature, find
from hangwatch.diagnostics.stacks import Frame, ThreadDump, site_package, started_by_threading, top_package
from hangwatch.diagnostics.waits import (
    FAMILY_PRIORITY, GIL, MAX_WAIT_FRAMES, Wait, family_signature, guessed_wait, wait_of,
)


def fork_inherited(sig: Signature, thread: ThreadDump, signatures: Sequence[Signature]) -> Signature:
    """``fork-inherited-lock`` for a lock wait (or a GIL wait over a lock's acquire) in a
    forked child (``inherited_lock``), else ``sig``."""
    if sig.id not in ("lock-wait", GIL) or not inherited_lock(thread):
        return sig
    return find(tuple(signatures), "fork-inherited-lock") or sig


#: CPython's buffered stream (sys.stdout, a file opened for writing) taking its own lock:
#: every write and flush holds it for the length of the call (``ENTER_BUFFERED``).
_BUFFERED_LOCK = re.compile(r"^(_enter_buffered_busy|_io__Buffered\w*_impl|_io_Buffered\w*_impl|buffered_\w+|_bufferedwriter_\w+)$")
#: A native write that a stream's lock holder would be blocked in (a full pipe, a stalled
#: terminal or file system).
_WRITE_CALL = re.compile(r"^(__)?(libc_)?(write|writev|__write_nocancel|_Py_write\w*|fwrite)$")


def stream_lock_inherited(thread: ThreadDump, others: Sequence[ThreadDump]) -> bool:
    """The thread waits for a buffered stream's lock (a print or flush of stdout, a log
    file's write) and no thread of its process is inside a write holding it: the holder
    was a thread of the parent when the process forked, and the child has only its copy of
    the lock, held for ever (a child's first print after a fork, or its exit's flush). A
    holder stuck writing to a full pipe would show its write; a paste of this thread alone
    is read the same (its holder, if any, is not shown)."""
    w = wait_of(thread)
    if w is None or w.category != "lock-wait":
        return False  # (a take_gil under the stream's lock: the lock is already held)
    near = thread.frames[:w.depth + 3]
    if not any(f.native and _BUFFERED_LOCK.search(f.function) for f in near):
        return False
    return not any(t is not thread and any(f.native and _WRITE_CALL.search(f.function) for f in t.frames[:4])
                   for t in others)


#: Frames only a rank of a distributed job runs under: torch.multiprocessing.spawn's
#: ``_wrap``, torchrun's error-recording wrapper, the data-parallel wrappers and engines.
_RANK_FILE = re.compile(r"(^|/)(torch/multiprocessing/spawn\.py|torch/distributed/|torch/nn/parallel/distributed\.py|"
                        r"deepspeed/runtime/|megatron/core/distributed/|accelerate/utils/deepspeed\.py|"
                        r"lightning/\w+/strategies/(ddp|deepspeed|fsdp)\w*\.py|pytorch_lightning/strategies/(ddp|deepspeed|fsdp)\w*\.py)")


def rank_in_step(thread: ThreadDump, rank: int | None) -> Wait | None:
    """A rank of a distributed job (its rank is known, or its stack runs under a rank's
    launcher or a data-parallel engine) whose main thread shows no wait at all: a
    collective, guessed. A rank that stops without a visible wait most often waits for its
    peers in a collective the paste cut off or py-spy could not show (a fused kernel, a
    hook inside backward); the advice (dump every rank) is what finds the one out of
    step. Marked ``by_name``, like a wait guessed from a name."""
    if not thread.frames or thread.active is True or thread.owns_gil:
        return None
    if rank is None and not any(not f.native and _RANK_FILE.search(f.file.replace("\\", "/")) for f in thread.frames):
        return None
    if any(not _OTHER_WORK.isdisjoint(words(f.function)) or not _OTHER_WORK.isdisjoint(words(f.short_file))
           for f in named_frames(thread)):
        return None  # a rank in its data, tokenizer, checkpoint or compile code: that code, not its peers
    inner = thread.frames[0]
    return Wait("nccl-collective-wait", "a collective", ("a rank of a distributed job that shows no wait",), (inner,),
                None, True, 0, by_name=True)


#: Words of a rank's own innermost frames that say it is busy with something other than
#: the step it shares with its peers.
_OTHER_WORK = frozenset(("data", "dataset", "datasets", "dataloader", "loader", "collate", "tokenize", "tokenizer",
                         "tokenizers", "getitem", "download", "checkpoint", "ckpt", "save", "load", "compile", "export"))


def _said_of(category: str, title: str, advice: str, source: str, signatures: Sequence[Signature]) -> Signature:
    """The family ``category`` with the title and advice of one situation of its wait (a
    family's low priority; ``source``: where that situation was learned)."""
    return Signature(family_signature(category, signatures).id, title, advice, (), priority=FAMILY_PRIORITY, collective=False,
                     reference=f"hangwatch's blocking-primitive table ({source})")


def finalizer_lock(signatures: Sequence[Signature]) -> Signature:
    """``lock-wait``, said of a lock a finalizer re-entered (see ``reentered_from_finalizer``)."""
    return _said_of("lock-wait", "A lock re-entered from a finalizer (the garbage collector ran it inside a call holding it)",
                     "A finalizer (__del__, a weakref or multiprocessing Finalize callback) ran in the middle of a call of "
                     "the same thread, while that call held a non-reentrant lock, and now waits for the same lock: the "
                     "thread waits for itself. The garbage collector runs finalizers at any allocation, so this is "
                     "intermittent. Break the reference cycle that leaves the object to the collector (close it "
                     "explicitly, use a context manager), make the lock reentrant (RLock), or have the finalizer "
                     "skip the locked work (try a non-blocking acquire, or defer it to another thread).",
                     "redis-py#2883 and #3081, cpython#109593: finalizers re-entering a held lock", signatures)


#: Waits on something outside the process: made on an event loop's thread, the loop waits on it.
_OUTSIDE_WAITS = frozenset(("socket-read", "subprocess-wait", "file-lock-wait", "sleep"))


def loop_blocked(wait: Wait, signatures: Sequence[Signature]) -> Signature:
    """A synchronous wait made on the loop's thread: a wait on something outside the
    process (a socket, a child process, a file lock, a sleep) keeps its own family, since
    that is what the loop waits on; a wait on something of the process (a future, an
    event, a lock, a queue, a thread) is ``asyncio-blocked``, as is a wait only the words
    of a frame name (an ``await`` chain into a client's coroutine): what would end it
    often needs the very loop it blocks (``fut.result()`` in a coroutine)."""
    category = wait.category if wait.category in _OUTSIDE_WAITS and not wait.by_name else "asyncio-blocked"
    return _said_of(category, f"An asyncio event loop blocked by a synchronous call on its thread (waiting on {wait.what})",
                     f"A coroutine or callback of the event loop makes a blocking call ({' -> '.join(wait.calls)}) on the "
                     "loop's own thread: no other coroutine of that loop runs until it returns, so everything awaiting "
                     "the loop stalls with it (and a call that waits for another coroutine never returns). Make the "
                     "call awaitable (an async client, asyncio.Lock/Queue/Event, asyncio.sleep) or run it off the loop "
                     "(await asyncio.to_thread(...), loop.run_in_executor); python -X dev (asyncio debug) logs slow "
                     "callbacks.", "an event loop's frames under a blocking call", signatures)


#: Where a prefork server's worker starts: the frame that forked it stays at the bottom of the
#: child's stack (gunicorn's arbiter.spawn_worker, multiprocessing's popen_fork._launch).
_FORK_POINT = re.compile(r"^(spawn_worker|_launch|fork_processes|_fork_worker)$")
_FORK_FILE = re.compile(r"(^|/)(gunicorn/arbiter|multiprocessing/popen_fork|tornado/process)\.py$")
#: logging's own frames that run under a handler's lock or take it.
_LOGGING_LOCKED = re.compile(r"^(\w+\.)?(emit|handle|flush|acquire|_acquireLock|__enter__|callHandlers)$")


def forked_in_logging(thread: ThreadDump) -> bool:
    """The thread is a forked worker (its stack starts at the frame that forked it) whose
    innermost Python frame is logging's own, under a handler's or a stream's lock: a lock
    another thread of the parent held at the fork, never released in the child."""
    inner = next((f for f in thread.frames if not f.native), None)
    if inner is None or _LOGGING_LOCKED.search(inner.function) is None or not inner.file.replace("\\", "/").endswith("logging/__init__.py"):
        return False
    return any(_FORK_POINT.search(f.method) and _FORK_FILE.search(f.file.replace("\\", "/")) for f in thread.frames)


#: A child of multiprocessing's fork start method (or billiard's, celery's fork): its stack
#: starts in the frames the parent forked from, or in the child's own entry (a Process's
#: ``_bootstrap``/``run``, a Pool worker's loop). A spawned or forkserver child starts in
#: ``spawn.py``/``forkserver.py``: a fresh interpreter that inherited no lock.
_FORK_CHILD_FRAME = re.compile(r"^(\w+\.)?(_bootstrap|run|_launch|worker|_worker_loop)$")
_FORK_CHILD_FILE = re.compile(r"(^|/)(multiprocessing|multiprocess|billiard)/(process|popen_fork|pool)\.py$|(^|/)torch/utils/data/_utils/worker\.py$")
_SPAWNED_FILE = re.compile(r"(^|/)(multiprocessing|multiprocess|billiard)/(spawn|forkserver|popen_spawn_posix|popen_forkserver)\.py$")
#: A threading lock's acquire (the table's rows, or a lock taken by a C call py-spy does not
#: show): not multiprocessing's own locks, which are shared semaphores meant to cross processes.
_THREAD_LOCK_FRAME = re.compile(r"(^|\.)(acquire|_acquireLock|_acquireModuleLock|__enter__|put|put_nowait)$")


def forked_child(thread: ThreadDump) -> bool:
    """The thread runs in a child forked by multiprocessing (or a prefork server) from a
    parent that may have had other threads: its stack shows the fork's frames or a fork
    child's entry, and no spawn or forkserver entry."""
    frames = [f for f in thread.frames if not f.native]
    if any(_SPAWNED_FILE.search(f.file.replace("\\", "/")) for f in frames):
        return False
    if started_by_threading(thread.frames):
        return False  # a thread started in this process (a ThreadPool's worker runs pool.py's worker too)
    return any((_FORK_CHILD_FRAME.search(f.function) and _FORK_CHILD_FILE.search(f.file.replace("\\", "/")))
               or (_FORK_POINT.search(f.method) and _FORK_FILE.search(f.file.replace("\\", "/"))) for f in frames) \
        or after_fork_native(thread)


def after_fork_native(thread: ThreadDump) -> bool:
    """A native frame of the child's side of a fork under the thread's wait: CPython's
    ``PyOS_AfterFork_Child``, an ``atfork``/``postfork`` child handler, a prefork server's
    ``uwsgi_respawn_worker``. Not when the wait is inside the fork call or the parent's
    side of it (``__libc_fork`` running its prepare handlers, ``PyOS_AfterFork_Parent``,
    ``jemalloc_postfork_parent``): the parent's own threads are all there."""
    for f in thread.frames:
        if not f.native:
            continue
        ws = frozenset(words(f.function))
        if f.function.lstrip("_") in _FORK_CALLS or not ws.isdisjoint(("parent", "prepare", "prefork")):
            return False
        if f.function == "PyOS_AfterFork" or "respawn" in ws:
            return True
        if "child" in ws and not ws.isdisjoint(("after", "post", "at", "afterfork", "postfork", "atfork")) \
                and not ws.isdisjoint(("fork", "afterfork", "postfork", "atfork")):
            return True
    return False


#: The fork call itself and glibc's handlers inside it (the process is still the parent there).
_FORK_CALLS = frozenset(("fork", "libc_fork", "Fork", "run_fork_handlers", "fork_impl", "libc_fork_impl"))


def inherited_lock(thread: ThreadDump) -> bool:
    """A thread of a forked child that waits to take a threading lock (logging's, a
    handler's, a queue's, a client's ``with self._lock``): the thread that held it in the
    parent at the fork does not exist in the child, so nobody releases it. The classic
    fork-after-threads deadlock; a lock of multiprocessing's own (a semaphore shared with
    the parent) is a wait for another process, not this."""
    w = wait_of(thread)  # a lock the table shows: a guess from a name stays a guess
    if w is None or w.category not in ("lock-wait", GIL) or not forked_child(thread):
        return False
    if any(_CONN_SYNC.search(f.file.replace("\\", "/")) for f in thread.frames[:w.depth + 1] if not f.native):
        return False
    if w.category == GIL:
        # py-bt's "Waiting for the GIL" over a Python lock's acquire: Python 2's lock
        # acquire waits there; the lock, not the GIL, is what it waits for. Under the
        # child's own after-fork code the GIL is the inherited lock: its holder was a thread
        # of the parent (uwsgi's respawned workers, uwsgi#2659).
        return any(_THREAD_LOCK_FRAME.search(f.function) for f in thread.frames[:w.depth + 3]) or after_fork_native(thread)
    return True


_CONN_SYNC = re.compile(r"(^|/)(multiprocessing|multiprocess|billiard)/(synchronize|managers)\.py$")


#: A finalizer the garbage collector (or a refcount drop) runs inside whatever code the
#: thread was in: ``__del__``, a weakref callback or ``weakref.finalize``, multiprocessing's
#: ``Finalize`` and the semaphore cleanup it calls, py-bt's "Garbage-collecting".
_FINALIZER_CALL = re.compile(r"^(\w+\.)?(__del__|__call__|_remove|remove|_cleanup|_run_finalizer)$")
_FINALIZER_MODULE = re.compile(r"(^|/)(weakref|_weakrefset|multiprocessing/util|multiprocessing/synchronize)\.py$")


def in_finalizer(frame: Frame) -> bool:
    """A frame of a finalizer (see ``_FINALIZER_CALL``)."""
    if frame.native:
        return frame.function == "<garbage collection>"
    name = frame.function.rsplit(".", 1)[-1]
    return name == "__del__" or (_FINALIZER_CALL.search(frame.function) is not None
                                 and _FINALIZER_MODULE.search(frame.file.replace("\\", "/")) is not None)


#: Waits a finalizer re-entering its own object's code blocks in: a lock the interrupted
#: call holds (the wait shown is that lock's, or a call that takes it: the resource
#: tracker's ``ensure_running``, a pool's ``release``).
_REENTRANT_WAITS = frozenset(("lock-wait", "event-wait", "queue-wait", "subprocess-wait", GIL))


def _cut_at(frame: Frame) -> bool:
    """A ``__del__`` as a thread's outermost frame: the paste shows the finalizer and not
    the call it interrupted (cut above it, or an "Exception ignored in" traceback)."""
    return not frame.native and frame.function.rsplit(".", 1)[-1] == "__del__"


def reentered_from_finalizer(thread: ThreadDump) -> bool:
    """The thread waits (on a lock, or in a call that takes one) inside a finalizer that
    interrupted other code of the same thread: the garbage collector ran it in the middle of
    a call that holds the very lock the finalizer now needs (redis-py's PubSub ``__del__``
    releasing a connection while ``get_connection`` holds the pool's lock, the resource
    tracker's cleanup re-entering ``ensure_running``): a self-deadlock no other thread can
    end. A finalizer at the bottom of its thread (a finalizer thread) is no interruption,
    unless the paste was cut above it (``_cut_at``)."""
    frames = thread.frames[:MAX_WAIT_FRAMES]
    at = next((i for i, f in enumerate(frames) if in_finalizer(f)), None)
    if at is None:
        return False
    if at == 0 and frames[0].native:
        # faulthandler's "Garbage-collecting" line stands above the frames the collector
        # interrupted, not at a place in them: the finalizer's own frame, where one
        # follows, is where it ran.
        at = next((i for i, f in enumerate(frames[1:], 1) if in_finalizer(f) and not f.native), 0)
    w = guessed_wait(thread)
    if at + 1 >= len(frames) and (w is None or w.category != "event-wait" or not _cut_at(frames[at])):
        # (a lock taken in a __del__ at the bottom may be a finalizer run at exit while
        # another thread holds it, as CPython's "Exception ignored in" traceback shows; a
        # Condition waited on there is the finalizer's own close, waiting for its lock)
        return False
    if w is not None and w.category not in _REENTRANT_WAITS and not w.by_name:
        return False  # a finalizer doing I/O (a socket close) waits on that
    if w is not None and w.depth > at:
        return False  # the wait is the interrupted code's own, below the finalizer
    return True


#: An asyncio event loop running a callback or a coroutine step (its ``_run_once``, the
#: Handle's ``_run``, ``run_forever``/``run_until_complete``, ``asyncio.run``, uvloop's).
_LOOP_FRAME = re.compile(r"^(\w+\.)?(_run_once|_run|run_forever|run_until_complete|run)$")
_LOOP_FILE = re.compile(r"(^|/)((asyncio/)?(base_events|events|runners|windows_events|proactor_events|selector_events)\.py|uvloop/)")
#: Synchronous waits that, made on the loop's own thread, stop every coroutine of the loop.
LOOP_BLOCKERS = frozenset(("socket-read", "lock-wait", "queue-wait", "event-wait", "future-wait", "thread-join",
                           "subprocess-wait", "sleep", "file-lock-wait"))


def blocks_event_loop(thread: ThreadDump) -> Wait | None:
    """The synchronous wait (a socket read, a lock, a queue, a sleep, a future's result...)
    that a coroutine or callback makes on its event loop's own thread: the loop's frames lie
    further out than the wait, so no other coroutine of the loop runs until it returns (a
    ``requests.get`` or a ``time.sleep`` inside ``async def``). None otherwise."""
    w = guessed_wait(thread)
    if w is None or w.category not in LOOP_BLOCKERS:
        return None
    further = thread.frames[w.depth + 1:MAX_WAIT_FRAMES * 2]
    if any(not f.native and _NOTEBOOK_CELL.search(f.file.replace("\\", "/")) for f in further):
        return None  # a notebook cell's code runs on the kernel's loop by design: its call is the wait
    if any(not f.native and _LOOP_FRAME.search(f.function) and _LOOP_FILE.search(f.file.replace("\\", "/")) for f in further):
        return w
    return None


#: IPython running a cell (a Jupyter kernel runs each cell on its event loop).
_NOTEBOOK_CELL = re.compile(r"(^|/)IPython/core/(interactiveshell|async_helpers)\.py$")


#: Running a coroutine to its end on an event loop: asyncio.run (its Runner), run_until_complete,
#: uvloop's and anyio's run.
_RUN_TO_END = re.compile(r"^(\w+\.)?(run|run_until_complete)$")
_RUN_TO_END_FILE = re.compile(r"(^|/)(asyncio/(runners|base_events)\.py|uvloop/)")
#: The loop's own plumbing between the loop and the code that started it.
_LOOP_PLUMBING = frozenset(("asyncio", "anyio", "uvloop", "nest_asyncio", "sniffio", "trio", "asyncio_runner"))
#: What runs one coroutine to its end for code that waits for it: test runners (a test that
#: should finish) and the bridges that call a coroutine from synchronous code.
_TEST_RUNNERS = frozenset(("pytest_asyncio", "_pytest", "pytest", "pluggy", "xdist", "execnet", "unittest", "pytest_trio",
                           "asynctest", "pytest_aiohttp", "aiounittest", "asgiref", "syncer", "asyncer"))
#: Frameworks whose loop serves until stopped (web and RPC servers, apps, bots, inference
#: servers, workers): idle there is waiting for the next request, not for a coroutine's end.
_SERVING = frozenset((
    "uvicorn", "hypercorn", "granian", "daphne", "gunicorn", "aiohttp", "sanic", "tornado", "quart", "starlette",
    "fastapi", "litestar", "streamlit", "gradio", "chainlit", "panel", "bokeh", "dash", "jupyter_server", "notebook",
    "ipykernel", "jupyterlab", "homeassistant", "mcp", "fastmcp", "vllm", "sglang", "ray", "jina", "discord", "telegram",
    "aiogram", "pyrogram", "telethon", "slack_bolt", "websockets", "grpc", "textual", "prefect", "faust", "nats",
    "kopf", "dramatiq", "arq", "distributed", "bentoml", "triton", "tritonserver", "litserve", "lmdeploy", "openai",
))


def awaits_its_coroutine(thread: ThreadDump) -> bool:
    """The thread's event loop, idle, runs one coroutine to its end (asyncio.run,
    run_until_complete) for the program's own code or a test: every task awaits
    something that never completes (a lost future, a dead peer, a task cycle). False for
    a loop a serving framework started (uvicorn, streamlit, an inference server: idle is
    waiting for the next request), for run_forever, and when no frame shows who started it."""
    frames = thread.frames
    entry = next((i for i in range(len(frames) - 1, -1, -1)
                  if not frames[i].native and _RUN_TO_END.match(frames[i].function)
                  and _RUN_TO_END_FILE.search(frames[i].file.replace("\\", "/"))), None)
    if entry is None:
        return False
    # Who started the loop: a serving framework anywhere further out makes it a server (the
    # program's own main() calling the framework's run() is outside that); else the
    # program's own code or a test runner, when any of it is shown.
    starter = False
    for f in frames[entry + 1:]:
        if f.native:
            continue
        package = top_package(f.file)
        if package in _LOOP_PLUMBING:
            continue
        if package in _SERVING or (site_package(f.file) and package not in _TEST_RUNNERS):
            return False
        starter = starter or package in _TEST_RUNNERS or not f.is_stdlib or f.function == "<module>"
    return starter


def program_awaits(signatures: Sequence[Signature]) -> Signature:
    """``asyncio-blocked``, said of a program's idle loop running its coroutine to its end."""
    return _said_of("asyncio-blocked", "An asyncio program waiting for a coroutine that never completes (its loop has nothing to run)",
                     "The program runs a coroutine to its end (asyncio.run, run_until_complete) and its event loop is "
                     "idle: every task awaits something that never completes (a request to a peer that never answers, "
                     "a future nobody resolves, a worker thread or process that died, tasks awaiting each other). "
                     "py-spy shows only the idle loop: dump the tasks to see what each awaits (python -m asyncio ps PID "
                     "on Python 3.14, aiomonitor, or asyncio.all_tasks() with each task's print_stack()), and put a "
                     "timeout on the awaits of network and subprocess calls (asyncio.timeout, wait_for).",
                     "an idle loop under asyncio.run", signatures)
