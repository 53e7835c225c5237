"""The traces sit below the envs (DESIGN.md section 1): nothing under specrl/traces imports an env.

Recording runs the real-loop env, so it lives in specrl.envs.recording; specrl.traces serves its
old names (collect_traces, cached_traces, record_episode) lazily, for code above the envs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import specrl.envs.recording
import specrl.traces

SPECRL = Path(specrl.traces.__file__).resolve().parents[1]
RECORDING_NAMES = ("cached_traces", "collect_traces", "record_episode")


def _imports(path: Path) -> list[tuple[str, list[str], list[str]]]:
    """(module, imported names, enclosing functions) of every import in ``path``, however deep."""
    found = []

    def visit(node: ast.AST, functions: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = (
                functions + [child.name]
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                else functions
            )
            if isinstance(child, ast.Import):
                found.extend((alias.name, [], functions) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module, [alias.name for alias in child.names], functions))
            visit(child, inner)

    visit(ast.parse(path.read_text()), [])
    return found


def test_no_module_of_the_traces_imports_an_env_at_any_depth():
    for path in sorted((SPECRL / "traces").glob("*.py")):
        for module, names, functions in _imports(path):
            targets = [module] + [f"{module}.{name}" for name in names]
            if not any(t == "specrl.envs" or t.startswith("specrl.envs.") for t in targets):
                continue
            # the one exception: the lazy re-export of the recording names, never run on import
            assert path.name == "__init__.py" and functions == ["__getattr__"], (
                f"{path.relative_to(SPECRL.parent)} imports {module} {names} "
                f"(in {functions or 'the module body'}): the traces must not import an env"
            )


def test_the_envs_take_the_recording_names_from_their_own_module():
    """Through specrl.traces they would go down and up again: an import cycle."""
    for path in sorted((SPECRL / "envs").glob("*.py")):
        for module, names, _ in _imports(path):
            if module == "specrl.traces":
                assert not set(names) & set(RECORDING_NAMES), (
                    f"{path.name}: import {names} from specrl.envs.recording"
                )


def test_the_old_names_still_import_from_specrl_traces():
    from specrl.traces import cached_traces, collect_traces, record_episode

    assert collect_traces is specrl.envs.recording.collect_traces
    assert cached_traces is specrl.envs.recording.cached_traces
    assert record_episode is specrl.envs.recording.record_episode
    assert set(RECORDING_NAMES) <= set(specrl.traces.__all__)
