"""Score ``hangwatch replay`` on a corpus of real pasted dumps.

A corpus is a directory of ``NAME.txt`` dumps, each with a ``NAME.meta`` sidecar
of ``key: value`` lines: ``url`` (where it was pasted), ``expected`` (the
signature id of the cause stated in that thread, ``?`` when the thread states
none; several ids joined by `` | `` when each names that cause, e.g. a family and
the bug-specific signature under it), ``cause``, ``shape``, optionally ``suspect``
(the pid of the culprit), ``heldout: yes`` (kept out of tuning), ``parse: refuse``
(a paste with no whole frame left, e.g. two dumps interleaved character by
character: replay is right to refuse it), ``collection`` (the batch it was
gathered in), ``first_pass`` (what replay said the first time it saw the dump,
before any rule was written for its collection) and ``blind_reading`` (the cause a
reader named reading only the paste, without its thread or its label: how much of the
cause the paste itself shows, the ceiling a reader of pastes can reach). The last line
printed is

    dumps=N parsed=P known_cause=K right=R

``parsed``: replay read stacks from it; ``right``: the headline signature is one of
the expected ids (known-cause dumps only). Above it, one line per collection that
recorded a first pass: ``collection=C known_cause=K first_pass_right=F right=R`` (then,
when some known-cause dumps have a ``blind_reading``: ``blind_read=N`` of them,
``blind_reading_right=B`` and ``first_pass_right_of_those=F2``, replay's first pass on
the same dumps), and one
for the dumps gathered before first passes were recorded (``collection=(before first passes)``).

A new collection is labelled from its sources first, then scored once with
``--record-first-pass``, which writes ``first_pass`` into each ``.meta`` of that
collection that has none; only then may rules be written for it. Usage::

    python -m hangwatch.diagnostics.corpus [DIR] [--subset all|tuning|heldout] [-v] [--record-first-pass]
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
    def expected_ids(self) -> frozenset[str]:
        return frozenset(part.strip() for part in self.expected.split("|") if part.strip())

    @property
    def collection(self) -> str:
        return self.meta.get("collection", "").strip()

    @property
    def first_pass(self) -> str:
        return self.meta.get("first_pass", "").strip()

    @property
    def blind_reading(self) -> str:
        return self.meta.get("blind_reading", "").strip()

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
        return self.parsed and self.known and self.got in self.entry.expected_ids

    @property
    def first_pass_right(self) -> bool:
        return self.known and self.entry.first_pass in self.entry.expected_ids

    @property
    def blind_reading_right(self) -> bool:
        return self.known and self.entry.blind_reading in self.entry.expected_ids


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


def by_collection(outcomes: Sequence[Outcome]) -> list[str]:
    """First-pass and current scores of each collection that recorded a first pass."""
    groups: dict[str, list[Outcome]] = {}
    for o in outcomes:
        if o.entry.collection and o.entry.first_pass:
            groups.setdefault(o.entry.collection, []).append(o)
    lines = []
    older = [o for o in outcomes if not o.entry.collection]
    if older and groups:
        # The dumps gathered before first passes were recorded: the bar a change must keep.
        known = [o for o in older if o.known]
        lines.append(f"collection=(before first passes) dumps={len(older)} parsed={sum(o.parsed for o in older)} "
                     f"known_cause={len(known)} right={sum(o.right for o in known)}")
    for name, group in sorted(groups.items()):
        known = [o for o in group if o.known]
        read = [o for o in known if o.entry.blind_reading]
        blind = (f" blind_read={len(read)} blind_reading_right={sum(o.blind_reading_right for o in read)}"
                 f" first_pass_right_of_those={sum(o.first_pass_right for o in read)}") if read else ""
        lines.append(f"collection={name} dumps={len(group)} parsed={sum(o.parsed for o in group)} "
                     f"known_cause={len(known)} first_pass_right={sum(o.first_pass_right for o in known)} "
                     f"right={sum(o.right for o in known)}{blind}")
    return lines


def record_first_pass(outcomes: Sequence[Outcome]) -> int:
    """Append ``first_pass`` to each ``.meta`` of a named collection that has none; how many were written.

    Dumps without a ``collection`` predate first-pass records: their verdicts were tuned, so a
    first pass written now would claim what nobody measured."""
    written = 0
    for o in outcomes:
        if o.entry.first_pass or not o.entry.collection:
            continue
        meta = o.entry.path.with_suffix(".meta")
        text = meta.read_text(encoding="utf-8")
        got = o.got if o.parsed else ("refused" if o.got is None else o.got)
        meta.write_text(text + ("" if text.endswith("\n") else "\n") + f"first_pass: {got}\n", encoding="utf-8")
        written += 1
    return written


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hangwatch.diagnostics.corpus", description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", nargs="?", default=str(DEFAULT_DIR))
    ap.add_argument("--subset", choices=("all", "tuning", "heldout"), default="all")
    ap.add_argument("--signatures", action="append", default=[], metavar="FILE")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per dump")
    ap.add_argument("--record-first-pass", action="store_true",
                    help="write first_pass into each .meta that has none (once per new collection, before any fix)")
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
    if args.record_first_pass:
        print(f"first_pass recorded for {record_first_pass(outcomes)} dumps")
    for line in by_collection(outcomes):
        print(line)
    print(summary(outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
