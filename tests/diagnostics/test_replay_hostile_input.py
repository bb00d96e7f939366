"""Replay on hostile or broken input: junk, bombs, special files, forged lines and escapes in
names and command lines, absurd what-if values, secrets in a paste, stacks thousands deep.
Each gives ``hangwatch: error:`` or a defused line, never a traceback or a runaway read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from diag_helpers import PASTED, ROOT, pyspy_dump_json, run_cli, synthetic_bundle, text_verdict, usage_error, write_minimal_bundle
from hangwatch.cli.main import main
from hangwatch.diagnostics.errors import InputError
from hangwatch.diagnostics.replay import aggregate, analyse, load_source, processes_overview, render_text
from hangwatch.diagnostics.signatures import load_signatures


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00" * 5000,
        bytes(range(256)) * 200,
        "\u00e9\u00e8 nothing here at all".encode("utf-16"),
        b"\x1b[31m\x1b[0m\r\n\t\r\n",
    ],
    ids=["empty", "nuls", "binary", "utf16-prose", "ansi-only"],
)
def test_junk_files_get_a_clear_error_not_a_traceback(tmp_path, capsys, data):
    path = tmp_path / "junk.txt"
    path.write_bytes(data)
    with pytest.raises(InputError):
        load_source(path)
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hangwatch: error:") and "Traceback" not in err


@pytest.mark.timeout(60)
def test_a_compressed_dump_is_read_and_bombs_archives_and_junk_are_refused(tmp_path, capsys):
    import gzip
    import zipfile

    text = (PASTED / "accelerate_3104_zero3_allgather.txt").read_bytes()
    gz = tmp_path / "dump.txt.gz"
    gz.write_bytes(gzip.compress(text))
    assert load_source(gz).kind == "text"
    bomb = tmp_path / "bomb.gz"
    bomb.write_bytes(gzip.compress(bytes(20 << 20)))  # 20 MiB of zeros in ~20 KB
    zipped = tmp_path / "dump.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("dump.txt", text)
    junk = tmp_path / "core.bin"
    junk.write_bytes(bytes((i * 7919) % 251 for i in range(200_000)))
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"  \n\t\n")
    for path, says in ((bomb, "once decompressed"), (zipped, "zip archive"), (junk, "binary data"), (empty, "empty")):
        assert main(["replay", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("hangwatch: error:") and says in err and "Traceback" not in err, err


@pytest.mark.timeout(10)
def test_a_fifo_or_device_given_as_a_dump_is_refused_not_waited_on(tmp_path, capsys):
    fifo = tmp_path / "dump.txt"
    os.mkfifo(fifo)
    assert "not a regular file (it is a FIFO)" in usage_error(capsys, "replay", str(fifo))
    assert "not a regular file (it is a character device)" in usage_error(capsys, "replay", "/dev/zero")
    sparse = tmp_path / "huge.txt"
    with open(sparse, "wb") as fh:
        fh.truncate(3 << 30)
    assert "larger than 16 MiB" in usage_error(capsys, "replay", str(sparse))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("manifest", ["[" * 100_000 + "]" * 100_000, json.dumps({"schema": 1, "verdict": 5, "stacks": "x"})])
def test_malformed_manifest_is_an_error_not_a_traceback(tmp_path, manifest):
    bundle = synthetic_bundle(tmp_path)
    (bundle / "manifest.json").write_text(manifest)
    for args in (["replay", str(bundle)], ["report", str(bundle), "-o", str(tmp_path / "r.html")]):
        done = run_cli(*args)
        assert done.returncode == 2, (args, done.stdout[-500:], done.stderr[-2000:])
        assert done.stderr.startswith("hangwatch: error:") and "Traceback" not in done.stderr


@pytest.mark.timeout(30)
def test_replay_output_carries_no_terminal_escapes(tmp_path):
    bundle = synthetic_bundle(tmp_path)
    processes = json.loads((bundle / "processes.json").read_text())
    processes[0]["cmdline"] = ["python", "grpo.py\x1b]0;pwned\x07\x1b[2J\x9b31m"]
    (bundle / "processes.json").write_text(json.dumps(processes))
    done = run_cli("replay", str(bundle))
    assert done.returncode == 0, done.stderr
    assert "grpo.py" in done.stdout  # the line is there, defused
    assert not any(c in done.stdout for c in "\x1b\x07\x9b")


@pytest.mark.timeout(20)
@pytest.mark.parametrize("option, value", [("--stall-window", "nan"), ("--stall-window", "-5"), ("--stall-window", "0"),
                                           ("--interval", "-1"), ("--interval", "inf"), ("--interval", "1e300"),
                                           ("--progress-timeout", "-1"), ("--gpu-busy", "150"), ("--gpu-busy", "nan"),
                                           ("--cpu-idle", "-1"), ("--cpu-idle", "nan")])
def test_replay_refuses_what_if_values_run_refuses(tmp_path, capsys, option, value):
    dump = str(ROOT / "tests" / "diagnostics" / "data" / "nccl_all_reduce.txt")
    err = usage_error(capsys, "replay", option, value, dump)  # with no bundle, nothing else would check them
    assert f"{option} must be" in err and "got" in err, err


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
        assert str(bundle) in done.stderr or "malformed input" not in done.stderr, done.stderr  # which input it was


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


@pytest.mark.timeout(60)
def test_a_frame_name_never_forges_a_line_in_replays_text(tmp_path):
    """A trainer names its code as it likes (compile()'s filename, a code object's co_name), and
    py-spy reports it as it is: a newline in it forged "== NAME (bundle)" lines in replay's text."""
    from hangwatch.diagnostics.replay import aggregate, processes_overview

    dump = pyspy_dump_json(9)
    dump[0]["frames"][0].update(name="wait\n== forged (bundle)", filename="/srv/a\n== forged2 (bundle).py")
    incidents = analyse([write_minimal_bundle(tmp_path, {"stacks/round-1/pid-9.json": dump})], load_signatures())
    text = render_text(incidents, aggregate(incidents), processes_overview(incidents))
    assert "forged" in text and not [line for line in text.splitlines() if line.startswith("== forged")]


@pytest.mark.timeout(60)
def test_replay_holds_no_bundles_bytes_after_reading_each(tmp_path):
    """A run directory of 30 bundles with three sparse 31 MiB logs each (368 KB on disk) held
    2.9 GB in `replay`: every bundle's bytes were kept until the last input was read."""
    from hangwatch.diagnostics.replay import aggregate

    run = tmp_path / "run" / "incidents"
    for i in range(3):
        bundle = write_minimal_bundle(run / f"b{i}", {"stacks/round-1/pid-9.json": pyspy_dump_json(9), "samples.jsonl": ""})
        target = run / f"20260101T00000{i}-attempt1-stall"
        bundle.rename(target)
        (target / "logs").mkdir()
        with open(target / "logs" / "stdout.tail.txt", "wb") as handle:
            handle.truncate(4 << 20)  # sparse: costs no disk
        (run / f"b{i}").rmdir()
    incidents = analyse([tmp_path / "run"], load_signatures())
    assert len(incidents) == 3
    assert all(set(i.source.bundle.files) == {"manifest.json"} for i in incidents)
    assert [i.to_json()["verdict"] for i in incidents] == ["stall"] * 3
    assert "== across 3 incident(s)" in render_text(incidents, aggregate(incidents))


def _bundle(tmp_path: Path, files: dict[str, object]) -> Path:
    root = tmp_path / "20260101T000000-attempt1-silent_hang"
    manifest = {"schema": 1, "kind": "hangwatch-incident", "run_id": "r", "attempt": 1,
                "verdict": {"kind": "silent_hang", "reason": "no progress"}}
    for name, data in {"manifest.json": manifest, **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))
    return root


@pytest.mark.timeout(60)
def test_a_stack_thousands_of_frames_deep_replays(tmp_path):
    frames = [{"name": "work", "filename": "/srv/train.py", "line": 9}] + \
        [{"name": f"f{i}", "filename": "/srv/train.py", "line": i} for i in range(3000)]
    dump = [{"pid": 4242, "thread_id": 1, "os_thread_id": 4242, "thread_name": "MainThread", "owns_gil": False,
             "active": False, "frames": frames}]
    bundle = _bundle(tmp_path, {"stacks/round-1/pid-4242.json": dump,
                                "processes.json": [{"pid": 4242, "ppid": 1, "name": "python"}]})
    incidents = analyse([bundle], load_signatures())
    agg = aggregate(incidents)
    assert json.loads(json.dumps(agg))["incidents"] == 1  # --json
    text = render_text(incidents, agg, processes_overview(incidents))
    assert "frames ...]" in text and "f2999 (train.py)" in text and "work (train.py)" in text


# A py-spy dump --locals pasted with the reporter's shell lines above it: the command line,
# the locals and the skipped shell lines carry secrets.
LOCALS_PASTE = """\
export HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyzABCDEF
curl -H "Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123456789" https://example.invalid
Process 4242: python train.py --hf_token hf_bcdefghijklmnopqrstuvwxyzABCDEFG --password hunter2secret
Python v3.10.12 (/usr/bin/python3.10)

Thread 4242 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2050)
        Arguments:
            tensor: <Tensor at 0x7f01>
        Locals:
            api_key: "sk-live-1234567890abcdef1234567890"
            password: "hunter3secret"
    main (train.py:120)
"""


SECRETS = ("hf_abcdefghijklmnopqrstuvwxyzABCDEF", "hf_bcdefghijklmnopqrstuvwxyzABCDEFG", "hunter2secret", "hunter3secret",
           "sk-live-1234567890abcdef1234567890", "abcdefghijklmnopqrstuvwxyz0123456789")


@pytest.mark.timeout(60)
def test_replay_never_echoes_a_pastes_secrets(tmp_path, capsys):
    # Before: the pasted 'Process N:' command line was printed as is ('process: python
    # train.py --hf_token hf_...') and the skipped shell lines were quoted in --json's
    # parse report ('export HF_TOKEN=hf_...'). Locals were never echoed; still not.
    from hangwatch.cli.main import main  # noqa: PLC0415

    path = tmp_path / "dump.txt"
    path.write_text(LOCALS_PASTE)
    for argv in (["replay", str(path)], ["replay", "--json", str(path)]):
        main(argv)
        out = capsys.readouterr()
        shown = out.out + out.err
        assert "all_reduce" in shown and "[REDACTED]" in shown
        for secret in SECRETS:
            assert secret not in shown, (argv, secret)
    assert text_verdict(tmp_path, LOCALS_PASTE) == "nccl-collective-wait"
