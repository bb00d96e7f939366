"""Bundles come from other people: hostile or broken ones give ``hangwatch: error:``,
never a traceback, a runaway read, raw escape sequences or script in the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
import zlib
from pathlib import Path

import pytest

from diag_helpers import ROOT, synthetic_bundle
from hangwatch.cli.main import main
from hangwatch.diagnostics.bundle import load_bundle


def _cli(*args: str, ulimit_kib: int | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "hangwatch.cli", *args]
    if ulimit_kib is not None:
        cmd = ["bash", "-c", f'ulimit -v {ulimit_kib} && exec "$@"', "bash", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)


def _gzip_member(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def _bomb(path: Path, gib: int = 1) -> Path:
    """A ~1 MB .tar.gz holding a ``gib`` GiB samples.jsonl: one gzip member of 1 MiB of
    zeros, repeated (gzip readers concatenate members), so it is built in an instant."""
    manifest = json.dumps({"schema": 1}).encode()
    first = tarfile.TarInfo("bomb/manifest.json")
    first.size = len(manifest)
    big = tarfile.TarInfo("bomb/samples.jsonl")
    big.size = gib << 30
    header = first.tobuf() + manifest.ljust(512, b"\0") + big.tobuf()
    zeros = _gzip_member(bytes(1 << 20))
    with open(path, "wb") as out:
        out.write(_gzip_member(header))
        for _ in range(gib << 10):
            out.write(zeros)
        out.write(_gzip_member(bytes(1024)))
    return path


@pytest.mark.timeout(60)
def test_decompression_bomb_is_refused_under_a_memory_limit(tmp_path):
    bomb = _bomb(tmp_path / "bomb.tar.gz")
    assert bomb.stat().st_size < 4 << 20
    for args in (["replay", str(bomb)], ["report", str(bomb), "-o", str(tmp_path / "r.html")]):
        done = _cli(*args, ulimit_kib=1_500_000)
        assert done.returncode == 2, done.stderr[-2000:]
        assert done.stderr.startswith("hangwatch: error:") and "Traceback" not in done.stderr
        assert "MiB" in done.stderr, done.stderr


@pytest.mark.timeout(30)
def test_report_escapes_every_field_and_forbids_scripts(tmp_path):
    bundle = synthetic_bundle(tmp_path)
    manifest = json.loads((bundle / "manifest.json").read_text())
    evil = "<script>alert(1)</script>"
    manifest["stacks"] = {"pyspy": evil, "rounds": [{"round": evil, "ok": evil, "processes": evil, "duration_s": evil}]}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    assert main(["report", str(bundle)]) == 0
    html = (bundle / "report.html").read_text()
    assert "<script" not in html and "&lt;script&gt;" in html
    assert "Content-Security-Policy" in html and "default-src 'none'" in html


@pytest.mark.timeout(30)
def test_a_symlink_in_a_bundle_is_never_read(tmp_path):
    private = tmp_path / "private.txt"
    private.write_text("TOPSECRET-CONTENT\n")
    private.chmod(0o600)
    bundle = synthetic_bundle(tmp_path)
    (bundle / "logs").mkdir(exist_ok=True)
    (bundle / "logs" / "stdout.tail.txt").symlink_to(private)
    loaded = load_bundle(bundle)
    assert "logs/stdout.tail.txt" not in loaded.files
    assert main(["report", str(bundle)]) == 0
    assert "TOPSECRET" not in (bundle / "report.html").read_text()


@pytest.mark.timeout(30)
def test_replay_output_carries_no_terminal_escapes(tmp_path):
    bundle = synthetic_bundle(tmp_path)
    processes = json.loads((bundle / "processes.json").read_text())
    processes[0]["cmdline"] = ["python", "grpo.py\x1b]0;pwned\x07\x1b[2J\x9b31m"]
    (bundle / "processes.json").write_text(json.dumps(processes))
    done = _cli("replay", str(bundle))
    assert done.returncode == 0, done.stderr
    assert "grpo.py" in done.stdout  # the line is there, defused
    assert not any(c in done.stdout for c in "\x1b\x07\x9b")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("manifest", ["[" * 100_000 + "]" * 100_000, json.dumps({"schema": 1, "verdict": 5, "stacks": "x"})])
def test_malformed_manifest_is_an_error_not_a_traceback(tmp_path, manifest):
    bundle = synthetic_bundle(tmp_path)
    (bundle / "manifest.json").write_text(manifest)
    for args in (["replay", str(bundle)], ["report", str(bundle), "-o", str(tmp_path / "r.html")]):
        done = _cli(*args)
        assert done.returncode == 2, (args, done.stdout[-500:], done.stderr[-2000:])
        assert done.stderr.startswith("hangwatch: error:") and "Traceback" not in done.stderr


def _usage_error(capsys, *args: str) -> str:
    """Run the CLI in-process; it must refuse with one ``hangwatch: error:`` line (exit 2)."""
    capsys.readouterr()
    assert main(list(args)) == 2
    err = capsys.readouterr().err
    assert err.startswith("hangwatch: error:") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.timeout(10)
def test_a_fifo_named_like_an_archive_is_refused_not_waited_on(tmp_path, capsys):
    fifo = tmp_path / "fifo.tar.gz"
    os.mkfifo(fifo)
    (tmp_path / "link.tgz").symlink_to(fifo)
    for args in (["replay", str(fifo)], ["report", str(fifo), "-o", str(tmp_path / "r.html")],
                 ["replay", str(tmp_path / "link.tgz")]):
        err = _usage_error(capsys, *args)
        assert args[1] in err and "not a regular file (it is a FIFO)" in err
    sparse = tmp_path / "sparse.tar.gz"
    with open(sparse, "wb") as fh:
        fh.truncate(3 << 30)
    assert "3.0 GiB" in _usage_error(capsys, "replay", str(sparse))


@pytest.mark.timeout(10)
def test_a_fifo_or_device_given_as_a_dump_is_refused_not_waited_on(tmp_path, capsys):
    fifo = tmp_path / "dump.txt"
    os.mkfifo(fifo)
    assert "not a regular file (it is a FIFO)" in _usage_error(capsys, "replay", str(fifo))
    assert "not a regular file (it is a character device)" in _usage_error(capsys, "replay", "/dev/zero")
    sparse = tmp_path / "huge.txt"
    with open(sparse, "wb") as fh:
        fh.truncate(3 << 30)
    assert "larger than 16 MiB" in _usage_error(capsys, "replay", str(sparse))


@pytest.mark.timeout(10)
def test_a_signature_file_that_is_a_fifo_device_or_huge_is_refused_by_name(tmp_path, capsys):
    dump = str(ROOT / "tests" / "diagnostics" / "data" / "nccl_all_reduce.txt")
    fifo = tmp_path / "sig.toml"
    os.mkfifo(fifo)
    sparse = tmp_path / "huge.toml"
    with open(sparse, "wb") as fh:
        fh.truncate(3 << 30)
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    for path, why in ((fifo, "it is a FIFO"), ("/dev/zero", "it is a character device"), (sparse, "3.0 GiB"),
                      (deep, "nested too deeply")):
        err = _usage_error(capsys, "replay", "--signatures", str(path), dump)
        assert f"{path}: " in err and why in err, err


@pytest.mark.timeout(20)
def test_pack_leaves_out_links_and_special_files_and_caps_sizes(tmp_path, capsys):
    private = tmp_path / "private.txt"
    private.write_text("TOPSECRET-CONTENT\n")
    bundle = synthetic_bundle(tmp_path)
    (bundle / "logs").mkdir(exist_ok=True)
    (bundle / "logs" / "stdout.tail.txt").symlink_to(private)
    (bundle / "linked-dir").symlink_to(tmp_path)
    os.mkfifo(bundle / "pipe")
    out = tmp_path / "out.tar.gz"
    assert main(["bundle", "pack", str(bundle), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    for name, what in (("logs/stdout.tail.txt", "a symbolic link"), ("linked-dir", "a symbolic link"), ("pipe", "a FIFO")):
        assert f"hangwatch: warning: {name}: left out of the archive ({what})" in err, err
    with tarfile.open(out) as tar:
        members = tar.getmembers()
    assert members and all(m.isfile() for m in members), [(m.name, m.type) for m in members]
    assert f"{bundle.name}/manifest.json" in {m.name for m in members}
    assert load_bundle(out).files.keys() == load_bundle(bundle).files.keys()
    with open(bundle / "core", "wb") as fh:
        fh.truncate(3 << 30)
    err = _usage_error(capsys, "bundle", "pack", str(bundle), "-o", str(tmp_path / "big.tar.gz"))
    assert "core is 3072 MiB, over the 32 MiB" in err
    assert not (tmp_path / "big.tar.gz").exists()


@pytest.mark.timeout(20)
@pytest.mark.parametrize("option, value", [("--stall-window", "nan"), ("--stall-window", "-5"), ("--stall-window", "0"),
                                           ("--interval", "-1"), ("--interval", "inf"), ("--interval", "1e300"),
                                           ("--progress-timeout", "-1"), ("--gpu-busy", "150"), ("--gpu-busy", "nan"),
                                           ("--cpu-idle", "-1"), ("--cpu-idle", "nan")])
def test_replay_refuses_what_if_values_run_refuses(tmp_path, capsys, option, value):
    dump = str(ROOT / "tests" / "diagnostics" / "data" / "nccl_all_reduce.txt")
    err = _usage_error(capsys, "replay", option, value, dump)  # with no bundle, nothing else would check them
    assert f"{option} must be" in err and "got" in err, err


# -- a bundle directory another user owns, read or packed as root (red-team probe) -----------------


def _swap_after_walk(monkeypatch, bundle: Path, folder: str, target: Path) -> None:
    """Between the walk and the reads, the directory's owner renames ``folder`` away and
    puts a link to ``target`` in its place (reproduced for real with a second user and a
    bundle large enough to pack slowly; here the swap is made at that exact point)."""
    import hangwatch.diagnostics.bundle as bundle_mod

    real = bundle_mod._walk

    def walk_then_swap(*args, **kwargs):
        found = real(*args, **kwargs)
        (bundle / folder).rename(bundle / f"{folder}.old")
        (bundle / folder).symlink_to(target)
        return found

    monkeypatch.setattr(bundle_mod, "_walk", walk_then_swap)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("how", ["pack", "read"])
def test_a_folder_swapped_for_a_link_during_a_read_is_never_followed(tmp_path, capsys, monkeypatch, how):
    private = tmp_path / "private"
    private.mkdir()
    (private / "secret.txt").write_text("TOPSECRET-CONTENT\n")
    bundle = synthetic_bundle(tmp_path)
    (bundle / "z").mkdir()
    (bundle / "z" / "secret.txt").write_text("decoy\n")
    _swap_after_walk(monkeypatch, bundle, "z", private)
    if how == "pack":
        out = tmp_path / "out.tar.gz"
        assert main(["bundle", "pack", str(bundle), "-o", str(out)]) == 0
        assert "z/secret.txt: left out of the archive (no longer a regular file)" in capsys.readouterr().err
        with tarfile.open(out) as tar:
            texts = [tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()]
    else:
        texts = list(load_bundle(bundle).files.values())
    assert not any(b"TOPSECRET" in t for t in texts), "a private file was read through a swapped-in link"


@pytest.mark.timeout(30)
@pytest.mark.skipif(os.geteuid() != 0, reason="a file of another user needs root")
def test_another_users_hard_link_in_their_bundle_is_never_read(tmp_path, capsys):
    """Where fs.protected_hardlinks is 0 (the kernel's default), anyone may hard-link a
    root-only file they can reach into their own bundle; root packing or reading that
    bundle put the file's content into the archive and the report."""
    private = tmp_path / "private.txt"
    private.write_text("TOPSECRET-CONTENT\n")
    private.chmod(0o600)
    bundle = synthetic_bundle(tmp_path)
    (bundle / "logs").mkdir(exist_ok=True)
    os.link(private, bundle / "logs" / "stdout.tail.txt")  # what that user can do with the sysctl at 0
    for path in (bundle, *bundle.rglob("*")):
        if not path.samefile(private):
            os.chown(path, 65534, 65534, follow_symlinks=False)
    out = tmp_path / "out.tar.gz"
    assert main(["bundle", "pack", str(bundle), "-o", str(out)]) == 0
    assert "logs/stdout.tail.txt: left out of the archive (a hard link to a file of uid 0" in capsys.readouterr().err
    with tarfile.open(out) as tar:
        assert not any(b"TOPSECRET" in tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())
    assert "logs/stdout.tail.txt" not in load_bundle(bundle).files
    report = tmp_path / "r.html"
    assert main(["report", str(bundle), "-o", str(report)]) == 0
    assert "TOPSECRET" not in report.read_text()


@pytest.mark.timeout(30)
@pytest.mark.skipif(os.geteuid() != 0, reason="a directory of another user needs root")
@pytest.mark.parametrize("command", ["report", "pack"])
def test_root_never_writes_below_a_folder_another_user_controls(tmp_path, capsys, monkeypatch, command):
    """Root reports on (or packs) a bundle another user owns. They flip its folder with a
    link to a root-only directory: once the bundle was read, root's report.html (or the
    archive) landed in that directory (reproduced with a second user and a flipping link;
    here the swap is made right after the read)."""
    import hangwatch.diagnostics.bundle as bundle_mod
    import hangwatch.cli.commands.report as diag_cli

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    bundle = synthetic_bundle(theirs)
    for path in (theirs, *theirs.rglob("*")):
        os.chown(path, 65534, 65534, follow_symlinks=False)
    target = tmp_path / "root-only"
    target.mkdir(mode=0o700)

    def swap():
        bundle.rename(bundle.with_name("real"))
        bundle.symlink_to(target)

    real_load, real_walk = diag_cli.load_bundle, bundle_mod._walk
    if command == "report":
        monkeypatch.setattr(diag_cli, "load_bundle", lambda p: (real_load(p), swap())[0])
    else:
        monkeypatch.setattr(bundle_mod, "_walk", lambda *a, **k: (real_walk(*a, **k), swap())[0])
    argv = ["report", str(bundle)] if command == "report" else ["bundle", "pack", str(bundle), "-o",
                                                                 str(bundle / "x.tar.gz")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "hangwatch: error: output" in err and "owned by uid 65534" in err, err
    assert list(target.iterdir()) == [], "root wrote into the directory the other user chose"


@pytest.mark.timeout(30)
def test_a_command_line_never_forges_a_row_or_an_escape_in_the_process_table():
    """A trainer chooses its own argv: a newline in it forged a pid-1 row in processes.txt."""
    import psutil

    from hangwatch.contract.capture import TreeProcess
    from hangwatch.diagnostics.proctable import process_table, render_table

    forged = "\n      1       0       1       1 S -   0.0   0.0    1  /sbin/init\x1b[2J"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", forged])
    try:
        p = psutil.Process(proc.pid)
        # Just after exec the child's command line reads empty for a moment: wait for its own, bounded.
        deadline = time.monotonic() + 20
        while p.cmdline()[-1:] != [forged]:
            assert time.monotonic() < deadline, p.cmdline()
            time.sleep(0.01)
        rows = process_table([TreeProcess(proc.pid, p.create_time(), p.ppid(), os.getpgid(proc.pid),
                                          os.getsid(proc.pid), p.name(), tuple(p.cmdline()))])
    finally:
        proc.kill()
        proc.wait()
    text = render_table(rows)
    assert len(text.splitlines()) == 2 and "\x1b" not in text, text
    assert rows[0]["cmdline"][-1] == forged  # processes.json keeps it as it was
