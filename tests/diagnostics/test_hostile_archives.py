"""A bundle archive whose tar *headers* are the bomb: the member-size check reads sizes
from the headers, but a GNU long-name header or a pax header is itself read whole into
memory by tarfile, and a member of a type tarfile does not know is skipped by
decompressing all of it. Both passed the old checks: a 1 MB archive took 2.1 GB."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

import pytest

from diag_helpers import ROOT


def _gzip_member(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def _archive(path: Path, header: tarfile.TarInfo, gib: int = 1) -> Path:
    """``header`` declaring ``gib`` GiB of data (all zeros), then a bundle's manifest. Built from
    one gzip member of 1 MiB repeated (gzip readers concatenate members): ~1 MB a GiB."""
    header.size = gib << 30
    manifest = json.dumps({"schema": 1}).encode()
    after = tarfile.TarInfo("bomb/manifest.json")
    after.size = len(manifest)
    zeros = _gzip_member(bytes(1 << 20))
    with open(path, "wb") as out:
        out.write(_gzip_member(header.tobuf(format=tarfile.GNU_FORMAT)))
        for _ in range(gib << 10):
            out.write(zeros)
        out.write(_gzip_member(after.tobuf(format=tarfile.GNU_FORMAT) + manifest.ljust(512, b"\0") + bytes(1024)))
    return path


def _replay(path: Path, ulimit_kib: int) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "hangwatch.cli", "replay", str(path)]
    cmd = ["bash", "-c", f'ulimit -v {ulimit_kib} && exec "$@"', "bash", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, cwd=ROOT)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["gnu_long_name", "pax_header", "unknown_type"])
def test_a_bomb_in_the_tar_headers_is_refused_within_the_bundle_limits(tmp_path, kind):
    header = tarfile.TarInfo("././@LongLink" if kind == "gnu_long_name" else "bomb/x")
    header.type = {"gnu_long_name": tarfile.GNUTYPE_LONGNAME, "pax_header": tarfile.XHDTYPE,
                   "unknown_type": b"Z"}[kind]
    bomb = _archive(tmp_path / f"{kind}.tar.gz", header)
    assert bomb.stat().st_size < 2 << 20
    # The old reader held the 1 GiB long name (and its copies) in memory: a MemoryError under
    # this limit; the unknown type it skipped by inflating all of it and then read on (exit 0).
    done = _replay(bomb, ulimit_kib=1_000_000)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert done.stderr.startswith("hangwatch: error:") and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "MemoryError" not in done.stderr and "MiB" in done.stderr, done.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["pid", "frame_line", "thresholds", "interval"])
def test_a_field_that_is_not_a_number_is_an_error_not_an_internal_error(tmp_path, where):
    """A bundle field of the wrong value (not only the wrong type) is malformed input: exit 2 and
    ``hangwatch: error:``; it was an internal error (exit 70, traceback in a file in /tmp)."""
    from diag_helpers import synthetic_bundle  # noqa: PLC0415

    bundle = synthetic_bundle(tmp_path)
    if where == "pid":
        (bundle / "processes.json").write_text(json.dumps([{"pid": "4242\x1b[2J", "cmdline": ["python"]}]))
    elif where == "frame_line":
        dump = json.loads((bundle / "stacks/round-1/pid-4242.json").read_text())
        dump[0]["frames"][0]["line"] = "x"
        (bundle / "stacks/round-1/pid-4242.json").write_text(json.dumps(dump))
    else:  # thresholds of the wrong shape; an interval no run takes (it failed an assertion in the detector)
        manifest = json.loads((bundle / "manifest.json").read_text())
        manifest["thresholds"] = ["abc"] if where == "thresholds" else {**manifest["thresholds"], "interval": 1e308}
        (bundle / "manifest.json").write_text(json.dumps(manifest))
    for args in (["replay", str(bundle)], ["report", str(bundle), "-o", str(tmp_path / "r.html")]):
        done = subprocess.run([sys.executable, "-m", "hangwatch.cli", *args], capture_output=True, text=True,
                              timeout=50, cwd=ROOT)
        if done.returncode == 0:
            continue  # this command never reads that field
        assert done.returncode == 2, (args, done.returncode, done.stderr[-2000:])
        assert done.stderr.startswith("hangwatch: error:") and "internal error" not in done.stderr, done.stderr
        assert "\x1b" not in done.stderr


@pytest.mark.timeout(60)
def test_a_command_line_never_forges_a_line_in_replays_text(tmp_path):
    """replay showed the stalled process's command line as it was: a newline in it (a bundle's
    ``processes.json``, or a trainer's ``python -c`` script) printed lines of its own choosing."""
    from diag_helpers import synthetic_bundle  # noqa: PLC0415

    bundle = synthetic_bundle(tmp_path)
    rows = json.loads((bundle / "processes.json").read_text())
    rows[0]["cmdline"] = ["python", "x\n== /forged (bundle)\n   suspect: pid 1"]
    (bundle / "processes.json").write_text(json.dumps(rows))
    done = subprocess.run([sys.executable, "-m", "hangwatch.cli", "replay", str(bundle)], capture_output=True,
                          text=True, timeout=50, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not any(line.startswith("== /forged") for line in done.stdout.splitlines()), done.stdout
    assert "x\\n== /forged" in done.stdout, done.stdout
