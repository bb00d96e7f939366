"""The capture hook: evidence is taken before anything is killed.

The runner calls the hook in a worker thread and waits for it until the
request's deadline; a hook that overruns is abandoned (recorded in the
journal) and recovery goes on. Hooks must therefore bound their own external
calls (``supervisor.tools.run_bounded``) and write atomically
(``supervisor.atomic``), so an abandoned hook never leaves half a bundle behind.

The full capture (py-spy stacks, process table, GPU state, log tails) lives
in ``diagnostics.capture``; ``SamplesOnlyCapture`` is the minimal fallback that
records the verdict and the sample window when diagnostics is unavailable.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

from supervisor.atomic import write_dir
from supervisor.detector import DetectorConfig, Verdict
from supervisor.samples import Sample


@dataclass(frozen=True)
class TreeProcess:
    """A process of the supervised tree, identified by pid plus create time."""

    pid: int
    create_time: float
    ppid: int
    pgid: int
    sid: int
    name: str
    cmdline: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "create_time": self.create_time,
            "ppid": self.ppid,
            "pgid": self.pgid,
            "sid": self.sid,
            "name": self.name,
            "cmdline": list(self.cmdline),
        }


@dataclass(frozen=True)
class CaptureRequest:
    run_dir: Path
    run_id: str
    attempt: int
    verdict: Verdict
    samples: Sequence[Sample]
    tree: Sequence[TreeProcess]
    log_paths: Mapping[str, Path]
    detector_config: DetectorConfig
    deadline: float  # time.monotonic() by which the hook must have returned
    gpu_probe: str = "none"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


class CaptureHook(Protocol):
    def __call__(self, request: CaptureRequest) -> Path | None:
        """Write the evidence; return where it is (a bundle directory)."""


def bundle_name(request: CaptureRequest) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{stamp}-attempt{request.attempt}-{request.verdict.kind.value}"


class SamplesOnlyCapture:
    """Fallback hook: the verdict and the samples that triggered it."""

    def __call__(self, request: CaptureRequest) -> Path | None:
        final = request.run_dir / "incidents" / bundle_name(request)
        manifest = {
            "schema": 1,
            "run_id": request.run_id,
            "attempt": request.attempt,
            "verdict": request.verdict.to_json(),
            "thresholds": request.detector_config.to_json(),
            "captured": ["samples"],
            "failed": {"stacks": "diagnostics capture unavailable"},
        }
        samples = "".join(json.dumps(s.to_json()) + "\n" for s in request.samples)
        return write_dir(
            final,
            {
                "manifest.json": json.dumps(manifest, indent=2).encode(),
                "samples.jsonl": samples.encode(),
            },
        )


def default_capture_hook() -> CaptureHook:
    """The diagnostics capture when installed, else the samples-only fallback."""
    try:
        from diagnostics.capture import capture_incident  # noqa: PLC0415
    except ImportError:
        return SamplesOnlyCapture()
    return capture_incident
