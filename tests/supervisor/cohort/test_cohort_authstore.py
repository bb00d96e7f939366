"""The cohort's authenticated store (a job with a secret): a stranger who reaches its port, on
real sockets, can neither read, write, erase nor list a key, nor keep the nodes from it."""

from __future__ import annotations

import json
import socket
import struct
import time

import pytest

from hangwatch.supervisor.cohort import authstore
from hangwatch.supervisor.cohort.authstore import MAGIC, NONCE, Client, Server, StoreRefused

SECRET = b"0123456789abcdef0123456789abcdef"
pytestmark = pytest.mark.timeout(30)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server():
    listener = socket.create_server(("127.0.0.1", 0))
    clock = Clock()
    srv = Server(listener, SECRET, clock=clock).start()
    srv.clock_ = clock
    yield srv
    srv.stop()
    listener.close()


def _client(srv: Server, secret: bytes = SECRET) -> Client:
    return Client("127.0.0.1", srv.listener.getsockname()[1], secret, timeout=2.0, connect_timeout=2.0)


def _stranger(srv: Server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", srv.listener.getsockname()[1]), timeout=2.0)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server dropped this connection (reads up to EOF; a reset counts)."""
    sock.settimeout(3.0)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def _wait(cond, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cond()


def test_a_node_with_the_secret_reads_and_writes_with_c10d_semantics(server):
    node = _client(server)
    node.set("k", "v")
    assert node.lookup("k") == b"v" and node.lookup("none") is None
    assert node.check(["k"]) and not node.check(["none"])
    assert node.add("c", 2) == 2 and node.add("c", 3) == 5
    assert node.compare_set("x", "", "a") == b"a"  # expected "" creates
    assert node.compare_set("x", "b", "c") == b"a"  # first writer wins
    assert node.compare_set("y", "b", "c") == b"b"  # absent, expected not "": c10d answers expected
    node.close()


def test_a_client_with_another_secret_is_refused_and_reads_nothing(server):
    _client(server).set("k", "v")
    with pytest.raises(StoreRefused, match="refused this node's secret"):
        _client(server, b"another secret of 32 bytes......")
    _wait(lambda: server.refused == 1)
    assert server.table.data == {"k": "v"}


@pytest.mark.parametrize("payload", [
    b"[" * 400_000,                                   # deep
    b"\xff\xfe" * 40,                                 # not UTF-8
    struct.pack(">I", 1 << 31) + b"x" * 60,           # a frame header claiming 2 GiB
    b'{"op": "set", "key": "stop", "value": "{\\"node\\": 0, \\"signal\\": 15}"}' + b" " * 64,  # a forged stop
    b'{"attempt": 1, "node": 0, "kind": "stall", "wall": NaN}' + b" " * 64,                    # non-finite
    b"\x00" * (NONCE + 32),                           # a handshake that guesses
], ids=["deep", "not-utf8", "huge-frame", "forged-stop", "non-finite", "guessed-proof"])
def test_a_stranger_without_the_secret_is_dropped_before_any_request_is_read(server, payload):
    node = _client(server)
    node.set("stop", "real")
    sock = _stranger(server)
    assert sock.recv(len(MAGIC) + NONCE, socket.MSG_WAITALL)[:len(MAGIC)] == MAGIC
    try:
        sock.sendall(payload)
    except (BrokenPipeError, ConnectionResetError):
        pass  # dropped while still sending: the point
    assert _closed_by_server(sock)
    sock.close()
    assert server.table.data == {"stop": "real"}
    assert node.lookup("stop") == b"real"  # the node's own connection never noticed


def test_a_stranger_who_says_nothing_is_dropped_after_the_handshake_time(server):
    sock = _stranger(server)
    _wait(lambda: len(server.conns) == 1)
    server.clock_.now += authstore.HANDSHAKE_S + 1
    assert _closed_by_server(sock)
    sock.close()


def test_a_flood_of_strangers_drops_their_connections_never_a_nodes(server, monkeypatch):
    monkeypatch.setattr(authstore, "MAX_CONNECTIONS", 8)
    node = _client(server)
    strangers = [_stranger(server) for _ in range(20)]
    try:
        late = _client(server)  # a node that connects during the flood gets in
        node.set("k", "v")
        assert late.lookup("k") == b"v"
        assert len(server.conns) <= 8
    finally:
        for s in strangers:
            s.close()


def test_a_frame_whose_mac_fails_drops_that_connection(server):
    node = _client(server)
    node.set("k", "v")
    body = json.dumps({"op": "set", "key": "k", "value": "forged"}).encode()
    node.sock.sendall(struct.pack(">I", len(body)) + b"\x00" * 32 + body)  # a frame injected into a node's session
    with pytest.raises(OSError):
        node.lookup("k")
    assert server.table.data == {"k": "v"}
    assert _client(server).lookup("k") == b"v"  # a new connection: the node goes on


def test_a_client_never_talks_to_a_store_that_does_not_hold_the_secret():
    """Someone listening on node 0's port once it died: not this job's store."""
    impostor = socket.create_server(("127.0.0.1", 0))
    fake = Server(impostor, b"the stranger's own secret.......").start()
    try:
        with pytest.raises(StoreRefused):
            Client("127.0.0.1", impostor.getsockname()[1], SECRET, timeout=1.0, connect_timeout=1.0)
    finally:
        fake.stop()
        impostor.close()


@pytest.mark.slow
def test_the_nodes_helpers_speak_through_it_and_a_node_with_another_secret_or_none_is_refused_saying_so():
    """Real store helpers, as the supervisors start them (the secret on the helper's stdin)."""
    from hangwatch.supervisor.cohort.store import StoreError, TCPStoreClient

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    host = TCPStoreClient("127.0.0.1", port, master=True, timeout=2.0, connect_timeout=10, secret=SECRET)
    try:
        assert host.authenticated and host.bound == "host"
        peer = TCPStoreClient("127.0.0.1", port, master=False, timeout=2.0, connect_timeout=10, secret=SECRET)
        peer.set("k", "v")
        assert host.get("k") == "v" and peer.get("none") is None and peer.add("c", 2) == 2
        peer.close()
        with pytest.raises(StoreError, match="refused this node's secret"):
            TCPStoreClient("127.0.0.1", port, master=False, timeout=2.0, connect_timeout=10,
                           secret=b"another secret of 32 bytes......")
        pytest.importorskip("torch.distributed")
        with pytest.raises(StoreError, match="authenticates its clients: give this node the job's secret"):
            TCPStoreClient("127.0.0.1", port, master=False, timeout=2.0, connect_timeout=10)
        assert host.get("k") == "v"
    finally:
        host.close()
