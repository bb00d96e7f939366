"""Keep the batch of an in-process vLLM ``LLM`` (TRL's colocate engine) while it runs.

The isolated worker keeps its own requests (``generator/worker.py``); an engine that runs in
the trainer's process is instrumented here instead: ``keep_llm_batches`` shadows
``llm.generate`` with an instance attribute that writes the request's record
(``hangwatch.contract.batch``) to ``inflight-<pid>.json`` in the attempt dir before the call
and removes it after, so a wedged call's batch reaches the incident bundle as ``batch.json``.

vLLM's ``generate(prompts, sampling_params, ...)`` takes a prompt or a list of them (text, or
a ``TokensPrompt`` dict) and one ``SamplingParams`` or one per prompt; the record keeps the
prompts, the first ``SamplingParams``'s fields (``SAMPLING_FIELDS``) with its ``n`` and
``seed``, and the arguments the engine was built with. Outside hangwatch (no attempt dir)
nothing is instrumented.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from typing import Any, Mapping

from hangwatch.contract import env as names
from hangwatch.contract.batch import InflightFile, make_record
from hangwatch.contract.versions import installed
from hangwatch.generator.policy import cudagraphs_enabled_in

logger = logging.getLogger(__name__)

#: The ``SamplingParams`` fields a record keeps (besides ``n`` and ``seed``); absent ones are skipped.
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "max_tokens", "min_tokens", "stop", "stop_token_ids",
                   "presence_penalty", "frequency_penalty", "repetition_penalty", "ignore_eos", "logprobs",
                   "skip_special_tokens", "include_stop_str_in_output")
VERSIONS = ("hangwatch", "torch", "vllm", "transformers", "trl")


def sampling_fields(params: Any) -> tuple[int, int | None, dict[str, Any]]:
    """``(n, seed, other fields)`` of a ``SamplingParams`` (or a list of them: the first's)."""
    if isinstance(params, (list, tuple)):
        params = params[0] if params else None
    if params is None:
        return 1, None, {}
    get = params.get if isinstance(params, Mapping) else (lambda name, default=None: getattr(params, name, default))
    fields = {}
    for name in SAMPLING_FIELDS:
        value = get(name, None)
        if value is not None:
            fields[name] = list(value) if isinstance(value, (tuple, set)) else value
    n, seed = get("n", 1), get("seed", None)
    return int(n or 1), (int(seed) if isinstance(seed, int) else None), fields


def as_prompts(prompts: Any) -> list[Any]:
    """vLLM's ``prompts`` argument as a list of texts and token-id dicts."""
    if prompts is None:
        return []
    if isinstance(prompts, (str, Mapping)):
        prompts = [prompts]
    return [p if isinstance(p, str) else dict(p) if isinstance(p, Mapping) else str(p) for p in prompts]


def keep_llm_batches(llm: Any, engine_kwargs: Mapping[str, Any], *, directory: str | None = None,
                     applied: Mapping[str, Any] | None = None) -> bool:
    """Keep ``llm.generate``'s requests in flight; False (nothing changed) outside hangwatch."""
    directory = directory or os.environ.get(names.ATTEMPT_DIR)
    method = getattr(llm, "generate", None)
    if not directory or not callable(method):
        return False
    inflight = InflightFile(directory)
    kwargs = dict(engine_kwargs)
    state: dict[str, Any] = {"calls": 0, "versions": None}

    @functools.wraps(method)
    def generate(prompts: Any = None, sampling_params: Any = None, *args: Any, **kw: Any) -> Any:
        state["calls"] += 1
        if state["versions"] is None:
            state["versions"] = {"python": sys.version.split()[0], **installed(VERSIONS)}
        n, seed, sampling = sampling_fields(sampling_params)
        record = make_record(engine="vllm", engine_kwargs=kwargs, prompts=as_prompts(prompts), n=n, seed=seed,
                             sampling=sampling, source="in-process", applied=applied,
                             engine_call=state["calls"], versions=state["versions"],
                             policy={"cudagraphs": "on" if cudagraphs_enabled_in(kwargs) else "off",
                                     "enforce_eager": bool(kwargs.get("enforce_eager"))})
        if not inflight.write(record):
            logger.warning("could not keep the engine's batch in flight: %s", inflight.failed)
        try:
            return method(prompts, sampling_params, *args, **kw)
        finally:
            inflight.clear()

    llm.generate = generate
    return True
