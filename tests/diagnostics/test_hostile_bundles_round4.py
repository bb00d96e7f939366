"""Round 4 of hostile inputs for bundles: bytes that are not UTF-8 in what the trainer's user names."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from diag_helpers import ROOT

pytestmark = pytest.mark.timeout(90)


def test_a_trainer_argument_that_is_not_utf8_never_costs_the_capture_or_the_report(tmp_path):
    """The trainer's user chose an argument with a byte that is not UTF-8 (a file name in
    Latin-1). Python reads it as a lone surrogate, which a plain .encode() refuses: the whole
    diagnostics capture failed (stacks, process table, report: the journal's capture was
    'UnicodeEncodeError', only the samples-only bundle was left), and `hangwatch report` of a
    bundle holding it was refused as malformed input. Now the byte is shown as \\udcff."""
    from hangwatch.contract.capture import CaptureRequest, TreeProcess
    from hangwatch.contract.verdict import Verdict, VerdictKind
    from hangwatch.diagnostics.capture import capture_incident

    trainer = subprocess.Popen([sys.executable.encode(), b"-c", b"import time; time.sleep(60)", b"data-\xff.bin"])
    try:
        proc = psutil.Process(trainer.pid)
        deadline = time.monotonic() + 20
        while len(proc.cmdline()) < 4 and time.monotonic() < deadline:  # until it has exec'd
            time.sleep(0.01)
        tp = TreeProcess(trainer.pid, proc.create_time(), os.getpid(), os.getpgid(trainer.pid), os.getsid(trainer.pid),
                         proc.name(), tuple(proc.cmdline()))
        assert "\udcff" in tp.cmdline[-1]
        run_dir = tmp_path / "run"
        run_dir.mkdir(mode=0o700)
        now = time.monotonic()
        verdict = Verdict(kind=VerdictKind.SILENT_HANG, detected_at=now, onset=now, reason="no heartbeat progress")
        bundle = capture_incident(CaptureRequest(run_dir=run_dir, run_id="r", attempt=1, verdict=verdict, samples=[],
                                                 tree=[tp], log_paths={}, thresholds={}, deadline=now + 60))
    finally:
        trainer.kill()
        trainer.wait()
    table = (bundle / "processes.txt").read_text()
    assert "data-\\udcff.bin" in table
    assert "data-\\udcff.bin" in (bundle / "report.html").read_text()

    out = tmp_path / "again.html"
    done = subprocess.run([sys.executable, "-m", "hangwatch.cli", "report", str(bundle), "-o", str(out)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "data-\\udcff.bin" in out.read_text()


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


def test_a_bundles_huge_log_is_shown_as_a_tail_in_its_report(tmp_path):
    """A bundle someone sent may hold logs of up to 32 MiB each (the reader's cap): the report
    copied each whole and redacted it all, 41 s and a 32 MB page for one such log. It shows the
    last 256 KiB of each, as the capture keeps."""
    from hangwatch.diagnostics.report import LOG_TAIL_BYTES

    bundle = tmp_path / "b"
    (bundle / "logs").mkdir(parents=True)
    (bundle / "manifest.json").write_text('{"schema": 1}')
    unit = "step 1 token abc a=b https://h/x\n"
    (bundle / "logs" / "stdout.log").write_text(unit * ((8 << 20) // len(unit)) + "the last line\n")
    done = subprocess.run([sys.executable, "-m", "hangwatch.cli", "report", str(bundle)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    page = (bundle / "report.html").read_text()
    assert len(page) < 2 * LOG_TAIL_BYTES and "the last line" in page and "not shown" in page
