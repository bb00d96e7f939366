"""``hangwatch report``: (re)write a bundle's report.html, or, given a run directory (it holds a
journal), the run's page RUN_DIR/report.html (``hangwatch.cli.run_page``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hangwatch.cli.errors import UsageError, bundle_input_errors
from hangwatch.contract.atomic import write_file
from hangwatch.contract.terminal import terminal_safe
from hangwatch.diagnostics.bundle import check_output_path, load_bundle, replace_file
from hangwatch.diagnostics.errors import DiagnosticsError


def cmd_report(args: argparse.Namespace) -> int:
    """``hangwatch report RUN_DIR``: a run's page (attempts, incidents, goodput); a bundle as before."""
    run_dir = Path(args.bundle)
    if not (run_dir / "journal.jsonl").is_file():
        return int(report_bundle(args))
    from hangwatch.cli.run_page import write_run_report  # noqa: PLC0415
    from hangwatch.contract.capped import FileTooLarge, NotRegularFile  # noqa: PLC0415

    out = Path(args.output) if args.output else None
    try:
        check_output_path(out or run_dir / "report.html")  # never below a folder another user controls
        path, g = write_run_report(run_dir, out)
    except DiagnosticsError as exc:
        raise UsageError(str(exc)) from exc
    except (NotRegularFile, FileTooLarge) as exc:  # the journal: the only file read whole
        raise UsageError(f"{run_dir / 'journal.jsonl'}: cannot read the journal: {exc.strerror}") from exc
    except OSError as exc:
        raise UsageError(f"{out or run_dir}: cannot write the report there ({exc.strerror or exc})") from exc
    goodput = f"{100 * g['goodput']:.1f} %" if g["goodput"] is not None else "-"
    print(terminal_safe(f"{path}  (goodput {goodput}: {g['productive_s']:.0f} s of {g['wall_s']:.0f} s; "
                        f"{len(g['incidents'])} incident(s), {len(g['attempts'])} attempt(s))"))
    return 0


@bundle_input_errors
def report_bundle(args: argparse.Namespace) -> int:
    from hangwatch.diagnostics.report import render_report  # noqa: PLC0415

    path = Path(args.bundle)
    if not path.exists():
        raise DiagnosticsError(f"{path}: no such bundle")
    b = load_bundle(path)
    html = render_report(b, signature_files=args.signatures)
    if args.output:
        out = Path(args.output)
        check_output_path(out)  # never replace a device node, a directory or a symlink
        try:
            write_file(out, html.encode("utf-8"))
        except OSError as exc:
            raise DiagnosticsError(f"{out}: cannot write the report ({exc.strerror or exc})") from None
    elif path.is_dir():
        out = replace_file(path, "report.html", html)
    else:
        raise DiagnosticsError(f"{path}: is an archive; give -o OUT.html")
    print(out)
    return 0
