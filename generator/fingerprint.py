"""Per-tensor fingerprints and the weight manifest.

A fingerprint is xxh3_128 over the tensor's raw bytes in C order. xxh3 is not
a cryptographic hash, and does not need to be: the question is "did the engine
load exactly these bytes" between two processes of one user that already
share an authenticated channel, i.e. accidental corruption, truncation, a
stale or partial load, a wrong slice of a packed parameter. xxh3_128 has a
2^-128 accidental-collision rate and runs near memory bandwidth (see
docs/generator.md for the measurements that chose it over blake3 and sha256).

Invariant: hashing never copies a contiguous CPU tensor (it hashes a
memoryview of the storage); a non-contiguous or device tensor is copied once.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Mapping

import torch
import xxhash

ALGORITHM = "xxh3_128"


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The tensor's bytes in C order, as a zero-copy view when it is contiguous on CPU."""
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous().reshape(-1)
    return memoryview(t.view(torch.uint8).numpy())


def fingerprint(tensor: torch.Tensor) -> str:
    return xxhash.xxh3_128_hexdigest(tensor_bytes(tensor))


def entry(tensor: torch.Tensor, digest: str | None = None) -> dict[str, Any]:
    """A manifest entry: shape, dtype and fingerprint (``digest`` if already computed)."""
    return {
        "shape": list(tensor.shape),
        "dtype": str(tensor.dtype).removeprefix("torch."),
        ALGORITHM: digest if digest is not None else fingerprint(tensor),
    }


def build_manifest(named: Iterable[tuple[str, torch.Tensor]]) -> dict[str, dict[str, Any]]:
    return {name: entry(tensor) for name, tensor in named}


def manifest_digest(manifest: Mapping[str, Mapping[str, Any]]) -> str:
    """One digest naming a whole manifest; the trainer checks the worker echoes it."""
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()
