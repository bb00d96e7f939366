"""The capture hook's interface: what the supervisor hands over before it kills.

The supervisor calls a ``CaptureHook`` in a worker thread and waits for it
until the request's deadline; a hook that overruns is abandoned (recorded in
the journal) and recovery goes on. Hooks must therefore bound their own
external calls (``hangwatch.contract.tools.run_bounded``) and write atomically
(``hangwatch.contract.atomic``), so an abandoned hook never leaves half a
bundle behind. The full capture lives in ``hangwatch.diagnostics.capture``;
the CLI injects it, the supervisor never imports it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

from hangwatch.contract.samples import Sample
from hangwatch.contract.verdict import Verdict


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
    thresholds: Mapping[str, Any]  # the detector's settings, as JSON
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
    node = request.extra.get("node_rank")
    # In a multi-node cohort every node captures the same incident: the name says whose it is.
    suffix = f"-node{int(node)}" if isinstance(node, int) else ""
    return f"{stamp}-attempt{request.attempt}-{request.verdict.kind.value}{suffix}"
