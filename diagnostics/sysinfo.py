"""The rest of what a bundle records about the host and the trainer: versions,
the trainer's environment (redacted) and log tails (redacted)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

from hangwatch.contract.capped import open_regular
from hangwatch.contract.procid import CMDLINE_CUT, initial_environ, read_cmdline
from hangwatch.contract.redact import redact_env, redact_text

PACKAGES = ("hangwatch", "torch", "vllm", "trl", "transformers", "flashinfer-python", "triton", "nvidia-nccl-cu12", "flash-linear-attention", "py-spy", "nvidia-ml-py")

# Bounds on what the trainer's user can make us read: its venv is theirs.
_MAX_SITE_DIRS = 32
_MAX_DIR_ENTRIES = 20000
_MAX_HEADER_BYTES = 64 * 1024


def versions(trainer_pid: int | None = None, timeout: float = 5.0) -> dict[str, Any]:
    """Package versions of the supervisor and of the trainer's interpreter.

    The trainer's are read from ``*.dist-info/METADATA`` files under the
    site directories its interpreter would use, found from /proc without
    running anything: running the trainer's interpreter would run its venv's
    ``.pth`` files and ``sitecustomize`` as our user (root, when the trainer
    dropped privileges). ``timeout`` is kept for the caller's budget; the
    reads are bounded by entry and byte caps instead.
    """
    local = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in PACKAGES:
        try:
            local[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            local[name] = None
    out: dict[str, Any] = {"supervisor": local, "driver": _driver_version()}
    if trainer_pid is not None:
        try:
            out["trainer"] = trainer_versions(trainer_pid)
        except OSError as exc:
            out["trainer_error"] = f"pid {trainer_pid}: {exc.strerror or exc}"
    return out


def trainer_versions(pid: int) -> dict[str, Any]:
    """Versions of PACKAGES as the interpreter of ``pid`` sees them (first on its path wins)."""
    python, dirs = site_dirs(pid)
    found: dict[str, str] = {}
    wanted = {_normalise(p): p for p in PACKAGES}
    for directory in dirs:
        for name, version in _dist_versions(directory, wanted):
            found.setdefault(name, version)
    out: dict[str, Any] = {"python": python, "site_dirs": [str(d) for d in dirs], "source": "metadata"}
    out.update({p: found.get(p) for p in PACKAGES})
    return out


def site_dirs(pid: int) -> tuple[str | None, list[Path]]:
    """(python version, the site directories of ``pid``'s interpreter, in sys.path order).

    Derived like the interpreter derives them: PYTHONPATH first, then the venv
    of the executable as invoked (``pyvenv.cfg`` next to it; /proc/PID/exe is
    the resolved base interpreter, which loses the venv), then the base
    prefix when no venv excludes it. Relative entries are skipped.
    """
    env = _environ(pid)
    exe = Path(os.readlink(f"/proc/{pid}/exe"))
    invoked = _invoked_executable(pid, env)
    cfg, venv = _pyvenv(invoked) if invoked else ({}, None)
    if venv is None and env.get("VIRTUAL_ENV"):
        cfg, venv = _pyvenv(Path(env["VIRTUAL_ENV"]) / "bin" / "python")
    python = cfg.get("version") or _version_from_name(exe.name)
    xy = ".".join(python.split(".")[:2]) if python else None
    candidates: list[Path] = [Path(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p.startswith("/")]
    if venv is not None:
        candidates += _prefix_sites(venv, xy)
    if venv is None or cfg.get("include-system-site-packages", "false").lower() == "true":
        base = Path(cfg["home"]).parent if "home" in cfg else exe.parent.parent
        candidates += _prefix_sites(base, xy)
        if xy and base == Path("/usr"):
            candidates += [Path("/usr/local/lib") / f"python{xy}" / "dist-packages", Path("/usr/lib/python3/dist-packages")]
    dirs: list[Path] = []
    seen: set[Path] = set()
    for c in candidates:
        if c.is_dir() and c.resolve() not in seen:
            seen.add(c.resolve())
            dirs.append(c)
    return python, dirs[:_MAX_SITE_DIRS]


def startup_paths(executable: str | os.PathLike[str]) -> list[Path]:
    """What the interpreter ``executable`` (as invoked) trusts when it starts with ``-I``, found
    without running it: ``pyvenv.cfg`` (its ``home`` chooses the standard library), the
    standard library folder, the site directories, and every entry in them (``.pth`` files
    run their ``import`` lines at startup, and may import any package there). Whoever can
    change one of these can make the interpreter run their code: a caller about to run it
    as root checks who owns them. Bounded like ``site_dirs`` (entry and folder caps).
    """
    invoked = Path(os.path.abspath(executable))
    resolved = Path(os.path.realpath(invoked))
    cfg, venv = _pyvenv(invoked)
    python = cfg.get("version") or _version_from_name(invoked.name) or _version_from_name(resolved.name)
    xy = ".".join(python.split(".")[:2]) if python else None
    out: list[Path] = []
    if venv is not None:
        out.append(venv / "pyvenv.cfg")
    base = Path(cfg["home"]).parent if "home" in cfg else resolved.parent.parent
    stdlib = [base / lib / (f"python{xy}" if xy else "") for lib in ("lib", "lib64")]
    sites = _prefix_sites(venv, xy) if venv is not None else []
    if venv is None or cfg.get("include-system-site-packages", "false").lower() == "true":
        sites += _prefix_sites(base, xy)
        if xy and base == Path("/usr"):
            sites += [Path("/usr/local/lib") / f"python{xy}" / "dist-packages", Path("/usr/lib/python3/dist-packages")]
    out += [p for p in stdlib if p.is_dir()]
    for site in [s for s in sites if s.is_dir()][:_MAX_SITE_DIRS]:
        out.append(site)
        out += [Path(e.path) for e in _bounded_scandir(site)]
    return out


def _environ(pid: int) -> dict[str, str]:
    """The environment ``pid`` was started with (capped); ``OSError`` when unreadable."""
    env = {}
    for item in initial_environ(pid):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return env


def _invoked_executable(pid: int, env: Mapping[str, str]) -> Path | None:
    """argv[0] as the kernel's exec resolved it: absolute, or searched on the trainer's PATH."""
    args = read_cmdline(pid)  # capped: the process chooses its command line's size
    argv0 = args[0] if args and args[0] != CMDLINE_CUT else ""
    if not argv0:
        return None
    if argv0.startswith("/"):
        return Path(argv0)
    if "/" in argv0:
        return Path(os.readlink(f"/proc/{pid}/cwd")) / argv0
    for d in env.get("PATH", "").split(os.pathsep)[:64]:
        if d.startswith("/") and os.access(Path(d) / argv0, os.X_OK):
            return Path(d) / argv0
    return None


def _pyvenv(executable: Path) -> tuple[dict[str, str], Path | None]:
    """``pyvenv.cfg`` beside the executable or one level up (the interpreter's own rule)."""
    for folder in (executable.parent, executable.parent.parent):
        text = _read_capped(folder / "pyvenv.cfg")
        if text is not None:
            cfg = {}
            for line in text.splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    cfg[key.strip().lower()] = value.strip()
            return cfg, folder
    return {}, None


def _prefix_sites(prefix: Path, xy: str | None) -> list[Path]:
    libs = [prefix / lib for lib in ("lib", "lib64")]
    out = []
    for lib in libs:
        names = [f"python{xy}"] if xy else sorted(p.name for p in _bounded_scandir(lib) if p.name.startswith("python3"))
        out += [lib / n / "site-packages" for n in names] + [lib / n / "dist-packages" for n in names]
    return out


def _version_from_name(name: str) -> str | None:
    m = re.fullmatch(r"python(\d+\.\d+)", name)
    return m.group(1) if m else None


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist_versions(directory: Path, wanted: Mapping[str, str]) -> Iterable[tuple[str, str]]:
    """(package, version) for each wanted ``*.dist-info``/``*.egg-info`` in ``directory``.

    Never follows a symlink: a linked metadata folder or file is skipped, and
    files are opened O_NOFOLLOW|O_NONBLOCK (a FIFO cannot block us) and must be
    regular. Only the header is parsed, from at most 64 KiB.
    """
    for entry in _bounded_scandir(directory):
        stem, dot, suffix = entry.name.rpartition(".")
        if suffix not in ("dist-info", "egg-info") or not dot:
            continue
        name = _normalise(stem.split("-", 1)[0])
        if name not in wanted:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
        except OSError:
            continue
        text = _read_capped(Path(entry.path) / ("METADATA" if suffix == "dist-info" else "PKG-INFO"))
        if text is None:
            continue
        header = text.split("\n\n", 1)[0]
        meta_name = re.search(r"^Name:\s*(\S+)", header, re.M)
        meta_version = re.search(r"^Version:\s*(\S+)", header, re.M)
        if meta_name and meta_version and _normalise(meta_name.group(1)) == name:
            yield wanted[name], meta_version.group(1)[:64]


def _bounded_scandir(directory: Path) -> list[os.DirEntry]:
    out = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                out.append(entry)
                if len(out) >= _MAX_DIR_ENTRIES:
                    break
    except OSError:
        pass
    return out


def _read_capped(path: Path) -> str | None:
    """The first bytes of a regular file of the trainer's user, or None. Never a device, never
    a FIFO, not even opened (``open_regular``): the file was opened first and checked after, so
    root's capture opened their FIFO named METADATA (reproduced with a ``setpriv`` trainer), and
    in their own mount namespace, reached through ``/proc/PID/root`` on their path, a device
    bind-mounted there (their terminal, without O_NOCTTY; ``/dev/watchdog``)."""
    try:
        fd = open_regular(path, follow_symlinks=False)
    except OSError:
        return None
    try:
        return os.read(fd, _MAX_HEADER_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _driver_version() -> str | None:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    return text.splitlines()[0].strip() if text else None


def trainer_environ(pid: int) -> dict[str, str] | None:
    """The trainer's environment, redacted; None when unreadable."""
    try:
        return redact_env(_environ(pid))
    except OSError:
        return None


def log_files(log_paths: Mapping[str, Any]) -> dict[str, Path]:
    """stdout, stderr and every ``*.log`` in the attempt dir, by a stable name."""
    out: dict[str, Path] = {}
    seen: set[Path] = set()

    def add(name: str, path: Path) -> None:
        try:
            key = path.resolve()
        except OSError:
            key = path
        # A symlinked log (to a private file) is never followed into a bundle.
        if key in seen or path.is_symlink() or not path.is_file():
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
    fd = open_regular(path, follow_symlinks=False)  # never a link, a FIFO or a device, not even opened
    with os.fdopen(fd, "rb") as handle:
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
