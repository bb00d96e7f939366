"""``--in-process-stacks all``: the start-up hook arms a Python process that never imports
hangwatch, and the sitecustomize it shadows still runs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hangwatch.contract import startup_hook
from hangwatch.contract.stackdump import read_header, stack_file

pytestmark = pytest.mark.timeout(30)


def test_the_hook_arms_a_plain_python_and_runs_the_sitecustomize_it_shadows(tmp_path):
    folder = startup_hook.write_hook(tmp_path / "run")
    assert folder == tmp_path / "run" / "startup-hook" and (folder / "sitecustomize.py").stat().st_mode & 0o777 == 0o600
    users = tmp_path / "users"
    users.mkdir()
    (users / "sitecustomize.py").write_text(f"open({str(tmp_path / 'users-ran')!r}, 'w').close()\n")
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    env = dict(os.environ, HANGWATCH_ATTEMPT_DIR=str(attempt), HANGWATCH_IN_PROCESS_STACKS="all",
               PYTHONPATH=startup_hook.with_hook({"PYTHONPATH": str(users)}, folder))
    out = subprocess.run([sys.executable, "-c", "import os, sys; print(os.getpid()); print('hangwatch.trainer' in sys.modules)"],
                         env=env, capture_output=True, text=True, check=True)
    pid, imported = out.stdout.split()
    header = read_header(stack_file(attempt, int(pid)).read_text().splitlines()[0])
    assert header is not None and header.pid == int(pid)
    assert imported == "False", "armed without importing hangwatch.trainer"
    assert (tmp_path / "users-ran").exists(), "the user's own sitecustomize still ran"


def test_the_hook_is_quiet_where_hangwatch_is_not_installed(tmp_path):
    folder = startup_hook.write_hook(tmp_path)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(folder), "HANGWATCH_ATTEMPT_DIR": str(tmp_path)}
    # -S: no site-packages, so no hangwatch; sitecustomize is imported only through site, so import it by hand.
    out = subprocess.run([sys.executable, "-S", "-c", f"import sys; sys.path.insert(0, {str(folder)!r}); import sitecustomize; print('ok')"],
                         env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
