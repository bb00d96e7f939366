"""Engines behind one interface; the worker process drives exactly one of them.

An engine implements (all called from the worker's main thread):

* ``start() -> dict``: build, then sleep at level 2 (weights and KV discarded).
* ``wake_weights()``, ``load_weights(path, manifest) -> report``,
  ``reload_weights() -> report`` (the model's own weights, for a reproduction),
  ``reset_prefix_cache()``, ``wake_kv()``,
  ``generate(prompts, n, seed, sampling) -> list[list[completion]]`` (per
  prompt, completions as ``{"index", "text", "token_ids"}`` in any order: the
  worker sorts and checks them), ``sleep()``, ``close()``.

``make_engine`` imports the chosen engine lazily: the vLLM engine module is
never imported for ``fake``, and vllm itself only inside ``VLLMEngine.start``.
"""

from __future__ import annotations

from typing import Any, Mapping

ENGINES = ("fake", "vllm")


def make_engine(name: str, engine_kwargs: Mapping[str, Any]) -> Any:
    if name == "fake":
        from hangwatch.generator.engines.fake import FakeEngine

        return FakeEngine(dict(engine_kwargs))
    if name == "vllm":
        from hangwatch.generator.engines.vllm_engine import VLLMEngine

        return VLLMEngine(dict(engine_kwargs))
    raise ValueError(f"unknown engine {name!r}; choose one of {ENGINES}")
