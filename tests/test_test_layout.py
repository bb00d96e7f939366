"""The tests' own layout: folders mirror the packages, files are named by what they test.

A newcomer finds the tests of ``supervisor/decide/detector.py`` under
``tests/supervisor/decide/``; end-to-end runs of the whole CLI live in
``tests/e2e/``. pytest imports test files by basename (no ``__init__.py``), so two
files of one name would shadow each other.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
# Folders of tests that mirror no package folder, and why.
NOT_MIRRORS = {
    "e2e": "end-to-end runs of the whole CLI",
    "fixtures": "small programs the tests run",
    "data": "inputs",
    "trainer": "hangwatch.trainer, installed from generator/trainer",
    "cli": "hangwatch.cli, installed from supervisor/cli",
    "contract": "hangwatch.contract, installed from supervisor/contract",
}
WHEN_WRITTEN = re.compile(r"round|review|held_?out|hostile\d", re.IGNORECASE)


def _test_files() -> list[Path]:
    return [p for p in TESTS.rglob("test_*.py") if "fixtures" not in p.parts and "data" not in p.parts]


def test_no_test_file_is_named_after_when_it_was_written():
    bad = sorted(str(p.relative_to(ROOT)) for p in _test_files() if WHEN_WRITTEN.search(p.stem))
    assert not bad, f"name these after what they test: {bad}"


def test_test_folders_mirror_the_package_folders():
    stray = []
    for folder in sorted(p for p in TESTS.rglob("*") if p.is_dir() and "__pycache__" not in p.parts):
        rel = folder.relative_to(TESTS)
        if rel.parts[0] in NOT_MIRRORS or "data" in rel.parts or "fixtures" in rel.parts:
            continue
        if not (ROOT / rel).is_dir():
            stray.append(f"tests/{rel.as_posix()} mirrors no folder {rel.as_posix()}/")
    assert not stray, "\n".join(stray)


def test_every_test_file_has_its_own_basename():
    counts = Counter(p.name for p in _test_files())
    assert not [n for n, c in counts.items() if c > 1], sorted(n for n, c in counts.items() if c > 1)
