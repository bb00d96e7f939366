"""What each thread waits on, from its innermost frames: the blocking-primitive layer. Pure.

Signatures name known bugs; under them, this layer names the blocking call a thread
sits in (a file lock, a child process, a queue, a socket, an event, a collective, a
synchronize...) from the table in ``primitives``, whether or not a signature applies:

* from the innermost frame outwards, frames are read while they are part of the wait:
  a row of the table, a standard-library or native frame, or a frame of the same
  package as the last row matched (a library's wrappers around its own wait). The
  first frame that is none of these ends the wait: it is the *caller*, the user's or
  library's code that made the call;
* the outermost row matched names the wait (``category``): a DataLoader's
  ``_try_get_data`` over ``queue.get`` over ``Condition.wait`` waits on the DataLoader,
  not on a condition. The rows matched, outermost first, are the ``calls``;
* a stack that ends at an API call which always has frames under it (``Process.join``,
  ``ray.get``: ``level = "call"``) was cut above the blocking frame: the wait is named
  from that call, and marked ``cut``;
* a thread whose innermost frame is its own code (not a row, not the standard library)
  waits on nothing: it runs.

``family_signature`` turns a wait into the stall a dump gets when a primitive is its
only evidence; ``refine`` replaces the generic ``lock-wait`` by the wait's own family
(an Event is no lock); ``outranks_wrapper`` tells when a blocking call at the top of a
thread outranks a wrapper signature (a graph replay) matched further out.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from typing import Any, Sequence

from hangwatch.diagnostics.named_waits import named_wait, words
from hangwatch.diagnostics.primitives import FAMILIES, LEAF_CALL, PRIMITIVES, Primitive
from hangwatch.diagnostics.signatures import Signature, find
from hangwatch.diagnostics.stacks import Frame, ThreadDump, top_package

#: Frames looked at per thread: a wait is at the top of its stack.
MAX_WAIT_FRAMES = 64
#: Frames of the standard library, native code or the same package in a row, past the
#: last row matched, that still belong to the wait (beyond: the thread runs there).
MAX_GLUE = 12
#: A family's stall loses to every signature that names a cause.
FAMILY_PRIORITY = 5
#: Families that are a wait on other work (the blocking call is the evidence): at the
#: top of a thread they outrank a wrapper signature matched further out.
BLOCKING_FAMILIES = frozenset(("nccl-collective-wait", "cuda-synchronize-wait", "lock-wait", "store-wait", "nccl-comm-init",
                               "gil-deadlock"))
#: ``lock-wait`` matches any threading wait; these families say better what it is (``sleep``:
#: an Event waited on by a retry loop's back-off).
REFINES_LOCK_WAIT = frozenset(("event-wait", "queue-wait", "thread-join", "future-wait", "subprocess-wait",
                               "socket-read", "file-lock-wait", "dataloader-wait", "asyncio-blocked", "gil-deadlock", "import-lock",
                               "sleep"))
# ``gil-deadlock`` too: a thread waiting to take the GIL matches the generic lock-wait
# signature (take_gil sits on a mutex or a semaphore), but what it waits for is the GIL, and
# the cure differs (release the GIL before blocking), so the wait's own family names it.
#: A join at interpreter exit (``shutdown-join``) whose thread sits in one of these says
#: better what the exit waits for: the lock file the joined work waits on, or the child
#: process multiprocessing's exit handler joins (the child is the one to dump).
REFINES_EXIT_JOIN = frozenset(("file-lock-wait", "subprocess-wait"))
#: A caller named like this around a sleep is a polling lock: an acquire loop that tries,
#: sleeps and tries again (filelock's, a lock file's, a hand-written spin on a lock).
_POLLING_LOCK = re.compile(r"(?i)acquire|(^|[._])(\w*_)?lock(_\w*)?$|lock(ed)?_?wait|wait_?(for_?)?lock")
GIL = "gil-deadlock"
#: Waits that name the thread's wait even under an outer call the table knows: taking the
#: GIL is the innermost wait there is (a lock.acquire or native call further out finished
#: its own wait and now waits to re-take the GIL), and a file lock under a database or
#: client call (Django's cursor wrapper over SQLite's busy wait) is what that call waits for.
NAMES_FROM_INSIDE = frozenset((GIL, "file-lock-wait"))


@dataclass(frozen=True)
class Wait:
    """One thread's wait. ``frames`` are the frames of the table's rows (innermost
    first), ``calls`` their labels (outermost first), ``caller`` the first frame outside
    the wait (None when the stack ends there), ``depth`` how many frames the wait spans."""

    category: str
    what: str
    calls: tuple[str, ...]
    frames: tuple[Frame, ...]
    caller: Frame | None
    cut: bool
    depth: int
    by_name: bool = False  # no blocking call shown: named from the words of a frame's name

    @property
    def weak(self) -> bool:
        """A C library's wait (poll, futex, a condition variable) called by native code of
        the job's own (an extension, the driver's event thread): what it waits for is that
        code's business, so it names no family (the frame itself is the evidence)."""
        last = self.frames[-1]
        if self.category == GIL:
            return False  # the GIL is the interpreter's, never the calling extension's business
        if self.category == "lock-wait" and any(_EXPLICIT_LOCK.search(_plain(f.function)) for f in self.frames):
            # A mutex, spin lock, read-write lock or critical section taken by name: a lock
            # whoever the caller is (a futex or semaphore alone may be anything's).
            return False
        if self.category == "file-lock-wait":
            return False  # a lock on a file (flock, a database's busy handler): whoever takes it
        if self.category == "thread-join" and any(_EXPLICIT_JOIN.search(_plain(f.function)) for f in self.frames):
            return False  # a join of a thread by name (pthread_join, std::thread::join): whoever joins
        if self.category == "socket-read" and _BLOCKING_READ.search(self.frames[-1].function):
            # A blocking recv/read/accept/connect is a read of that descriptor whoever makes
            # it (poll, epoll and select are an event loop's idle wait: still the caller's).
            return False
        return (last.native and self.category not in ECOSYSTEM_NATIVE and self.caller is not None
                and self.caller.native and not self.caller.is_system_native)

    def describe(self, thread: str = "") -> str:
        who = f"{thread} waits" if thread else "waits"
        text = f"{who} on {self.what} ({' -> '.join(self.calls)})"
        if self.caller is not None:
            text += f", called from `{_where(self.caller)}`"
        if self.by_name:
            return f"{thread or 'it'} probably waits on {self.what} (guessed from {self.calls[0]}; no blocking call is shown)"
        if self.cut:
            text += " (the dump ends at this call: cut above the blocking frame)"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "what": self.what,
            "calls": list(self.calls),
            "frames": [f.render() for f in self.frames],
            "caller": self.caller.render() if self.caller is not None else None,
            "cut": self.cut,
            "by_name": self.by_name,
        }


def _where(frame: Frame) -> str:
    """``datasets/builder.py:123``: the last two path components, enough to find the file."""
    path = "/".join(frame.file.replace("\\", "/").rsplit("/", 2)[-2:]) if not frame.native else frame.short_file
    return f"{path}:{frame.line}" if frame.line is not None else f"{frame.function} ({path})"


#: A frame whose function the paste does not show (pytest's long traceback shows a frame's
#: source and location, and its ``def`` only when the whole function fits): a module of
#: the table (asyncio's event loop, selectors, http.client) names its wait by the file alone.
UNNAMED = "<unknown>"


@functools.lru_cache(maxsize=65536)
def _row(function: str, file: str, native: bool) -> Primitive | None:
    name = function.split("@", 1)[0] if native else function  # "pthread_cond_wait@@GLIBC_2.3.2"
    if native:
        # glibc's internal aliases ("__GI___lll_lock_wait", "__GI_flock") and
        # gcc's clones ("do_futex_wait.constprop.0", "lll_lock_wait.isra.0") are the function itself.
        name = _plain(name)
    path = file.replace("\\", "/")
    unnamed = name == UNNAMED and not native
    by_file: list[Primitive] = []
    for p in PRIMITIVES:
        if p.native != native:
            continue
        if p.file is not None and p.file.search(path) is None:
            continue
        if unnamed:
            if p.file is not None and p.level == "block":
                by_file.append(p)
            continue
        if p.function.search(name) is not None:
            return p
    # A frame without its function names a wait by its file only when every row of that
    # file says the same (asyncio's base_events.py; not threading.py: a join, an event or a lock).
    if by_file and all(p.category == by_file[0].category for p in by_file):
        return by_file[0]
    return None


def primitive_of(frame: Frame) -> Primitive | None:
    """The table's row for this frame, or None. A frame given by name only (a hand-written
    chain, ``take_gil -> PyEval_RestoreThread``: no file, no library) may be a C function
    as well as a Python one. A nested function's qualified name, as py-spy prints it on
    Python 3.11+ (``block_until_ready.<locals>.try_to_block``), is read as the function
    (``block_until_ready.try_to_block``), else as the function it is nested in."""
    row = _row(frame.function, frame.file, frame.native)
    if row is None and not frame.native and ".<locals>." in frame.function:
        row = _row(frame.function.replace(".<locals>", ""), frame.file, False) or _row(
            frame.function.split(".<locals>.", 1)[0], frame.file, False)
    if row is None and not frame.native and frame.file in ("?", ""):
        row = _row(frame.function, frame.file, True)
    return row


def _package(frame: Frame) -> str:
    """The top-level package of a Python frame's file: the installed package ("torch" for
    ".../site-packages/torch/cuda/__init__.py"), else the first folder of a relative path
    ("datasets" for "datasets/builder.py"), else the module's name."""
    package = top_package(frame.file)
    if package:
        return package
    path = frame.file.replace("\\", "/")
    return path.rsplit("/", 1)[-1].removesuffix(".py")


def wait_of(thread: ThreadDump) -> Wait | None:
    """What ``thread`` waits on, or None when its innermost frames are its own code. A C
    library's wait inside an extension (``Wait.weak``: libpq's poll) gives way to the wait
    the Python call around the extension names (SQLAlchemy's ``do_execute``: a socket)."""
    w = _wait(thread.frames[:MAX_WAIT_FRAMES])
    if w is not None and w.weak:
        at = next((i for i, f in enumerate(thread.frames[:MAX_WAIT_FRAMES]) if not f.native), None)
        outer = _wait(thread.frames[at:at + MAX_WAIT_FRAMES]) if at else None
        if outer is not None and not outer.weak and outer.frames[0] == thread.frames[at]:
            # (the call right around the extension: a wait further out is another frame's;
            # and the native frames under it show it was not cut)
            return replace(outer, depth=outer.depth + at, cut=False)
    return w


def guessed_wait(thread: ThreadDump) -> Wait | None:
    """``wait_of``, else the wait the words of its innermost own frames name
    (``named_waits``: a cut traceback's ``_read_from_socket``, a C++ library's
    ``Mutex::Lock``), marked ``by_name``; None when neither says anything."""
    w = wait_of(thread)
    if w is not None or thread.active is True or thread.owns_gil:
        return w  # (a thread py-spy saw running Python code runs: its names are no wait)
    return _named(thread.frames[:MAX_WAIT_FRAMES])


@functools.lru_cache(maxsize=16384)
def _named(frames: tuple[Frame, ...]) -> Wait | None:
    named = named_wait(ThreadDump("", "", frames))
    if named is None:
        return None
    category, what, how, frame = named
    at = next(i for i, f in enumerate(frames) if f is frame)
    caller = next((f for f in frames[at + 1:] if not f.is_stdlib), None)
    label = {"name": f"the name `{frame.render()}`", "module": f"the module of `{frame.render()}`",
             "device": f"`{frame.render()}`, a device library's frame"}.get(
        how, f"`{frame.render()}`, a network client's frame")
    return Wait(category, what, (label,), (frame,), caller, True, at, by_name=True)


@functools.lru_cache(maxsize=16384)
def _wait(frames: tuple[Frame, ...]) -> Wait | None:
    matched: list[tuple[int, Frame, Primitive]] = []
    glue = 0
    caller: Frame | None = None
    driver_thread: bool | None = None
    for i, f in enumerate(frames):
        if matched and not f.native and _LOGGING_CALL.search(f.function) and _LOGGING_FILE.search(f.file):
            caller = f  # a logging call made inside a library's wait: the wait under it is the logging call's own
            break
        if not f.native and f.method == "_bootstrap" and _CHILD_BOOTSTRAP_FILE.search(f.file):
            # A multiprocessing child's entry: the frames out from it are its parent's (a
            # forked child runs on top of the parent's Popen._launch and start()), or the
            # spawn main that started it; no wait of this process is there.
            break
        p = primitive_of(f)
        if p is not None and p.level == "driver":
            if driver_thread is None:
                driver_thread = ThreadDump("", "", frames).driver_thread()
            if driver_thread:
                p = None
        if p is not None:
            matched.append((i, f, p))
            glue = 0
            continue
        if _glue(f, matched[-1][1], matched[-1][2]) if matched else (f.native or f.is_stdlib):
            glue += 1
            if matched and glue > MAX_GLUE:
                break  # the thread runs in the standard library past its wait: no caller to name
            continue
        caller = f
        break
    if not matched:
        return None
    outer = matched[-1]
    stop = outer[0] + 1 + min(glue, MAX_GLUE)
    # Some waits name the thread's wait wherever they sit (``NAMES_FROM_INSIDE``); else the
    # outermost match, the call the code made.
    naming = next((m for m in matched if m[2].category in NAMES_FROM_INSIDE), outer)
    if naming[2].category == GIL and all(_plain(m[1].function).startswith("PyCOND_") for m in matched if m[2].category == GIL):
        # CPython's condition variable is the GIL's on POSIX, but on Windows every Python
        # lock is built on it too (EnterNonRecursiveMutex): with no take_gil shown, a lock's
        # acquire further out says whose it is.
        naming = next((m for m in matched if m[2].category == "lock-wait" and m[0] > naming[0]), naming)
    if matched[0][1].file == "<call>" and outer[2].level == "call" and LEAF_CALL.match(matched[0][1].function):
        naming = matched[0]  # a C call the source line shows inside an API cut above its own frames
    category, what = naming[2].category, naming[2].what
    if matched[0][2].category == "sleep" and category in ("sleep", "lock-wait") and any(
            _POLLING_LOCK.search(f.function) for f in [m[1] for m in matched[1:]] + ([caller] if caller else [])):
        category, what = "file-lock-wait", "a lock polled by a sleep loop"
    elif category == "event-wait" and caller is not None and not caller.native and _POLLING_LOCK.search(caller.function):
        # A Condition waited on by a lock-like class's own acquire (a slot pool, a
        # hand-written semaphore or read-write lock): the thread waits for that lock.
        category, what = "lock-wait", "a lock (a Condition waited on by its acquire)"
    elif category == "event-wait" and caller is not None and not caller.native and _backs_off(caller.function):
        # An Event waited on by a retry loop's back-off (an interruptible sleep between
        # attempts: wandb's _sleep_check_cancelled, a client's backoff): the thread sleeps
        # between retries of something that keeps failing.
        category, what = "sleep", "a retry loop's back-off (an Event waited on between attempts)"
    elif (category == "queue-wait" and matched[0][2].category == "lock-wait" and len(matched) > 1
          and outer[1].function.rsplit(".", 1)[-1] in ("put", "put_nowait")):
        # A put blocked taking the queue's own lock (multiprocessing's Queue.put in its
        # Lock.__enter__): another thread holds that lock (or held it when the process
        # forked), the queue is not full. (A get waiting for the reader lock is an idle
        # pool worker queued behind the one that reads: a queue wait.)
        category, what = "lock-wait", "a queue's lock"
    if (outer[2].level == "driver" and category != GIL
            and any(m[2].category == "lock-wait" and _EXPLICIT_LOCK.search(_plain(m[1].function)) for m in matched)):
        # A mutex or read-write lock taken inside the driver (its profiler's, its context's):
        # the thread waits for that lock's holder, not for the device.
        category, what = "lock-wait", "a lock inside the driver"
    if (caller is not None and caller.native and category in _LIBC_WAITS and matched[-1][1].native
            and _ACCELERATOR_BACKEND.search(caller.file) is not None and not ThreadDump("", "", frames).driver_thread()):
        # A C library wait (an eventfd read, a futex, a condition) called by torch's
        # accelerator backend (libtorch_npu's stream, libtorch_cuda's events): the backend
        # waits for its device there.
        category, what = "cuda-synchronize-wait", "the accelerator (a wait inside its torch backend)"
    innermost_python = next((f for f in frames if not f.native), None)
    cut = matched[0][2].level == "call" and innermost_python is matched[0][1] and not any(f.native for f in frames[:matched[0][0]])
    labels: list[str] = []
    for _, f, p in reversed(matched):
        label = f"`{f.function}()` on the innermost source line" if f.file == "<call>" else p.label
        if not labels or labels[-1] != label:
            labels.append(label)
    return Wait(category, what, tuple(labels), tuple(f for _, f, _ in matched), caller, cut, stop)


_GLIBC_ALIAS = re.compile(r"^__GI_")
_CLONE_SUFFIX = re.compile(r"(\.(constprop|isra|part|cold|lto_priv)(\.\d+)?)+$")


def _plain(name: str) -> str:
    """A native function's name without glibc's ``__GI_`` alias prefix or gcc's clone suffix."""
    return _GLIBC_ALIAS.sub("", _CLONE_SUFFIX.sub("", name.split("@", 1)[0]))

#: Words that make a sleep-named caller a wait for something (``sleep_until_ready``).
_UNTIL = frozenset(("until", "for", "ready", "event", "wait", "signal", "signaled", "notified"))


def _backs_off(function: str) -> bool:
    """A caller named for a back-off (``backoff``, ``back_off``) or for a sleep
    (``_sleep_check_cancelled``, ``retry_sleep``), not for a sleep until something is ready
    (``sleep_until_ready`` waits on that)."""
    ws = words(function.rsplit(".", 1)[-1])
    if "backoff" in ws or any(a == "back" and b == "off" for a, b in zip(ws, ws[1:])):
        return True
    return bool(ws) and "sleep" in (ws[0], ws[-1]) and _UNTIL.isdisjoint(ws)


#: Native calls that take a lock by name (see ``Wait.weak``).
#: A thread joined by name (glibc's join and its internal forms across versions, macOS's
#: _pthread_join, C++'s std::thread::join, Rust's JoinHandle::join).
_EXPLICIT_JOIN = re.compile(r"^_{0,3}pthread_(clock|timed|try)?join(_common|_np|_ex)?$|^std::thread::join|"
                            r"(^|::)(JoinHandle|JoinInner)(<[^>]{0,300}>)?::join$")
_EXPLICIT_LOCK = re.compile(r"^(__)?pthread_(mutex|spin|rwlock)_\w*lock\w*$|^(__)?lll_lock_wait\w*$|^std::(shared_)?mutex::lock"
                            r"|^\w*_spin(lock)?_lock\w*$|EnterCriticalSection|^RtlpWaitOnCriticalSection$|AcquireSRWLock"
                            r"|(^|::)(Mutex::(Lock|LockSlow\w*|ReaderLock|WriterLock)|SpinLock::(Lock|SlowLock))$")

#: Native calls that block reading (or connecting) one descriptor (see ``Wait.weak``).
_BLOCKING_READ = re.compile(r"^(__)?(libc_)?(read|recv|recvfrom|recvmsg|accept4?|connect)(_nocancel)?$|^__GI___libc_read$")

#: A logging call: what waits under it (its lock) is the call's, whatever library made it.
_CHILD_BOOTSTRAP_FILE = re.compile(r"(^|/)(multiprocess(ing)?|billiard)/process\.py$")
_LOGGING_CALL = re.compile(r"^(\w+\.)?(debug|info|warning|warn|error|exception|critical|log|_log|isEnabledFor|handle|callHandlers)$")
_LOGGING_FILE = re.compile(r"(^|/)logging/(__init__|init)\.py$")
#: torch's accelerator backends (and the vendors' own torch plugins): a C library wait they
#: call is the device's.
_ACCELERATOR_BACKEND = re.compile(r"(^|/)(libtorch_npu|libtorch_xpu|libtorch_musa|libc10_npu|libc10_xpu|libtorch_gcu|libtorch_mlu)[\w.-]{0,40}\.so")
#: The C library's waits that say nothing of their own (see ``_ACCELERATOR_BACKEND``).
_LIBC_WAITS = frozenset(("socket-read", "event-wait", "lock-wait", "sleep"))

#: Native rows of the ecosystem (CUDA, NCCL, the c10d store, Ray): the job's own native
#: frames around them (libtorch, libc10) are the library's wrappers of that wait.
ECOSYSTEM_NATIVE = frozenset(("nccl-comm-init", "nccl-collective-wait", "store-wait", "cuda-synchronize-wait", "ray-get-wait"))


#: Native libraries that serve the standard library's own calls (TLS under ``ssl``,
#: compression, ctypes): a C wait under them is still that call's.
_STDLIB_NATIVE = re.compile(r"(^|/)(libssl|libcrypto|libz|libffi|libbz2|liblzma|libsqlite3|sqlite3|_ssl|_socket|_sqlite3|select|_posixsubprocess)[\w.-]{0,40}\.(so|pyd|dylib|dll)")


def _glue(f: Frame, last: Frame, row: Primitive) -> bool:
    """Whether ``f``, outside the table, still belongs to the wait whose last row matched
    ``last``: the standard library, the C library and the interpreter, the same Python
    package or native library; past an ecosystem row, any native frame (libtorch around
    a CUDA synchronize). Any other native frame (an extension, the driver) is the code
    that called a C library's wait (see ``Wait.weak``)."""
    if not f.native:
        return f.is_stdlib or (not last.native and _package(f) == _package(last))
    return (f.is_system_native or _STDLIB_NATIVE.search(f.file) is not None or (last.native and f.short_file == last.short_file)
            or (row.native and row.category in ECOSYSTEM_NATIVE))


def family_signature(category: str, signatures: Sequence[Signature]) -> Signature:
    """The stall a dump gets when the wait ``category`` is its only evidence: the built-in
    signature of that id where one exists (``lock-wait``, ``nccl-collective-wait``...),
    with a family's low priority, else one made from ``FAMILIES``."""
    return _family(category, tuple(s for s in signatures if s.id == category))


@functools.lru_cache(maxsize=256)
def _family(category: str, same_id: tuple[Signature, ...]) -> Signature:
    known = find(same_id, category)
    if known is not None:
        return Signature(known.id, known.title, known.advice, (), priority=min(known.priority, FAMILY_PRIORITY),
                         collective=known.collective, reference=known.reference)
    fam = FAMILIES.get(category)
    title = fam.title if fam else f"Waiting ({category})"
    advice = fam.advice if fam else "The thread waits in a blocking call: find what it waits for in the other stacks."
    return Signature(category, title, advice, (), priority=FAMILY_PRIORITY, reference="hangwatch's blocking-primitive table")


def named_family(wait: Wait, signatures: Sequence[Signature]) -> Signature:
    """The stall of a wait named ``by_name``: its family, below every wait the table shows
    (``FAMILY_PRIORITY`` - 1), its title saying it is a guess and from which name."""
    fam = family_signature(wait.category, signatures)
    return Signature(fam.id, f"{fam.title} (guessed from {wait.calls[0]}: no blocking call is shown)", fam.advice, (), priority=FAMILY_PRIORITY - 1, collective=fam.collective,
                     reference="hangwatch's named waits (the words of a frame's name)")


def refine(sig: Signature, thread: ThreadDump, signatures: Sequence[Signature]) -> Signature:
    """``sig``, unless it is the generic ``lock-wait`` and the thread's wait says better
    what it is (an Event or Condition, a queue, a join, a future, the GIL...), or a join
    at interpreter exit whose thread waits on a child process or a lock file."""
    if sig.id == "nccl-collective-wait" and _host_wait_in_nccl(thread):
        setup = find(tuple(signatures), "nccl-comm-init")
        if setup is not None:
            return setup
    if sig.id in ("nccl-comm-init", "nccl-collective-wait"):
        return _store_not_nccl(sig, thread, signatures)
    if sig.id == "h2d-copy-stuck":
        return _copy_to_host(sig, thread, signatures)
    if sig.id not in ("lock-wait", "shutdown-join"):
        return sig
    w = wait_of(thread)
    if w is None or w.category not in (REFINES_LOCK_WAIT if sig.id == "lock-wait" else REFINES_EXIT_JOIN):
        return sig
    if sig.id == "shutdown-join" and w.category == "subprocess-wait":
        # The exit joins a child process: the child is what never ends (the built-in
        # child-process-wait says so and how to dump it).
        child = find(tuple(signatures), "child-process-wait")
        if child is not None:
            return child
    return family_signature(w.category, signatures)


#: Frames that show a store wait serving NCCL's communicator setup (rank 0's unique id
#: fetched through the store): such a wait is the communicator's, not the store's.
_NCCL_SETUP = re.compile(r"(?i)nccl(GetUniqueId|CommInit|UniqueNCCLID|Comm\b)|getNCCLComm|initNCCLComm|UniqueNCCLID|pynccl")


#: NCCL's (and RCCL's) library and its collective entry points.
_NCCL_LIB = re.compile(r"(^|/)lib[nr]ccl[\w.-]{0,40}\.so")
_NCCL_COLLECTIVE = re.compile(r"^[nr]ccl(AllReduce|Broadcast|Bcast|Reduce|AllGather|ReduceScatter|Send|Recv|AlltoAll|GroupEnd)$")


def _host_wait_in_nccl(thread: ThreadDump) -> bool:
    """A C library wait (a condition, poll, a socket read) called by NCCL's own code under
    one of its collective calls: a collective only enqueues work on the host, so a thread
    blocked on the CPU inside it waits for the connections NCCL sets up lazily on first
    use (its bootstrap exchange with the other ranks), not for the collective itself."""
    frames = thread.frames[:MAX_WAIT_FRAMES]
    w = wait_of(thread)
    if w is None or w.category not in _LIBC_WAITS or w.caller is None or not _NCCL_LIB.search(w.caller.file):
        return False
    return any(f.native and _NCCL_COLLECTIVE.match(f.function) for f in frames)


def _store_not_nccl(sig: Signature, thread: ThreadDump, signatures: Sequence[Signature]) -> Signature:
    """``nccl-comm-init`` or a collective matched a thread whose innermost wait is the c10d
    store (a TCPStore client connecting, a store get, a store-based barrier, the elastic
    agent's exit barrier on the store): unless a frame of
    the thread shows the wait serves NCCL's communicator setup, the store is what it waits
    on (the master is unreachable, a rank never arrived) and ``store-wait`` names it."""
    w = wait_of(thread)
    if w is None or w.category != "store-wait":
        return sig
    if any(_NCCL_SETUP.search(f.function) or _NCCL_SETUP.search(f.file) for f in thread.frames[:MAX_WAIT_FRAMES]):
        return sig
    return family_signature("store-wait", signatures)


#: A copy from the device to the host: ``.item()``, ``.tolist()``, ``.cpu()`` of a result
#: (``_local_scalar_dense``, a DtoH memcpy). It waits for all work queued before it.
_TO_HOST = re.compile(r"DtoH|(^|::|\.)_?local_scalar_dense|(^|\.)(item|tolist)$|copy_device_to_host|D2H")
#: A copy to the device that a job's own helper makes (what h2d-copy-stuck is about).
_TO_DEVICE = re.compile(r"^(\w+\.)?(copy_to_device|to_device|_to_device|move_to_device|send_to_device|_move_to_device|recursively_apply)$|HtoD|H2D")


def _copy_to_host(sig: Signature, thread: ThreadDump, signatures: Sequence[Signature]) -> Signature:
    """``h2d-copy-stuck`` matched a memcpy that copies *to the host* (``.item()``): that
    copy synchronizes with the stream, so the thread waits for the GPU's queued work,
    ``cuda-synchronize-wait``, unless the stack shows a copy to the device."""
    frames = thread.frames[:MAX_WAIT_FRAMES]
    if any(_TO_DEVICE.search(f.function) for f in frames) or not any(_TO_HOST.search(f.function) for f in frames):
        return sig
    return family_signature("cuda-synchronize-wait", signatures)


def outranks_wrapper(thread: ThreadDump, evidence: Sequence[Frame]) -> bool:
    """True when ``thread`` sits in a blocking call (a collective, a synchronize, a lock)
    at the top of its stack and every frame of ``evidence`` (a wrapper signature's: a
    graph replay's or a compiled forward's wrapper) lies further out than that wait and
    the frame that called it."""
    w = wait_of(thread)
    if w is None or w.category not in BLOCKING_FAMILIES:
        return False
    # The wrapper calling the wait itself (a graph wrapper synchronizing its replay) is the
    # replay's own wait: the wrapper keeps it. Code between them (the wrapped model calling
    # a collective) makes the wait the model's own.
    inside = {id(f) for f in thread.frames[:w.depth + 1]}
    return bool(evidence) and not any(id(f) in inside for f in evidence)
