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

MAX_MANIFEST_BYTES = 4 * 1024 * 1024


def bundle_summary(path: str | Path | None) -> dict[str, Any]:
    """``{"bundle", "report", "signature", "title"}``; fields are None when unknown."""
    out: dict[str, Any] = {"bundle": None, "report": None, "signature": None, "title": None}
    if not path:
        return out
    bundle = Path(path)
    out["bundle"] = str(bundle)
    report = bundle / "report.html"
    if report.is_file():
        out["report"] = str(report)
    try:
        with open(bundle / "manifest.json", "rb") as handle:
            manifest = json.loads(handle.read(MAX_MANIFEST_BYTES))
    except (OSError, ValueError):
        return out
    classification = manifest.get("classification") if isinstance(manifest, dict) else None
    if isinstance(classification, dict):
        out["signature"] = classification.get("signature_id")
        out["title"] = classification.get("title")
    return out
