"""The weight staging file lives in a directory every local user shares (/dev/shm)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

TRAINER_UID = 65534  # the trainer's user: not root, so the sticky bit binds it
OTHER_UID = 54321  # another local user


@pytest.mark.timeout(60)
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as two other users")
def test_another_user_cannot_make_a_weight_sync_fail_by_claiming_the_staged_name():
    """The staged file was renamed from ``NAME.safetensors.tmp`` to ``NAME.safetensors``: another
    user who listed the shared directory while the weights were written created ``NAME.safetensors``
    first, and in a sticky directory the trainer may not replace another user's file, so the
    rename failed with EPERM at every sync (reproduced with a trainer running as nobody)."""
    torch = pytest.importorskip("torch")
    from hangwatch.generator import staging

    # Below /tmp, not pytest's root-only tmp_path, so that the trainer's user reaches it.
    shared = Path(tempfile.mkdtemp(prefix="hostile3-shm-", dir="/tmp"))
    os.chmod(shared, 0o1777)  # like /dev/shm
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    result_r, result_w = os.pipe()
    original = staging._write

    def write_while_the_other_user_acts(out, plan):
        os.write(ready_w, b"x")
        os.read(go_r, 1)
        return original(out, plan)

    staging._write = write_while_the_other_user_acts
    try:
        pid = os.fork()
        if pid == 0:  # the trainer, as its own (non-root) user
            code = 1
            try:
                os.setresgid(TRAINER_UID, TRAINER_UID, TRAINER_UID)
                os.setresuid(TRAINER_UID, TRAINER_UID, TRAINER_UID)
                staged = staging.stage([("w", torch.ones(4))], str(shared))
                os.write(result_w, f"ok {staged.path}".encode())
                code = 0
            except BaseException as error:  # reported to the test, never raised in the fork
                os.write(result_w, f"{type(error).__name__}: {error}".encode())
            finally:
                os._exit(code)
        os.close(ready_w)
        ready_w = None
        assert os.read(ready_r, 1) == b"x", os.read(result_r, 4096)  # b"": the trainer failed first
        temp = [name for name in os.listdir(shared) if name.endswith(".tmp")]
        assert len(temp) == 1, temp
        # The other user claims every name the rename could be guessed to take.
        claimed = shared / temp[0][: -len(".tmp")]
        claimed.write_bytes(b"")
        os.chown(claimed, OTHER_UID, OTHER_UID)
        os.write(go_w, b"x")
        _, status = os.waitpid(pid, 0)
        answer = os.read(result_r, 4096).decode()
        staged = os.stat(answer[3:]) if answer.startswith("ok ") else None
    finally:
        staging._write = original
        for fd in (ready_r, ready_w, go_r, go_w, result_r, result_w):
            if fd is not None:
                os.close(fd)
        shutil.rmtree(shared, ignore_errors=True)
    assert os.waitstatus_to_exitcode(status) == 0 and answer.startswith("ok "), answer
    assert answer[3:] != str(claimed) and staged.st_uid == TRAINER_UID
    assert staged.st_mode & 0o077 == 0  # nobody else may read the weights
