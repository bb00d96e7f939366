"""The docs keep up with the command line, and point only at files that exist.

Every long option that `hangwatch CMD --help` lists (for every command, and every
subcommand such as `bundle pack`) must appear in README.md or a page under docs/;
every repository path the docs name as a file must exist.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# An option's own line in argparse's help: two spaces, then `-o X, --output X` or `--flag`.
OPTION_LINE = re.compile(r"^  (?:-\w[^,]*, )?(--[a-z0-9][a-z0-9-]*)")
# A command in the `COMMAND` list of a help text: four spaces, then its name.
COMMAND_LINE = re.compile(r"^    ([a-z][a-z-]*)(?:\s|$)")


def _help(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "hangwatch.cli", *args, "--help"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert proc.returncode == 0, f"hangwatch {' '.join(args)} --help failed: {proc.stderr}"
    return proc.stdout


def _commands(help_text: str) -> list[str]:
    """The commands a help text lists under its `COMMAND` positional."""
    found: list[str] = []
    lines = help_text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() != "COMMAND":
            continue
        for entry in lines[i + 1:]:
            if not entry.strip() or not entry.startswith("    "):
                break
            match = COMMAND_LINE.match(entry)
            if match:
                found.append(match.group(1))
    return found


def _every_command() -> list[tuple[str, ...]]:
    commands: list[tuple[str, ...]] = []
    for name in _commands(_help()):
        commands.append((name,))
        commands.extend((name, sub) for sub in _commands(_help(name)))
    return commands


def _long_options(help_text: str) -> set[str]:
    return {m.group(1) for line in help_text.splitlines() if (m := OPTION_LINE.match(line))} - {"--help"}


def _docs_text() -> str:
    return "\n".join(page.read_text(encoding="utf-8") for page in PAGES)


@pytest.mark.slow
def test_every_option_in_the_help_is_documented():
    docs = _docs_text()
    commands = _every_command()
    assert ("run",) in commands and ("bundle", "pack") in commands, commands
    missing: dict[str, list[str]] = {}
    for command in commands:
        for option in sorted(_long_options(_help(*command))):
            if not re.search(re.escape(option) + r"(?![\w-])", docs):
                missing.setdefault("hangwatch " + " ".join(command), []).append(option)
    assert not missing, "options in --help that README.md and docs/*.md never mention: " + "; ".join(
        f"{command}: {', '.join(options)}" for command, options in missing.items()
    )


# A path the docs name: it starts at one of the repository's top folders (or is a
# top-level file) and ends in a file name with an extension. Folders are not checked:
# pages may name test folders of a layout that is still being filled in.
TOP = ("supervisor/", "diagnostics/", "generator/", "scripts/", "tests/", "docs/")
PATH_TOKEN = re.compile(r"[`(]((?:\.\./|docs/)?[A-Za-z0-9_./-]+\.(?:py|md|toml|sh|txt|json|cfg))[`)#:\s]")


def _named_paths(page: Path) -> set[str]:
    names: set[str] = set()
    for match in PATH_TOKEN.finditer(page.read_text(encoding="utf-8")):
        names.add(match.group(1))
    return names


def _resolve(page: Path, name: str) -> Path | None:
    """The file a page's path stands for, or None when it is not a repository path."""
    if name.startswith(TOP) or name in {"README.md", "pyproject.toml"}:
        return ROOT / name
    if page.parent.name == "docs" and "/" not in name and name.endswith(".md"):
        return page.parent / name  # a link between pages: [security.md](security.md)
    if name.startswith("../"):
        return (page.parent / name).resolve()
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_file_a_page_names_exists(page: Path):
    dangling = sorted(
        name for name in _named_paths(page)
        if (path := _resolve(page, name)) is not None and not path.exists()
    )
    assert not dangling, f"{page.relative_to(ROOT)} names files that do not exist: {', '.join(dangling)}"
