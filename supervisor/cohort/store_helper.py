"""The cohort store's helper process: the store, spoken to over a pipe.

Without a secret the store is PyTorch's c10d ``TCPStore``; with one it is the cohort's own
authenticated store (``authstore``: a stranger who reaches the port can neither read nor
write a key, nor list them), and torch is not needed.

The supervisor never imports torch (it must not share fate with CUDA), so it
runs this small process instead: ``python -P -m hangwatch.supervisor.cohort.store_helper
HOST PORT MASTER TIMEOUT_S CALL_TIMEOUT_S``, its first line on stdin the job's secret in hex
(or empty). With MASTER=1 it hosts the store (node 0's
supervisor does; torchrun's c10d rendezvous is hosted the same way), otherwise
it connects to it. Requests and replies are one JSON object per line on
stdin/stdout; a reply always answers, with ``ok: false`` and the error when the
store call failed (for example, node 0 is gone).

It dies with its supervisor: parent-death signal, and EOF on stdin.

A connection that breaks (reset by a switch, a firewall or a NAT dropping its state:
the store itself still up) fails that call, and the next call connects again: a c10d
client never reconnects by itself, so one reset failed every later call ("Broken
pipe") and the node took the live store for lost after its lease (75, the job ended).
"""

from __future__ import annotations

import ctypes
import datetime
import json
import os
import signal
import socket
import sys
import time

PR_SET_PDEATHSIG = 1
RECONNECT_S = 1.0  # how long one new connection may take (a call's own deadline is at least 2 s)
RECONNECT_EVERY_S = 1.0  # while the store cannot be reached, calls in between fail at once


MAX_VALUE_BYTES = 128 * 1024  # a longer value is cut to one byte past the reader's bound (``values.parse``)


def _text(value: bytes) -> str:
    """A stored value as text for the supervisor: bytes that are not UTF-8 as lone surrogates (its reader
    refuses those, rather than this call failing as if the store were down), cut past the readers' bound."""
    return value[:MAX_VALUE_BYTES + 1].decode("utf-8", "surrogateescape")


def _serve(store, line: str) -> dict:
    req = json.loads(line)
    op, key = req.get("op"), req.get("key", "")
    if op == "set":
        store.set(key, req["value"])
        return {"value": None}
    if op == "get":  # non-blocking: None when the key is not there yet
        if hasattr(store, "lookup"):  # the authenticated store: one round trip
            raw = store.lookup(key)
            return {"value": None if raw is None else _text(raw)}
        return {"value": _text(store.get(key)) if store.check([key]) else None}
    if op == "add":
        return {"value": int(store.add(key, int(req.get("amount", 1))))}
    if op == "compare_set":
        return {"value": _text(store.compare_set(key, req["expected"], req["desired"]))}
    if op == "ping":
        store.check(["__ping__"])
        return {"value": "pong"}
    raise ValueError(f"unknown op {op!r}")


def _listener(host: str, port: int) -> socket.socket | None:
    """A socket listening on ``host`` alone, for the store to serve on (c10d's own binds every interface).
    None when ``host`` is no address of this machine (a name for a proxy, a NAT): the store then listens
    everywhere, and the supervisor says so."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
    except OSError:
        return None
    _KEEP.append(sock)  # the store serves on its descriptor: it must stay open as long as this process
    return sock


_KEEP: list[object] = []  # sockets and servers that must live as long as this process


def _c10d(host: str, port: int, master: bool, timeout: float, call_timeout: float):
    """Without a secret: c10d's ``TCPStore`` (node 0 hosts it). Returns (store, reconnect, errors, bound)."""
    if not master and _greets_first(host, port):
        # c10d's client would retry its ping for longer than its timeout, then fail unexplained
        from hangwatch.supervisor.cohort.authstore import StoreRefused  # noqa: PLC0415

        raise StoreRefused("it greets as an authenticated store")
    from torch.distributed import DistNetworkError, TCPStore  # noqa: PLC0415  (only in this helper process)

    listener = _listener(host, port) if master else None
    bound = "host" if listener is not None else ("all" if master else None)
    server = TCPStore(host, port, None, master, datetime.timedelta(seconds=timeout), wait_for_workers=False,
                      **({"master_listen_fd": listener.fileno(), "use_libuv": True} if listener else {}))
    server.set_timeout(datetime.timedelta(seconds=call_timeout))
    _KEEP.append(server)  # node 0's ``server`` serves the store: kept whatever its own client socket does

    def reconnect():
        # A plain connect first: c10d's own retries a refused connection for seconds past
        # its timeout, and every call queued behind it (a lease round, each tick's poll)
        # would miss its deadline while node 0 is really gone.
        socket.create_connection((host, server.port), timeout=RECONNECT_S).close()
        store = TCPStore(host, server.port, None, False, datetime.timedelta(seconds=min(timeout, RECONNECT_S)),
                         wait_for_workers=False)
        store.set_timeout(datetime.timedelta(seconds=call_timeout))
        return store

    return server, reconnect, (DistNetworkError, OSError), bound, server.port


def _greets_first(host: str, port: int) -> bool:
    """Whether the store on the port speaks first, as the authenticated store does (c10d's waits for its
    client's ping): a node given no secret while node 0 was. False when nothing answers yet."""
    from hangwatch.supervisor.cohort.authstore import MAGIC  # noqa: PLC0415

    try:
        with socket.create_connection((host, port), timeout=RECONNECT_S) as probe:
            probe.settimeout(0.5)
            return probe.recv(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _authenticated(host: str, port: int, master: bool, timeout: float, call_timeout: float, secret: bytes):
    """With a secret: the cohort's own store (``authstore``), no torch; every connection proves it holds
    the secret before any byte of a request is read. Returns as ``_c10d``."""
    from hangwatch.supervisor.cohort.authstore import Client, LocalStore, Server, StoreRefused  # noqa: PLC0415

    if master:
        listener = _listener(host, port)
        bound = "host"
        if listener is None:  # the host is no address here (a proxy, a NAT): every interface
            bound = "all"
            dual = socket.has_dualstack_ipv6()
            listener = socket.create_server(("", port), family=socket.AF_INET6 if dual else socket.AF_INET,
                                            backlog=128, reuse_port=False, dualstack_ipv6=dual)
        server = Server(listener, secret).start()
        _KEEP.append(server)
        return LocalStore(server.table), None, (OSError,), bound, listener.getsockname()[1]

    def reconnect():
        return Client(host, port, secret, timeout=call_timeout, connect_timeout=RECONNECT_S)

    deadline = time.monotonic() + timeout
    while True:  # node 0 may not be up yet: wait for it, as c10d's client does, within the join's bound
        try:
            return (Client(host, port, secret, timeout=call_timeout,
                           connect_timeout=max(0.1, min(5.0, deadline - time.monotonic()))),
                    reconnect, (OSError,), None, port)
        except StoreRefused:
            raise
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no answer from the cohort store within {timeout:g} s ({exc})") from None
            time.sleep(0.5)


def main(argv: list[str]) -> int:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides when we stop
    host, port, master, timeout = argv[0], int(argv[1]), argv[2] == "1", float(argv[3])
    # Each call's own bound, once the store is up: the lease's third, not the join's timeout (a call
    # stuck for the join timeout held a cut-off node's shutdown for minutes).
    call_timeout = float(argv[4]) if len(argv) > 4 else timeout
    # The first line on stdin: the job's secret in hex, or empty (never on the command line, which
    # every user of the machine can read).
    secret = bytes.fromhex(sys.stdin.readline(4096).strip() or "") or None
    try:
        if secret is not None:
            store, reconnect, broken, bound, port = _authenticated(host, port, master, timeout, call_timeout, secret)
        else:
            store, reconnect, broken, bound, port = _c10d(host, port, master, timeout, call_timeout)
    except Exception as exc:  # noqa: BLE001  (reported to the supervisor, which explains it)
        print(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    print(json.dumps({"ready": True, "port": port, "bound": bound, "authenticated": secret is not None}), flush=True)
    retry_at = 0.0  # node 0's own store is kept whatever its socket does (``reconnect`` None)
    for line in sys.stdin:
        try:
            if store is None:  # the connection broke: a new one, at most once per RECONNECT_EVERY_S
                if time.monotonic() < retry_at:
                    raise ConnectionError("the connection to the cohort store broke; reconnecting")
                tried = time.monotonic()
                try:
                    store = reconnect()
                except Exception:
                    retry_at = tried + RECONNECT_EVERY_S  # (a connection that came back may break again at once)
                    raise
            reply = {"ok": True, **_serve(store, line)}
        except Exception as exc:  # noqa: BLE001
            if isinstance(exc, broken) and reconnect is not None:
                if store is not None and secret is not None:
                    store.close()  # (an authstore.Client: its socket; c10d's client closes itself)
                store = None  # this call fails; the next one connects again (the store may be fine)
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        try:
            req_id = json.loads(line).get("id")
        except ValueError:
            req_id = None
        print(json.dumps({"id": req_id, **reply}), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.pop("HANGWATCH_HEARTBEAT", None)
    sys.exit(main(sys.argv[1:]))
