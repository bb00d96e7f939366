"""A wait named from the words in a frame's name, when no blocking call is shown. Pure.

The table in ``primitives`` names the blocking calls hangwatch knows. A stack often ends
above them: a Ctrl-C traceback stops at the program's line that made a C call, a
faulthandler dump or a paste is cut, a library wraps its wait in its own frames
(``_read_from_socket``, ``acquire_lock``, ``wait_for_peer``), a native stack shows a
C++ library's own mutex (``absl::Mutex::Lock``). The words in those names still say
what the thread waits on, in any library: ``recv`` and ``socket`` a socket, ``lock`` and
``acquire`` a lock, ``join`` a thread, ``all_reduce`` a collective. A frame in a network
client's package (``urllib3``, ``botocore``, ``pika``...) waits on the network.

Only the innermost frames that are not the standard library are read (a word further
out is the program's plan, not where it stopped), and only when the table matched
nothing. The wait is marked ``by_name``: a guess a report says is one.

To add a word: put it in the family's row of ``WORDS`` (or a package in
``NETWORK_PACKAGES``) and a case in tests/diagnostics/test_named_waits.py.
"""

from __future__ import annotations

import re
from typing import Callable

from hangwatch.diagnostics.stacks import Frame, ThreadDump, site_package, top_package

#: Innermost non-standard-library frames read for words (the first that says something
#: wins, but a bare "wait" gives way to one further out that names what is waited for).
FRAMES_READ = 2

#: Top-level packages of network clients (an HTTP, RPC, message-broker or database client,
#: a cloud SDK's transfer): their frames run on their server's answer.
NETWORK_PACKAGES = frozenset((
    "requests", "urllib3", "httpx", "httpcore", "aiohttp", "http", "httplib2", "grpc", "grpcio", "botocore", "boto3", "boto",
    "s3transfer", "s3fs", "gcsfs", "adlfs", "aiobotocore", "googleapiclient", "paramiko", "pika", "kombu", "amqp", "aio_pika",
    "redis", "pymongo", "motor", "psycopg", "psycopg2", "pymysql", "MySQLdb", "mysql", "asyncpg", "aiomysql", "kafka",
    "confluent_kafka", "aiokafka", "websocket", "websockets", "zmq", "thrift", "elasticsearch", "opensearchpy", "ldap3",
    "suds", "zeep", "cassandra", "pysftp", "pexpect",
    "selenium", "nats", "pulsar", "etcd3", "kazoo", "consul", "hvac", "snowflake", "pyodbc", "cx_Oracle", "oracledb",
))


#: Top-level packages of device I/O (a serial port, USB, HID, instruments, CAN): their reads
#: wait for the device's next bytes (pyserial's ``read`` with no timeout set).
DEVICE_PACKAGES = frozenset(("serial", "usb", "hid", "pyvisa", "can", "pyftdi", "smbus", "smbus2", "bluetooth", "bleak"))


def words(name: str) -> tuple[str, ...]:
    """``_read_from_socket`` -> read, from, socket; ``absl::Mutex::LockSlow`` -> absl,
    mutex, lock, slow; ``AcquireLock`` -> acquire, lock."""
    # (lookaheads, not a run of capitals then a capital: linear on a long all-caps name)
    spaced = re.sub(r"([a-z0-9])(?=[A-Z])", r"\1 ", re.sub(r"([A-Z])(?=[A-Z][a-z])", r"\1 ", name[:MAX_NAME]))
    return tuple(w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w)


#: Characters of a name read (C++ names with their templates can be very long).
MAX_NAME = 300


Test = Callable[[tuple[str, ...]], bool]


def _has(*words: str) -> Test:
    wanted = frozenset(words)
    return lambda ws: not wanted.isdisjoint(ws)


def _phrase(*phrases: str) -> Test:
    """Words written together or apart, as whole words: ``all_reduce``, ``allreduce`` and
    ``AllReduce`` for "all reduce"; never inside another word (``install_to_all_hosts``
    holds no "all to all")."""
    split = [tuple(p.split()) for p in phrases]
    joined = frozenset("".join(p) for p in split)

    def test(ws: tuple[str, ...]) -> bool:
        if not joined.isdisjoint(ws):
            return True
        return any(ws[i:i + len(p)] == p for p in split if len(p) > 1 for i in range(len(ws) - len(p) + 1))
    return test


def _with(first: Test, *context: str) -> Test:
    """``first`` and one of the ``context`` words: "broadcast" is a collective next to
    "dist", "rank" or "params", numpy's shape broadcasting otherwise."""
    ctx = frozenset(context)
    return lambda ws: first(ws) and not ctx.isdisjoint(ws)


#: A name that asks or reads a state (``is_locked``, ``has_lock``, ``get_lock``) does not wait.
_PREDICATE = frozenset(("is", "has", "get", "set", "check", "can", "should", "make", "create", "new", "build", "init", "release",
                        "unlock", "try", "non", "no"))

#: (category, what, test) tried in order on a frame's words: the specific families before
#: the generic ones.
WORDS: tuple[tuple[str, str, Test], ...] = (
    ("file-lock-wait", "a file lock", _phrase("file lock", "lock file", "flock", "lockf", "pid lock", "pid file", "file baton")),
    ("nccl-collective-wait", "a collective",
     lambda ws: _phrase("all reduce", "all gather", "reduce scatter", "all to all", "nccl comm", "collective",
                        # pipeline parallelism's point-to-point exchanges between stages
                        "isend", "irecv", "p2p ops", "recv forward", "recv backward", "send forward", "send backward")(ws)
     or _with(_has("broadcast", "barrier"), "dist", "distributed", "rank", "ranks", "comm", "group", "params", "parameters",
              "object", "objects", "buffers", "nccl", "gloo", "hvd", "process")(ws)),
    ("store-wait", "the distributed store", _phrase("rendezvous", "tcp store", "store barrier", "c10d store")),
    ("lock-wait", "a lock", _has("synchronized")),  # a lock decorator (Java's word), not a device synchronize
    ("cuda-synchronize-wait", "the GPU",
     _phrase("synchronize", "cuda sync", "device sync", "stream sync", "stream wait", "event sync")),
    ("subprocess-wait", "a child process", _has("subprocess", "popen", "waitpid", "communicate", "wait4", "waitid")),
    ("socket-read", "a socket or a server's reply",
     _has("recv", "recvfrom", "recvmsg", "socket", "sock", "urlopen", "getresponse", "http", "https", "rpc", "grpc",
          "websocket", "download", "upload", "ssl", "handshake", "connect", "epoll")),
    ("queue-wait", "a queue", _has("queue", "dequeue", "mailbox", "inbox", "pipe")),
    ("lock-wait", "a lock", _has("lock", "acquire", "mutex", "rlock", "semaphore", "spinlock")),
    ("thread-join", "a thread", _with(_has("join"), "thread", "threads", "worker", "workers", "process", "processes", "pool",
                                      "all", "children", "child")),
    ("sleep", "a sleep", _has("sleep", "backoff")),
    ("event-wait", "an event or condition", _has("wait", "waiter", "condition", "condvar")),
)


#: Words of a file's path that make it I/O code: its ``close`` flushes a file, a stream or a
#: connection (hdfs_native's ``close`` waits for the NameNode), it stops no thread.
_IO_PATH: Test = _has("io", "file", "files", "fs", "hdfs", "s3", "gcs", "stream", "streams", "socket", "http",
                      "conn", "connection", "connections", "db", "sql", "storage", "writer", "reader")

#: Verbs of a call that stops something, and what it may name after the verb: a Python call
#: that stops, closes or shuts down a thing with threads waits for them to end (an executor's
#: ``shutdown``, a consumer's ``close``, ``stop_channels``, ``shutdown_workers``), a
#: ``stop_words`` or a ``stop_profiler`` does not. (A native library's ``close`` flushes to
#: its file or server instead, as does a network client's.)
_STOP_VERBS = frozenset(("stop", "close", "shutdown", "terminate", "cancel", "teardown"))
_STOPPED = frozenset(("thread", "threads", "worker", "workers", "pool", "pools", "executor", "executors", "consumer",
                      "consumers", "manager", "managers", "channel", "channels", "server", "servers", "service", "services",
                      "loop", "loops", "all", "listener", "listeners", "scheduler", "background", "child", "children",
                      "process", "processes", "daemon", "heartbeat", "monitor", "watcher", "engine", "engines"))


def _stops(ws: tuple[str, ...]) -> bool:
    return bool(ws) and ws[0] in _STOP_VERBS and all(w in _STOPPED for w in ws[1:])


#: (category, what, test) tried on the words of a module's name (see ``named_category``).
MODULE_WORDS: tuple[tuple[str, str, Test], ...] = (
    ("file-lock-wait", "a file lock", _phrase("file lock", "lock file", "file baton")),
    ("nccl-collective-wait", "a pipeline stage's send or receive", _phrase("p2p communication", "p2p comm")),
    ("nccl-collective-wait", "a collective", _phrase("all reduce", "all gather", "reduce scatter", "all to all", "collective",
                                                     "collectives")),
    ("store-wait", "the distributed store", _phrase("rendezvous", "tcp store", "c10d store")),
)


#: Protocol words of an installed library's module (see ``named_category``).
_NETWORK_MODULE: Test = _has("http", "https", "ftp", "sftp", "webhdfs", "socket", "sockets", "rpc", "grpc", "websocket",
                             "websockets", "ssh", "smb")


#: Words of a function that does I/O (see ``_NETWORK_MODULE``).
_IO_CALL: Test = _has("read", "readinto", "recv", "fetch", "open", "send", "request", "urlopen", "download", "upload",
                      "connect", "cat", "stream", "get", "put", "post")


def named_category(frame: Frame) -> tuple[str, str, str] | None:
    """(category, what, how) the words of ``frame``'s function name say it waits on
    (how: "name"), or its package being a network client's (how: "package") or a device
    library's (how: "device"), or its
    module's name (how: "module"); None when they say nothing."""
    ws = words(frame.function)
    if ws and ws[0] not in _PREDICATE:
        for category, what, test in WORDS:
            if test(ws):
                if category == "subprocess-wait" and "communicate" in ws and not frame.native:
                    # Popen.communicate's word; a module named for peers' communication
                    # (Megatron's p2p_communication._communicate) exchanges with a peer rank
                    module = _module_category(_stem(frame))
                    if module is not None:
                        return module
                return category, what, "name"
    if not frame.native and top_package(frame.file) in NETWORK_PACKAGES:
        return "socket-read", "a server's reply", "package"
    if not frame.native and top_package(frame.file) in DEVICE_PACKAGES:
        return "socket-read", "a device's data (a serial port, USB)", "device"
    if not frame.native and _stops(words(frame.function.rsplit(".", 1)[-1])) and not _IO_PATH(words(frame.file)):
        return "thread-join", "the threads it stops", "name"
    if not frame.native:
        # The module's name, when the function's says nothing: a helper of a module named
        # for its wait (``_gather_ipc_meta`` in custom_all_reduce.py). Only the phrases no
        # module is named for unless it waits: an http.py parses as much as it reads.
        stem = _stem(frame)
        module = _module_category(stem)
        if module is not None:
            return module
        if site_package(frame.file) and _NETWORK_MODULE(stem) and _IO_CALL(words(frame.function)):
            # An installed library's module named for a protocol (fsspec's
            # implementations/http.py, a client's transport/sftp.py), in a function named for
            # I/O: its reads are the network's (werkzeug's http.py parse_options_header parses).
            return "socket-read", "a server's reply", "module"
    return None


def _stem(frame: Frame) -> tuple[str, ...]:
    """The words of a Python frame's module name (``p2p_communication.py`` -> p2p, communication)."""
    return words(frame.file.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".py").removesuffix(".pyx"))


def _module_category(stem: tuple[str, ...]) -> tuple[str, str, str] | None:
    """(category, what, "module") that the words of a module's name (``_stem``) say."""
    for category, what, test in MODULE_WORDS:
        if test(stem):
            return category, what, "module"
    return None


def named_frames(thread: ThreadDump) -> tuple[Frame, ...]:
    """The frames read for words: the innermost ones outside the standard library (named
    native frames of an extension count; the C library's and unnamed ones do not)."""
    out: list[Frame] = []
    for f in thread.frames:
        if len(out) >= FRAMES_READ:
            break
        if f.native and (f.is_system_native or f.function in ("?", "??", "")):
            continue
        if not f.native and f.is_stdlib:
            continue
        out.append(f)
    return tuple(out)


def named_wait(thread: ThreadDump) -> tuple[str, str, str, Frame] | None:
    """(category, what, how, frame): the first of ``named_frames`` whose name (or
    package) says what it waits on; a bare "wait" (an event's) gives way to a frame
    further out that says more. None when none does."""
    generic: tuple[str, str, str, Frame] | None = None
    for f in named_frames(thread):
        found = named_category(f)
        if found is None:
            continue
        if found[0] != "event-wait":
            return found[0], found[1], found[2], f
        # "wait" alone says least: the caller's words may say what is waited for (torch's
        # op ``wait`` under ZeRO-3's ``AllGatherCoalescedHandle.wait``: a collective).
        generic = generic or (found[0], found[1], found[2], f)
    return generic
