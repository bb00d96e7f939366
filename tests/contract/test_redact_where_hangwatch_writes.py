"""Redaction where hangwatch writes what a trainer gave it: a live process's command line in the
process table, a log tail (in one pass, however long its unbroken runs), and the trainer's
``info`` in the journal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hangwatch.contract.journal import read_journal


ROOT = Path(__file__).resolve().parents[2]


SECRET = "Zq7pW2xK9mLr"


PHRASE = "correct horse " + SECRET + " staple"


# A key's body has lines that look random and lines that do not (several slashes, few classes).
PEM_BODY = ["MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC" + SECRET[:8],
            "abc/def/ghi/jkl/" + SECRET + "/mno/pqr/stu/vwx/yz0123456789abcdef",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" + SECRET.lower()]


@pytest.mark.timeout(30)
def test_a_real_processes_command_line_and_log_tail_in_a_bundle(tmp_path):
    """What the capture records of a live process (its process table row) and of its log."""
    import subprocess
    import sys

    import psutil

    from hangwatch.contract.capture import TreeProcess
    from hangwatch.diagnostics.proctable import process_table
    from hangwatch.diagnostics.sysinfo import tail

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", f"--password={PHRASE}"])
    try:
        p = psutil.Process(proc.pid)
        row = process_table([TreeProcess(proc.pid, p.create_time(), p.ppid(), os.getpgid(proc.pid),
                                         os.getsid(proc.pid), p.name(), tuple(p.cmdline()))])[0]
    finally:
        proc.kill()
        proc.wait()
    assert not any(SECRET in a or "staple" in a for a in row["cmdline"]), row["cmdline"]
    log = tmp_path / "stdout.log"
    log.write_text(f"connecting with PASSWORD='{PHRASE}'\n-----BEGIN PRIVATE KEY-----\n" + "\n".join(PEM_BODY)
                   + "\n-----END PRIVATE KEY-----\n")
    text = tail(log)
    assert SECRET not in text and SECRET[:8] not in text and "staple" not in text, text


@pytest.mark.timeout(30)
@pytest.mark.parametrize("run", ["a", "a.", "Aa1-"])
def test_a_long_run_of_name_characters_in_a_log_is_redacted_in_one_pass(tmp_path, run):
    """A log line holding a long unbroken run (a base64url blob, a hex dump, a minified value)
    made every position start a name match that scanned the rest of the run: 20 KB took 26 s,
    a 256 KiB log tail hours, so the capture's log step and `hangwatch report` never ended."""
    from hangwatch.diagnostics.sysinfo import tail

    log = tmp_path / "stdout.log"
    log.write_text("step 1\n" + run * ((200 << 10) // len(run)) + f" HF_TOKEN={SECRET}\n")
    out = tail(log)  # redacted on the way out; the timeout fails the test before the fix
    assert SECRET not in out and out.startswith("step 1")


SECRETS = ("hunter2-engine-secret", "pa55w0rd-in-url", "hf_AbCdEfGhIjKlMnOpQrSt")


def _info() -> dict:
    return {"pass_at_1": 0.25, "auth": {"mode": "oidc"}, "api_keys": ["k1"], "secret_sauce": True,
            "engine_kwargs": {"model": "m", "hf_token": SECRETS[0]},
            "wandb": f"https://user:{SECRETS[1]}@wandb.example.com", "note": f"token {SECRETS[2]}"}


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_the_trainers_info_is_journaled_redacted(tmp_path):
    run_dir = tmp_path / "run"
    # The trainer waits (bounded) until the supervisor has journaled its beat, then exits.
    trainer = ("import os, time; from hangwatch.trainer import beat\n"
               f"beat(step=1, phase='train', **{_info()!r})\n"
               "journal = os.path.join(os.environ['HANGWATCH_RUN_DIR'], 'journal.jsonl')\n"
               "deadline = time.monotonic() + 30\n"
               "while time.monotonic() < deadline and '\"event\":\"trainer' + '_info' not in open(journal).read():\n"
               "    time.sleep(0.05)\n")
    done = subprocess.run([sys.executable, "-m", "hangwatch.cli", "run", "--quiet", "--run-dir", str(run_dir),
                           "--gpu-probe", "none", "--interval", "0.2", "--", sys.executable, "-c", trainer],
                          capture_output=True, text=True, timeout=50, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    records = [r for r in read_journal(run_dir / "journal.jsonl") if r.get("event") == "trainer_info"]
    assert records, "no trainer_info record"
    text = (run_dir / "journal.jsonl").read_text()
    assert not any(s in text for s in SECRETS), text[-3000:]
    assert records[0]["info"]["engine_kwargs"]["model"] == "m"
