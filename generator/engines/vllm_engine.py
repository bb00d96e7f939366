"""The real engine: vLLM's offline ``LLM`` with sleep mode, driven inside the worker process.

Written against vLLM 0.22-0.31 (TRL 1.16's range); cannot run without a GPU.
``vllm`` is imported only in ``start`` so that importing this module (or the
worker with ``--engine fake``) never needs vLLM.

Defaults added to the caller's kwargs (the caller's win): ``enable_sleep_mode``
(sleep/wake needs it), ``load_format="dummy"`` (weights come from the
trainer, never from disk), and ``worker_extension_cls`` naming
``hangwatch.generator.engines.vllm_extension.WeightSyncExtension``, which vLLM mixes
into its GPU worker so ``collective_rpc`` can reach ``hangwatch_load_weights``.
"""

from __future__ import annotations

from typing import Any, Mapping

EXTENSION = "hangwatch.generator.engines.vllm_extension.WeightSyncExtension"


class VLLMEngine:
    def __init__(self, kwargs: Mapping[str, Any]):
        self.kwargs = {"enable_sleep_mode": True, "load_format": "dummy", "worker_extension_cls": EXTENSION,
                       **kwargs}
        self.llm: Any = None
        self._sampling_params: Any = None

    def start(self) -> dict[str, Any]:
        from vllm import LLM, SamplingParams

        self._sampling_params = SamplingParams
        self.llm = LLM(**self.kwargs)
        self.llm.sleep(level=2)
        mode = None
        try:  # what vLLM actually applied: some model kinds override the request silently
            mode = str(self.llm.llm_engine.vllm_config.compilation_config.cudagraph_mode)
        except AttributeError:
            pass
        return {"engine": "vllm", "cudagraph_mode": mode}

    def wake_weights(self) -> None:
        self.llm.wake_up(tags=["weights"])

    def load_weights(self, path: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
        reports = self.llm.collective_rpc("hangwatch_load_weights", args=(path, dict(manifest)))
        digests = {r.get("digest") for r in reports}
        if not reports or len(digests) != 1:
            raise RuntimeError(f"GPU workers disagree on the loaded weights: {reports!r:.500}")
        return reports[0]

    def reset_prefix_cache(self) -> None:
        self.llm.reset_prefix_cache()

    def wake_kv(self) -> None:
        self.llm.wake_up(tags=["kv_cache"])

    def generate(self, prompts: list[str], n: int, seed: int, sampling: Mapping[str, Any]) -> list[list[dict[str, Any]]]:
        params = self._sampling_params(n=n, seed=seed, **dict(sampling))
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [[{"index": c.index, "text": c.text, "token_ids": list(c.token_ids)} for c in out.outputs]
                for out in outputs]

    def sleep(self) -> None:
        self.llm.sleep(level=2)

    def close(self) -> None:
        if self.llm is not None:
            # LLM has no shutdown(); the engine core owns the child processes.
            self.llm.llm_engine.engine_core.shutdown()
            self.llm = None
