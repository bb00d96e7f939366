"""The control socket: private runtime dir, mutual HMAC handshake, JSON frames, request ids.

Invariants:
* Nothing a peer sends is parsed until it has proven it holds the key: the
  handshake exchanges fixed-size raw byte strings only, and every message
  after it is JSON (``json.loads``), never pickle, so even an authenticated
  peer cannot make us run code.
* Authentication is mutual (the client checks the server too) and bound to
  fresh nonces from both sides, so a recorded handshake cannot be replayed.
* The socket lives in a 0700 directory and is created 0600 (umask around
  bind, so there is no window where it is wider); a stale socket file is
  removed before bind.
* Every blocking call has a deadline from ``time.monotonic()``.
* A reply whose ``id`` is not the current request's is a late answer to an
  abandoned request and is skipped, whatever it says (also when it is an error).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets
import socket
import struct
import tempfile
import time
from dataclasses import dataclass
from hashlib import sha256
from typing import Any, Callable

from hangwatch.contract import ownerlock
from hangwatch.generator.errors import AuthenticationFailed, ProtocolError, WorkerDied, WorkerTimeout

NONCE_BYTES = 32
MAC_BYTES = 32
MAX_FRAME = 256 * 1024 * 1024
_HEADER = struct.Struct(">I")


def new_authkey() -> bytes:
    return secrets.token_bytes(32)


def private_runtime_dir(prefix: str = "hangwatch-gen-") -> str:
    """A fresh 0700 directory (``mkdtemp`` creates it 0700 atomically), named after
    this process so that ``sweep_runtime_dirs`` can tell when its owner is gone."""
    base = _runtime_base()
    sweep_runtime_dirs(prefix, base)
    path = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=base)
    ownerlock.hold(path)  # while we live, no sweeper (in any pid namespace) takes it for an orphan
    return path


def sweep_runtime_dirs(prefix: str = "hangwatch-gen-", base: str | None = None) -> list[str]:
    """Remove runtime dirs whose owning process died without cleaning up (a trainer
    SIGKILLed after a wedge). Only our own naming, only real directories of ours
    (never a symlink: this is /tmp), only when the owner is certainly dead (its lock
    is free and its pid does not exist, ``contract.ownerlock``), and only the socket
    inside: anything else there keeps the directory."""
    base = base or _runtime_base() or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(base)
    except OSError:
        return removed
    for name in names:
        owner = name[len(prefix):].split("-", 1)[0] if name.startswith(prefix) else ""
        if not owner.isdigit():
            continue
        path = os.path.join(base, name)
        fd = ownerlock.abandoned(path, int(owner), directory=True)
        if fd is None:
            continue
        try:
            with contextlib.suppress(OSError):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink("control.sock", dir_fd=fd)  # relative to the directory we locked
                os.rmdir(path)
                removed.append(name)
        finally:
            os.close(fd)
    return removed


def _runtime_base() -> str | None:
    base = os.environ.get("XDG_RUNTIME_DIR")
    return base if base and os.path.isdir(base) else None


def bind_listener(path: str, backlog: int = 4) -> socket.socket:
    """Bind a Unix socket at ``path`` with mode 0600, removing a stale one first."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(backlog)
    return sock


def _mac(key: bytes, role: bytes, nonce_a: bytes, nonce_b: bytes) -> bytes:
    return hmac.new(key, role + nonce_a + nonce_b, sha256).digest()


def _recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    chunks, got = [], 0
    while got < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WorkerTimeout(f"timed out reading {n} bytes from the control socket")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(min(n - got, 1 << 20))
        except socket.timeout:
            raise WorkerTimeout(f"timed out reading {n} bytes from the control socket") from None
        if not chunk:
            raise WorkerDied("control socket closed by peer")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _send_all(sock: socket.socket, data: bytes, deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise WorkerTimeout("timed out writing to the control socket")
    sock.settimeout(remaining)
    try:
        sock.sendall(data)
    except socket.timeout:
        raise WorkerTimeout("timed out writing to the control socket") from None
    except (BrokenPipeError, ConnectionResetError) as error:
        raise WorkerDied(f"control socket closed by peer ({error})") from None


def server_handshake(sock: socket.socket, key: bytes, timeout: float) -> None:
    """Server side: challenge first, read exactly MAC+nonce bytes, answer only a good MAC."""
    deadline = time.monotonic() + timeout
    nonce_s = secrets.token_bytes(NONCE_BYTES)
    _send_all(sock, nonce_s, deadline)
    answer = _recv_exact(sock, MAC_BYTES + NONCE_BYTES, deadline)
    mac, nonce_c = answer[:MAC_BYTES], answer[MAC_BYTES:]
    if not hmac.compare_digest(mac, _mac(key, b"client", nonce_s, nonce_c)):
        raise AuthenticationFailed("peer failed the HMAC challenge")
    _send_all(sock, _mac(key, b"server", nonce_c, nonce_s), deadline)


def client_handshake(sock: socket.socket, key: bytes, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    nonce_s = _recv_exact(sock, NONCE_BYTES, deadline)
    nonce_c = secrets.token_bytes(NONCE_BYTES)
    _send_all(sock, _mac(key, b"client", nonce_s, nonce_c) + nonce_c, deadline)
    try:
        proof = _recv_exact(sock, MAC_BYTES, deadline)
    except WorkerDied:
        raise AuthenticationFailed("server closed the connection during the handshake (wrong key?)") from None
    if not hmac.compare_digest(proof, _mac(key, b"server", nonce_c, nonce_s)):
        raise AuthenticationFailed("server failed the HMAC challenge")


def send_message(sock: socket.socket, message: dict[str, Any], deadline: float) -> None:
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"message of {len(body)} bytes exceeds the {MAX_FRAME}-byte frame limit")
    _send_all(sock, _HEADER.pack(len(body)) + body, deadline)


def recv_message(sock: socket.socket, deadline: float) -> dict[str, Any]:
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size, deadline))
    if size > MAX_FRAME:
        raise ProtocolError(f"frame of {size} bytes exceeds the {MAX_FRAME}-byte limit")
    try:
        message = json.loads(_recv_exact(sock, size, deadline))
    except ValueError as error:
        raise ProtocolError(f"undecodable frame: {error}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"frame is a {type(message).__name__}, not an object")
    return message


@dataclass
class Reply:
    """What came back for one request. ``ok`` False: ``error`` = {"type", "message"}."""

    id: int
    ok: bool
    result: Any = None
    error: dict[str, str] | None = None


class ControlClient:
    """The trainer's end of the control socket.

    ``alive`` (optional) is polled while waiting so that a dead worker is
    reported as ``WorkerDied`` at once instead of at the deadline.
    """

    POLL_S = 0.2

    def __init__(self, path: str, key: bytes, *, timeout: float, alive: Callable[[], bool] | None = None):
        self._alive = alive
        self._next_id = 0
        self.skipped_replies = 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(path)
            client_handshake(self.sock, key, timeout)
        except BaseException:
            self.sock.close()
            raise

    def close(self) -> None:
        self.sock.close()

    def request(self, op: str, timeout: float, **args: Any) -> Reply:
        """Send ``op`` and wait for ITS reply (matched by id) until the deadline."""
        deadline = time.monotonic() + timeout
        self._next_id += 1
        request_id = self._next_id
        send_message(self.sock, {"id": request_id, "op": op, "args": args}, deadline)
        while True:
            message = self._recv_polling(deadline, op, timeout)
            reply_id = message.get("id")
            if reply_id != request_id:
                # A late reply to a request we abandoned (it timed out): never
                # take it for this one, even if it happens to have the same shape.
                self.skipped_replies += 1
                continue
            return Reply(id=request_id, ok=bool(message.get("ok")), result=message.get("result"),
                         error=message.get("error"))

    def _recv_polling(self, deadline: float, op: str, timeout: float) -> dict[str, Any]:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerTimeout(f"worker did not answer {op!r} within {timeout:.1f} s")
            readable = self._wait_readable(min(remaining, self.POLL_S))
            if readable:
                try:
                    return recv_message(self.sock, deadline)
                except WorkerTimeout:
                    raise WorkerTimeout(f"worker did not answer {op!r} within {timeout:.1f} s") from None
            if self._alive is not None and not self._alive():
                raise WorkerDied(f"worker exited while answering {op!r}")

    def _wait_readable(self, seconds: float) -> bool:
        import select

        readable, _, _ = select.select([self.sock], [], [], max(0.0, seconds))
        return bool(readable)
