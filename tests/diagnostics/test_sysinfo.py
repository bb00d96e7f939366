"""System information in a capture: only regular files are ever opened, never a FIFO or a
device the trainer's user names."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.timeout(60)
def test_the_capture_never_opens_a_fifo_or_device_the_trainers_user_names(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The versions step reads the trainer's venv, which a dropped-privilege trainer's user owns:
    a FIFO named ``METADATA`` was opened by root's capture (reproduced with a ``setpriv`` trainer:
    their writer, waiting for a reader, went on), and so would a device bind-mounted in their mount
    namespace on a path through ``/proc/PID/root``. Only regular files are ever opened; a regular
    METADATA is still read, and a log tail that is not a regular file is refused."""
    import os

    from hangwatch.diagnostics import sysinfo

    site = tmp_path / "site-packages"
    (site / "torch-2.9.0.dist-info").mkdir(parents=True)
    os.mkfifo(site / "torch-2.9.0.dist-info" / "METADATA")
    (site / "vllm-0.30.0.dist-info").mkdir()
    (site / "vllm-0.30.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.30.0\n\n")
    os.mkfifo(tmp_path / "stdout.log")
    opened: list[str] = []
    real = os.open

    def spy(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not flags & getattr(os, "O_PATH", 0):
            opened.append(os.fspath(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    found = dict(sysinfo._dist_versions(site, {"torch": "torch", "vllm": "vllm"}))
    assert found == {"vllm": "0.30.0"}
    with pytest.raises(OSError):
        sysinfo.tail(tmp_path / "stdout.log")
    assert not [p for p in opened if p.endswith(("torch-2.9.0.dist-info/METADATA", "stdout.log"))]
