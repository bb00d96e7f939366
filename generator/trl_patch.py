"""Inject rollout-policy kwargs at TRL's colocate ``LLM(...)`` call site.

TRL (checked against 1.9.1 and 1.16.0) builds its colocate engine in
``trl/generation/vllm_generation.py`` as ``self.llm = LLM(...)`` with a fixed
argument list (no ``enforce_eager``, no ``compilation_config``). ``LLM`` is a
module global there, bound by ``from vllm import LLM, ...`` only when
``is_vllm_available()``; the call resolves it at call time, so rebinding the
module attribute while the trainer builds its engine reaches that one call.

Decision for a module without ``LLM`` (vLLM not installed): by default warn
and do nothing, because TRL itself would fail with NameError at that call and
there is nothing to wrap. A caller that brings its own constructor (a test, or
a launcher that imported vLLM itself) passes ``factory=``; the wrapper is then
set as the attribute and removed again on exit, restoring the absence.

``apply_rollout_policy`` also reads back, right after TRL's ``LLM(...)``
returns, what the engine's GPU worker applied (``collective_rpc`` with
``hangwatch.generator.applied.worker_compilation_settings``), beats it for the
journal and raises ``CudagraphPolicyViolation`` when the policy said graphs off
and the worker runs them (e.g. a TRL release that starts passing its own
``compilation_config``, whose explicit arguments win). It also keeps each
``generate`` request of that engine in flight in the attempt dir
(``hangwatch.generator.inflight_llm``), for the incident bundle's ``batch.json``.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from hangwatch.generator.applied import (AppliedSettings, check_applied, last_applied, remember,
                                        worker_compilation_settings)
from hangwatch.generator.beacon import instrument_llm
from hangwatch.generator.compat import warn_unsupported_versions
from hangwatch.generator.errors import CudagraphPolicyViolation
from hangwatch.generator.inflight_llm import keep_llm_batches
from hangwatch.generator.policy import RolloutPolicy, rollout_policy

logger = logging.getLogger(__name__)

TRL_VLLM_MODULE = "trl.generation.vllm_generation"
_ABSENT = object()


@contextlib.contextmanager
def patched_rollout_engine(
    extra_kwargs: Mapping[str, Any],
    *,
    module_name: str = TRL_VLLM_MODULE,
    factory: Callable[..., Any] | None = None,
    after_build: Callable[[Any, Mapping[str, Any]], None] | None = None,
) -> Iterator[bool]:
    """Within the block, ``<module_name>.LLM(**kw)`` builds with ``{**extra_kwargs, **kw}``.

    TRL's explicit kwargs win: this only adds settings TRL leaves at vLLM's
    defaults. ``after_build(llm, kwargs)`` runs on each engine built (and may
    raise). Yields whether the wrapper is installed; the original binding
    (or its absence) is always restored on exit, also on error.
    """
    extra = dict(extra_kwargs)
    if not extra and after_build is None:
        yield False
        return
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        logger.warning("cannot import %s (%s); rollout engine kwargs %s NOT applied", module_name, error, extra)
        yield False
        return
    original = getattr(module, "LLM", _ABSENT)
    target = original if callable(original) else factory
    if target is None:
        logger.warning(
            "%s has no callable LLM (vLLM not installed, or TRL moved the call site); "
            "rollout engine kwargs %s NOT applied", module_name, extra,
        )
        yield False
        return

    def build_llm(*args: Any, **kwargs: Any) -> Any:
        final = {**extra, **kwargs}
        llm = target(*args, **final)
        if after_build is not None:
            after_build(llm, final)
        return llm

    build_llm.__wrapped__ = target  # type: ignore[attr-defined]
    setattr(module, "LLM", build_llm)
    logger.info("rollout engine kwargs %s injected at %s.LLM", extra, module_name)
    try:
        yield True
    finally:
        if original is _ABSENT:
            with contextlib.suppress(AttributeError):
                delattr(module, "LLM")
        else:
            setattr(module, "LLM", original)


@contextlib.contextmanager
def apply_rollout_policy(
    env: Mapping[str, str],
    *,
    step: int | None = None,
    module_name: str = TRL_VLLM_MODULE,
    factory: Callable[..., Any] | None = None,
) -> Iterator[bool]:
    """Decide the policy from ``env``, log and heartbeat it, and inject it into TRL.

    Wrap the trainer construction (``GRPOTrainer(...)``, which builds the
    colocate engine) in this. The heartbeat carries ``cudagraphs="on"/"off"``
    and ``enforce_eager`` so the supervisor journal records what was applied.
    """
    from hangwatch.contract.heartbeat import beat  # stdlib-only client

    policy = rollout_policy(env)
    logger.info("rollout engine policy: cudagraphs=%s enforce_eager=%s kwargs=%s",
                "on" if policy.cudagraphs else "off", policy.enforce_eager, policy.engine_kwargs())
    beat(step=step, phase="engine_policy", **policy.beat_info())
    warn_unsupported_versions()

    def read_back(llm: Any, kwargs: Mapping[str, Any]) -> None:
        verify_engine(llm, policy, kwargs, step=step)
        # The engine step rule for the in-process engine (a no-op outside hangwatch).
        instrument_llm(llm)
        # Its requests in flight, for the bundle's batch.json (a no-op outside hangwatch).
        applied = last_applied()
        keep_llm_batches(llm, kwargs, applied=applied.to_json() if applied is not None else None)

    with patched_rollout_engine(policy.engine_kwargs(), module_name=module_name, factory=factory,
                                after_build=read_back) as applied:
        yield applied


def verify_engine(llm: Any, policy: RolloutPolicy, kwargs: Mapping[str, Any], *, step: int | None = None) -> None:
    """Read what the built engine's GPU workers applied, beat it, refuse graphs the policy turned off."""
    from hangwatch.contract.heartbeat import beat  # stdlib-only client

    rpc = getattr(llm, "collective_rpc", None)
    if not callable(rpc):  # vLLM's LLM always has it; a stand-in may not
        logger.warning("%s has no collective_rpc: the applied cuda-graph mode cannot be read back",
                       type(llm).__name__)
        return
    applied = AppliedSettings.from_reports(rpc(worker_compilation_settings))
    remember(applied)  # the HF callback's later beats carry it too, so the journal cannot miss it
    logger.info("rollout engine applied cudagraph_mode=%s compile_mode=%s (%d worker(s))",
                applied.cudagraph_mode, applied.compile_mode, applied.workers)
    beat(step=step, phase="engine_policy", **policy.beat_info(), **applied.beat_info())
    try:
        check_applied(policy.cudagraphs, applied, requested=kwargs)
    except CudagraphPolicyViolation:
        # The refused engine already holds the GPU; release what can be released (LLM has no
        # shutdown(); its engine core does) before the error ends the trainer's construction.
        with contextlib.suppress(Exception):
            llm.llm_engine.engine_core.shutdown()
        raise
