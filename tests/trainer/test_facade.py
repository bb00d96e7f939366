"""hangwatch.trainer, the one module a training script imports: its names are the generator's and
the contract's own, importing it imports neither torch nor transformers (HangwatchCallback pulls
transformers in on first use), and its folder cannot be imported under another name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(120)


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=100)


def test_the_facade_exports_the_generator_and_contract_names_without_importing_torch_or_transformers():
    out = _python(
        "import sys, hangwatch.trainer as t\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, sorted(sys.modules)\n"
        "from hangwatch.contract.heartbeat import beat\n"
        "from hangwatch.generator.policy import rollout_engine_kwargs, rollout_policy\n"
        "from hangwatch.generator.trl_patch import apply_rollout_policy\n"
        "assert (t.beat, t.rollout_engine_kwargs, t.rollout_policy, t.apply_rollout_policy) == "
        "(beat, rollout_engine_kwargs, rollout_policy, apply_rollout_policy)\n"
        "assert sorted(t.__all__) == ['HangwatchCallback', 'apply_rollout_policy', 'beat', 'rollout_engine_kwargs', "
        "'rollout_policy']\n"
        "print('ok')\n")
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


@pytest.mark.slow
def test_hangwatch_callback_is_the_hf_callback_looked_up_on_first_use_and_other_names_are_missing():
    out = _python(
        "import sys, hangwatch.trainer as t\n"
        "C = t.HangwatchCallback\n"
        "import transformers\n"
        "from hangwatch.generator import hf_callback\n"
        "assert C is hf_callback.HangwatchCallback and issubclass(C, transformers.TrainerCallback)\n"
        "try:\n"
        "    t.NoSuchName\n"
        "except AttributeError as exc:\n"
        "    assert 'NoSuchName' in str(exc)\n"
        "else:\n"
        "    raise SystemExit('no AttributeError')\n"
        "print('ok')\n")
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_the_facade_folder_imported_under_its_own_name_is_refused():
    """A second copy of every module in it would be a second heartbeat writer, a second policy."""
    out = _python(f"import sys; sys.path.insert(0, {str(ROOT / 'generator')!r}); import trainer")
    assert out.returncode != 0 and "import hangwatch.trainer, not trainer" in out.stderr, out.stderr
