"""Mixed into vLLM's GPU worker via ``worker_extension_cls``; runs in vLLM's worker process.

``hangwatch_load_weights(path, manifest)`` maps the staged safetensors file
(zero-copy CPU tensors), lets the model's own ``load_weights`` copy them to
the device (packing q/k/v and gate/up as vLLM does), then proves the result
with ``hangwatch.generator.weightsync.verify_loaded`` on the model's device tensors
(each copied to host once for fingerprinting). Raises ``WeightMismatch``.

Where the engine keeps its weights in kernel format (vLLM's CPU platform packs each linear
layer's weight into a oneDNN handle and empties the parameter: ``weightsync.kernel_format``),
the load goes through the worker's own ``reload_weights(weights_iterator=...,
is_checkpoint_format=True)`` (vLLM >= 0.31: layerwise reload, re-packing each layer), and
the proof is ``weightsync.verify_received``: the bytes handed to the loader, fingerprinted
as they are read, against the manifest.

``hangwatch_compilation_settings()`` reports the cuda-graph and compile mode
this worker applied (see ``hangwatch.generator.applied``): the worker's copy of
the config is the one ``resolve_cudagraph_mode_and_sizes`` may have changed.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from hangwatch.generator.applied import worker_compilation_settings
from hangwatch.generator.errors import WeightMismatch
from hangwatch.generator.staging import StagedReader
from hangwatch.generator.weightsync import Received, kernel_format, verify_loaded, verify_received


class WeightSyncExtension:
    model_runner: Any  # provided by vLLM's GPU worker
    vllm_config: Any  # provided by vLLM's GPU worker

    def hangwatch_load_weights(self, path: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """The load's report; a refused load is returned as ``{"weight_mismatch": message}``, not
        raised: vLLM's ``collective_rpc`` turns a worker's exception into a plain ``Exception``
        whose text is all that is left, and the trainer must still tell a WeightMismatch apart."""
        try:
            return self._hangwatch_load(path, manifest)
        except WeightMismatch as error:
            return {"weight_mismatch": str(error)}

    def _hangwatch_load(self, path: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
        model = self.model_runner.model
        reload = getattr(self, "reload_weights", None)
        if kernel_format(model) and callable(reload):
            with StagedReader(path) as reader:
                received = Received(reader.items())
                reload(weights_iterator=iter(received), is_checkpoint_format=True)
            return verify_received(manifest, received)
        with StagedReader(path) as reader:
            loaded = model.load_weights(reader.items())
            if torch.cuda.is_available():  # vLLM's CPU worker: the copies are done on return
                torch.cuda.synchronize()  # the H2D copies read the mapping; finish before unmapping
        return verify_loaded(model, manifest, loaded)

    def hangwatch_compilation_settings(self) -> dict[str, Any]:
        return worker_compilation_settings(self)
