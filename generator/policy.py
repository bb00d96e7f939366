"""Rollout-engine policy: which ``LLM(...)`` kwargs the cuda-graph setting means.

Dependency-free on purpose (no torch, vllm or trl): the supervisor and the CPU
test venv evaluate it, and the trainer applies it before vLLM is imported.

Environment (the supervisor sets both for the trainer):

* ``HANGWATCH_CUDAGRAPHS``: ``"1"`` or unset keeps the engine defaults (vLLM
  V1 captures and replays cuda graphs); ``"0"`` turns graphs off with
  ``compilation_config={"cudagraph_mode": "NONE"}``, which keeps torch.compile.
* ``HANGWATCH_ENFORCE_EAGER``: ``"1"`` gives ``enforce_eager=True`` (no graphs,
  no torch.compile); the supervisor's last escalation step. It wins over
  ``HANGWATCH_CUDAGRAPHS``. ``"0"`` or unset: no effect.

Any other value is a ``ValueError`` that names the variable and the value: a
typo must not silently leave graphs on in a run that was meant to avoid them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from hangwatch.contract.env import CUDAGRAPHS as CUDAGRAPHS_ENV
from hangwatch.contract.env import ENFORCE_EAGER as ENFORCE_EAGER_ENV

_FLAG_VALUES = {"0": False, "1": True}


@dataclass(frozen=True)
class RolloutPolicy:
    """The decided setting. ``cudagraphs`` is what the heartbeat reports ("on"/"off")."""

    cudagraphs: bool
    enforce_eager: bool

    def engine_kwargs(self) -> dict[str, Any]:
        if self.enforce_eager:
            return {"enforce_eager": True}
        if not self.cudagraphs:
            # A plain dict: LLM() accepts it and validates the enum name itself,
            # so this module never needs to import vllm.
            return {"compilation_config": {"cudagraph_mode": "NONE"}}
        return {}

    def beat_info(self) -> dict[str, Any]:
        """Heartbeat ``info`` fields; the supervisor journals them when they change."""
        return {"cudagraphs": "on" if self.cudagraphs else "off", "enforce_eager": self.enforce_eager}


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return _FLAG_VALUES[raw.strip()]
    except KeyError:
        raise ValueError(f"{name}={raw!r} is not valid; use '0' or '1' (or leave it unset)") from None


def rollout_policy(env: Mapping[str, str]) -> RolloutPolicy:
    """Decide from ``env`` (pass ``os.environ``); raises ``ValueError`` on a bad value."""
    eager = _flag(env, ENFORCE_EAGER_ENV, False)
    graphs = _flag(env, CUDAGRAPHS_ENV, True)
    return RolloutPolicy(cudagraphs=graphs and not eager, enforce_eager=eager)


def rollout_engine_kwargs(env: Mapping[str, str]) -> dict[str, Any]:
    """Extra ``LLM(...)`` kwargs for the rollout engine; ``{}`` means engine defaults."""
    return rollout_policy(env).engine_kwargs()


def cudagraphs_enabled_in(engine_kwargs: Mapping[str, Any]) -> bool:
    """Whether an engine built with ``engine_kwargs`` captures cuda graphs (vLLM V1 semantics).

    ``enforce_eager`` turns graphs off; so does ``compilation_config`` with
    ``cudagraph_mode`` "NONE" (case-insensitive but not stripped, as vLLM
    parses it: " NONE" is a ``KeyError`` there, never graphs off). Anything
    else, a misspelled key included (vLLM drops it silently), leaves vLLM's
    default (``FULL_AND_PIECEWISE``), i.e. graphs on. This is the request; what
    the worker applied is read back (``hangwatch.generator.applied``).
    """
    if engine_kwargs.get("enforce_eager"):
        return False
    config = engine_kwargs.get("compilation_config")
    if isinstance(config, Mapping):
        mode = config.get("cudagraph_mode")
        if isinstance(mode, str):
            return mode.upper() != "NONE"
    return True


def with_policy(engine_kwargs: Mapping[str, Any], policy: RolloutPolicy) -> dict[str, Any]:
    """``engine_kwargs`` with the graph setting of ``policy``; the user's other compilation settings stay."""
    kwargs = dict(engine_kwargs)
    kwargs.pop("enforce_eager", None)
    extra = policy.engine_kwargs()
    user_cc = kwargs.get("compilation_config")
    if isinstance(user_cc, Mapping) and isinstance(extra.get("compilation_config"), Mapping):
        extra["compilation_config"] = {**user_cc, **extra["compilation_config"]}
    return {**kwargs, **extra}
