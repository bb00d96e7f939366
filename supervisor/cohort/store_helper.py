"""The cohort store's helper process: PyTorch's c10d ``TCPStore``, spoken to over a pipe.

The supervisor never imports torch (it must not share fate with CUDA), so it
runs this small process instead: ``python -P -m hangwatch.supervisor.cohort.store_helper
HOST PORT MASTER TIMEOUT_S``. With MASTER=1 it hosts the store (node 0's
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


_KEEP: list[socket.socket] = []


def main(argv: list[str]) -> int:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides when we stop
    host, port, master, timeout = argv[0], int(argv[1]), argv[2] == "1", float(argv[3])
    # Each call's own bound, once the store is up: the lease's third, not the join's timeout (a call
    # stuck for the join timeout held a cut-off node's shutdown for minutes).
    call_timeout = float(argv[4]) if len(argv) > 4 else timeout
    try:
        from torch.distributed import DistNetworkError, TCPStore  # noqa: PLC0415  (only in this helper process)

        listener = _listener(host, port) if master else None
        bound = "host" if listener is not None else ("all" if master else None)
        server = TCPStore(host, port, None, master, datetime.timedelta(seconds=timeout), wait_for_workers=False,
                          **({"master_listen_fd": listener.fileno(), "use_libuv": True} if listener else {}))
    except Exception as exc:  # noqa: BLE001  (reported to the supervisor, which explains it)
        print(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    server.set_timeout(datetime.timedelta(seconds=call_timeout))
    print(json.dumps({"ready": True, "port": server.port, "bound": bound}), flush=True)
    store, retry_at = server, 0.0  # node 0's ``server`` also serves the store: it is kept whatever its socket does
    for line in sys.stdin:
        try:
            if store is None:  # the connection broke: a new one, at most once per RECONNECT_EVERY_S
                if time.monotonic() < retry_at:
                    raise DistNetworkError("the connection to the cohort store broke; reconnecting")
                retry_at = time.monotonic() + RECONNECT_EVERY_S
                # A plain connect first: c10d's own retries a refused connection for seconds past
                # its timeout, and every call queued behind it (a lease round, each tick's poll)
                # would miss its deadline while node 0 is really gone.
                socket.create_connection((host, server.port), timeout=RECONNECT_S).close()
                store = TCPStore(host, server.port, None, False, datetime.timedelta(seconds=min(timeout, RECONNECT_S)),
                                 wait_for_workers=False)
                store.set_timeout(datetime.timedelta(seconds=call_timeout))
            reply = {"ok": True, **_serve(store, line)}
        except Exception as exc:  # noqa: BLE001
            if isinstance(exc, (DistNetworkError, OSError)):
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
