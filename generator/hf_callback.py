"""A Hugging Face ``Trainer`` callback that sends hangwatch heartbeats (TRL trainers included).

One line in a training script::

    from hangwatch.generator.hf_callback import HangwatchCallback
    trainer.add_callback(HangwatchCallback())        # or Trainer(..., callbacks=[HangwatchCallback()])

    # GRPOTrainer and other generating trainers: also announce the generate phase
    HangwatchCallback.attach(trainer)

Dependency-light: importing this module imports neither transformers nor torch.
``HangwatchCallback`` is built (as a subclass of ``transformers.TrainerCallback``)
the first time the name is looked up, through the module's ``__getattr__``;
``HangwatchCallbackCore`` holds all the logic and needs nothing but the standard
library, so it is unit-testable with fake state/control objects. Without
``HANGWATCH_HEARTBEAT`` in the environment every beat is a no-op, so a script
instrumented this way runs unchanged outside hangwatch.

What it reports (``hangwatch.contract.heartbeat.beat``), checked against the training
loop of transformers 5.24 (``Trainer._inner_training_loop``) and TRL 1.16.0:

* ``on_train_begin``, ``on_step_begin``, ``on_substep_end``, ``on_step_end``:
  ``beat(step=state.global_step, phase="train")``; the step is the global step.
  ``on_substep_end`` (each gradient-accumulation micro-batch but the last) adds
  ``micro_batch=<n>`` to that beat, so it says how far the optimizer step got.
* The ``checkpoint`` phase *before* a save starts. The loop calls
  ``on_step_end`` and then ``_maybe_log_save_evaluate``, which saves when
  ``control.should_save`` is set; ``DefaultFlowCallback`` (always first in the
  handler) sets it inside ``on_step_end``, so by the time this callback's
  ``on_step_end`` runs the decision is known. It then beats
  ``phase="checkpoint"`` (with ``info saving=<step>``), and ``on_save`` (which
  fires *after* the save) beats ``phase="train"`` again (``last_checkpoint``).
  The same at ``on_epoch_end`` (epoch save strategy) and ``on_evaluate``
  (``save_strategy="best"`` decides the save only after evaluating). So
  ``--phase-timeout checkpoint=...`` (default 1800 s) covers the whole save.
* ``phase="evaluate"`` on every evaluation batch (``on_prediction_step``).
* ``phase="generate"`` around rollout generation: TRL's ``GRPOTrainer`` has no
  callback event for it, so :meth:`HangwatchCallback.attach` (not the plain
  ``add_callback``) also wraps the trainer's ``_generate_and_score_completions``
  (``GRPOTrainer``/``RLOOTrainer`` in TRL 1.16) on that instance.
* ``info`` on every beat (the supervisor journals it as ``trainer_info`` when
  it changes): the rollout-engine policy the run applies, from
  ``hangwatch.generator.policy`` and the ``HANGWATCH_*`` environment, as
  ``cudagraphs="on"|"off"``, ``enforce_eager``, ``engine_kwargs`` (the
  ``LLM(...)`` kwargs ``hangwatch.generator.trl_patch`` injects), ``attempt``, and once
  training starts ``use_vllm``/``vllm_mode`` from the trainer's arguments and,
  when the colocate engine was built under ``apply_rollout_policy``, what its
  GPU worker applied (``applied_cudagraph_mode``, ``applied_compile_mode``).
  :meth:`HangwatchCallbackCore.note` adds fields of your own (for example the
  kwargs the engine was really built with).

What it adds to the Trainer's own logs (so W&B, TensorBoard and
``trainer_state.json``'s ``log_history`` show restarts on the training curves):
``hangwatch/attempt`` (1, 2, ...) and, on a resumed attempt,
``hangwatch/resumed_from_step`` (the step of the checkpoint hangwatch chose).
Reporting callbacks (``report_to``) run before user callbacks, so ``attach``
also wraps the trainer's ``log`` to put the fields in before any reporter sees
the record; ``on_log`` adds them for the callbacks after this one and to
``log_history`` (a plain ``add_callback``).
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any, Callable, Mapping

from hangwatch.contract.heartbeat import beat
from hangwatch.generator.applied import last_applied


__all__ = ["HangwatchCallback", "HangwatchCallbackCore", "make_callback", "policy_info", "run_log_fields"]

#: the TRL methods that run one round of rollout generation (+ scoring), wrapped by ``attach``
GENERATE_METHODS = ("_generate_and_score_completions",)


def policy_info(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The rollout-engine policy ``env`` implies, as heartbeat ``info`` fields.

    Raises ``ValueError`` on a malformed ``HANGWATCH_CUDAGRAPHS`` /
    ``HANGWATCH_ENFORCE_EAGER`` (a typo must not silently leave graphs on).
    ``hangwatch.generator.policy`` is dependency-free, so importing it costs nothing.
    """
    from hangwatch.generator.policy import rollout_policy  # noqa: PLC0415  (keep `import supervisor` free of it)

    env = os.environ if env is None else env
    policy = rollout_policy(env)
    return {**policy.beat_info(), "engine_kwargs": policy.engine_kwargs()}


def run_log_fields(env: Mapping[str, str] | None = None) -> dict[str, int]:
    """hangwatch's attempt and resume point as numeric Trainer log fields (empty outside hangwatch)."""
    env = os.environ if env is None else env
    out: dict[str, int] = {}
    attempt = env.get("HANGWATCH_ATTEMPT", "")
    if attempt.isdigit():
        out["hangwatch/attempt"] = int(attempt)
    resume = env.get("HANGWATCH_RESUME_FROM")
    if resume:
        step = re.search(r"(\d+)$", os.path.basename(resume.rstrip("/")))
        if step:
            out["hangwatch/resumed_from_step"] = int(step.group(1))
    return out


class HangwatchCallbackCore:
    """The callback's logic, without the ``transformers`` base class (see the module doc).

    ``announce_checkpoint=False`` turns the checkpoint-phase announcement off
    (only useful to show what it prevents); ``env`` defaults to ``os.environ``;
    ``beat_fn`` is the heartbeat client (tests pass a recorder).
    """

    def __init__(
        self,
        *,
        announce_checkpoint: bool = True,
        env: Mapping[str, str] | None = None,
        beat_fn: Callable[..., Any] = beat,
    ) -> None:
        env = os.environ if env is None else env
        self.announce_checkpoint = announce_checkpoint
        self._beat = beat_fn
        self.info: dict[str, Any] = policy_info(env)
        if env.get("HANGWATCH_ATTEMPT"):
            self.info["attempt"] = env["HANGWATCH_ATTEMPT"]
        self.log_fields = run_log_fields(env)
        self.phase: str | None = None
        self.step: int | None = None
        self._micro_batch = 0  # gradient-accumulation micro-batches done in this optimizer step

    # -- public helpers ----------------------------------------------------------

    def note(self, **info: Any) -> None:
        """Add (or with ``None``, remove) ``info`` fields carried by every later beat; beats now."""
        for key, value in info.items():
            if value is None:
                self.info.pop(key, None)
            else:
                self.info[key] = value
        self.send(self.step, self.phase or "train")

    def send(self, step: int | None, phase: str, **extra: Any) -> None:
        self.step, self.phase = step, phase
        self._beat(step=step, phase=phase, **{**self.info, **extra})

    def wrap_generation(self, trainer: Any) -> list[str]:
        """Beat ``phase="generate"`` around the trainer's rollout methods; returns those wrapped."""
        wrapped = []
        for name in GENERATE_METHODS:
            method = getattr(trainer, name, None)
            if method is None or getattr(method, "_hangwatch_wrapped", False):
                continue
            setattr(trainer, name, self._generating(trainer, method))
            wrapped.append(name)
        return wrapped

    def wrap_logging(self, trainer: Any) -> bool:
        """Put ``log_fields`` into every record ``trainer.log`` gets, before any reporter sees it."""
        log = getattr(trainer, "log", None)
        if log is None or not self.log_fields or getattr(log, "_hangwatch_wrapped", False):
            return False
        fields = self.log_fields

        @functools.wraps(log)
        def logged(logs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            return log({**logs, **{k: v for k, v in fields.items() if k not in logs}}, *args, **kwargs)

        logged._hangwatch_wrapped = True  # type: ignore[attr-defined]
        trainer.log = logged
        return True

    def _generating(self, trainer: Any, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def generate(*args: Any, **kwargs: Any) -> Any:
            state = getattr(trainer, "state", None)
            step = getattr(state, "global_step", self.step)
            before = self.phase if self.phase not in (None, "generate") else "train"
            self.send(step, "generate")
            try:
                return method(*args, **kwargs)
            finally:
                self.send(step, before)

        generate._hangwatch_wrapped = True  # type: ignore[attr-defined]
        return generate

    # -- TrainerCallback events --------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        applied = last_applied()  # the colocate engine, built and read back under apply_rollout_policy
        if applied is not None:
            self.info.update(applied.beat_info())
        use_vllm = getattr(args, "use_vllm", None)
        if use_vllm is not None:
            self.info["use_vllm"] = bool(use_vllm)
            if use_vllm:
                self.info["vllm_mode"] = getattr(args, "vllm_mode", None)
        self.send(state.global_step, "train")
        return control

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self._micro_batch = 0
        self.send(state.global_step, "train")
        return control

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        # The global step moves once per optimizer step, which with many gradient-accumulation
        # micro-batches may take long: the beat says how far it got.
        self._micro_batch += 1
        self.send(state.global_step, "train", micro_batch=self._micro_batch)
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.announce_checkpoint and (getattr(control, "should_save", False) or _save_due(args, state)):
            self.send(state.global_step, "checkpoint", saving=state.global_step)
        else:
            self.send(state.global_step, "train")
        return control

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.announce_checkpoint and getattr(control, "should_save", False):
            self.send(state.global_step, "checkpoint", saving=state.global_step)
        return control

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.send(state.global_step, "evaluate")
        return control

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        # save_strategy="best" decides the save right after this event.
        if self.announce_checkpoint and (getattr(control, "should_save", False)
                                          or _strategy(getattr(args, "save_strategy", None)) == "best"):
            self.send(state.global_step, "checkpoint", saving=state.global_step)
        else:
            self.send(state.global_step, "train")
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.info["last_checkpoint"] = state.global_step
        self.send(state.global_step, "train")
        return control

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        if logs is not None and self.log_fields:
            for key, value in self.log_fields.items():
                logs.setdefault(key, value)
            history = getattr(state, "log_history", None)
            if history and isinstance(history[-1], dict):
                for key, value in self.log_fields.items():
                    history[-1].setdefault(key, value)
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        # The final beat: this process is done, and no longer judged for progress.
        self.send(state.global_step, "train_end", final=True)
        return control


def _strategy(value: Any) -> str:
    return str(getattr(value, "value", value) or "").lower()


def _save_due(args: Any, state: Any) -> bool:
    """DefaultFlowCallback's step-save rule, for a handler where this callback runs before it."""
    if _strategy(getattr(args, "save_strategy", None)) != "steps":
        return False
    save_steps = getattr(state, "save_steps", 0) or 0
    step = getattr(state, "global_step", 0) or 0
    max_steps = getattr(state, "max_steps", 0) or 0
    return (save_steps > 0 and step % save_steps == 0) or (max_steps > 0 and step >= max_steps)


_CLASS: type | None = None


def _build_class() -> type:
    global _CLASS
    if _CLASS is None:
        from transformers import TrainerCallback  # only when the callback is actually used

        def attach(cls: type, trainer: Any, **kwargs: Any) -> Any:
            """Add a new callback to ``trainer``, wrap its rollout generation and its ``log``; returns the callback."""
            callback = cls(**kwargs)
            trainer.add_callback(callback)
            callback.wrap_generation(trainer)
            callback.wrap_logging(trainer)
            return callback

        _CLASS = type(
            "HangwatchCallback",
            (HangwatchCallbackCore, TrainerCallback),
            {
                "__module__": __name__,
                "__doc__": "hangwatch heartbeats from a transformers/TRL Trainer (see hangwatch.generator.hf_callback).",
                "attach": classmethod(attach),
            },
        )
    return _CLASS


def make_callback(**kwargs: Any) -> Any:
    """``HangwatchCallback(**kwargs)``: a ``transformers.TrainerCallback`` instance."""
    return _build_class()(**kwargs)


def __getattr__(name: str) -> Any:
    if name == "HangwatchCallback":
        return _build_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
