"""Bundles come from other people: bombs in their data or tar headers, links, FIFOs, hard links,
folders swapped during a read, nesting thousands deep and JSON past its object budget are
refused or left out, and names never forge a line in ``bundle pack``'s warnings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

import pytest

from diag_helpers import ROOT, pyspy_dump_json, run_cli, synthetic_bundle, usage_error, write_minimal_bundle
from hangwatch.cli.main import main
from hangwatch.diagnostics import bundle as bundle_mod
from hangwatch.diagnostics.bundle import Bundle, load_bundle
from hangwatch.diagnostics.replay import analyse, render_text
from hangwatch.diagnostics.report import render_report
from hangwatch.diagnostics.signatures import load_signatures


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
        done = run_cli(*args, ulimit_kib=1_500_000)
        assert done.returncode == 2, done.stderr[-2000:]
        assert done.stderr.startswith("hangwatch: error:") and "Traceback" not in done.stderr
        assert "MiB" in done.stderr, done.stderr


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


@pytest.mark.slow
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


@pytest.mark.timeout(10)
def test_a_fifo_named_like_an_archive_is_refused_not_waited_on(tmp_path, capsys):
    fifo = tmp_path / "fifo.tar.gz"
    os.mkfifo(fifo)
    (tmp_path / "link.tgz").symlink_to(fifo)
    for args in (["replay", str(fifo)], ["report", str(fifo), "-o", str(tmp_path / "r.html")],
                 ["replay", str(tmp_path / "link.tgz")]):
        err = usage_error(capsys, *args)
        assert args[1] in err and "not a regular file (it is a FIFO)" in err
    sparse = tmp_path / "sparse.tar.gz"
    with open(sparse, "wb") as fh:
        fh.truncate(3 << 30)
    assert "3.0 GiB" in usage_error(capsys, "replay", str(sparse))


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
    err = usage_error(capsys, "bundle", "pack", str(bundle), "-o", str(tmp_path / "big.tar.gz"))
    assert "core is 3072 MiB, over the 32 MiB" in err
    assert not (tmp_path / "big.tar.gz").exists()


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


@pytest.mark.timeout(90)
def test_a_name_in_a_bundle_never_forges_a_line_in_packs_warnings(tmp_path):
    """`bundle pack` names what it leaves out (a FIFO, a link) with its escapes shown, but kept
    a newline: a sender's FIFO named 'x\\nhangwatch: archive checked, nothing left out' printed a
    line of its own."""
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "manifest.json").write_text('{"schema": 1}')
    os.mkfifo(bundle / "x\nhangwatch: archive checked, nothing left out")
    done = subprocess.run([sys.executable, "-m", "hangwatch.cli", "bundle", "pack", str(bundle)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    warnings = [line for line in done.stderr.splitlines() if line]
    assert len(warnings) == 1 and warnings[0].startswith("hangwatch: warning: x\\nhangwatch:"), done.stderr


@pytest.mark.timeout(60)
def test_a_bundle_nested_thousands_of_folders_deep_is_refused_at_once(tmp_path: Path) -> None:
    """Every file of a bundle directory is opened one folder at a time from the top, so folders
    nested thousands deep made `replay` and `report` quadratic (3,000 empty folders: 7 s, up to
    ~15 s within the 4096-entry cap). A bundle is three folders deep: past 16 it is refused."""
    import os

    from diag_helpers import synthetic_bundle
    from hangwatch.diagnostics.bundle import MAX_DEPTH, load_bundle
    from hangwatch.diagnostics.errors import InputError

    bundle = synthetic_bundle(tmp_path)
    load_bundle(bundle)  # as written: fine
    deep = bundle / "logs"
    deep.mkdir()
    for _ in range(MAX_DEPTH + 2):
        deep = deep / "d"
        os.mkdir(deep)
    with pytest.raises(InputError, match="nested"):
        load_bundle(bundle)


@pytest.mark.timeout(60)
def test_the_process_table_is_parsed_once_for_all_stack_files(tmp_path, monkeypatch):
    files: dict[str, object] = {f"stacks/round-1/pid-{p}.json": pyspy_dump_json(p) for p in range(100, 150)}
    files["processes.json"] = [{"pid": p, "ppid": 1, "name": "python", "cmdline": ["python", f"rank{p}"]}
                               for p in range(100, 150)]
    bundle = load_bundle(write_minimal_bundle(tmp_path, files))
    parsed: list[str] = []
    original = Bundle.json

    def counting(self: Bundle, name: str, default: object = None) -> object:
        parsed.append(name)
        return original(self, name, default)

    monkeypatch.setattr(Bundle, "json", counting)
    dumps = bundle.dumps()
    assert len(dumps) == 50 and {d.cmdline for d in dumps} == {f"python rank{p}" for p in range(100, 150)}
    assert parsed.count("processes.json") == 1


@pytest.mark.timeout(60)
def test_stack_files_past_the_object_budget_are_left_out(tmp_path, monkeypatch):
    monkeypatch.setattr(bundle_mod, "MAX_STACK_OBJECTS", 1000)
    bomb = '[{"pid": 7, "frames": [' + ",".join(["{}"] * 5000) + "]}]"
    path = write_minimal_bundle(tmp_path, {"stacks/round-1/pid-7.json": bomb, "stacks/round-1/pid-8.json": pyspy_dump_json(8),
                             "stacks/round-2/pid-8.json": pyspy_dump_json(8)})
    bundle = load_bundle(path)
    assert [d.pid for d in bundle.dumps()] == [8, 8]
    assert bundle.left_out == ["stacks/round-1/pid-7.json"]
    page = render_report(bundle)
    assert "stacks/round-1/pid-7.json" in page and "more objects than a capture writes" in page
    assert "left out: stacks/round-1/pid-7.json" in render_text(analyse([path], load_signatures()), {
        "incidents": 1, "signatures": {}, "recurring_frames": [], "call_tree": {"children": []}})
