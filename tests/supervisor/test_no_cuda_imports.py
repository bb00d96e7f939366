"""The supervisor never imports CUDA libraries (torch, vllm, transformers)."""

from __future__ import annotations

import subprocess
import sys

import pytest


pytestmark = pytest.mark.timeout(30)


def test_the_supervisor_never_imports_cuda_libraries():
    """The watchdog must not share fate with CUDA: no torch, vllm or transformers in
    the process that runs `hangwatch run`, the capture and the replay."""
    code = (
        "import sys\n"
        "import hangwatch.cli.main, hangwatch.supervisor.runner\n"
        "from hangwatch.cli.run_wiring import default_capture_hook\n"
        "default_capture_hook()\n"
        "import hangwatch.cli.commands.replay, hangwatch.diagnostics.replay\n"
        "hangwatch.cli.main.build_parser()\n"
        "bad = [m for m in ('torch', 'vllm', 'transformers', 'trl', 'generator') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
