"""The control socket: a private listener and runtime dir, and a handshake that is mutual and bound to the key."""

import os
import stat
import threading

import pytest

from hangwatch.generator import protocol
from hangwatch.generator.errors import AuthenticationFailed


def test_handshake_mutual_and_key_bound(tmp_path):
    path = str(tmp_path / "s.sock")
    listener = protocol.bind_listener(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    key = protocol.new_authkey()
    results = []

    def serve():
        for _ in range(2):
            conn, _ = listener.accept()
            try:
                protocol.server_handshake(conn, key, 2)
                results.append("ok")
            except AuthenticationFailed:
                results.append("refused")
            finally:
                conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    with pytest.raises(AuthenticationFailed):
        protocol.ControlClient(path, b"wrong" * 8, timeout=2)
    protocol.ControlClient(path, key, timeout=2).close()
    thread.join(5)
    listener.close()
    assert results == ["refused", "ok"]
    assert protocol.bind_listener(path).close() is None, "stale socket file is replaced"
    runtime = protocol.private_runtime_dir()
    assert stat.S_IMODE(os.stat(runtime).st_mode) == 0o700
    os.rmdir(runtime)
