"""What the engine's GPU worker actually applied (cuda-graph mode, compile mode), and the refusal.

Why the worker: vLLM resolves the final cuda-graph mode there
(``CompilationConfig.resolve_cudagraph_mode_and_sizes``, called from the GPU
model runner) and may change it there, e.g. downgrade FULL_AND_PIECEWISE; the
front end's copy (``llm.llm_engine.vllm_config``) never sees that change. So
the settings are read with ``collective_rpc`` on the extension method
``APPLIED_RPC`` (``engines/vllm_extension.py``), once per worker.

Invariant: when the rollout policy asked for graphs off, no engine whose
worker reports a mode other than NONE is used (``check_applied`` raises
``CudagraphPolicyViolation``). That is the guarantee behind a retry "with
graphs off": a misspelled ``compilation_config`` key, which vLLM drops
silently, or a model kind that overrides the request is caught here.

Dependency-free (no torch, no vLLM): the TRL path and the tests use it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from hangwatch.generator.errors import CudagraphPolicyViolation, GeneratorError

APPLIED_RPC = "hangwatch_compilation_settings"


def _name(value: Any) -> str | None:
    """An enum member's name (``CUDAGraphMode.NONE`` -> ``"NONE"``); ints (old ``level``) as text."""
    if value is None:
        return None
    name = getattr(value, "name", None)
    if isinstance(name, str):
        return name
    return str(value).rsplit(".", 1)[-1]


def compilation_settings(compilation_config: Any) -> dict[str, str | None]:
    """The two settings of a (worker's) ``CompilationConfig``, as plain strings for JSON."""
    mode = getattr(compilation_config, "mode", None)
    if mode is None:  # vLLM before ``mode`` named it ``level`` (an int)
        mode = getattr(compilation_config, "level", None)
    return {"cudagraph_mode": _name(getattr(compilation_config, "cudagraph_mode", None)),
            "compile_mode": _name(mode)}


def worker_compilation_settings(worker: Any) -> dict[str, str | None]:
    """Runs ON a GPU worker (``self`` of vLLM's worker): the settings its model runner resolved.

    The extension method ``APPLIED_RPC`` calls this; so does the TRL path, which
    passes it to ``collective_rpc`` as a callable (TRL builds its own ``LLM``
    without our ``worker_extension_cls``). The model runner resolves the mode on
    the compilation config it holds; read that one, and the worker's own where
    a runner keeps none.
    """
    config = getattr(getattr(worker, "model_runner", None), "compilation_config", None)
    return compilation_settings(config if config is not None else worker.vllm_config.compilation_config)


@dataclass(frozen=True)
class AppliedSettings:
    """The settings every GPU worker of one engine reported (they must agree)."""

    cudagraph_mode: str
    compile_mode: str | None
    workers: int

    @property
    def graphs_on(self) -> bool:
        return self.cudagraph_mode != "NONE"

    @classmethod
    def from_reports(cls, reports: Iterable[Mapping[str, Any]] | None) -> "AppliedSettings":
        items = [dict(r) for r in (reports or [])]
        if not items:
            raise GeneratorError("no GPU worker answered the compilation-settings read-back")
        distinct = {(r.get("cudagraph_mode"), r.get("compile_mode")) for r in items}
        if len(distinct) != 1:
            raise GeneratorError(f"GPU workers disagree on the applied compilation settings: {items!r:.500}")
        mode, compile_mode = distinct.pop()
        if not isinstance(mode, str) or not mode:
            raise GeneratorError(f"a GPU worker reported no cuda-graph mode: {items!r:.500}")
        return cls(cudagraph_mode=mode, compile_mode=compile_mode, workers=len(items))

    @classmethod
    def from_json(cls, data: Any) -> "AppliedSettings":
        """The engine's ``start`` report entry (``to_json``), checked like a worker report."""
        if not isinstance(data, Mapping):
            raise GeneratorError(f"the engine's start report has no applied settings: {data!r:.300}")
        settings = cls.from_reports([data])
        return cls(settings.cudagraph_mode, settings.compile_mode, int(data.get("workers", 1)))

    def to_json(self) -> dict[str, Any]:
        return {"cudagraph_mode": self.cudagraph_mode, "compile_mode": self.compile_mode, "workers": self.workers}

    def beat_info(self) -> dict[str, Any]:
        """Heartbeat ``info`` fields: the supervisor journals them (``trainer_info``) per attempt."""
        return {"applied_cudagraph_mode": self.cudagraph_mode, "applied_compile_mode": self.compile_mode}


_last: AppliedSettings | None = None


def remember(applied: AppliedSettings) -> None:
    """Record the engine this process built last, for beats sent later by others (the HF callback)."""
    global _last
    _last = applied


def last_applied() -> AppliedSettings | None:
    """What the last engine built in this process applied (None: none was read back)."""
    return _last


def check_applied(policy_graphs_on: bool, applied: AppliedSettings, *, requested: Mapping[str, Any] | None = None,
                  log_path: str | None = None) -> None:
    """Refuse an engine that runs graphs when the policy said off. Graphs on by policy: anything goes
    (vLLM may downgrade; that is reported, not refused)."""
    if policy_graphs_on or not applied.graphs_on:
        return
    asked = {k: requested[k] for k in ("compilation_config", "enforce_eager") if k in requested} if requested else {}
    raise CudagraphPolicyViolation(
        f"the rollout policy turned cuda graphs off, but the engine's GPU worker applied "
        f"cudagraph_mode={applied.cudagraph_mode} (compile mode {applied.compile_mode}); refusing to use it. "
        f"Requested: {asked or 'nothing'}. vLLM silently drops a misspelled compilation_config key; "
        f"use compilation_config={{'cudagraph_mode': 'NONE'}} or enforce_eager=True",
        log_path=log_path,
    )
