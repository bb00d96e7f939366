"""hangwatch's vLLM plugin (entry point group ``vllm.general_plugins``): registers the real-engine
wedge model's architecture with vLLM's ``ModelRegistry``, by name, so nothing is imported until a
model asks for it. vLLM loads general plugins in each of its processes (front end, engine core,
workers); set ``VLLM_PLUGINS`` to a list without ``hangwatch`` to keep it out.

The architecture, ``HangwatchWedgeLlamaForCausalLM`` (``engines/wedge_model.py``), is only for
testing hangwatch against the real engine: a model that wedges on purpose.
"""

from __future__ import annotations

WEDGE_ARCHITECTURE = "HangwatchWedgeLlamaForCausalLM"
WEDGE_CLASS = "hangwatch.generator.engines.wedge_model:WedgeLlamaForCausalLM"


def register() -> None:
    from vllm import ModelRegistry

    if WEDGE_ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(WEDGE_ARCHITECTURE, WEDGE_CLASS)
