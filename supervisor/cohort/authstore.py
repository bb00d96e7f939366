"""The cohort's own store for a job with a secret: every connection authenticated before it can read or write.

c10d's ``TCPStore`` has no client authentication: anyone who reaches its port lists the keys
(``list_keys``), overwrites or deletes any of them, and a MAC on each record cannot stop that
(a lease counter kept erased looks still: that node is taken for lost, the job ends). With a
secret, node 0's store helper serves this store instead, and the other nodes' helpers speak to
it; torch is not needed for it (standard library only).

The protocol, raw bytes (nothing is unpickled; every length is bounded):

* the server sends ``MAGIC`` and a 32-byte random challenge ``Ns``;
* the client sends its own challenge ``Nc`` and ``HMAC(secret, "client" Ns Nc)``; a client
  that does not, within ``HANDSHAKE_S``, is dropped before the server reads a request;
* the server answers ``HMAC(secret, "server" Ns Nc)``, so a client never talks to a store
  that does not hold the secret either (a stranger listening on node 0's port once it died);
* then frames, each way: a 4-byte length (at most ``MAX_FRAME``), a MAC under the session
  key ``HMAC(secret, "session" Ns Nc)`` over the direction, a sequence number and the body,
  and the body: one JSON object (a request ``{"op", "key", ...}`` or its reply).

Operations as c10d's: ``set``, ``get`` (non-blocking), ``check``, ``add``, ``compare_set``
(``expected=""`` creates). One thread serves every connection (``selectors``), so the number
of connections is capped (``MAX_CONNECTIONS``): when it is reached, the oldest connection not
yet authenticated is dropped, never an authenticated one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import selectors
import socket
import struct
import threading
import time
from typing import Any

MAGIC = b"hwstore1"
NONCE = 32
MAC = 32
MAX_FRAME = 256 * 1024  # a record is at most 64 KiB (values.MAX_VALUE_CHARS); JSON escapes may double it
MAX_KEY = 4096
MAX_CONNECTIONS = 128
HANDSHAKE_S = 5.0
MAX_PENDING_OUT = 4 * MAX_FRAME  # replies an authenticated client does not read: dropped past this


class StoreRefused(ConnectionError):
    """The other end is not this job's store, or not a client holding this job's secret."""


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


class Table:
    """The store's keys and values (c10d's semantics), shared by the server's connections and node 0's helper."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.lock = threading.Lock()

    def set(self, key: str, value: str) -> None:
        with self.lock:
            self.data[key] = value

    def get(self, key: str) -> str | None:
        with self.lock:
            return self.data.get(key)

    def check(self, keys: list[str]) -> bool:
        with self.lock:
            return all(k in self.data for k in keys)

    def add(self, key: str, amount: int) -> int:
        with self.lock:
            value = int(self.data.get(key, "0")) + amount
            self.data[key] = str(value)
            return value

    def compare_set(self, key: str, expected: str, desired: str) -> str:
        with self.lock:
            current = self.data.get(key)
            if (current is None and expected == "") or current == expected:
                self.data[key] = desired
                return desired
            return current if current is not None else expected

    def serve(self, req: Any) -> dict[str, Any]:
        """One request's reply; a malformed request is an error reply, never an exception."""
        try:
            op, key = req["op"], req.get("key", "")
            if not isinstance(key, str) or len(key) > MAX_KEY:
                raise ValueError("bad key")
            if op == "set":
                self.set(key, _str(req["value"]))
                return {"ok": True, "value": None}
            if op == "get":
                return {"ok": True, "value": self.get(key)}
            if op == "check":
                return {"ok": True, "value": self.check([key])}
            if op == "add":
                amount = req.get("amount", 1)
                if not isinstance(amount, int) or isinstance(amount, bool):
                    raise ValueError("bad amount")
                return {"ok": True, "value": self.add(key, amount)}
            if op == "compare_set":
                return {"ok": True, "value": self.compare_set(key, _str(req["expected"]), _str(req["desired"]))}
            raise ValueError(f"unknown op {str(op)[:40]!r}")
        except (KeyError, TypeError, ValueError) as exc:
            return {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("a value must be text")
    return value


class _Frames:
    """One authenticated connection's framing: sealing what it sends, opening what it receives."""

    def __init__(self, session: bytes, sends: bytes, receives: bytes) -> None:
        self.session, self.sends, self.receives = session, sends, receives
        self.sent = self.received = 0

    def seal(self, obj: Any) -> bytes:
        body = json.dumps(obj, separators=(",", ":")).encode()
        mac = _mac(self.session, self.sends, struct.pack(">Q", self.sent), body)
        self.sent += 1
        return struct.pack(">I", len(body)) + mac + body

    def take(self, buf: bytearray) -> Any | None:
        """The next whole frame's body from ``buf`` (consumed), None when it is not all there yet;
        ``StoreRefused`` for one too long or whose MAC fails."""
        if len(buf) < 4 + MAC:
            return None
        (size,) = struct.unpack(">I", buf[:4])
        if size > MAX_FRAME:
            raise StoreRefused(f"a frame of {size} bytes (at most {MAX_FRAME})")
        if len(buf) < 4 + MAC + size:
            return None
        mac, body = bytes(buf[4:4 + MAC]), bytes(buf[4 + MAC:4 + MAC + size])
        del buf[:4 + MAC + size]
        if not hmac.compare_digest(mac, _mac(self.session, self.receives, struct.pack(">Q", self.received), body)):
            raise StoreRefused("a frame whose MAC does not match")
        self.received += 1
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise StoreRefused("a frame that is not JSON") from exc


def _session(secret: bytes, ns: bytes, nc: bytes) -> bytes:
    return _mac(secret, b"session", ns, nc)


class _Conn:
    def __init__(self, sock: socket.socket, now: float) -> None:
        self.sock, self.opened = sock, now
        self.nonce = os.urandom(NONCE)
        self.inbuf = bytearray()
        self.outbuf = bytearray(MAGIC + self.nonce)
        self.frames: _Frames | None = None  # set once the client proved it holds the secret


class Server:
    """The authenticating store server: one thread, every connection on one selector."""

    def __init__(self, listener: socket.socket, secret: bytes, table: Table | None = None,
                 clock: Any = time.monotonic) -> None:
        self.listener, self.secret, self.clock = listener, secret, clock
        self.table = table or Table()
        self.conns: dict[socket.socket, _Conn] = {}
        self.refused = 0  # connections dropped for failing the handshake (a test reads it)
        self._sel = selectors.DefaultSelector()
        self._stop = threading.Event()
        listener.setblocking(False)
        self._sel.register(listener, selectors.EVENT_READ)
        self.thread = threading.Thread(target=self._loop, name="cohort-store", daemon=True)

    def start(self) -> "Server":
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=5)
        for sock in list(self.conns):
            self._drop(sock)
        self._sel.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            for key, events in self._sel.select(timeout=0.2):  # (how soon ``stop`` and a handshake's end are seen)
                if key.fileobj is self.listener:
                    self._accept()
                    continue
                sock = key.fileobj
                if sock not in self.conns:
                    continue
                try:
                    if events & selectors.EVENT_READ:
                        self._read(sock)
                    if sock in self.conns and events & selectors.EVENT_WRITE:
                        self._write(sock)
                except Exception:  # noqa: BLE001  (whatever one connection sent, the store serves on)
                    self._drop(sock, refused=self.conns.get(sock) is not None and self.conns[sock].frames is None)
            now = self.clock()
            for sock, conn in list(self.conns.items()):
                if conn.frames is None and now - conn.opened > HANDSHAKE_S:
                    self._drop(sock, refused=True)  # a stranger that holds a connection open, saying nothing

    def _accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        if len(self.conns) >= MAX_CONNECTIONS:
            pending = [c for c in self.conns.values() if c.frames is None]
            if not pending:
                sock.close()  # every slot holds a node of this job: a newcomer waits for its retry
                return
            self._drop(min(pending, key=lambda c: c.opened).sock, refused=True)
        sock.setblocking(False)
        conn = _Conn(sock, self.clock())
        self.conns[sock] = conn
        self._sel.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)

    def _read(self, sock: socket.socket) -> None:
        conn = self.conns[sock]
        want = (NONCE + MAC - len(conn.inbuf)) if conn.frames is None else 65536
        chunk = sock.recv(want)
        if not chunk:
            raise OSError("closed")
        conn.inbuf += chunk
        if conn.frames is None:
            if len(conn.inbuf) < NONCE + MAC:
                return
            nc, proof = bytes(conn.inbuf[:NONCE]), bytes(conn.inbuf[NONCE:NONCE + MAC])
            del conn.inbuf[:NONCE + MAC]
            if not hmac.compare_digest(proof, _mac(self.secret, b"client", conn.nonce, nc)):
                raise StoreRefused("the client does not hold the job's secret")
            conn.frames = _Frames(_session(self.secret, conn.nonce, nc), b"s", b"c")
            conn.outbuf += _mac(self.secret, b"server", conn.nonce, nc)
        while True:
            req = conn.frames.take(conn.inbuf)
            if req is None:
                break
            conn.outbuf += conn.frames.seal(self.table.serve(req) if isinstance(req, dict) else
                                            {"ok": False, "error": "not a request"})
        if len(conn.outbuf) > MAX_PENDING_OUT:
            raise OSError("the client reads none of its replies")
        self._write(sock)

    def _write(self, sock: socket.socket) -> None:
        conn = self.conns[sock]
        if conn.outbuf:
            try:
                sent = sock.send(conn.outbuf)
            except BlockingIOError:
                sent = 0
            del conn.outbuf[:sent]
        self._sel.modify(sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbuf else 0))

    def _drop(self, sock: socket.socket, refused: bool = False) -> None:
        self.conns.pop(sock, None)
        self.refused += refused
        try:
            self._sel.unregister(sock)
        except (KeyError, ValueError, OSError):
            pass
        sock.close()


class Client:
    """One authenticated connection to the store, every call bounded by ``timeout``.

    Any failure (the connection broke, a reply out of time, a store that is not this job's)
    raises ``OSError`` (``StoreRefused`` is one): the connection is then unusable, and the
    helper opens a new one for a later call.
    """

    def __init__(self, host: str, port: int, secret: bytes, *, timeout: float, connect_timeout: float) -> None:
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=connect_timeout)
        try:
            self.sock.settimeout(connect_timeout)
            hello = self._exactly(len(MAGIC) + NONCE, "its greeting")
            if hello[:len(MAGIC)] != MAGIC:
                raise StoreRefused("the store on that port is not a hangwatch store with a secret (is node 0 "
                                   "given the job's secret too?)")
            ns, nc = hello[len(MAGIC):], os.urandom(NONCE)
            self.sock.sendall(nc + _mac(secret, b"client", ns, nc))
            try:
                proof = self._exactly(MAC, "its proof")
            except OSError:
                raise StoreRefused("node 0's store refused this node's secret (every node needs the same "
                                   "--cohort-secret-file or $HANGWATCH_COHORT_SECRET)") from None
            if not hmac.compare_digest(proof, _mac(secret, b"server", ns, nc)):
                raise StoreRefused("the store on that port does not hold the job's secret")
            self.frames = _Frames(_session(secret, ns, nc), b"c", b"s")
            self.sock.settimeout(timeout)
        except BaseException:
            self.sock.close()
            raise
        self._buf = bytearray()

    def _exactly(self, n: int, what: str) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError(f"the store closed the connection before {what}")
            data += chunk
        return data

    def call(self, req: dict[str, Any]) -> Any:
        deadline = time.monotonic() + self.timeout
        self.sock.settimeout(self.timeout)
        self.sock.sendall(self.frames.seal(req))
        while True:
            reply = self.frames.take(self._buf)
            if reply is not None:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the cohort store did not answer within {self.timeout:g} s")
            self.sock.settimeout(left)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the cohort store closed the connection")
            self._buf += chunk
        if not isinstance(reply, dict) or not reply.get("ok"):
            raise ValueError(str(reply.get("error") if isinstance(reply, dict) else reply)[:200])
        return reply.get("value")

    # c10d's ``TCPStore`` methods, as the helper calls them (values as bytes), and ``lookup``
    def set(self, key: str, value: str) -> None:
        self.call({"op": "set", "key": key, "value": value})

    def lookup(self, key: str) -> bytes | None:
        """A non-blocking get in one round trip: None when the key is not there."""
        value = self.call({"op": "get", "key": key})
        return None if value is None else str(value).encode("utf-8", "surrogatepass")

    def check(self, keys: list[str]) -> bool:
        return all(self.call({"op": "check", "key": k}) for k in keys)

    def add(self, key: str, amount: int) -> int:
        return int(self.call({"op": "add", "key": key, "amount": amount}))

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        value = self.call({"op": "compare_set", "key": key, "expected": expected, "desired": desired})
        return str(value).encode("utf-8", "surrogatepass")

    def close(self) -> None:
        self.sock.close()


class LocalStore:
    """Node 0's helper's own view of its ``Table``, with the client's methods (no connection to fail)."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def set(self, key: str, value: str) -> None:
        self.table.set(key, value)

    def lookup(self, key: str) -> bytes | None:
        value = self.table.get(key)
        return None if value is None else value.encode("utf-8", "surrogatepass")

    def check(self, keys: list[str]) -> bool:
        return self.table.check(keys)

    def add(self, key: str, amount: int) -> int:
        return self.table.add(key, amount)

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        return self.table.compare_set(key, expected, desired).encode("utf-8", "surrogatepass")
