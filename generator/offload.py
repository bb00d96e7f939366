"""Move the trainer's tensors off the accelerator and back, keeping every object identity.

Invariants:
* Parameter objects survive: only ``.data`` (and ``.grad``) is reassigned, never
  ``Module.to``, which may replace Parameters and orphan the optimizer's keys.
* Optimizer state keeps its keys (the same Parameter objects) and its
  structure; only tensor values are replaced, and restored to the device each
  one came from.
* ``restore`` is idempotent and runs even after a failed ``offload``.
On a CPU-only trainer every move is a no-op on placement, but the same code path runs.
"""

from __future__ import annotations

import gc
from typing import Any

import torch


class TrainerOffload:
    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, *, to: str = "cpu"):
        self.model = model
        self.optimizer = optimizer
        self.to = torch.device(to)
        self._tensors: list[tuple[torch.Tensor, torch.device, bool]] = []
        self._state: list[tuple[Any, Any, torch.device]] = []

    def offload(self) -> None:
        try:
            seen: set[int] = set()
            for tensor in [*self.model.parameters(), *self.model.buffers()]:
                if id(tensor) in seen:
                    continue
                seen.add(id(tensor))
                self._tensors.append((tensor, tensor.device, False))
                tensor.data = tensor.data.to(self.to)
                if tensor.grad is not None:
                    self._tensors.append((tensor, tensor.grad.device, True))
                    tensor.grad.data = tensor.grad.data.to(self.to)
            if self.optimizer is not None:
                for state in self.optimizer.state.values():
                    self._offload_container(state)
            if any(device != self.to for _, device, _ in self._tensors):
                # Drop the last references to device blocks, then hand the blocks back
                # so the engine can use them. Skipped when nothing left a device (CPU
                # trainer): a full gc pass costs ~0.1 s per call for nothing.
                gc.collect()
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
        except BaseException:
            self.restore()
            raise

    def _offload_container(self, container: Any) -> None:
        keys = list(container) if isinstance(container, dict) else range(len(container))
        for key in keys:
            value = container[key]
            if isinstance(value, torch.Tensor):
                self._state.append((container, key, value.device))
                container[key] = value.to(self.to)
            elif isinstance(value, (dict, list)):
                self._offload_container(value)

    def restore(self) -> None:
        for tensor, device, is_grad in self._tensors:
            if is_grad:
                if tensor.grad is not None:
                    tensor.grad.data = tensor.grad.data.to(device)
            else:
                tensor.data = tensor.data.to(device)
        for container, key, device in self._state:
            container[key] = container[key].to(device)
        self._tensors.clear()
        self._state.clear()
