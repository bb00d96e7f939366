"""Engine-side proof that the model holds exactly the staged bytes.

Runs inside the engine process (the fake worker, or vLLM's GPU worker via
``hangwatch.generator.engines.vllm_extension``). Imports torch only.

Checks, all of which must pass:
* coverage from the load: every unique model parameter was reported loaded
  by ``model.load_weights`` (tied aliases count once, by identity), and no
  loaded name is unknown to the model;
* coverage from the manifest: every manifest entry maps to a model parameter
  or to a dim-0 slice of a packed one (vLLM packs q,k,v into ``qkv_proj`` and
  gate,up into ``gate_up_proj``), and the slices of each packed parameter add
  up to all of its rows;
* bytes: each mapped parameter or slice has the entry's shape, dtype and
  fingerprint, computed from the model's own storage (that is the proof).
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Mapping

import torch

from hangwatch.generator import fingerprint as fp
from hangwatch.generator.errors import WeightMismatch

PACKED = (("qkv_proj", ("q_proj", "k_proj", "v_proj")), ("gate_up_proj", ("gate_proj", "up_proj")))


def _map_entry(name: str, manifest: Mapping[str, Mapping[str, Any]],
               params: Mapping[str, torch.Tensor]) -> tuple[str, torch.Tensor] | None:
    """The model parameter name and tensor (or dim-0 slice) that holds manifest entry ``name``."""
    if name in params:
        return name, params[name]
    for packed, pieces in PACKED:
        for index, piece in enumerate(pieces):
            marker = f".{piece}."
            if marker not in name:
                continue
            target = name.replace(marker, f".{packed}.")
            if target not in params:
                continue
            offset = 0
            for prior in pieces[:index]:
                prior_name = name.replace(marker, f".{prior}.")
                if prior_name not in manifest:
                    return None
                offset += int(manifest[prior_name]["shape"][0])
            rows = int(manifest[name]["shape"][0])
            if offset + rows > params[target].shape[0]:
                return None
            return target, params[target].narrow(0, offset, rows)
    return None


def verify_loaded(model: torch.nn.Module, manifest: Mapping[str, Mapping[str, Any]],
                  loaded_names: Iterable[str]) -> dict[str, Any]:
    """Raise ``WeightMismatch`` unless ``model`` holds exactly ``manifest``; else a report."""
    started = time.perf_counter()
    params = dict(model.named_parameters(remove_duplicate=False))
    unique = dict(model.named_parameters())
    loaded = set(loaded_names)
    loaded_ids = {id(params[n]) for n in loaded if n in params}
    missing = sorted(n for n, p in unique.items() if id(p) not in loaded_ids)
    unexpected = sorted(loaded - params.keys())
    problems: list[str] = []
    if missing:
        problems.append(f"not loaded: {missing[:8]}{' ...' if len(missing) > 8 else ''} ({len(missing)})")
    if unexpected:
        problems.append(f"unexpected loaded names: {unexpected[:8]}")

    covered_rows: dict[int, int] = {}
    mismatched: list[str] = []
    unmapped: list[str] = []
    nbytes = 0
    for name, want in manifest.items():
        mapped = _map_entry(name, manifest, params)
        if mapped is None:
            unmapped.append(name)
            continue
        target, tensor = mapped
        key = id(params[target])
        covered_rows[key] = covered_rows.get(key, 0) + (tensor.shape[0] if tensor.dim() else 1)
        got = fp.entry(tensor)
        nbytes += tensor.numel() * tensor.element_size()
        if got != dict(want):
            mismatched.append(f"{name} (want {dict(want)}, got {got})")
    if unmapped:
        problems.append(f"manifest entries with no model parameter: {unmapped[:8]}")
    short = sorted(n for n, p in unique.items()
                   if covered_rows.get(id(p), 0) != (p.shape[0] if p.dim() else 1))
    if short:
        problems.append(f"model parameters not fully covered by the manifest: {short[:8]}")
    if mismatched:
        problems.append(f"fingerprint mismatch in {len(mismatched)} tensors: {mismatched[:3]}")
    if problems:
        raise WeightMismatch("; ".join(problems), remote_type="WeightMismatch")
    return {
        "digest": fp.manifest_digest(manifest),
        "tensors": len(manifest),
        "parameters": len(unique),
        "bytes": nbytes,
        "verify_s": time.perf_counter() - started,
    }
