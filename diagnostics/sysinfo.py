"""The rest of what a bundle records about the host and the trainer: versions,
the trainer's environment (redacted) and log tails (redacted)."""

from __future__ import annotations

import importlib.metadata
import platform
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

from hangwatch.contract.redact import redact_env, redact_text
from hangwatch.contract.tools import run_bounded

PACKAGES = ("hangwatch", "torch", "vllm", "trl", "transformers", "flashinfer-python", "triton", "nvidia-nccl-cu12", "flash-linear-attention", "py-spy", "nvidia-ml-py")
# Run in the trainer's interpreter: its venv is the one that matters. Reads
# package metadata only; torch and vllm are never imported.
_VERSIONS_SCRIPT = (
    "import importlib.metadata as m, json, sys\n"
    "out = {'python': sys.version.split()[0]}\n"
    f"for p in {list(PACKAGES)!r}:\n"
    "    try: out[p] = m.version(p)\n"
    "    except Exception: out[p] = None\n"
    "print(json.dumps(out))\n"
)


def versions(trainer_exe: str | None = None, timeout: float = 5.0) -> dict[str, Any]:
    local = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in PACKAGES:
        try:
            local[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            local[name] = None
    out: dict[str, Any] = {"supervisor": local, "driver": _driver_version()}
    if trainer_exe and "python" in Path(trainer_exe).name:
        result = run_bounded([trainer_exe, "-c", _VERSIONS_SCRIPT], timeout)
        if result.ok:
            import json  # noqa: PLC0415

            try:
                out["trainer"] = json.loads(result.stdout)
            except ValueError:
                out["trainer_error"] = "unparseable output"
        else:
            out["trainer_error"] = result.error or result.stderr.strip()[-300:]
    return out


def _driver_version() -> str | None:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    return text.splitlines()[0].strip() if text else None


def trainer_environ(pid: int) -> dict[str, str] | None:
    """The trainer's environment, redacted; None when unreadable."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, _, v = item.partition(b"=")
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return redact_env(env)


def log_files(log_paths: Mapping[str, Any]) -> dict[str, Path]:
    """stdout, stderr and every ``*.log`` in the attempt dir, by a stable name."""
    out: dict[str, Path] = {}
    seen: set[Path] = set()

    def add(name: str, path: Path) -> None:
        try:
            key = path.resolve()
        except OSError:
            key = path
        if key in seen or not path.is_file():
            return
        seen.add(key)
        out[name] = path

    for name, value in log_paths.items():
        if name == "attempt_dir" or value is None:
            continue
        add(name, Path(value))
    attempt_dir = log_paths.get("attempt_dir")
    if attempt_dir is not None and Path(attempt_dir).is_dir():
        for path in sorted(Path(attempt_dir).glob("*.log")):
            add(path.stem, path)
    return out


def tail(path: Path, lines: int = 200, max_bytes: int = 256 * 1024) -> str:
    """The last ``lines`` lines (read from the end: logs can be gigabytes), redacted."""
    with open(path, "rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        handle.seek(max(0, size - max_bytes))
        data = handle.read()
    text = data.decode("utf-8", "replace")
    kept = text.splitlines()[-lines:]
    return redact_text("\n".join(kept) + ("\n" if kept else ""))


def tails(files: Mapping[str, Path], lines: int = 200) -> tuple[dict[str, str], dict[str, str]]:
    """(tails by name, errors by name)."""
    got, failed = {}, {}
    for name, path in files.items():
        try:
            got[name] = tail(path, lines)
        except OSError as exc:
            failed[name] = f"{path}: {exc.strerror or exc}"
    return got, failed


def safe_names(names: Iterable[str]) -> dict[str, str]:
    """Bundle file names for log names (no path separators)."""
    return {n: "".join(c if c.isalnum() or c in "._-" else "_" for c in n) for n in names}
