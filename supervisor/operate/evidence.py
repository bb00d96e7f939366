"""What an incident bundle says about itself, read from its ``manifest.json``.

The supervisor never imports diagnostics (it must not share fate with it), but
alerts and ``hangwatch status`` want the one-line answer: which signature, and
where the report is. The bundle format is documented (docs/bundle-format.md),
so this reads the manifest as plain JSON, size-capped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hangwatch.contract.capped import read_capped

MAX_MANIFEST_BYTES = 4 * 1024 * 1024


def bundle_summary(path: str | Path | None) -> dict[str, Any]:
    """``{"bundle", "report", "signature", "title"}``; fields are None when unknown."""
    out: dict[str, Any] = {"bundle": None, "report": None, "signature": None, "title": None}
    if not path or not isinstance(path, (str, Path)):
        return out  # a journal edited by hand can hold anything here
    bundle = Path(path)
    out["bundle"] = str(bundle)
    report = bundle / "report.html"
    try:
        if report.is_file():
            out["report"] = str(report)
    except OSError:  # a name too long, say: no report to show
        pass
    try:
        # Never blocks (a FIFO named manifest.json) and never reads past the cap.
        manifest = json.loads(read_capped(bundle / "manifest.json", MAX_MANIFEST_BYTES, follow_symlinks=False))
    except (OSError, ValueError, RecursionError):
        return out
    classification = manifest.get("classification") if isinstance(manifest, dict) else None
    if isinstance(classification, dict):
        out["signature"] = classification.get("signature_id")
        out["title"] = classification.get("title")
    return out
