"""The CLI's user mistakes: printed as ``hangwatch: error: ...`` with exit 2, never a traceback.

``UsageError`` is raised by any command and turned into that line by ``main``. The
commands that read bundles and dumps (``replay``, ``report``, ``bundle pack``) wrap
their handler in ``bundle_input_errors``: what other people send may be malformed.
"""

from __future__ import annotations

import argparse
import sys
from functools import wraps
from typing import Callable

from hangwatch.contract.errors import ConfigError
from hangwatch.contract.exitcodes import EXIT_USAGE
from hangwatch.contract.terminal import one_line
from hangwatch.diagnostics.errors import DiagnosticsError


class UsageError(Exception):
    """A user mistake; printed without a traceback."""


def bundle_input_errors(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    @wraps(fn)
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except (DiagnosticsError, ConfigError) as exc:
            print(f"hangwatch: error: {one_line(str(exc))}", file=sys.stderr)
            return EXIT_USAGE
        except (KeyError, TypeError, ValueError, ArithmeticError, AttributeError, IndexError, RecursionError,
                MemoryError) as exc:
            # Bundles come from other people: a field of the wrong type, shape or value is
            # malformed input, not our bug, and never a traceback.
            print(f"hangwatch: error: {_inputs(args)}malformed input ({type(exc).__name__}: {one_line(str(exc)[:200])}); "
                  "not a bundle or dump hangwatch wrote", file=sys.stderr)
            return EXIT_USAGE

    return run


def _inputs(args: argparse.Namespace) -> str:
    """The input(s) the command read, to lead the error with ("a.txt: "); with several,
    the first three and how many more (which one failed is not known here)."""
    paths = [str(p) for p in (getattr(args, "paths", None) or [getattr(args, "bundle", None)]) if p]
    if not paths:
        return ""
    shown = ", ".join(one_line(p[:200]) for p in paths[:3])
    return f"{shown}{f' (and {len(paths) - 3} more)' if len(paths) > 3 else ''}: "
