"""A small key-value store interface for the cohort, with the real backend and a fake.

``Store`` is what ``node.Cohort`` needs: set, non-blocking get, atomic add,
compare-and-set (first writer wins). ``TCPStoreClient`` drives the store over TCP
through ``store_helper`` (a process of its own: the supervisor never imports torch):
PyTorch's c10d ``TCPStore``, or with the job's secret the authenticated ``authstore``;
every call has a deadline. The tests' in-memory fake of
``Store`` (``tests/fakes.py``) has the same semantics.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import subprocess
import threading
import time
from typing import Protocol

from hangwatch.contract.pyexec import module_command
from hangwatch.contract.tools import HELPER_PIDS, _helpers_lock


class StoreError(RuntimeError):
    """The store could not be reached or answered with an error."""


class Store(Protocol):
    def set(self, key: str, value: str) -> None: ...

    def get(self, key: str) -> str | None: ...

    def add(self, key: str, amount: int = 1) -> int: ...

    def compare_set(self, key: str, expected: str, desired: str) -> str: ...

    def close(self) -> None: ...


class TCPStoreClient:
    """c10d ``TCPStore`` through the helper process; ``master=True`` hosts it."""

    _discarding = False  # inside a reply line that was too long: dropped up to its end

    def __init__(self, host: str, port: int, *, master: bool, timeout: float = 10.0,
                 connect_timeout: float = 60.0, secret: bytes | None = None) -> None:
        """``secret``: the job's cohort secret; with it the store is the authenticated one
        (``authstore``), which every node must then be given too."""
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._buf = b""
        try:
            self.proc = subprocess.Popen(
                module_command("hangwatch.supervisor.cohort.store_helper") + [host, str(port), "1" if master else "0",
                                                                       str(connect_timeout), str(timeout)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
            )
        except OSError as exc:
            raise StoreError(f"cannot start the cohort store helper: {exc}") from exc
        with _helpers_lock:
            HELPER_PIDS.add(self.proc.pid)  # ours, not the trainer's: never sampled or killed with the tree
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(((secret or b"").hex() + "\n").encode())  # its first line: never in argv
            self.proc.stdin.flush()
        except OSError:
            pass  # the helper died at once: its missing hello says so below
        try:
            hello = self._read(connect_timeout + 30.0)
        except BaseException:  # a stop while node 0 is awaited: the helper must not outlive us
            self.proc.kill()
            self.close()
            raise
        if not hello.get("ready"):
            self.close()
            error = str(hello.get("error", "no answer"))
            hint = ("this node (0) hosts it: is the port free on this host?" if master else
                    "node 0's store authenticates its clients: give this node the job's secret too "
                    "(--cohort-secret-file or $HANGWATCH_COHORT_SECRET)" if secret is None and ("Ping failed" in error or "authenticated store" in error) else
                    "node 0's supervisor hosts it: is hangwatch run started on node 0 with the same --cohort, "
                    "and the port reachable from this node?")
            where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # an IPv6 address as it is written
            if "secret" in error:  # the store's own refusal says what to do
                raise StoreError(f"cohort store at {where}: {error}")
            raise StoreError(f"cohort store at {where}: {error} ({hint})")
        self.port = int(hello["port"])
        #: "host": node 0's store listens on the --cohort host alone; "all": on every interface (the host is
        #: no address of this machine); None: this node only connects
        self.bound = hello.get("bound")
        #: whether the store authenticates every connection (the job's secret; ``authstore``)
        self.authenticated = bool(hello.get("authenticated"))

    def _read(self, timeout: float, want: int | None = None) -> dict:
        """The next reply line (the one answering request ``want``, when given), within ``timeout``.

        A call that timed out leaves its reply in the pipe, to arrive late: it is read
        and dropped here by its id, never taken for the answer to a later call.
        """
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while True:
            line, nl, rest = self._buf.partition(b"\n")
            if nl:
                self._buf = rest
                try:
                    reply = json.loads(line)
                except ValueError:
                    raise StoreError("unreadable reply from the cohort store helper") from None
                if not isinstance(reply, dict):
                    raise StoreError("unreadable reply from the cohort store helper")
                if want is None or reply.get("id") == want:
                    return reply
                continue  # a late answer to a call that already timed out
            left = deadline - time.monotonic()
            if left <= 0:
                raise StoreError(f"the cohort store did not answer within {timeout:g} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise StoreError(self._gone())
                if self._discarding:  # the rest of an oversized line: never read as replies of its own
                    _, nl, chunk = chunk.partition(b"\n")
                    self._discarding = not nl
                self._buf += chunk
                if len(self._buf) > 1 << 20 and b"\n" not in self._buf:
                    # A value too big for us (another job's, or someone's who reached the store): this
                    # call fails, and the line is dropped to its end, so the next call reads clean.
                    self._buf, self._discarding = b"", True
                    raise StoreError("oversized reply from the cohort store helper")

    def _call(self, op: str, **fields: object) -> object:
        with self._lock:
            if self.proc.poll() is not None:
                raise StoreError(self._gone())
            req_id = next(self._ids)
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write((json.dumps({"id": req_id, "op": op, **fields}) + "\n").encode())
                self.proc.stdin.flush()
            except OSError as exc:
                raise StoreError(f"the cohort store helper is gone: {exc}") from exc
            reply = self._read(self.timeout, want=req_id)
        if not reply.get("ok"):
            raise StoreError(str(reply.get("error")))
        return reply.get("value")

    def _gone(self) -> str:
        """Whose failure it is: this node's own helper died (killed, out of memory), not node 0's store."""
        code = self.proc.poll()
        return (f"this node's cohort store helper (pid {self.proc.pid}) exited"
                + (f" with status {code}" if code is not None else ""))

    def set(self, key: str, value: str) -> None:
        self._call("set", key=key, value=value)

    def get(self, key: str) -> str | None:
        value = self._call("get", key=key)
        return None if value is None else str(value)

    def add(self, key: str, amount: int = 1) -> int:
        value = self._call("add", key=key, amount=amount)
        if not isinstance(value, int):
            raise StoreError(f"the cohort store answered {value!r} to an add")
        return value

    def compare_set(self, key: str, expected: str, desired: str) -> str:
        return str(self._call("compare_set", key=key, expected=expected, desired=desired))

    def kill(self) -> None:
        """End the helper now (the store is lost: a call it is stuck in would hold ``close`` for seconds)."""
        try:
            self.proc.kill()
        except OSError:
            pass

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(timeout=5)
        with _helpers_lock:
            HELPER_PIDS.discard(self.proc.pid)
