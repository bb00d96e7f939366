"""hangwatch.trainer: everything a training script imports, in one place.

    from hangwatch.trainer import beat, HangwatchCallback, rollout_engine_kwargs, apply_rollout_policy

* ``beat(step=..., phase=...)``: report progress to the supervisor (a no-op
  outside hangwatch).
* ``HangwatchCallback``: a ``transformers.TrainerCallback`` that beats for an
  HF/TRL trainer; ``HangwatchCallback.attach(trainer)`` also announces TRL's
  generate phase.
* ``rollout_engine_kwargs(os.environ)``: the extra ``LLM(...)`` kwargs this
  attempt's cuda-graph policy asks for.
* ``apply_rollout_policy(os.environ)``: a context manager that injects them at
  TRL's colocate ``LLM(...)`` call.

Importing this module imports the standard library only; transformers is
imported the first time ``HangwatchCallback`` is looked up.

Importing it under hangwatch also arms this process's evidence (``contract.stackdump.arm``):
its stacks are dumped on ``HANGWATCH_STACKS_SIGNAL`` into its own file of the attempt dir,
for the capture where py-spy may not attach, and the supervisor is declared its ptracer,
so py-spy may attach under Yama's ``ptrace_scope=1``. Outside hangwatch it does nothing.
"""

from __future__ import annotations

from typing import Any

from hangwatch.contract import stackdump
from hangwatch.contract.heartbeat import beat
from hangwatch.generator.policy import rollout_engine_kwargs, rollout_policy
from hangwatch.generator.trl_patch import apply_rollout_policy

# This folder is installed as hangwatch.trainer (pyproject.toml maps it). Imported
# under its folder's name it would be a second copy of every module in it.
if __name__ != "hangwatch.trainer":  # pragma: no cover - only a wrong import reaches this
    raise ImportError(f"import hangwatch.trainer, not {__name__}")

stackdump.arm()

__all__ = ["HangwatchCallback", "apply_rollout_policy", "beat", "rollout_engine_kwargs", "rollout_policy"]


def __getattr__(name: str) -> Any:
    if name == "HangwatchCallback":
        from hangwatch.generator import hf_callback  # noqa: PLC0415  (imports transformers on first use)

        return hf_callback.HangwatchCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
