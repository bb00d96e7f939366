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

from hangwatch.diagnostics.stacks import Frame, ThreadDump

#: Innermost non-standard-library frames read for words (the first that says something wins).
FRAMES_READ = 2

#: Top-level packages of network clients (an HTTP, RPC, message-broker or database client,
#: a cloud SDK's transfer): their frames run on their server's answer.
NETWORK_PACKAGES = frozenset((
    "requests", "urllib3", "httpx", "httpcore", "aiohttp", "http", "httplib2", "grpc", "grpcio", "botocore", "boto3", "boto",
    "s3transfer", "s3fs", "gcsfs", "adlfs", "aiobotocore", "google", "paramiko", "pika", "kombu", "amqp", "aio_pika",
    "redis", "pymongo", "motor", "psycopg", "psycopg2", "pymysql", "MySQLdb", "mysql", "asyncpg", "aiomysql", "kafka",
    "confluent_kafka", "aiokafka", "websocket", "websockets", "zmq", "thrift", "elasticsearch", "opensearchpy", "ldap3",
    "smtplib", "ftplib", "imaplib", "poplib", "telnetlib", "xmlrpc", "suds", "zeep", "cassandra", "pysftp", "pexpect",
    "selenium", "nats", "pulsar", "etcd3", "kazoo", "consul", "hvac", "snowflake", "pyodbc", "cx_Oracle", "oracledb",
))


def _words(name: str) -> tuple[str, ...]:
    """``_read_from_socket`` -> read, from, socket; ``absl::Mutex::LockSlow`` -> absl,
    mutex, lock, slow; ``AcquireLock`` -> acquire, lock."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", name))
    return tuple(w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w)


def _has(*words: str) -> Callable[[tuple[str, ...], str], bool]:
    wanted = frozenset(words)
    return lambda ws, joined: not wanted.isdisjoint(ws)


def _joined(*pieces: str) -> Callable[[tuple[str, ...], str], bool]:
    """Words written together or apart (``allreduce``, ``all_reduce``, ``AllReduce``)."""
    return lambda ws, joined: any(p in joined for p in pieces)


#: (category, what, test) tried in order on a frame's words (``ws``) and its name with
#: the separators taken out (``joined``): the specific families before the generic ones.
WORDS: tuple[tuple[str, str, Callable[[tuple[str, ...], str], bool]], ...] = (
    ("file-lock-wait", "a file lock",
     lambda ws, joined: _has("flock", "lockf", "baton", "filelock", "lockfile", "pidlock", "pidfile")(ws, joined)
     or "filelock" in joined or "lockfile" in joined),
    ("nccl-collective-wait", "a collective",
     _joined("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "ncclcomm", "collective", "processgroup")),
    ("store-wait", "the distributed store", _joined("rendezvous", "tcpstore", "storebarrier", "c10dstore")),
    ("lock-wait", "a lock", _has("synchronized")),  # a lock decorator (Java's word), not a device synchronize
    ("cuda-synchronize-wait", "the GPU",
     lambda ws, joined: "synchronize" in ws or any(p in joined for p in ("cudasync", "devicesync", "streamsync", "streamwait"))),
    ("subprocess-wait", "a child process", _has("subprocess", "popen", "waitpid", "communicate", "wait4", "waitid")),
    ("socket-read", "a socket or a server's reply",
     _has("recv", "recvfrom", "recvmsg", "socket", "sock", "urlopen", "getresponse", "http", "https", "rpc", "grpc",
          "websocket", "download", "upload", "ssl", "handshake", "connect", "epoll")),
    ("queue-wait", "a queue", _has("queue", "dequeue", "mailbox", "inbox", "pipe")),
    ("lock-wait", "a lock", _has("lock", "locked", "acquire", "mutex", "rlock", "semaphore", "sem", "spinlock")),
    ("thread-join", "a thread", _has("join")),
    ("sleep", "a sleep", _has("sleep", "backoff")),
    ("event-wait", "an event or condition", _has("wait", "waiter", "condition", "condvar", "blocking")),
)


def named_category(frame: Frame) -> tuple[str, str, str] | None:
    """(category, what, how) the words of ``frame``'s function name say it waits on
    (how: "name"), or its package being a network client's (how: "package"); None when
    they say nothing."""
    name = frame.function
    ws = _words(name)
    joined = "".join(ws)
    for category, what, test in WORDS:
        if test(ws, joined):
            return category, what, "name"
    if not frame.native and _package(frame.file) in NETWORK_PACKAGES:
        return "socket-read", "a server's reply", "package"
    return None


def _package(path: str) -> str:
    path = path.replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/"):
        i = path.rfind(marker)
        if i != -1:
            return path[i + len(marker):].split("/", 1)[0]
    parts = [p for p in path.split("/") if p]
    # "/usr/lib/python3.11/smtplib.py": a standard-library module is its own package.
    return parts[-1].removesuffix(".py") if parts else ""


def named_frames(thread: ThreadDump) -> tuple[Frame, ...]:
    """The frames read for words: the innermost ones outside the standard library (named
    native frames of an extension count; the C library's and unnamed ones do not)."""
    out: list[Frame] = []
    for f in thread.frames:
        if len(out) >= FRAMES_READ:
            break
        if f.native and (f.is_system_native or f.function in ("?", "??", "")):
            continue
        if not f.native and f.is_stdlib and _package(f.file) not in NETWORK_PACKAGES:
            continue
        out.append(f)
    return tuple(out)


def named_wait(thread: ThreadDump) -> tuple[str, str, str, Frame] | None:
    """(category, what, how, frame): the first of ``named_frames`` whose name (or
    package) says what it waits on. None when none does."""
    for f in named_frames(thread):
        found = named_category(f)
        if found is not None:
            return found[0], found[1], found[2], f
    return None
