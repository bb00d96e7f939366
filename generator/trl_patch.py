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
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from hangwatch.generator.policy import rollout_policy

logger = logging.getLogger(__name__)

TRL_VLLM_MODULE = "trl.generation.vllm_generation"
_ABSENT = object()


@contextlib.contextmanager
def patched_rollout_engine(
    extra_kwargs: Mapping[str, Any],
    *,
    module_name: str = TRL_VLLM_MODULE,
    factory: Callable[..., Any] | None = None,
) -> Iterator[bool]:
    """Within the block, ``<module_name>.LLM(**kw)`` builds with ``{**extra_kwargs, **kw}``.

    TRL's explicit kwargs win: this only adds settings TRL leaves at vLLM's
    defaults. Yields whether the wrapper is installed; the original binding
    (or its absence) is always restored on exit, also on error.
    """
    extra = dict(extra_kwargs)
    if not extra:
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
        return target(*args, **{**extra, **kwargs})

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
    with patched_rollout_engine(policy.engine_kwargs(), module_name=module_name, factory=factory) as applied:
        yield applied
