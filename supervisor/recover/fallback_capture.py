"""The samples-only capture: the runner's fallback when the injected hook fails.

It keeps the verdict and the sample window that triggered it, so an incident
always leaves evidence, even when py-spy or the diagnostics capture cannot run.
Redacted as the diagnostics bundles are (``redact_value``: still valid JSON).
"""

from __future__ import annotations

import json
from pathlib import Path

from hangwatch.contract.atomic import write_dir
from hangwatch.contract.capture import CaptureRequest, bundle_name
from hangwatch.contract.redact import redact_value


class SamplesOnlyCapture:
    """Fallback hook: the verdict and the samples that triggered it."""

    def __call__(self, request: CaptureRequest) -> Path | None:
        final = request.run_dir / "incidents" / bundle_name(request)
        # Redacted like every bundle (a bundle is for sharing): the samples carry the trainer's
        # heartbeat info, which may name a token.
        manifest = redact_value({
            "schema": 1,
            "run_id": request.run_id,
            "attempt": request.attempt,
            "verdict": request.verdict.to_json(),
            "thresholds": dict(request.thresholds),
            "captured": ["samples"],
            "failed": {"stacks": "diagnostics capture unavailable"},
        })
        samples = "".join(json.dumps(redact_value(s.to_json())) + "\n" for s in request.samples)
        return write_dir(
            final,
            {
                "manifest.json": json.dumps(manifest, indent=2).encode(),
                "samples.jsonl": samples.encode(),
            },
        )
