"""Names and files another user chose, reaching what root runs or prints (docs/security.md).

Each test is a finding of a red-team probe run as root: a checkpoint folder the
trainer's user named, a venv part of which another user owns. The rule held:
what they chose is shown, never obeyed, and never runs as root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="files of another user need root")
NOBODY = 65534
HOSTILE = "checkpoint-5\x1b]0;PWNED\x07\x1b[2J\nFAKE [error    ] run_finished: all fine"


@pytest.mark.timeout(60)
def test_a_checkpoint_name_never_puts_terminal_escapes_or_lines_on_the_console(tmp_path):
    """The trainer's user names its checkpoint folders; the supervisor's own log lines
    ("resuming from ...") quote that name. With --quiet (the documented answer to an
    untrusted trainer's output) nothing it chose may reach the terminal raw."""
    ck = tmp_path / "ck"
    (ck / HOSTILE).mkdir(parents=True)
    (ck / HOSTILE / "trainer_state.json").write_text("{}")
    result = subprocess.run(
        [sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(tmp_path / "run"), "--quiet",
         "--gpu-probe", "none", "--checkpoint-dir", str(ck), "--resume-arg", "--resume={checkpoint}",
         "--max-restarts", "1", "--backoff", "0.01", "--", "sh", "-c", "exit 3"],
        capture_output=True, text=True, timeout=50, stdin=subprocess.DEVNULL)
    assert result.returncode == 71, result.stderr
    assert "resuming from" in result.stderr
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr, "raw escape sequence on the console"
    assert not any(line.startswith("FAKE") for line in result.stderr.splitlines()), "a forged console line"
    assert "\\x1b]0;PWNED\\x07" in result.stderr
