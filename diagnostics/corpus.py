"""Score ``hangwatch replay`` on a corpus of real pasted dumps.

A corpus is a directory of ``NAME.txt`` dumps, each with a ``NAME.meta`` sidecar
of ``key: value`` lines: ``url`` (where it was pasted), ``expected`` (the
signature id of the cause stated in that thread, ``?`` when the thread states
none), ``cause``, ``shape``, optionally ``suspect`` (the pid of the culprit),
``heldout: yes`` (kept out of tuning) and ``parse: refuse`` (a paste with no whole
frame left, e.g. two dumps interleaved character by character: replay is right to
refuse it). The last line printed is

    dumps=N parsed=P known_cause=K right=R

``parsed``: replay read stacks from it; ``right``: the headline signature is the
expected one (known-cause dumps only). Usage::

    python -m hangwatch.diagnostics.corpus [DIR] [--subset all|tuning|heldout] [-v]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

DEFAULT_DIR = Path("tests/diagnostics/data/pasted")


@dataclass(frozen=True)
class Entry:
    name: str
    path: Path
    meta: dict[str, str]

    @property
    def expected(self) -> str:
        return self.meta.get("expected", "?").strip() or "?"

    @property
    def refusable(self) -> bool:
        """No whole frame survives in the paste: refusing it is the right answer."""
        return self.meta.get("parse", "").strip().lower() == "refuse"

    @property
    def heldout(self) -> bool:
        return self.meta.get("heldout", "").strip().lower() in ("yes", "true", "1")


@dataclass(frozen=True)
class Outcome:
    entry: Entry
    parsed: bool
    got: str | None
    error: str = ""

    @property
    def known(self) -> bool:
        return self.entry.expected != "?"

    @property
    def right(self) -> bool:
        return self.parsed and self.known and self.got == self.entry.expected


def read_meta(path: Path) -> dict[str, str]:
    meta: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and not key.startswith((" ", "\t")):
            meta[key.strip().lower()] = value.strip()
    return meta


def load_corpus(directory: Path, subset: str = "all") -> list[Entry]:
    entries = []
    for txt in sorted(Path(directory).glob("*.txt")):
        meta_path = txt.with_suffix(".meta")
        meta = read_meta(meta_path) if meta_path.is_file() else {}
        entry = Entry(txt.stem, txt, meta)
        if subset == "all" or (subset == "heldout") == entry.heldout:
            entries.append(entry)
    return entries


def score(entries: Sequence[Entry], signature_files: Sequence[str] = ()) -> list[Outcome]:
    from hangwatch.diagnostics.errors import DiagnosticsError  # noqa: PLC0415
    from hangwatch.diagnostics.replay import analyse  # noqa: PLC0415
    from hangwatch.diagnostics.signatures import load_signatures  # noqa: PLC0415

    signatures = load_signatures(signature_files)
    out = []
    for e in entries:
        try:
            (incident,) = analyse([e.path], signatures)
        except DiagnosticsError as exc:
            out.append(Outcome(e, False, None, str(exc)))
            continue
        c = incident.classification
        parsed = c is not None
        out.append(Outcome(e, parsed, (c.signature_id or "unknown") if c else None))
    return out


def summary(outcomes: Sequence[Outcome]) -> str:
    n = len(outcomes)
    parsed = sum(o.parsed for o in outcomes)
    known = sum(o.known for o in outcomes)
    right = sum(o.right for o in outcomes)
    return f"dumps={n} parsed={parsed} known_cause={known} right={right}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hangwatch.diagnostics.corpus", description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", nargs="?", default=str(DEFAULT_DIR))
    ap.add_argument("--subset", choices=("all", "tuning", "heldout"), default="all")
    ap.add_argument("--signatures", action="append", default=[], metavar="FILE")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per dump")
    args = ap.parse_args(argv)
    directory = Path(args.directory)
    if not directory.is_dir():
        print(f"corpus: {directory}: no such directory", file=sys.stderr)
        return 2
    outcomes = score(load_corpus(directory, args.subset), args.signatures)
    for o in outcomes:
        if args.verbose or not (o.right or (o.parsed and not o.known)):
            mark = "ok  " if o.right else ("--  " if o.parsed and not o.known else (
                "MISS" if o.parsed else ("REFD" if o.entry.refusable else "FAIL")))
            print(f"{mark} {o.entry.name:48s} expected={o.entry.expected:26s} got={o.got}{'  ' + o.error if o.error else ''}")
    print(summary(outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
