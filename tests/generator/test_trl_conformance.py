"""Static conformance: the installed TRL still builds its colocate engine where apply_rollout_policy patches it.

``patched_rollout_engine`` rebinds the module global ``LLM`` of
``trl.generation.vllm_generation`` while the trainer is built. That reaches TRL's engine
only if (1) ``LLM`` is a module global bound by ``from vllm import LLM`` (under
``is_vllm_available()``), (2) ``VLLMGeneration._init_vllm`` calls it by that bare name
(``self.llm = LLM(...)``), with no local re-import that would bypass the module
attribute, and (3) TRL does not pass ``compilation_config``/``enforce_eager`` itself
(its explicit arguments win, so the policy would be overridden; the read-back would
then refuse the engine, but a new TRL should be caught here first). Reads the source
with ``ast``; imports nothing from TRL.
"""

from __future__ import annotations

import ast
import importlib.util
from importlib import metadata
from pathlib import Path

import pytest

from hangwatch.generator.trl_patch import TRL_VLLM_MODULE

POLICY_KEYS = {"compilation_config", "enforce_eager"}


def _trl_source() -> tuple[Path, str]:
    spec = importlib.util.find_spec("trl")  # the top-level spec: TRL's __init__ is not run
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("TRL is not installed (pip install 'hangwatch[trl]'); nothing to check the call site against")
    path = Path(next(iter(spec.submodule_search_locations)), *TRL_VLLM_MODULE.split(".")[1:]).with_suffix(".py")
    version = metadata.version("trl")
    assert path.is_file(), f"TRL {version}: {TRL_VLLM_MODULE} is gone ({path}); the colocate engine moved"
    return path, version


def _binds_llm(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return any((alias.asname or alias.name) == "LLM" for alias in node.names)
    if isinstance(node, ast.Import):
        return any((alias.asname or alias.name) == "LLM" for alias in node.names)
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Name) and t.id == "LLM" for t in targets)
    return isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == "LLM"


def call_site_problems(source: str, where: str) -> list[str]:
    """What keeps ``apply_rollout_policy`` from reaching TRL's colocate ``LLM(...)`` in ``source``; [] = none."""
    tree = ast.parse(source)
    # (1) LLM is bound once, at module level, from vllm, under is_vllm_available()
    module_binding = [
        node for stmt in tree.body if isinstance(stmt, ast.If)
        and "is_vllm_available" in ast.unparse(stmt.test)
        for node in ast.walk(stmt) if isinstance(node, ast.ImportFrom) and node.module == "vllm" and _binds_llm(node)
    ]
    if not module_binding:
        return [f"{where}: no module-level `from vllm import LLM` under is_vllm_available()"]
    others = [n.lineno for n in ast.walk(tree) if _binds_llm(n) and n not in module_binding]
    if others:
        return [f"{where}: LLM is also bound at lines {others}; a local binding bypasses the patched module attribute"]
    # (2) VLLMGeneration._init_vllm: self.llm = LLM(...) by the bare module-global name
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "VLLMGeneration"), None)
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_init_vllm"), None) if cls else None
    if init is None:
        return [f"{where}: VLLMGeneration._init_vllm is gone"]
    calls = [node.value for node in ast.walk(init)
             if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
             and isinstance(node.value.func, ast.Name) and node.value.func.id == "LLM"
             and any(ast.unparse(t) == "self.llm" for t in node.targets)]
    if len(calls) != 1:
        return [f"{where}: expected one `self.llm = LLM(...)` in _init_vllm, found {len(calls)}"]
    # (3) keywords only, none of them the policy's
    (call,) = calls
    problems = []
    if call.args:
        problems.append(f"{where}: LLM(...) at line {call.lineno} now takes positional arguments")
    if any(k.arg is None for k in call.keywords):
        problems.append(f"{where}: LLM(**...) at line {call.lineno}: TRL may pass compilation_config itself")
    clash = sorted({k.arg for k in call.keywords} & POLICY_KEYS)
    if clash:
        problems.append(f"{where}: TRL now passes {clash} to LLM(...) at line {call.lineno}; "
                        "its explicit arguments win over the injected policy")
    return problems


def test_trl_colocate_llm_call_site_is_where_apply_rollout_policy_patches():
    path, version = _trl_source()
    assert call_site_problems(path.read_text(), f"TRL {version}, {path}") == []


@pytest.mark.parametrize("old, new, expect", [
    ("self.llm = LLM(", "from vllm import LLM\n            self.llm = LLM(", "also bound"),
    ("self.llm = LLM(", "self.llm = vllm.LLM(", "found 0"),
    ("self.llm = LLM(", "self.llm = LLM(enforce_eager=False, ", "enforce_eager"),
    ("def _init_vllm(", "def _build_engine(", "_init_vllm is gone"),
])
def test_the_check_fails_when_trl_moves_the_call_site(old, new, expect):
    path, _ = _trl_source()
    source = path.read_text()
    assert old in source
    problems = call_site_problems(source.replace(old, new, 1), "mutated")
    assert problems and expect in problems[0]
