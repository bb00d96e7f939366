"""hangwatch's vLLM plugin registers the wedge model's architecture by name, once, importing nothing."""

import sys
import tomllib
import types
from pathlib import Path

from hangwatch.generator.engines import vllm_plugin

ROOT = Path(__file__).resolve().parents[3]


def test_register_names_the_wedge_model_once_without_importing_it(monkeypatch):
    registered = {}

    class Registry:
        @staticmethod
        def get_supported_archs():
            return list(registered)

        @staticmethod
        def register_model(arch, target):
            registered[arch] = target

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(ModelRegistry=Registry))
    vllm_plugin.register()
    vllm_plugin.register()
    assert registered == {"HangwatchWedgeLlamaForCausalLM": vllm_plugin.WEDGE_CLASS}
    assert "hangwatch.generator.engines.wedge_model" not in sys.modules, "registered by name: nothing imported"


def test_the_entry_point_is_declared_where_vllm_looks_for_plugins():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    plugins = pyproject["project"]["entry-points"]["vllm.general_plugins"]
    assert plugins == {"hangwatch": "hangwatch.generator.engines.vllm_plugin:register"}
    module, _, cls = vllm_plugin.WEDGE_CLASS.partition(":")
    assert (ROOT / "generator" / "engines" / "wedge_model.py").read_text().count(f"class {cls}(") == 1
    assert module == "hangwatch.generator.engines.wedge_model"
