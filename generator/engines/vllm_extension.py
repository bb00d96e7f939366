"""Mixed into vLLM's GPU worker via ``worker_extension_cls``; runs in vLLM's worker process.

``hangwatch_load_weights(path, manifest)`` maps the staged safetensors file
(zero-copy CPU tensors), lets the model's own ``load_weights`` copy them to
the device (packing q/k/v and gate/up as vLLM does), then proves the result
with ``hangwatch.generator.weightsync.verify_loaded`` on the model's device tensors
(each copied to host once for fingerprinting). Raises ``WeightMismatch``.

``hangwatch_compilation_settings()`` reports the cuda-graph and compile mode
this worker applied (see ``hangwatch.generator.applied``): the worker's copy of
the config is the one ``resolve_cudagraph_mode_and_sizes`` may have changed.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from hangwatch.generator.applied import worker_compilation_settings
from hangwatch.generator.staging import StagedReader
from hangwatch.generator.weightsync import verify_loaded


class WeightSyncExtension:
    model_runner: Any  # provided by vLLM's GPU worker
    vllm_config: Any  # provided by vLLM's GPU worker

    def hangwatch_load_weights(self, path: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
        model = self.model_runner.model
        with StagedReader(path) as reader:
            loaded = model.load_weights(reader.items())
            torch.cuda.synchronize()  # the H2D copies read the mapping; finish before unmapping
        return verify_loaded(model, manifest, loaded)

    def hangwatch_compilation_settings(self) -> dict[str, Any]:
        return worker_compilation_settings(self)
