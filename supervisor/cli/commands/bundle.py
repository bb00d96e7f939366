"""``hangwatch bundle pack BUNDLE``: a bundle as one .tar.gz, to attach to a bug report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hangwatch.cli.errors import bundle_input_errors
from hangwatch.contract.terminal import one_line
from hangwatch.diagnostics.bundle import pack


@bundle_input_errors
def cmd_pack(args: argparse.Namespace) -> int:
    def skipped(name: str, what: str) -> None:
        print(f"hangwatch: warning: {one_line(name)}: left out of the archive ({what}); it holds regular "
              "files only", file=sys.stderr)

    out = pack(Path(args.bundle), Path(args.output) if args.output else None, skipped)
    print(out)
    return 0
