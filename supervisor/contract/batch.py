"""The kept batch: the record of an engine request in flight, and its file in the attempt dir.

Whoever drives a rollout engine (the generator's isolated worker, or the instrumented
in-process engine of TRL) writes, right before each ``generate`` call, what that call was
asked to do to ``inflight-<pid>.json`` in the attempt directory, and removes the file when
the call returns. A wedged call never returns, so its record is still there when the
supervisor captures the incident: the capture copies it into the bundle as ``batch.json``,
and ``hangwatch reproduce`` runs it again against a fresh engine.

A record (``kind`` = ``hangwatch-batch``) holds the prompts (text, or ``{"prompt_ids": [...]}``
for vLLM's ``{"prompt_token_ids": [...]}``: a name with TOKEN in it is a secret's to the bundle's
redaction, which would blank the ids; ``RECORD_NAMES``), ``n``, the seed and the sampling parameters, the engine's name and arguments, the
graph policy asked for and what the engine applied, the model path, the fingerprint of the
weights last loaded and the versions (docs/bundle-format.md, ``batch.json``).

Invariants:
* The file is written atomically (``contract.atomic``: a reader sees a whole record or none),
  0600, never through a symlink; it holds prompts, as the worker's log does. It is not
  fsynced: it matters while its writer lives, not through a power loss.
* A record is at most ``MAX_BATCH_BYTES``: prompts past the cap are left out (never cut in
  the middle: a shortened prompt is another request), and ``truncated`` says how many went.
* Writing never fails the request it describes: an ``OSError`` is swallowed (``write`` returns
  False). The hot path costs one JSON encoding and one atomic write per call.
* Readers read at most the cap plus slack, never follow a symlink, and refuse what is not a
  record (``BatchError``).
* Standard library only: the supervisor, the diagnostics and the generator all use it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from hangwatch.contract import atomic
from hangwatch.contract.capped import read_capped

SCHEMA = 1
KIND = "hangwatch-batch"
#: The largest record kept: prompts past it are left out.
MAX_BATCH_BYTES = 4 << 20
#: What a reader accepts (the cap plus the envelope of a record that only just fitted).
MAX_READ_BYTES = MAX_BATCH_BYTES + (64 << 10)
PREFIX = "inflight-"
INFLIGHT_NAME = re.compile(r"^inflight-(\d+)\.json$")


class BatchError(ValueError):
    """A file that is not a readable batch record (missing, too large, corrupt, not ours)."""


def inflight_path(directory: str | os.PathLike[str], pid: int) -> Path:
    """The in-flight record of process ``pid``: ``inflight-<pid>.json`` in ``directory``."""
    return Path(directory) / f"{PREFIX}{int(pid)}.json"


#: vLLM's names whose TOKEN the bundle's redaction takes for a secret's (it would blank the ids),
#: and the record's names for them; ``engine_names`` turns them back.
RECORD_NAMES = {"prompt_token_ids": "prompt_ids", "stop_token_ids": "stop_ids",
                "allowed_token_ids": "allowed_ids", "bad_words_token_ids": "bad_words_ids"}
ENGINE_NAMES = {v: k for k, v in RECORD_NAMES.items()}


def record_names(value: Any) -> Any:
    """A prompt or sampling mapping as the record keeps it (other values as they are)."""
    if isinstance(value, Mapping):
        return {RECORD_NAMES.get(k, k): v for k, v in value.items()}
    return value


def engine_names(value: Any) -> Any:
    """A recorded prompt or sampling mapping as the engine takes it (``record_names`` undone)."""
    if isinstance(value, Mapping):
        return {ENGINE_NAMES.get(k, k): v for k, v in value.items()}
    return value


def make_record(*, engine: str, engine_kwargs: Mapping[str, Any], prompts: list[Any], n: int, seed: int | None,
                sampling: Mapping[str, Any], source: str, policy: Mapping[str, Any] | None = None,
                applied: Mapping[str, Any] | None = None, weights: Mapping[str, Any] | None = None,
                engine_call: int | None = None, versions: Mapping[str, str] | None = None,
                pid: int | None = None, wall: float | None = None) -> dict[str, Any]:
    """A batch record (a plain dict, JSON-ready); ``encode`` caps and serialises it."""
    kwargs = dict(engine_kwargs)
    return {
        "schema": SCHEMA,
        "kind": KIND,
        "op": "generate",
        "source": source,
        "pid": os.getpid() if pid is None else pid,
        "written_at": round(time.time() if wall is None else wall, 3),
        "engine": engine,
        "engine_kwargs": kwargs,
        "model": kwargs.get("model") if isinstance(kwargs.get("model"), str) else None,
        "policy": dict(policy) if policy is not None else None,
        "applied": dict(applied) if applied is not None else None,
        "weights": dict(weights) if weights is not None else None,
        "engine_call": engine_call,
        "request": {"prompts": [record_names(p) for p in prompts], "n": n, "seed": seed,
                    "sampling": record_names(sampling)},
        "versions": dict(versions or {}),
        "truncated": None,
    }


def encode(record: Mapping[str, Any], limit: int = MAX_BATCH_BYTES) -> bytes:
    """``record`` as JSON of at most ``limit`` bytes: the prompts that fit, in order, and a
    ``truncated`` note when some were left out. Values JSON cannot hold are written as text."""
    data = _dumps(record)
    if len(data) <= limit:
        return data
    request = dict(record.get("request") or {})
    prompts = list(request.get("prompts") or [])
    note = {"prompts_total": len(prompts), "prompts_kept": 0, "cap_bytes": limit,
            "reason": f"the batch was over the {limit}-byte cap; prompts past it were left out"}
    empty = {**record, "request": {**request, "prompts": []}, "truncated": note}
    room = limit - len(_dumps(empty)) - 32  # the kept count's digits
    kept = 0
    for prompt in prompts:
        room -= len(_dumps(prompt)) + 2  # ", " between items
        if room < 0:
            break
        kept += 1
    note["prompts_kept"] = kept
    data = _dumps({**empty, "request": {**request, "prompts": prompts[:kept]}})
    if len(data) > limit:  # the envelope alone is over the cap (engine arguments of megabytes)
        slim = {k: v for k, v in empty.items() if k not in ("engine_kwargs", "versions", "applied")}
        note.update(prompts_kept=0, reason=f"{note['reason']}; the engine arguments too")
        data = _dumps({**slim, "engine_kwargs": {}})
    return data


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), default=str, ensure_ascii=False).encode("utf-8", "backslashreplace")


class InflightFile:
    """The in-flight record of one engine-driving process; ``directory`` None: a no-op."""

    def __init__(self, directory: str | os.PathLike[str] | None, pid: int | None = None,
                 limit: int = MAX_BATCH_BYTES) -> None:
        self.path = inflight_path(directory, os.getpid() if pid is None else pid) if directory else None
        self.limit = limit
        self.failed: str | None = None  # the last write's error, for the caller's log

    def write(self, record: Mapping[str, Any]) -> bool:
        """Replace the record atomically; False (and ``failed`` set) if it could not be written."""
        if self.path is None:
            return False
        try:
            # Not fsynced: the record matters while its writer lives (a wedged process), not
            # through a power loss, and the two fsyncs were most of a write's cost (1-10 ms).
            atomic.write_file(self.path, encode(record, self.limit), mode=0o600, durable=False)
        except (OSError, ValueError) as exc:
            self.failed = f"{type(exc).__name__}: {exc}"
            return False
        self.failed = None
        return True

    def clear(self) -> None:
        """The request returned: its record goes (a later incident must not show it)."""
        if self.path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)


def read_record(path: str | os.PathLike[str], limit: int = MAX_READ_BYTES) -> dict[str, Any]:
    """The record in ``path``: a regular file (never a symlink) of at most ``limit`` bytes."""
    try:
        data = read_capped(path, limit, follow_symlinks=False)
    except OSError as exc:
        raise BatchError(f"{path}: {exc.strerror or exc}") from None
    return parse_record(data, str(path))


def parse_record(data: bytes | str, source: str = "batch.json") -> dict[str, Any]:
    """``data`` as a batch record, or ``BatchError`` saying why it is not one."""
    try:
        record = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise BatchError(f"{source}: not valid JSON ({str(exc)[:120]})") from None
    if not isinstance(record, dict) or record.get("kind") != KIND:
        raise BatchError(f"{source}: not a hangwatch batch record")
    return record


@dataclass(frozen=True)
class Batch:
    """What a reproduction needs from a record, checked: types as the engine takes them."""

    engine: str
    engine_kwargs: dict[str, Any]
    prompts: list[Any]
    n: int
    seed: int | None
    sampling: dict[str, Any]
    applied: dict[str, Any] | None
    model: str | None
    truncated: dict[str, Any] | None
    record: dict[str, Any]

    @classmethod
    def from_record(cls, record: Mapping[str, Any], source: str = "batch.json") -> "Batch":
        request = record.get("request")
        if not isinstance(request, Mapping):
            raise BatchError(f"{source}: the record has no request")
        engine, kwargs = record.get("engine"), record.get("engine_kwargs")
        prompts, n, seed = request.get("prompts"), request.get("n"), request.get("seed")
        sampling = request.get("sampling") or {}
        if not isinstance(engine, str) or not engine:
            raise BatchError(f"{source}: the record names no engine")
        if not isinstance(kwargs, Mapping) or not isinstance(sampling, Mapping):
            raise BatchError(f"{source}: engine_kwargs and sampling must be objects")
        if not isinstance(prompts, list) or not all(isinstance(p, (str, dict)) for p in prompts):
            raise BatchError(f"{source}: prompts must be a list of texts or token-id objects")
        if not prompts:
            why = (record.get("truncated") or {}).get("reason") if isinstance(record.get("truncated"), Mapping) else None
            raise BatchError(f"{source}: the record kept no prompt" + (f" ({why})" if why else ""))
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise BatchError(f"{source}: n must be a positive whole number, got {n!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise BatchError(f"{source}: seed must be a whole number or null, got {seed!r}")
        applied, truncated, model = record.get("applied"), record.get("truncated"), record.get("model")
        return cls(engine, dict(kwargs), [engine_names(p) for p in prompts], n, seed, engine_names(sampling),
                   dict(applied) if isinstance(applied, Mapping) else None,
                   model if isinstance(model, str) else None,
                   dict(truncated) if isinstance(truncated, Mapping) else None, dict(record))
